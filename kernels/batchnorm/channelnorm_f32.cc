// SPDX-License-Identifier: Apache-2.0
// channelnorm_f32.cc: the fp32 per-channel (BatchNorm) kernels, forward and backward,
// compiled once per Highway target.
#include "kernels/batchnorm/channelnorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/batchnorm/channelnorm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/batchnorm/channelnorm-inl.h"
#include "kernels/batchnorm/channelnorm_backward-inl.h"
#include "kernels/common/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

extern const ChannelNormKernels kChannelNormKernels = {
    &ChannelSpanMoments, &ShortPlaneMax, &ShortPlaneScratchFloats, &ShortPlaneMoments,
    &ChannelSpanMaxAbs, &ChannelSpanApply,   &ChannelPlanesApply,
    &ColumnMoments,      &MergeColumns,      &ColumnApply,
    &ChannelStridedMoments, &ChannelStridedMaxAbs,
    &PlanesGradSums,     &SpanGradApply,     &ColumnGradSums,
    &ColumnGradApply};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

const ChannelNormKernels& ChannelNormKernelsFor(long long target) {
  NK_SELECT_TARGET(target, kChannelNormKernels);
  return HWY_STATIC_DISPATCH(kChannelNormKernels);
}

}  // namespace nk
#endif  // HWY_ONCE
