// SPDX-License-Identifier: Apache-2.0
// half-inl.h: bfloat16 and fp16 to and from fp32, per target (c-abi.md, "Half
// precision"). Widening is exact; narrowing rounds to nearest, ties to even, keeps
// NaN quiet (its top payload bits too, as the hardware does), rounds fp16 beyond the
// largest finite value (|v| >= 65520) to Inf and keeps fp16 subnormals.
//
// Highway 1.0.3's own conversions are not all of that: its bf16 DemoteTo truncates,
// and without F16C (SSE4, SSSE3, EMU128, SCALAR) its fp16 DemoteTo truncates too and
// clamps the exponent, and its fp16 PromoteTo widens Inf and NaN to finite values.
// So bf16 is integer arithmetic (AVX3 on CPUs with AVX512-BF16: vcvtneps2bf16, below),
// and fp16 takes F16C where the target has it (AVX2, AVX3: vcvtph2ps, vcvtps2ph with
// rounding to nearest even) and integer arithmetic elsewhere.
#if defined(NK_KERNELS_HALF_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_HALF_INL_H_
#undef NK_KERNELS_HALF_INL_H_
#else
#define NK_KERNELS_HALF_INL_H_
#endif

#include <stdint.h>

#include "hwy/highway.h"
#include "kernels/common/cpu_targets.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef NK_F16C  // per target
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define NK_F16C 1
#else
#define NK_F16C 0
#endif

// The baseline targets (EMU128, SCALAR) emulate vectors lane by lane: there the
// conversions are called rather than inlined into every load and store of the
// kernels, which made those targets most of the half kernels' code and build time.
#undef NK_HALF_INLINE
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
#define NK_HALF_INLINE HWY_NOINLINE
#else
#define NK_HALF_INLINE HWY_INLINE
#endif

// The half vector holding as many elements as the fp32 vector of D.
template <class D>
using HalfTag = hn::Rebind<uint16_t, D>;

// ------------------------------------------------------------------ bfloat16

template <class D>
NK_HALF_INLINE hn::Vec<D> WidenBf16(D d, hn::Vec<HalfTag<D>> h) {
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// The 16 bits dropped are rounded into the kept ones by adding 0x7FFF plus the kept
// lowest bit (a carry into the exponent is the right result, up to Inf); NaN keeps
// its top payload bits with the quiet bit set, as vcvtneps2bf16 does.
template <class D>
HWY_INLINE hn::Vec<HalfTag<D>> NarrowBf16Bits(D /* d */, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(du, v);
  const auto high = hn::ShiftRight<16>(bits);
  const auto odd = hn::And(high, hn::Set(du, 1));
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), odd)));
  const auto nan = hn::Or(high, hn::Set(du, 0x40));
  const auto out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
  return hn::DemoteTo(HalfTag<D>(), hn::BitCast(di, out));  // every value fits
}

// AVX512-BF16's vcvtneps2bf16 rounds as NarrowBf16Bits does but reads fp32 subnormals
// as zero, so vectors holding one (vfpclassps: denormal) take the integer arithmetic.
// One instruction for about nine: bf16 LayerNorm 1024x1024, AVX3, 1 thread, 10.3 ->
// 13.6 GB/s.
template <class D>
NK_HALF_INLINE hn::Vec<HalfTag<D>> NarrowBf16(D d, hn::Vec<D> v) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) {
    if (kUseAvx512Bf16 && _mm512_fpclass_ps_mask(v.raw, 0x20) == 0) {
      __m256i h;
      // By opcode: the AVX3 target's flags do not include avx512bf16.
      asm("vcvtneps2bf16 %1, %0" : "=v"(h) : "v"(v.raw));
      return hn::Vec<HalfTag<D>>{h};
    }
  }
#endif
  return NarrowBf16Bits(d, v);
}

// ------------------------------------------------------------------ fp16

template <class D>
NK_HALF_INLINE hn::Vec<D> WidenF16(D d, hn::Vec<HalfTag<D>> h) {
#if NK_F16C
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), h));
#else
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::PromoteTo(du, h);
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000)));
  const auto mag = hn::And(bits, hn::Set(du, 0x7FFF));
  const auto exponent = hn::ShiftRight<10>(mag);
  // Normal: the exponent rebiased (127 - 15), the mantissa moved up 13 bits; Inf and
  // NaN (exponent 31) rebiased once more, to 255.
  const auto normal = hn::Add(hn::ShiftLeft<13>(mag), hn::Set(du, 112u << 23));
  const auto special = hn::Add(normal, hn::Set(du, 112u << 23));
  // Subnormal (exponent 0, zero included): the mantissa times 2^-24, exact.
  const auto subnormal = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(d, hn::BitCast(di, mag)), hn::Set(d, 0x1p-24f)));
  auto out = hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 31)), special, normal);
  out = hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal, out);
  return hn::BitCast(d, hn::Or(sign, out));
#endif
}

template <class D>
NK_HALF_INLINE hn::Vec<HalfTag<D>> NarrowF16(D d, hn::Vec<D> v) {
#if NK_F16C
  // vcvtps2ph with _MM_FROUND_NO_EXC: the rounding mode of the immediate, nearest even.
  return hn::BitCast(HalfTag<D>(), hn::DemoteTo(hn::Rebind<hwy::float16_t, D>(), v));
#else
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000));
  const auto mag = hn::And(bits, hn::Set(du, 0x7FFFFFFF));
  const auto mag_i = hn::BitCast(di, mag);  // below 2^31: signed compares are right
  // Normal results: the exponent rebiased and the 13 dropped bits rounded in (0xFFF
  // plus the kept lowest bit); a carry into the exponent is right, up to Inf (65520).
  const auto odd = hn::And(hn::ShiftRight<13>(mag), hn::Set(du, 1));
  const auto normal = hn::ShiftRight<13>(
      hn::Add(hn::Sub(mag, hn::Set(du, 112u << 23)), hn::Add(hn::Set(du, 0xFFF), odd)));
  // Below 2^-14, subnormal results: adding 0.5 makes the FPU round at 2^-24, the
  // subnormal step, to nearest even; the sum's low bits are the result (1024 where it
  // rounds up to the least normal, which is that result's encoding too).
  const auto subnormal =
      hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, mag), hn::Set(d, 0.5f))),
              hn::Set(du, 0x3F000000));
  // From 65536 on (the normal formula's exponent would overflow): Inf; NaN keeps its
  // top payload bits, quiet, as vcvtps2ph does.
  const auto nan =
      hn::Or(hn::Set(du, 0x7E00), hn::And(hn::ShiftRight<13>(mag), hn::Set(du, 0x3FF)));
  auto out = hn::IfThenElse(hn::RebindMask(du, hn::Lt(mag_i, hn::Set(di, 0x38800000))),
                            subnormal, normal);
  out = hn::IfThenElse(hn::RebindMask(du, hn::Gt(mag_i, hn::Set(di, 0x477FFFFF))),
                       hn::Set(du, 0x7C00), out);
  out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, out);
  return hn::DemoteTo(HalfTag<D>(), hn::BitCast(di, hn::Or(sign, out)));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_HALF_INL_H_
