// SPDX-License-Identifier: Apache-2.0
// rownorm_f16.cc: the fp16 LayerNorm-family kernel tables, forward and backward,
// compiled once per Highway target: the row paths of rownorm-inl.h and
// rownorm_backward-inl.h on float16 tensors (half-inl.h widens and rounds). Rows of a
// few whole vectors take the register path (shortrow_*_f16.cc).
#include "kernels/layernorm/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm/rownorm_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/common/dispatch.h"
#include "kernels/layernorm/rownorm-inl.h"
#include "kernels/layernorm/rownorm_backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

using Elem = hwy::float16_t;
extern const RowNormKernelsT<Elem> kRowNormKernels_f16 = RowNormTable<Elem>();
extern const RowGradKernelsT<Elem> kRowGradKernels_f16 = RowGradTable<Elem>();

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

template <>
const RowNormKernelsT<hwy::float16_t>& RowNormKernelsFor<hwy::float16_t>(
    long long target) {
  NK_SELECT_TARGET(target, kRowNormKernels_f16);
  return HWY_STATIC_DISPATCH(kRowNormKernels_f16);
}

template <>
const RowGradKernelsT<hwy::float16_t>& RowGradKernelsFor<hwy::float16_t>(
    long long target) {
  NK_SELECT_TARGET(target, kRowGradKernels_f16);
  return HWY_STATIC_DISPATCH(kRowGradKernels_f16);
}

}  // namespace nk
#endif  // HWY_ONCE
