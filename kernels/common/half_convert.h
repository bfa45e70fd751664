// SPDX-License-Identifier: Apache-2.0
// half_convert.h: spans of bfloat16 / fp16 to and from fp32 with the per-target
// conversions of half-inl.h (the kernels' loads and stores use those directly), so the
// rounding of every target can be checked value by value.
#ifndef NK_KERNELS_HALF_CONVERT_H_
#define NK_KERNELS_HALF_CONVERT_H_

#include <stdint.h>

#include <cstddef>

namespace nk {

enum class HalfType { kBf16, kF16 };

struct HalfConvertKernels {
  // f[i] = the fp32 value of h[i] (exact), i < n.
  void (*widen)(HalfType type, const uint16_t* h, size_t n, float* f);
  // h[i] = f[i] rounded to nearest even, i < n.
  void (*narrow)(HalfType type, const float* f, size_t n, uint16_t* h);
  int64_t target;  // the HWY_* bit of the target the table was compiled for
};

// The table of `target` (a single HWY_* bit that this library compiled).
const HalfConvertKernels& HalfConvertKernelsFor(long long target);

}  // namespace nk

#endif  // NK_KERNELS_HALF_CONVERT_H_
