// SPDX-License-Identifier: Apache-2.0
// channelnorm_bf16.cc: the per-channel kernels (BatchNorm, GroupNorm) on bfloat16
// tensors, forward and backward, compiled once per Highway target.
#include "kernels/batchnorm/channelnorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/batchnorm/channelnorm_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/batchnorm/channelnorm-inl.h"
#include "kernels/batchnorm/channelnorm_backward-inl.h"
#include "kernels/common/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

extern const ChannelNormKernelsT<hwy::bfloat16_t> kChannelNormKernels_bf16 =
    ChannelNormTable<hwy::bfloat16_t>();

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

template <>
const ChannelNormKernelsT<hwy::bfloat16_t>& ChannelNormKernelsFor<hwy::bfloat16_t>(
    long long target) {
  NK_SELECT_TARGET(target, kChannelNormKernels_bf16);
  return HWY_STATIC_DISPATCH(kChannelNormKernels_bf16);
}

}  // namespace nk
#endif  // HWY_ONCE
