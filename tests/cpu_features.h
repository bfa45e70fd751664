// SPDX-License-Identifier: Apache-2.0
// cpu_features.h: what this x86 CPU runs, by its own feature flags (libgcc's cpuid),
// not by the library's or Highway's detection, so that tests can check those.
#ifndef NK_TESTS_CPU_FEATURES_H_
#define NK_TESTS_CPU_FEATURES_H_

#if defined(__x86_64__)
// Highway's AVX3 target: AVX-512 F, VL, DQ and BW.
inline bool CpuRunsAvx3() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
}
#endif

#endif  // NK_TESTS_CPU_FEATURES_H_
