// SPDX-License-Identifier: Apache-2.0
// cpu_targets.cc: CPUID/XGETBV feature detection mapped to Highway's x86 targets.
#include "kernels/common/cpu_targets.h"

#include <cstdlib>
#include <cstring>

#include "hwy/highway.h"

#if HWY_ARCH_X86
#include <cpuid.h>
#else
#include "hwy/targets.h"
#endif

namespace nk {

#if HWY_ARCH_X86
namespace {

bool Bit(uint32_t reg, int index) { return (reg >> index) & 1u; }

uint32_t ReadXcr0() {
  uint32_t lo, hi;
  asm volatile(".byte 0x0F, 0x01, 0xD0" : "=a"(lo), "=d"(hi) : "c"(0));  // xgetbv
  return lo;
}

}  // namespace

int64_t CpuTargets() {
  int64_t bits = HWY_SCALAR | HWY_EMU128;
  uint32_t a, b, c, d;
  __cpuid_count(0, 0, a, b, c, d);
  const uint32_t max_level = a;
  __cpuid_count(1, 0, a, b, c, d);
  const uint32_t c1 = c, d1 = d;
  __cpuid_count(0x80000001u, 0, a, b, c, d);
  const bool lzcnt = Bit(c, 5);
  uint32_t b7 = 0;
  if (max_level >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    b7 = b;
  }
  const bool sse2 = Bit(d1, 25) && Bit(d1, 26);
  const bool ssse3 = sse2 && Bit(c1, 0) && Bit(c1, 9);
  const bool sse4 = ssse3 && Bit(c1, 19) && Bit(c1, 20) && Bit(c1, 1) && Bit(c1, 25);
  const bool avx2 = sse4 && Bit(c1, 28) && Bit(b7, 5) && lzcnt && Bit(b7, 3) &&
                    Bit(b7, 8) && Bit(c1, 12) && Bit(c1, 29);
  const bool avx3 = avx2 && Bit(b7, 16) && Bit(b7, 31) && Bit(b7, 17) && Bit(b7, 30) &&
                    Bit(b7, 28);
  if (ssse3) bits |= HWY_SSSE3;
  if (sse4) bits |= HWY_SSE4;
  if (avx2) bits |= HWY_AVX2;
  if (avx3) bits |= HWY_AVX3;
  // The OS must save the wider registers across context switches.
  if (Bit(c1, 27)) {  // OSXSAVE
    const uint32_t xcr0 = ReadXcr0();
    if (!Bit(xcr0, 1) || !Bit(xcr0, 2)) bits &= ~(HWY_AVX2 | HWY_AVX3);
    if (!Bit(xcr0, 5) || !Bit(xcr0, 6) || !Bit(xcr0, 7)) bits &= ~HWY_AVX3;
  } else {
    bits &= ~(HWY_AVX2 | HWY_AVX3);
  }
  return bits;
}

bool CpuHasAvx512Bf16() {
  if ((CpuTargets() & HWY_AVX3) == 0) return false;  // and the OS saves zmm
  uint32_t a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  if (a < 1) return false;  // no subleaf 1
  __cpuid_count(7, 1, a, b, c, d);
  return Bit(a, 5);
}

bool CpuIsAmd() {
  uint32_t a, b, c, d;
  __cpuid_count(0, 0, a, b, c, d);
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  return std::memcmp(vendor, "AuthenticAMD", 12) == 0;
}

#else   // !HWY_ARCH_X86

int64_t CpuTargets() { return hwy::SupportedTargets(); }
bool CpuHasAvx512Bf16() { return false; }
bool CpuIsAmd() { return false; }

#endif  // HWY_ARCH_X86

extern const bool kUseAvx512Bf16 = [] {
  const char* env = std::getenv("NK_AVX512BF16");
  return CpuHasAvx512Bf16() && !(env != nullptr && std::strcmp(env, "0") == 0);
}();

}  // namespace nk
