// rownorm_f32.cc: the fp32 LayerNorm-family kernels, compiled once per Highway target.
#include "kernels/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rownorm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/rownorm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

extern const RowNormKernels kRowNormKernels = {&Rows, &RowChunkMoments, &RowMaxAbs,
                                               &RowApply};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

const RowNormKernels& RowNormKernelsFor(long long target) {
  NK_SELECT_TARGET(target, kRowNormKernels);
  return HWY_STATIC_DISPATCH(kRowNormKernels);
}

}  // namespace nk
#endif  // HWY_ONCE
