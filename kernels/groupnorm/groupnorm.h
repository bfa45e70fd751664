// SPDX-License-Identifier: Apache-2.0
// groupnorm.h: GroupNorm's op layer (InstanceNorm is groups == c): statistics per
// (sample, group) set of c / groups channels, a per-channel affine, and the backward.
#ifndef NK_KERNELS_GROUPNORM_H_
#define NK_KERNELS_GROUPNORM_H_

#include <cstddef>

#include "include/normkernels.h"

namespace nk {

// One validated call with a non-empty tensor of type T (float, hwy::bfloat16_t,
// hwy::float16_t), as plain data. Optional pointers are nullptr. For the forward, dy
// and dx are unused; for the backward, y and beta.
template <class T>
struct GroupNormJobT {
  const char* function;  // the C entry point, for errors found after validation
  size_t n, c, spatial, groups;
  bool channels_last;  // NHWC
  const T* x;
  const T* dy;
  const float* gamma;  // [c]
  const float* beta;   // [c]
  float eps;
  T* y;   // forward
  T* dx;  // backward
  size_t group_channels() const { return c / groups; }
};

// Forward: y, and mean / rstd [n * groups] where wanted.
template <class T>
nk_status GroupNormForward(const GroupNormJobT<T>& job, float* mean, float* rstd);

// Backward from the forward's mean / rstd: dx, and dgamma / dbeta where wanted.
template <class T>
nk_status GroupNormBackward(const GroupNormJobT<T>& job, const float* mean,
                            const float* rstd, float* dgamma, float* dbeta);

}  // namespace nk

#endif  // NK_KERNELS_GROUPNORM_H_
