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

// bf16 two vectors at a time through StorePair, as the kernels store their outputs
// (AVX3 narrows such a pair by one instruction), then vector by vector.
void Narrow(HalfType type, const float* f, size_t n, uint16_t* h) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t begin = 0;
  if (type == HalfType::kBf16) {
    auto* out = reinterpret_cast<hwy::bfloat16_t*>(h);
    for (; begin + 2 * N <= n; begin += 2 * N) {
      StorePair(hn::LoadU(d, f + begin), hn::LoadU(d, f + begin + N), d, out + begin);
    }
  }
  ForEachVector(d, begin, n, [&](auto dv, size_t i) HWY_ATTR {
    const auto v = hn::LoadU(dv, f + i);
    hn::StoreU(type == HalfType::kBf16 ? NarrowBf16(dv, v) : NarrowF16(dv, v),
               HalfTag<decltype(dv)>(), h + i);
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
