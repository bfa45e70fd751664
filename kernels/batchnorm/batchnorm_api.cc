// SPDX-License-Identifier: Apache-2.0
// batchnorm_api.cc: the C entry points of BatchNorm, forward and backward, and the
// SyncBatchNorm building blocks: validate every argument before any write, then run
// the op layer.
#include <stdint.h>

#include <limits>

#include "hwy/base.h"
#include "include/normkernels.h"
#include "kernels/batchnorm/batchnorm.h"
#include "kernels/common/c_types.h"
#include "kernels/common/moments.h"
#include "kernels/common/validate.h"

namespace nk {
namespace {

// c floats per channel vector must fit size_t in bytes.
Validator& Channels(Validator& v, size_t c) {
  return v.Require(c <= std::numeric_limits<size_t>::max() / sizeof(float),
                   NK_ERR_INVALID_SHAPE, "c is %zu; c floats overflow size_t", c);
}

// The shape n x c x spatial: the element count, and n * spatial (the count per
// channel). Both must fit size_t in bytes.
Validator& Shape(Validator& v, size_t n, size_t c, size_t spatial, size_t* per_channel,
                 size_t* elements) {
  v.Product(n, "n", spatial, "spatial", 1, per_channel)
      .Product(*per_channel, "n * spatial", c, "c", sizeof(float), elements);
  return Channels(v, c);
}

template <class T>
BatchNormJobT<T> Job(const char* function, size_t n, size_t c, size_t spatial,
                     nk_layout layout, const T* x, const float* gamma, const float* beta,
                     float eps, float momentum, T* y) {
  return {function, n, c, spatial, layout == NK_LAYOUT_NHWC, x, gamma, beta, eps,
          momentum, y};
}

template <class T>
BatchNormGradJobT<T> GradJob(const char* function, size_t n, size_t c, size_t spatial,
                             nk_layout layout, const T* x, const T* dy, const float* mean,
                             const float* rstd, const float* gamma, double total_count,
                             T* dx) {
  return {function, n, c, spatial, layout == NK_LAYOUT_NHWC, x, dy, mean, rstd, gamma,
          total_count, dx};
}

template <class T>
nk_status Training(const char* function, size_t n, size_t c, size_t spatial,
                   nk_layout layout, const T* x, const float* gamma, const float* beta,
                   float eps, float momentum, float* running_mean, float* running_var,
                   T* y, float* save_mean, float* save_rstd) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout).Eps(eps).Momentum(momentum);
  Shape(v, n, c, spatial, &per_channel, &elements)
      .Require(per_channel != 1, NK_ERR_INVALID_SHAPE,
               "n * spatial is 1; training needs more than 1 value per channel");
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(y, "y").Require(
      (running_mean == nullptr) == (running_var == nullptr), NK_ERR_NULL_POINTER,
      "%s is NULL but %s is not; pass both running statistics or neither",
      running_mean == nullptr ? "running_mean" : "running_var",
      running_mean == nullptr ? "running_var" : "running_mean");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"beta", beta, c_bytes, false},
               {"running_mean", running_mean, c_bytes, true},
               {"running_var", running_var, c_bytes, true},
               {"y", y, bytes, true},
               {"save_mean", save_mean, c_bytes, true},
               {"save_rstd", save_rstd, c_bytes, true}},
              {{"y", "x"}});
  if (v.failed()) return v.status();
  return BatchNormTraining(
      Job<T>(function, n, c, spatial, layout, x, gamma, beta, eps, momentum, y),
      running_mean, running_var, save_mean, save_rstd);
}

template <class T>
nk_status Inference(const char* function, size_t n, size_t c, size_t spatial,
                    nk_layout layout, const T* x, const float* mean, const float* var,
                    const float* gamma, const float* beta, float eps, T* y) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout).Eps(eps);
  Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(mean, "mean").NotNull(var, "var").NotNull(y, "y");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"mean", mean, c_bytes, false},
               {"var", var, c_bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"beta", beta, c_bytes, false},
               {"y", y, bytes, true}},
              {{"y", "x"}});
  if (v.failed()) return v.status();
  return BatchNormInference(
      Job<T>(function, n, c, spatial, layout, x, gamma, beta, eps, 0.0f, y), mean, var);
}

template <class T>
nk_status MomentsOf(const char* function, size_t n, size_t c, size_t spatial,
                    nk_layout layout, const T* x, float* mean, float* m2) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  if (per_channel != 0) v.NotNull(x, "x");
  v.NotNull(mean, "mean").NotNull(m2, "m2");
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, elements * sizeof(T), false},
               {"mean", mean, c_bytes, true},
               {"m2", m2, c_bytes, true}},
              {});
  if (v.failed()) return v.status();
  if (per_channel == 0) {  // an empty shard: moments of nothing
    for (size_t ci = 0; ci < c; ++ci) mean[ci] = m2[ci] = 0.0f;
    return NK_OK;
  }
  return BatchNormMoments(
      Job<T>(function, n, c, spatial, layout, x, nullptr, nullptr, 0.0f, 0.0f, nullptr),
      mean, m2);
}

template <class T>
nk_status Backward(const char* function, size_t n, size_t c, size_t spatial,
                   nk_layout layout, const T* x, const T* dy, const float* save_mean,
                   const float* save_rstd, const float* gamma, T* dx, float* dgamma,
                   float* dbeta) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(dy, "dy").NotNull(save_mean, "save_mean")
      .NotNull(save_rstd, "save_rstd").NotNull(dx, "dx");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"dy", dy, bytes, false},
               {"save_mean", save_mean, c_bytes, false},
               {"save_rstd", save_rstd, c_bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"dx", dx, bytes, true},
               {"dgamma", dgamma, c_bytes, true},
               {"dbeta", dbeta, c_bytes, true}},
              {{"dx", "dy"}});
  if (v.failed()) return v.status();
  return BatchNormBackward(
      GradJob<T>(function, n, c, spatial, layout, x, dy, save_mean, save_rstd, gamma,
                 static_cast<double>(per_channel), dx),
      dgamma, dbeta);
}

template <class T>
nk_status BackwardReduce(const char* function, size_t n, size_t c, size_t spatial,
                         nk_layout layout, const T* x, const T* dy, const float* mean,
                         const float* rstd, float* sum_dy, float* sum_dy_xhat) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  if (per_channel != 0) v.NotNull(x, "x").NotNull(dy, "dy");
  v.NotNull(mean, "mean").NotNull(rstd, "rstd").NotNull(sum_dy, "sum_dy")
      .NotNull(sum_dy_xhat, "sum_dy_xhat");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"dy", dy, bytes, false},
               {"mean", mean, c_bytes, false},
               {"rstd", rstd, c_bytes, false},
               {"sum_dy", sum_dy, c_bytes, true},
               {"sum_dy_xhat", sum_dy_xhat, c_bytes, true}},
              {});
  if (v.failed()) return v.status();
  if (per_channel == 0) {  // an empty shard: sums of nothing
    for (size_t ci = 0; ci < c; ++ci) sum_dy[ci] = sum_dy_xhat[ci] = 0.0f;
    return NK_OK;
  }
  return BatchNormBackwardReduce(
      GradJob<T>(function, n, c, spatial, layout, x, dy, mean, rstd, nullptr,
                 static_cast<double>(per_channel), nullptr),
      sum_dy, sum_dy_xhat);
}

template <class T>
nk_status BackwardApply(const char* function, size_t n, size_t c, size_t spatial,
                        nk_layout layout, const T* x, const T* dy, const float* mean,
                        const float* rstd, const float* gamma, uint64_t total_count,
                        const float* sum_dy, const float* sum_dy_xhat, T* dx) {
  Validator v(function);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  Shape(v, n, c, spatial, &per_channel, &elements)
      .Require(total_count >= per_channel, NK_ERR_INVALID_SHAPE,
               "total_count is %llu, fewer than this shard's n * spatial (%zu)",
               static_cast<unsigned long long>(total_count), per_channel);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(dy, "dy").NotNull(mean, "mean").NotNull(rstd, "rstd")
      .NotNull(sum_dy, "sum_dy").NotNull(sum_dy_xhat, "sum_dy_xhat").NotNull(dx, "dx");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"dy", dy, bytes, false},
               {"mean", mean, c_bytes, false},
               {"rstd", rstd, c_bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"sum_dy", sum_dy, c_bytes, false},
               {"sum_dy_xhat", sum_dy_xhat, c_bytes, false},
               {"dx", dx, bytes, true}},
              {{"dx", "dy"}});
  if (v.failed()) return v.status();
  return BatchNormBackwardApply(
      GradJob<T>(function, n, c, spatial, layout, x, dy, mean, rstd, gamma,
                 static_cast<double>(total_count), dx),
      sum_dy, sum_dy_xhat);
}

}  // namespace
}  // namespace nk

extern "C" {

// The tensor kernels for tensors of CTYPE (the C type) held as ELEM (the kernels'
// type), named with SUFFIX.
#define NK_BATCHNORM_KERNELS(SUFFIX, CTYPE, ELEM)                                        \
  nk_status nk_batchnorm_forward_training_##SUFFIX(                                      \
      size_t n, size_t c, size_t spatial, nk_layout layout, const CTYPE* x,              \
      const float* gamma, const float* beta, float eps, float momentum,                  \
      float* running_mean, float* running_var, CTYPE* y, float* save_mean,               \
      float* save_rstd) {                                                                \
    return nk::Training<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x), gamma,   \
                              beta, eps, momentum, running_mean, running_var,            \
                              nk::As<ELEM>(y), save_mean, save_rstd);                    \
  }                                                                                      \
  nk_status nk_batchnorm_forward_inference_##SUFFIX(                                     \
      size_t n, size_t c, size_t spatial, nk_layout layout, const CTYPE* x,              \
      const float* mean, const float* var, const float* gamma, const float* beta,        \
      float eps, CTYPE* y) {                                                             \
    return nk::Inference<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x), mean,   \
                               var, gamma, beta, eps, nk::As<ELEM>(y));                  \
  }                                                                                      \
  nk_status nk_batchnorm_moments_##SUFFIX(size_t n, size_t c, size_t spatial,            \
                                          nk_layout layout, const CTYPE* x, float* mean, \
                                          float* m2) {                                   \
    return nk::MomentsOf<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x), mean,   \
                               m2);                                                      \
  }                                                                                      \
  nk_status nk_batchnorm_backward_##SUFFIX(                                              \
      size_t n, size_t c, size_t spatial, nk_layout layout, const CTYPE* x,              \
      const CTYPE* dy, const float* save_mean, const float* save_rstd,                   \
      const float* gamma, CTYPE* dx, float* dgamma, float* dbeta) {                      \
    return nk::Backward<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x),          \
                              nk::As<ELEM>(dy), save_mean, save_rstd, gamma,             \
                              nk::As<ELEM>(dx), dgamma, dbeta);                          \
  }                                                                                      \
  nk_status nk_batchnorm_backward_reduce_##SUFFIX(                                       \
      size_t n, size_t c, size_t spatial, nk_layout layout, const CTYPE* x,              \
      const CTYPE* dy, const float* mean, const float* rstd, float* sum_dy,              \
      float* sum_dy_xhat) {                                                              \
    return nk::BackwardReduce<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x),    \
                                    nk::As<ELEM>(dy), mean, rstd, sum_dy, sum_dy_xhat);  \
  }                                                                                      \
  nk_status nk_batchnorm_backward_apply_##SUFFIX(                                        \
      size_t n, size_t c, size_t spatial, nk_layout layout, const CTYPE* x,              \
      const CTYPE* dy, const float* mean, const float* rstd, const float* gamma,         \
      uint64_t total_count, const float* sum_dy, const float* sum_dy_xhat, CTYPE* dx) {  \
    return nk::BackwardApply<ELEM>(__func__, n, c, spatial, layout, nk::As<ELEM>(x),     \
                                   nk::As<ELEM>(dy), mean, rstd, gamma, total_count,     \
                                   sum_dy, sum_dy_xhat, nk::As<ELEM>(dx));               \
  }

NK_BATCHNORM_KERNELS(f32, float, float)
NK_BATCHNORM_KERNELS(bf16, nk_bf16, hwy::bfloat16_t)
NK_BATCHNORM_KERNELS(f16, nk_f16, hwy::float16_t)
#undef NK_BATCHNORM_KERNELS

nk_status nk_moments_merge_f32(size_t c, uint64_t count_a, const float* mean_a,
                               const float* m2_a, uint64_t count_b, const float* mean_b,
                               const float* m2_b, float* mean_out, float* m2_out) {
  nk::Validator v(__func__);
  nk::Channels(v, c).Require(
      count_a <= std::numeric_limits<uint64_t>::max() - count_b, NK_ERR_INVALID_SHAPE,
      "count_a + count_b (%llu + %llu) overflows uint64_t",
      static_cast<unsigned long long>(count_a), static_cast<unsigned long long>(count_b));
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  v.NotNull(mean_a, "mean_a")
      .NotNull(m2_a, "m2_a")
      .NotNull(mean_b, "mean_b")
      .NotNull(m2_b, "m2_b")
      .NotNull(mean_out, "mean_out")
      .NotNull(m2_out, "m2_out");
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"mean_a", mean_a, c_bytes, false},
               {"m2_a", m2_a, c_bytes, false},
               {"mean_b", mean_b, c_bytes, false},
               {"m2_b", m2_b, c_bytes, false},
               {"mean_out", mean_out, c_bytes, true},
               {"m2_out", m2_out, c_bytes, true}},
              {{"mean_out", "mean_a"}, {"m2_out", "m2_a"}});
  if (v.failed()) return v.status();
  const double na = static_cast<double>(count_a);
  const double nb = static_cast<double>(count_b);
  for (size_t ci = 0; ci < c; ++ci) {
    nk::Moments m = {0.0, 0.0f, 0.0f};
    if (count_a != 0 || count_b != 0) {
      m = nk::MergeMoments({na, mean_a[ci], m2_a[ci]}, {nb, mean_b[ci], m2_b[ci]});
    }
    mean_out[ci] = m.mean;
    m2_out[ci] = m.m2;
  }
  return NK_OK;
}

nk_status nk_batchnorm_update_running_f32(size_t c, uint64_t count, const float* mean,
                                          const float* m2, float momentum,
                                          float* running_mean, float* running_var) {
  nk::Validator v(__func__);
  v.Momentum(momentum).Require(count >= 2, NK_ERR_INVALID_SHAPE,
                               "count is %llu; the unbiased variance needs at least 2 "
                               "values",
                               static_cast<unsigned long long>(count));
  nk::Channels(v, c);
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  v.NotNull(mean, "mean")
      .NotNull(m2, "m2")
      .NotNull(running_mean, "running_mean")
      .NotNull(running_var, "running_var");
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"mean", mean, c_bytes, false},
               {"m2", m2, c_bytes, false},
               {"running_mean", running_mean, c_bytes, true},
               {"running_var", running_var, c_bytes, true}},
              {});
  if (v.failed()) return v.status();
  const double unbias = 1.0 / (static_cast<double>(count) - 1.0);
  for (size_t ci = 0; ci < c; ++ci) {
    nk::UpdateRunning(unbias, mean[ci], m2[ci], momentum, running_mean + ci,
                      running_var + ci);
  }
  return NK_OK;
}

}  // extern "C"
