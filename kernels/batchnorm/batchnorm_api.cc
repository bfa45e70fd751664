// SPDX-License-Identifier: Apache-2.0
// batchnorm_api.cc: the C entry points of BatchNorm, forward and backward, and the
// SyncBatchNorm building blocks: validate every argument before any write, then run
// the op layer.
#include <stdint.h>

#include <limits>

#include "include/normkernels.h"
#include "kernels/batchnorm/batchnorm.h"
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

BatchNormJob Job(const char* function, size_t n, size_t c, size_t spatial,
                 nk_layout layout, const float* x, const float* gamma, const float* beta,
                 float eps, float momentum, float* y) {
  return {function, n, c, spatial, layout == NK_LAYOUT_NHWC, x, gamma, beta, eps,
          momentum, y};
}

BatchNormGradJob GradJob(const char* function, size_t n, size_t c, size_t spatial,
                         nk_layout layout, const float* x, const float* dy,
                         const float* mean, const float* rstd, const float* gamma,
                         double total_count, float* dx) {
  return {function, n, c, spatial, layout == NK_LAYOUT_NHWC, x, dy, mean, rstd, gamma,
          total_count, dx};
}

}  // namespace
}  // namespace nk

extern "C" {

nk_status nk_batchnorm_forward_training_f32(size_t n, size_t c, size_t spatial,
                                            nk_layout layout, const float* x,
                                            const float* gamma, const float* beta,
                                            float eps, float momentum,
                                            float* running_mean, float* running_var,
                                            float* y, float* save_mean,
                                            float* save_rstd) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout).Eps(eps).Momentum(momentum);
  nk::Shape(v, n, c, spatial, &per_channel, &elements)
      .Require(per_channel != 1, NK_ERR_INVALID_SHAPE,
               "n * spatial is 1; training needs more than 1 value per channel");
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(y, "y").Require(
      (running_mean == nullptr) == (running_var == nullptr), NK_ERR_NULL_POINTER,
      "%s is NULL but %s is not; pass both running statistics or neither",
      running_mean == nullptr ? "running_mean" : "running_var",
      running_mean == nullptr ? "running_var" : "running_mean");
  const size_t bytes = elements * sizeof(float);
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
  return nk::BatchNormTraining(
      nk::Job(__func__, n, c, spatial, layout, x, gamma, beta, eps, momentum, y),
      running_mean, running_var, save_mean, save_rstd);
}

nk_status nk_batchnorm_forward_inference_f32(size_t n, size_t c, size_t spatial,
                                             nk_layout layout, const float* x,
                                             const float* mean, const float* var,
                                             const float* gamma, const float* beta,
                                             float eps, float* y) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout).Eps(eps);
  nk::Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(mean, "mean").NotNull(var, "var").NotNull(y, "y");
  const size_t bytes = elements * sizeof(float);
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"mean", mean, c_bytes, false},
               {"var", var, c_bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"beta", beta, c_bytes, false},
               {"y", y, bytes, true}},
              {{"y", "x"}});
  if (v.failed()) return v.status();
  return nk::BatchNormInference(
      nk::Job(__func__, n, c, spatial, layout, x, gamma, beta, eps, 0.0f, y), mean, var);
}

nk_status nk_batchnorm_moments_f32(size_t n, size_t c, size_t spatial,
                                   nk_layout layout, const float* x, float* mean,
                                   float* m2) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  nk::Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  if (per_channel != 0) v.NotNull(x, "x");
  v.NotNull(mean, "mean").NotNull(m2, "m2");
  const size_t c_bytes = c * sizeof(float);
  v.NoOverlap({{"x", x, elements * sizeof(float), false},
               {"mean", mean, c_bytes, true},
               {"m2", m2, c_bytes, true}},
              {});
  if (v.failed()) return v.status();
  if (per_channel == 0) {  // an empty shard: moments of nothing
    for (size_t ci = 0; ci < c; ++ci) mean[ci] = m2[ci] = 0.0f;
    return NK_OK;
  }
  return nk::BatchNormMoments(
      nk::Job(__func__, n, c, spatial, layout, x, nullptr, nullptr, 0.0f, 0.0f, nullptr),
      mean, m2);
}

nk_status nk_moments_merge_f32(size_t c, uint64_t count_a, const float* mean_a,
                               const float* m2_a, uint64_t count_b, const float* mean_b,
                               const float* m2_b, float* mean_out, float* m2_out) {
  nk::Validator v(__func__);
  nk::Channels(v, c).Require(count_a <= std::numeric_limits<uint64_t>::max() - count_b,
               NK_ERR_INVALID_SHAPE, "count_a + count_b (%llu + %llu) overflows uint64_t",
               static_cast<unsigned long long>(count_a),
               static_cast<unsigned long long>(count_b));
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  v.NotNull(mean_a, "mean_a").NotNull(m2_a, "m2_a").NotNull(mean_b, "mean_b")
      .NotNull(m2_b, "m2_b").NotNull(mean_out, "mean_out").NotNull(m2_out, "m2_out");
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
  v.NotNull(mean, "mean").NotNull(m2, "m2").NotNull(running_mean, "running_mean")
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

nk_status nk_batchnorm_backward_f32(size_t n, size_t c, size_t spatial, nk_layout layout,
                                    const float* x, const float* dy,
                                    const float* save_mean, const float* save_rstd,
                                    const float* gamma, float* dx, float* dgamma,
                                    float* dbeta) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  nk::Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(dy, "dy").NotNull(save_mean, "save_mean")
      .NotNull(save_rstd, "save_rstd").NotNull(dx, "dx");
  const size_t bytes = elements * sizeof(float);
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
  return nk::BatchNormBackward(
      nk::GradJob(__func__, n, c, spatial, layout, x, dy, save_mean, save_rstd, gamma,
                  static_cast<double>(per_channel), dx),
      dgamma, dbeta);
}

nk_status nk_batchnorm_backward_reduce_f32(size_t n, size_t c, size_t spatial,
                                           nk_layout layout, const float* x,
                                           const float* dy, const float* mean,
                                           const float* rstd, float* sum_dy,
                                           float* sum_dy_xhat) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  nk::Shape(v, n, c, spatial, &per_channel, &elements);
  if (v.failed()) return v.status();
  if (c == 0) return NK_OK;
  if (per_channel != 0) v.NotNull(x, "x").NotNull(dy, "dy");
  v.NotNull(mean, "mean").NotNull(rstd, "rstd").NotNull(sum_dy, "sum_dy")
      .NotNull(sum_dy_xhat, "sum_dy_xhat");
  const size_t bytes = elements * sizeof(float);
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
  return nk::BatchNormBackwardReduce(
      nk::GradJob(__func__, n, c, spatial, layout, x, dy, mean, rstd, nullptr,
                  static_cast<double>(per_channel), nullptr),
      sum_dy, sum_dy_xhat);
}

nk_status nk_batchnorm_backward_apply_f32(size_t n, size_t c, size_t spatial,
                                          nk_layout layout, const float* x,
                                          const float* dy, const float* mean,
                                          const float* rstd, const float* gamma,
                                          uint64_t total_count, const float* sum_dy,
                                          const float* sum_dy_xhat, float* dx) {
  nk::Validator v(__func__);
  size_t per_channel = 0, elements = 0;
  v.Layout(layout);
  nk::Shape(v, n, c, spatial, &per_channel, &elements)
      .Require(total_count >= per_channel, NK_ERR_INVALID_SHAPE,
               "total_count is %llu, fewer than this shard's n * spatial (%zu)",
               static_cast<unsigned long long>(total_count), per_channel);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(dy, "dy").NotNull(mean, "mean").NotNull(rstd, "rstd")
      .NotNull(sum_dy, "sum_dy").NotNull(sum_dy_xhat, "sum_dy_xhat").NotNull(dx, "dx");
  const size_t bytes = elements * sizeof(float);
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
  return nk::BatchNormBackwardApply(
      nk::GradJob(__func__, n, c, spatial, layout, x, dy, mean, rstd, gamma,
                  static_cast<double>(total_count), dx),
      sum_dy, sum_dy_xhat);
}

}  // extern "C"
