// SPDX-License-Identifier: Apache-2.0
// groupnorm_api.cc: the C entry points of GroupNorm (and InstanceNorm, groups == c):
// validate every argument before any write, then run the op layer.
#include "hwy/base.h"
#include "include/normkernels.h"
#include "kernels/common/c_types.h"
#include "kernels/common/validate.h"
#include "kernels/groupnorm/groupnorm.h"

namespace nk {
namespace {

// The shape n x c x spatial in `groups` groups: the element count (fitting size_t in
// bytes), and groups != 0 dividing c.
Validator& Shape(Validator& v, size_t n, size_t c, size_t spatial, size_t groups,
                 size_t* sets, size_t* elements) {
  size_t per_channel = 0;
  v.Product(n, "n", spatial, "spatial", 1, &per_channel)
      .Product(per_channel, "n * spatial", c, "c", sizeof(float), elements)
      .Require(groups != 0, NK_ERR_INVALID_SHAPE,
               "groups is 0 (c is %zu); groups must divide c", c)
      .Require(groups == 0 || c % groups == 0, NK_ERR_INVALID_SHAPE,
               "groups is %zu, which does not divide c = %zu", groups, c);
  // n * groups <= n * c, which fits when the tensor does (c != 0 and spatial != 0).
  *sets = n * groups;
  return v;
}

template <class T>
GroupNormJobT<T> Job(const char* function, size_t n, size_t c, size_t spatial,
                     size_t groups, nk_layout layout, const T* x) {
  GroupNormJobT<T> job{};
  job.function = function;
  job.n = n;
  job.c = c;
  job.spatial = spatial;
  job.groups = groups;
  job.channels_last = layout == NK_LAYOUT_NHWC;
  job.x = x;
  return job;
}

template <class T>
nk_status Forward(const char* function, size_t n, size_t c, size_t spatial, size_t groups,
                  nk_layout layout, const T* x, const float* gamma, const float* beta,
                  float eps, T* y, float* mean, float* rstd) {
  Validator v(function);
  size_t sets = 0, elements = 0;
  v.Layout(layout).Eps(eps);
  Shape(v, n, c, spatial, groups, &sets, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x").NotNull(y, "y");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  const size_t set_bytes = sets * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"beta", beta, c_bytes, false},
               {"y", y, bytes, true},
               {"mean", mean, set_bytes, true},
               {"rstd", rstd, set_bytes, true}},
              {{"y", "x"}});
  if (v.failed()) return v.status();
  GroupNormJobT<T> job = Job(function, n, c, spatial, groups, layout, x);
  job.gamma = gamma;
  job.beta = beta;
  job.eps = eps;
  job.y = y;
  return GroupNormForward(job, mean, rstd);
}

template <class T>
nk_status Backward(const char* function, size_t n, size_t c, size_t spatial,
                   size_t groups, nk_layout layout, const T* x, const T* dy,
                   const float* mean, const float* rstd, const float* gamma, T* dx,
                   float* dgamma, float* dbeta) {
  Validator v(function);
  size_t sets = 0, elements = 0;
  v.Layout(layout);
  Shape(v, n, c, spatial, groups, &sets, &elements);
  if (v.failed()) return v.status();
  if (elements == 0) return NK_OK;
  v.NotNull(x, "x")
      .NotNull(dy, "dy")
      .NotNull(mean, "mean")
      .NotNull(rstd, "rstd")
      .NotNull(dx, "dx");
  const size_t bytes = elements * sizeof(T);
  const size_t c_bytes = c * sizeof(float);
  const size_t set_bytes = sets * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"dy", dy, bytes, false},
               {"mean", mean, set_bytes, false},
               {"rstd", rstd, set_bytes, false},
               {"gamma", gamma, c_bytes, false},
               {"dx", dx, bytes, true},
               {"dgamma", dgamma, c_bytes, true},
               {"dbeta", dbeta, c_bytes, true}},
              {{"dx", "dy"}});
  if (v.failed()) return v.status();
  GroupNormJobT<T> job = Job(function, n, c, spatial, groups, layout, x);
  job.dy = dy;
  job.gamma = gamma;
  job.dx = dx;
  return GroupNormBackward(job, mean, rstd, dgamma, dbeta);
}

}  // namespace
}  // namespace nk

extern "C" {

// GroupNorm's forward and backward for tensors of CTYPE (the C type) held as ELEM (the
// kernels' type), named with SUFFIX.
#define NK_GROUPNORM_KERNELS(SUFFIX, CTYPE, ELEM)                                       \
  nk_status nk_groupnorm_forward_##SUFFIX(                                              \
      size_t n, size_t c, size_t spatial, size_t groups, nk_layout layout,              \
      const CTYPE* x, const float* gamma, const float* beta, float eps, CTYPE* y,       \
      float* mean, float* rstd) {                                                       \
    return nk::Forward<ELEM>(__func__, n, c, spatial, groups, layout, nk::As<ELEM>(x),  \
                             gamma, beta, eps, nk::As<ELEM>(y), mean, rstd);            \
  }                                                                                     \
  nk_status nk_groupnorm_backward_##SUFFIX(                                             \
      size_t n, size_t c, size_t spatial, size_t groups, nk_layout layout,              \
      const CTYPE* x, const CTYPE* dy, const float* mean, const float* rstd,            \
      const float* gamma, CTYPE* dx, float* dgamma, float* dbeta) {                     \
    return nk::Backward<ELEM>(__func__, n, c, spatial, groups, layout, nk::As<ELEM>(x), \
                              nk::As<ELEM>(dy), mean, rstd, gamma, nk::As<ELEM>(dx),    \
                              dgamma, dbeta);                                           \
  }

NK_GROUPNORM_KERNELS(f32, float, float)
NK_GROUPNORM_KERNELS(bf16, nk_bf16, hwy::bfloat16_t)
NK_GROUPNORM_KERNELS(f16, nk_f16, hwy::float16_t)
#undef NK_GROUPNORM_KERNELS

}  // extern "C"
