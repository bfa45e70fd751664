// SPDX-License-Identifier: Apache-2.0
// fuzz_util.h: what the libFuzzer targets share: failing loudly, fuzzed values with
// the edge cases of fp32 (one by one, or long runs from a seed), and the ISA / thread
// choice.
#ifndef NK_TESTS_FUZZ_FUZZ_UTIL_H_
#define NK_TESTS_FUZZ_FUZZ_UTIL_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "normkernels.h"

namespace nk_fuzz {

[[noreturn]] inline void Fail(const char* fuzzer, const char* what) {
  std::fprintf(stderr, "%s: %s (last error: %s)\n", fuzzer, what, nk_last_error());
  std::abort();
}

// NaN, infinities, huge and tiny values, 1e4 + small, or a moderate value.
inline float Value(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return NAN;
    case 1: return p.ConsumeBool() ? INFINITY : -INFINITY;
    case 2: return p.ConsumeFloatingPointInRange<float>(-3e38f, 3e38f);
    case 3: return p.ConsumeFloatingPointInRange<float>(-1e-30f, 1e-30f);
    case 4: return 1e4f + p.ConsumeFloatingPointInRange<float>(-2.0f, 2.0f);
    default: return p.ConsumeFloatingPointInRange<float>(-8.0f, 8.0f);
  }
}

// The values of one argument: fuzzed one by one (every edge case, costly in bytes), or,
// 3 times in 4, moderate ones from a fuzzed seed with fuzzed ones planted at a fuzzed
// rate (long rows of finite values from a few bytes).
class Filler {
 public:
  explicit Filler(FuzzedDataProvider& p)
      : p_(p), seeded_(p.ConsumeIntegralInRange<int>(0, 3) != 0),
        plant_(p.ConsumeIntegralInRange<int>(0, 3)),
        rng_(p.ConsumeIntegral<uint32_t>()) {}
  float Next() {
    if (!seeded_) return Value(p_);
    const uint32_t bits = static_cast<uint32_t>(rng_());
    if (plant_ != 0 && bits % (1u << (10 - 3 * plant_)) == 0) return Value(p_);
    return static_cast<float>(bits >> 8) * 0x1p-21f - 4.0f;  // [-4, 4)
  }

 private:
  FuzzedDataProvider& p_;
  bool seeded_;
  int plant_;  // planted fuzzed values: none, 1/128, 1/16, 1/2
  std::minstd_rand rng_;
};

// One of the ISAs this CPU runs, and 1 to 3 threads.
inline void SelectIsaAndThreads(FuzzedDataProvider& p, const char* fuzzer) {
  const char* isas[8];
  const size_t nisa = nk_list_isas(isas, 8);
  if (nk_set_isa(isas[p.ConsumeIntegralInRange<size_t>(0, nisa - 1)]) != NK_OK) {
    Fail(fuzzer, "set_isa");
  }
  nk_set_num_threads(p.ConsumeIntegralInRange<int>(1, 3));
}

}  // namespace nk_fuzz

#endif  // NK_TESTS_FUZZ_FUZZ_UTIL_H_
