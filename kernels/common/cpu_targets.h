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

}  // namespace nk

#endif  // NK_KERNELS_CPU_TARGETS_H_
