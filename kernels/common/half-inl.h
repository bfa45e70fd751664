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
//
// bf16 conversions are integer arithmetic (but for AVX512-BF16's narrowing), and
// below AVX-512 their instructions outnumber the normalization's: bf16 LayerNorm at
// AVX2 took twice the f32 kernel's time, fp16 (F16C) the f32 kernel's. So x86 below
// AVX-512 widens with one shuffle (AVX2 vpshufb, SSE4 a word unpack; for a
// zero-extension and a shift), rounds with a compare (for a shift) and narrows with a
// byte shuffle (for two shifts and a pack; AVX2 joins its blocks with a vpermq either
// way): AVX2 LayerNorm 1024x1024, 1 thread, 301 -> 264 us.

template <class D>
NK_HALF_INLINE hn::Vec<D> WidenBf16(D d, hn::Vec<HalfTag<D>> h) {
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// The Lanes(d) bf16 at p, widened.
template <class D>
NK_HALF_INLINE hn::Vec<D> LoadWidenBf16(D d, const uint16_t* p) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 8) {
    // The 16 bytes in both blocks (vbroadcasti128 is a load, not a shuffle), then
    // each element into the upper half of its lane.
    const __m256i h =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i to_upper =
        _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,  //
                         -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return hn::Vec<D>{_mm256_castsi256_ps(_mm256_shuffle_epi8(h, to_upper))};
  }
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  if constexpr (hn::MaxLanes(D()) == 4) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return hn::Vec<D>{_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h))};
  }
#endif
  return WidenBf16(d, hn::LoadU(HalfTag<D>(), p));
}

// The upper 16 bits of each lane of u, as the half vector.
template <class D>
HWY_INLINE hn::Vec<HalfTag<D>> UpperHalves(D /* d */,
                                           hn::Vec<hn::RebindToUnsigned<D>> u) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 8) {
    // Each block's upper halves into its lower 8 bytes, then the two 8-byte pieces
    // side by side.
    const __m256i from_upper =
        _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,  //
                         2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(u.raw, from_upper), 0x08);
    return hn::Vec<HalfTag<D>>{_mm256_castsi256_si128(packed)};
  }
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  if constexpr (hn::MaxLanes(D()) == 4) {
    const __m128i from_upper =
        _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    return hn::Vec<HalfTag<D>>{_mm_shuffle_epi8(u.raw, from_upper)};
  }
#endif
  const hn::RebindToSigned<D> di;
  return hn::DemoteTo(HalfTag<D>(), hn::BitCast(di, hn::ShiftRight<16>(u)));
}

// v's bits with their upper halves rounded to bf16 (the lower halves are left over):
// the 16 bits dropped are rounded into the kept ones by adding 0x7FFF plus the kept
// lowest bit (a carry into the exponent is the right result, up to Inf); NaN keeps
// its top payload bits with the quiet bit set, as vcvtneps2bf16 does.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBf16Bits(D /* d */, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  // Plus 0x7FFF and the kept lowest bit (bit 16): minus its all-ones mask. Elsewhere
  // the shift, as before: AVX3's compares give a mask register (one more instruction
  // to a vector), and Arm's targets were not measured.
  const auto odd = hn::VecFromMask(du, hn::TestBit(bits, hn::Set(du, 0x10000)));
  const auto rounded = hn::Sub(hn::Add(bits, hn::Set(du, 0x7FFF)), odd);
#else
  const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), odd));
#endif
  const auto nan = hn::Or(bits, hn::Set(du, 0x400000));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
}

template <class D>
HWY_INLINE hn::Vec<HalfTag<D>> NarrowBf16Bits(D d, hn::Vec<D> v) {
  return UpperHalves(d, RoundedBf16Bits(d, v));
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

#if HWY_TARGET == HWY_AVX3
// lo and hi narrowed together by vcvtne2ps2bf16 (lo's 16 bf16, then hi's) into *out,
// where AVX512-BF16 is used and neither holds a subnormal: one convert and one test
// for two vectors. False otherwise (NarrowBf16 each, then).
//
// The test is on the result: the instruction reads a subnormal as zero, and no other
// fp32 value but zero narrows to a bf16 of magnitude zero, so a pair without a ±0 in
// its result had no subnormal (pairs holding true zeros take the exact path too). Two
// instructions (the sign shifted out, a test of the words) in place of two
// vfpclassps, whose masks went through scalar registers (LayerNorm bf16, AVX3, 1
// thread, both builds alternating in one process, both orders, time after / before:
// 16384x1024 0.97, 1024x1024 0.98, 64x1024 0.98; the magnitude's mask as a constant
// was rebroadcast in every step, and as a memory operand of an asm took 1.04-1.12).
HWY_INLINE bool NarrowBf16Pair(__m512 lo, __m512 hi, __m512i* out) {
  if (!kUseAvx512Bf16) return false;
  __m512i h;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(h) : "v"(hi), "v"(lo));
  const __m512i magnitude = _mm512_add_epi16(h, h);  // the sign shifted out
  if (_mm512_testn_epi16_mask(magnitude, magnitude) != 0) return false;
  *out = h;
  return true;
}
#endif

// v rounded to the nearest bf16, kept in fp32: no narrowing and widening where the
// rounding is integer arithmetic.
template <class D>
NK_HALF_INLINE hn::Vec<D> RoundBf16(D d, hn::Vec<D> v) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) {
    if (kUseAvx512Bf16) return WidenBf16(d, NarrowBf16(d, v));
  }
#endif
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::And(RoundedBf16Bits(d, v), hn::Set(du, 0xFFFF0000u)));
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
