// SPDX-License-Identifier: Apache-2.0
// test_half: the bfloat16 / fp16 conversions of every target against a reference
// written from the formats' definitions (half_reference.h: values from their fields;
// rounding by looking up the two nearest representable values), sharing no code with
// them.
// Widening: all 65536 patterns of each type. Narrowing: every representable value,
// the midpoint to the next one (ties to even) and the fp32 values beside both, at both
// signs; fp16's overflow (65504, 65520, beyond) and subnormal range; NaN payloads;
// random fp32 patterns; spans of every length up to 67 at odd offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/cpu_targets.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/half_convert.h"
#include "half_reference.h"
#include "test_util.h"

namespace {

using nk::HalfType;
using nk_test::HalfFormat;
using nk_test::InfBits;
using nk_test::IsNaN;
using nk_test::IsQuiet;
using nk_test::kBf16;
using nk_test::kF16;
using nk_test::Round;
using nk_test::Value;

HalfType TypeOf(const HalfFormat& fmt) {
  return fmt.exponent_bits == kBf16.exponent_bits ? HalfType::kBf16 : HalfType::kF16;
}

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// The fp32 inputs of the narrowing checks: each representable value, the midpoint to
// the next, the fp32 values beside both, both signs; then the special cases and random
// patterns.
std::vector<float> NarrowInputs(const HalfFormat& fmt) {
  std::vector<float> in;
  const uint16_t inf = InfBits(fmt);
  for (uint32_t h = 0; h < inf; ++h) {
    const float v = static_cast<float>(Value(fmt, static_cast<uint16_t>(h)));
    const float mid =
        static_cast<float>((Value(fmt, static_cast<uint16_t>(h)) +
                            Value(fmt, static_cast<uint16_t>(h + 1))) /
                           2);  // exact: one bit more than the half's significand
    for (float f : {v, mid}) {
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, HUGE_VALF)}) {
        in.push_back(g);
        in.push_back(-g);
      }
    }
  }
  for (float f : {65504.0f, 65519.996f, 65520.0f, 65535.0f, 65536.0f, 1e6f, 3.4e38f,
                  HUGE_VALF, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1p-14f,
                  0x1.ffcp-15f, 0x1.ffep-15f, 0x1p-149f, 0x1p-126f, 0x1.fffffep-127f}) {
    in.push_back(f);
    in.push_back(-f);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const float f = Bits(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) in.push_back(f);
  }
  return in;
}

class Half : public nk_test::IsaTest {
 protected:
  const nk::HalfConvertKernels& Kernels() {
    return nk::HalfConvertKernelsFor(nk::CurrentTarget());
  }
};

TEST_P(Half, WidensEveryPatternExactly) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  for (const HalfFormat& fmt : {kBf16, kF16}) {
    std::vector<float> f(h.size(), 12345.0f);
    Kernels().widen(TypeOf(fmt), h.data(), h.size(), f.data());
    for (uint32_t i = 0; i < h.size(); ++i) {
      const long double want = Value(fmt, h[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i])) << fmt.name << " 0x" << std::hex << i;
        ASSERT_EQ(std::signbit(f[i]), (i >> 15) != 0)
            << fmt.name << " 0x" << std::hex << i;
      } else {
        ASSERT_EQ(static_cast<long double>(f[i]), want)
            << fmt.name << " 0x" << std::hex << i;
        ASSERT_EQ(std::signbit(f[i]), (i >> 15) != 0)
            << fmt.name << " 0x" << std::hex << i;
      }
    }
  }
}

TEST_P(Half, NarrowsToNearestEven) {
  for (const HalfFormat& fmt : {kBf16, kF16}) {
    const std::vector<float> in = NarrowInputs(fmt);
    std::vector<uint16_t> out(in.size(), 0x1234);
    Kernels().narrow(TypeOf(fmt), in.data(), in.size(), out.data());
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(out[i], Round(fmt, in[i])) << fmt.name << ": " << std::hexfloat << in[i]
                                           << " (0x" << std::hex << Bits(in[i]) << ")";
    }
  }
}

// The cases the contract names, spelled out (the reference above agrees with them).
TEST_P(Half, NamedCases) {
  const auto f16 = [&](float f) {
    uint16_t h;
    Kernels().narrow(HalfType::kF16, &f, 1, &h);
    return h;
  };
  const auto bf16 = [&](float f) {
    uint16_t h;
    Kernels().narrow(HalfType::kBf16, &f, 1, &h);
    return h;
  };
  EXPECT_EQ(f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f16(65519.996f), 0x7BFF);
  EXPECT_EQ(f16(65520.0f), 0x7C00);  // the tie past the largest value: Inf
  EXPECT_EQ(f16(-1e9f), 0xFC00);
  EXPECT_EQ(f16(0x1p-24f), 0x0001);         // the least subnormal, kept
  EXPECT_EQ(f16(0x1p-25f), 0x0000);         // a tie with 0: even
  EXPECT_EQ(f16(0x1.8p-24f), 0x0002);       // a tie between 1 and 2: even
  EXPECT_EQ(f16(1.0f + 0x1p-11f), 0x3C00);  // ties to even, down
  EXPECT_EQ(f16(1.0f + 0x3p-11f), 0x3C02);  // and up
  EXPECT_EQ(bf16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(bf16(1.0f + 0x3p-8f), 0x3F82);
  EXPECT_EQ(bf16(1.0f + 0x1.02p-8f), 0x3F81);  // above the tie: up (truncation: 0x3F80)
  EXPECT_EQ(bf16(3.4e38f), 0x7F80);            // beyond the largest bf16: Inf
  EXPECT_EQ(bf16(0x1p-133f), 0x0001);          // bf16 subnormals kept
}

// NaN stays NaN, quiet, with its sign and top payload bits, the same on every target.
TEST_P(Half, NaNStaysQuietNaN) {
  const std::vector<uint32_t> nans = {0x7FC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF,
                                      0xFF800400, 0x7FBFE000, 0x7F802000};
  for (const HalfFormat& fmt : {kBf16, kF16}) {
    std::vector<float> in;
    for (uint32_t u : nans) in.push_back(Bits(u));
    std::vector<uint16_t> out(in.size());
    Kernels().narrow(TypeOf(fmt), in.data(), in.size(), out.data());
    for (size_t i = 0; i < in.size(); ++i) {
      SCOPED_TRACE(testing::Message() << fmt.name << " 0x" << std::hex << nans[i]);
      EXPECT_TRUE(IsNaN(fmt, out[i]));
      EXPECT_TRUE(IsQuiet(fmt, out[i]));
      EXPECT_EQ(out[i] >> 15, nans[i] >> 31);
      const uint32_t top = (nans[i] & 0x7FFFFF) >> (23 - fmt.mantissa_bits);
      EXPECT_EQ(out[i] & ((1u << fmt.mantissa_bits) - 1),
                top | (1u << (fmt.mantissa_bits - 1)));
    }
  }
}

// Every length up to 67 from odd offsets: vector bodies and tails convert alike, and
// nothing outside the span is written.
TEST_P(Half, SpansOfEveryLength) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> f(80);
  for (float& v : f) v = normal(rng);
  for (const HalfFormat& fmt : {kBf16, kF16}) {
    std::vector<uint16_t> whole(f.size());
    for (size_t i = 0; i < f.size(); ++i) whole[i] = Round(fmt, f[i]);
    for (size_t n = 1; n <= 67; ++n) {
      for (size_t at : {size_t{1}, size_t{3}, size_t{7}}) {
        std::vector<uint16_t> h(f.size(), 0xABCD);
        Kernels().narrow(TypeOf(fmt), f.data() + at, n, h.data() + at);
        std::vector<float> back(f.size(), -7.0f);
        Kernels().widen(TypeOf(fmt), h.data() + at, n, back.data() + at);
        for (size_t i = 0; i < f.size(); ++i) {
          const bool inside = i >= at && i < at + n;
          ASSERT_EQ(h[i], inside ? whole[i] : 0xABCD)
              << fmt.name << " n " << n << " i " << i;
          ASSERT_EQ(back[i], inside ? static_cast<float>(Value(fmt, whole[i])) : -7.0f)
              << fmt.name << " n " << n << " i " << i;
        }
      }
    }
  }
}

NK_INSTANTIATE_FOR_EACH_ISA(Half);

// Under AVX3, bf16 is rounded by vcvtneps2bf16 where the CPU has AVX512-BF16 (Zen 4,
// Sapphire Rapids) and by integer arithmetic elsewhere or with NK_AVX512BF16=0:
// ctest runs the half tests under AVX3 both ways (tests/CMakeLists.txt). The library's
// CPUID check must agree with the compiler's.
TEST(HalfCpu, Avx512Bf16AsTheCompilerDetectsIt) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(nk::CpuHasAvx512Bf16(), __builtin_cpu_supports("avx512bf16") != 0);
#endif
  const char* env = std::getenv("NK_AVX512BF16");
  const bool off = env != nullptr && std::strcmp(env, "0") == 0;
  EXPECT_EQ(nk::kUseAvx512Bf16, nk::CpuHasAvx512Bf16() && !off);
}

}  // namespace
