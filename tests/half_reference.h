// SPDX-License-Identifier: Apache-2.0
// half_reference.h: bfloat16 and fp16 written from the formats' definitions (values
// from their fields; rounding by looking up the two nearest representable values), and
// design.md's rule for half outputs. Shares no code with the kernels.
#ifndef NK_TESTS_HALF_REFERENCE_H_
#define NK_TESTS_HALF_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace nk_test {

struct HalfFormat {
  int mantissa_bits;  // stored fraction bits: 7 (bf16), 10 (fp16)
  int exponent_bits;  // 8, 5
  const char* name;   // the C ABI's suffix
};
constexpr HalfFormat kBf16{7, 8, "bf16"};
constexpr HalfFormat kF16{10, 5, "f16"};

// The pattern of +Inf.
inline uint16_t InfBits(const HalfFormat& fmt) {
  return static_cast<uint16_t>(((1u << fmt.exponent_bits) - 1) << fmt.mantissa_bits);
}
inline uint16_t QuietBit(const HalfFormat& fmt) {
  return static_cast<uint16_t>(1u << (fmt.mantissa_bits - 1));
}

// The value of a half pattern from its fields (NaN for any NaN pattern).
inline long double ValueFromFields(const HalfFormat& fmt, uint16_t h) {
  const int m = fmt.mantissa_bits, e = fmt.exponent_bits;
  const int bias = (1 << (e - 1)) - 1;
  const unsigned exponent = (h >> m) & ((1u << e) - 1);
  const unsigned fraction = h & ((1u << m) - 1);
  const long double sign = (h >> 15) != 0 ? -1.0L : 1.0L;
  if (exponent == (1u << e) - 1) {
    return fraction == 0 ? sign * HUGE_VALL : std::nanl("");
  }
  if (exponent == 0)
    return sign * std::ldexp(static_cast<long double>(fraction), 1 - bias - m);
  return sign * std::ldexp(static_cast<long double>(fraction + (1u << m)),
                           static_cast<int>(exponent) - bias - m);
}

// The values of the patterns 0 .. +Inf, ascending (the tests look up millions), in R:
// exact in float and double too (a half value has 11 significant bits at most).
template <class R = long double>
inline const std::vector<R>& Magnitudes(const HalfFormat& fmt) {
  static const auto table = [](const HalfFormat& f) {
    std::vector<R> v(InfBits(f) + 1);
    for (uint32_t h = 0; h < v.size(); ++h) {
      v[h] = static_cast<R>(ValueFromFields(f, static_cast<uint16_t>(h)));
    }
    return v;
  };
  static const std::vector<R> bf16 = table(kBf16), f16 = table(kF16);
  return fmt.exponent_bits == kBf16.exponent_bits ? bf16 : f16;
}

inline bool IsNaN(const HalfFormat& fmt, uint16_t h) {
  return (h & 0x7FFF) > InfBits(fmt);
}
inline bool IsQuiet(const HalfFormat& fmt, uint16_t h) {
  return (h & QuietBit(fmt)) != 0;
}

inline long double Value(const HalfFormat& fmt, uint16_t h) {
  if (IsNaN(fmt, h)) return std::nanl("");
  const long double a = Magnitudes(fmt)[h & 0x7FFF];
  return (h >> 15) != 0 ? -a : a;
}

// The value as fp32 holds it (exactly: both formats are subsets of fp32).
inline float Widen(const HalfFormat& fmt, uint16_t h) {
  if (IsNaN(fmt, h)) return std::nanf("");
  const float a = Magnitudes<float>(fmt)[h & 0x7FFF];
  return (h >> 15) != 0 ? -a : a;
}

// Round to nearest, ties to even: the nearer of the two representable neighbours (the
// even pattern on a tie); beyond the largest finite value by half its step or more,
// Inf. NaN gives the quiet NaN of its sign. Computed in R, which must hold v and the
// differences below exactly.
template <class R>
inline uint16_t RoundIn(const HalfFormat& fmt, R v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const uint16_t inf = InfBits(fmt);
  if (std::isnan(v)) return sign | inf | QuietBit(fmt);
  const std::vector<R>& magnitude = Magnitudes<R>(fmt);
  const R a = std::fabs(v);
  const uint16_t max = inf - 1;
  const R top = magnitude[max], step = top - magnitude[max - 1];
  if (a >= top + step / 2) return sign | inf;
  // The largest pattern whose value is <= a: where 2^e <= a < 2^(e+1), the pattern
  // ((e + bias - 1) << m) + k has the value k * 2^(e - m), k in [2^m, 2^(m+1)) (below
  // the least exponent, the subnormals: k from 0).
  const int m = fmt.mantissa_bits, bias = (1 << (fmt.exponent_bits - 1)) - 1;
  const int e = a == 0 ? 1 - bias : std::max(std::ilogb(a), 1 - bias);
  const uint16_t lo = static_cast<uint16_t>(((e + bias - 1) << m) +
                                            static_cast<int>(std::ldexp(a, m - e)));
  if (lo == max) return sign | max;
  const R below = a - magnitude[lo], above = magnitude[lo + 1] - a;
  const bool up = above < below || (above == below && (lo & 1) != 0);
  return sign | static_cast<uint16_t>(lo + up);
}
inline uint16_t Round(const HalfFormat& fmt, long double v) { return RoundIn(fmt, v); }
// An fp32 value (the f32 kernels' outputs, the tests' inputs) in double, exactly: it and
// its two neighbours are multiples of its own ulp below twice its magnitude. Where long
// double is software quad precision (aarch64; under qemu ~120 ns an operation against
// ~12 for double) this was most of the half tests' time.
inline uint16_t Round(const HalfFormat& fmt, float v) {
  return RoundIn(fmt, static_cast<double>(v));
}

// design.md, Numerics, half precision: `got` is RNE(want), except where want lies within
// `bound` of a rounding boundary, where the neighbour across it is accepted too: the
// values that fp32 results within the bound round to, Round(want - bound) to
// Round(want + bound) (rounding is monotonic). NaN wants a quiet NaN, an infinity the
// same infinity; in a row holding a NaN or an infinity the bound is NaN, and a finite
// want is then met exactly (as Meets).
inline bool MeetsHalf(const HalfFormat& fmt, uint16_t got, long double want,
                      long double bound) {
  if (std::isnan(want)) return IsNaN(fmt, got) && IsQuiet(fmt, got);
  if (std::isnan(bound)) bound = 0;
  if (got == Round(fmt, want)) return true;
  if (IsNaN(fmt, got)) return false;
  const long double v = Value(fmt, got);
  return Value(fmt, Round(fmt, want - bound)) <= v &&
         v <= Value(fmt, Round(fmt, want + bound));
}

}  // namespace nk_test

#endif  // NK_TESTS_HALF_REFERENCE_H_
