// SPDX-License-Identifier: Apache-2.0
// half_convert.cc: the span conversions of half_convert.h, compiled once per target.
#include "kernels/common/half_convert.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/common/half_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/half-inl.h"
#include "kernels/common/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

void Widen(HalfType type, const uint16_t* h, size_t n, float* f) {
  ForEachVector(hn::ScalableTag<float>(), 0, n, [&](auto d, size_t i) HWY_ATTR {
    hn::StoreU(type == HalfType::kBf16
                   ? LoadWidenBf16(d, h + i)
                   : WidenF16(d, hn::LoadU(HalfTag<decltype(d)>(), h + i)),
               d, f + i);
  });
}

void Narrow(HalfType type, const float* f, size_t n, uint16_t* h) {
  ForEachVector(hn::ScalableTag<float>(), 0, n, [&](auto d, size_t i) HWY_ATTR {
    const auto v = hn::LoadU(d, f + i);
    hn::StoreU(type == HalfType::kBf16 ? NarrowBf16(d, v) : NarrowF16(d, v),
               HalfTag<decltype(d)>(), h + i);
  });
}

extern const HalfConvertKernels kHalfConvertKernels = {&Widen, &Narrow, HWY_TARGET};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

const HalfConvertKernels& HalfConvertKernelsFor(long long target) {
  NK_SELECT_TARGET(target, kHalfConvertKernels);
  return HWY_STATIC_DISPATCH(kHalfConvertKernels);
}

}  // namespace nk
#endif  // HWY_ONCE
