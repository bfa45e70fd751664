// SPDX-License-Identifier: Apache-2.0
// rownorm_f32.cc: the fp32 LayerNorm-family kernel tables, forward and backward,
// compiled once per Highway target. Rows of a few whole vectors take the register path
// (shortrow-inl.h, shortrow_*_f32.cc).
#include "kernels/layernorm/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm/rownorm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/common/dispatch.h"
#include "kernels/layernorm/rownorm-inl.h"
#include "kernels/layernorm/rownorm_backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

extern const RowNormKernels kRowNormKernels = RowNormTable<float>();
extern const RowGradKernels kRowGradKernels = RowGradTable<float>();

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

template <>
const RowNormKernels& RowNormKernelsFor<float>(long long target) {
  NK_SELECT_TARGET(target, kRowNormKernels);
  return HWY_STATIC_DISPATCH(kRowNormKernels);
}

template <>
const RowGradKernels& RowGradKernelsFor<float>(long long target) {
  NK_SELECT_TARGET(target, kRowGradKernels);
  return HWY_STATIC_DISPATCH(kRowGradKernels);
}

}  // namespace nk
#endif  // HWY_ONCE
