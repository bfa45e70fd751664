// SPDX-License-Identifier: Apache-2.0
// cpu_targets.h: which Highway targets this CPU runs, detected by the library itself.
#ifndef NK_KERNELS_CPU_TARGETS_H_
#define NK_KERNELS_CPU_TARGETS_H_

#include <stdint.h>

namespace nk {

// HWY_* bits of the targets this CPU (and OS) supports. On x86 it is our own CPUID
// check, the same feature groups as Highway 1.0.3's: libnormkernels then needs no
// libhwy at run time, is immune to another Highway user's DisableTargets, and runs
// under valgrind (libhwy's start-up code uses RDTSCP, which valgrind 3.19 lacks).
int64_t CpuTargets();

// Whether the CPU runs AVX512-BF16 besides Highway's AVX3 (Zen 4, Sapphire Rapids,
// Cooper Lake; not Skylake-X or Ice Lake).
bool CpuHasAvx512Bf16();

// Whether the CPU is AMD's (CPUID's vendor string): for the few choices of a path that
// measured the other way round on AMD's and Intel's cores.
bool CpuIsAmd();

// CpuHasAvx512Bf16(), read once at load, unless NK_AVX512BF16=0 is in the environment:
// the AVX3 kernels then round fp32 to bfloat16 with vcvtneps2bf16 instead of integer
// arithmetic (half-inl.h; the same bits either way, which the tests check by running
// with both).
extern const bool kUseAvx512Bf16;

}  // namespace nk

#endif  // NK_KERNELS_CPU_TARGETS_H_
