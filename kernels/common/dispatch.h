// SPDX-License-Identifier: Apache-2.0
// dispatch.h: the selected ISA (a Highway target) and thread count, and the macro that
// picks a per-target kernel table by target.
#ifndef NK_KERNELS_DISPATCH_H_
#define NK_KERNELS_DISPATCH_H_

#include <stdint.h>

#include <cstddef>

#include "hwy/highway.h"

namespace nk {

// The target kernels use for a call starting now (a single HWY_* bit); read once at
// the entry of every kernel.
int64_t CurrentTarget();

// The number of threads for a job of `work` elements: 1 for small jobs, never more
// than the configured count, and at least kMinWorkPerThread elements each.
int ThreadsFor(size_t work);

// Calls whose tensors (inputs and outputs together) reach StreamBytes() write their
// outputs with non-temporal stores: the outputs would not stay in the last-level cache
// (32 MiB per core complex on Zen 4 / 5) anyway, and streaming skips the read for
// ownership. kStreamBytes by default; NK_STREAM_BYTES in the environment sets it (a
// CPU with a larger cache; tests that take the streamed paths with small tensors). The
// channel forwards of fp32 tensors stream from half of it (StreamsChannels).
constexpr size_t kStreamBytes = size_t{32} << 20;
size_t StreamBytes();

// Whether a channel forward (BatchNorm, GroupNorm) of `elements` streams y: once x and
// y together reach StreamBytes(), fp32 ones from half of that. Zen 4, x and y of 24.5
// MiB, GB/s not streamed -> streamed, 1 thread: BatchNorm training 16x64x56x56 NHWC
// AVX3 15.9-22.6 -> 29.5-31.2, AVX2 13.3-18.0 -> 28.4-29.5, SSE4 8.6-10.3 -> 17.7;
// GroupNorm 32x512x14x14 NCHW AVX3 18.2-18.7 -> 43.2-47.2, AVX2 17-20 -> 46-48, NHWC
// 15-17 -> 26-28 at both (2 threads +5-25%; SSE4 NCHW 2 threads 49-52 -> 41-47). A
// Zen 5 host gained on those GroupNorm cells and held BatchNorm's. Half tensors of
// those bytes lost: BatchNorm training bf16 / fp16 32x64x56x56 NHWC, AVX2 1 thread
// 16.1 -> 13.2 / 22.0 -> 16.8 GB/s, AVX3 2 threads 42-50 -> 32-33.
inline bool StreamsChannels(size_t elements, size_t element_bytes) {
  const size_t bytes = 2 * elements * element_bytes;
  return (element_bytes == 4 ? 2 * bytes : bytes) >= StreamBytes();
}

// The first item of part `k` of `parts` equal parts of `n` items.
inline size_t PartBegin(size_t n, size_t k, size_t parts) { return n * k / parts; }

}  // namespace nk

// NK_SELECT_TARGET(target, NAME): `return &N_<TARGET>::NAME;` for the compiled target
// equal to `target`; falls through otherwise. Our own table instead of Highway's
// HWY_DYNAMIC_DISPATCH, whose chosen target is a process-wide global of libhwy.
#define NK_TARGET_CASE(BIT, NS, NAME) \
  case BIT:                           \
    return NS::NAME;
#if HWY_TARGETS & HWY_AVX3_DL
#define NK_CASE_AVX3_DL(NAME) NK_TARGET_CASE(HWY_AVX3_DL, N_AVX3_DL, NAME)
#else
#define NK_CASE_AVX3_DL(NAME)
#endif
#if HWY_TARGETS & HWY_AVX3
#define NK_CASE_AVX3(NAME) NK_TARGET_CASE(HWY_AVX3, N_AVX3, NAME)
#else
#define NK_CASE_AVX3(NAME)
#endif
#if HWY_TARGETS & HWY_AVX2
#define NK_CASE_AVX2(NAME) NK_TARGET_CASE(HWY_AVX2, N_AVX2, NAME)
#else
#define NK_CASE_AVX2(NAME)
#endif
#if HWY_TARGETS & HWY_SSE4
#define NK_CASE_SSE4(NAME) NK_TARGET_CASE(HWY_SSE4, N_SSE4, NAME)
#else
#define NK_CASE_SSE4(NAME)
#endif
#if HWY_TARGETS & HWY_SSSE3
#define NK_CASE_SSSE3(NAME) NK_TARGET_CASE(HWY_SSSE3, N_SSSE3, NAME)
#else
#define NK_CASE_SSSE3(NAME)
#endif
#if HWY_TARGETS & HWY_SVE2_128
#define NK_CASE_SVE2_128(NAME) NK_TARGET_CASE(HWY_SVE2_128, N_SVE2_128, NAME)
#else
#define NK_CASE_SVE2_128(NAME)
#endif
#if HWY_TARGETS & HWY_SVE_256
#define NK_CASE_SVE_256(NAME) NK_TARGET_CASE(HWY_SVE_256, N_SVE_256, NAME)
#else
#define NK_CASE_SVE_256(NAME)
#endif
#if HWY_TARGETS & HWY_SVE2
#define NK_CASE_SVE2(NAME) NK_TARGET_CASE(HWY_SVE2, N_SVE2, NAME)
#else
#define NK_CASE_SVE2(NAME)
#endif
#if HWY_TARGETS & HWY_SVE
#define NK_CASE_SVE(NAME) NK_TARGET_CASE(HWY_SVE, N_SVE, NAME)
#else
#define NK_CASE_SVE(NAME)
#endif
#if HWY_TARGETS & HWY_NEON
#define NK_CASE_NEON(NAME) NK_TARGET_CASE(HWY_NEON, N_NEON, NAME)
#else
#define NK_CASE_NEON(NAME)
#endif
#if HWY_TARGETS & HWY_EMU128
#define NK_CASE_EMU128(NAME) NK_TARGET_CASE(HWY_EMU128, N_EMU128, NAME)
#else
#define NK_CASE_EMU128(NAME)
#endif
#if HWY_TARGETS & HWY_SCALAR
#define NK_CASE_SCALAR(NAME) NK_TARGET_CASE(HWY_SCALAR, N_SCALAR, NAME)
#else
#define NK_CASE_SCALAR(NAME)
#endif

#define NK_SELECT_TARGET(target, NAME)                                           \
  switch (target) {                                                              \
    NK_CASE_AVX3_DL(NAME)                                                        \
    NK_CASE_AVX3(NAME) NK_CASE_AVX2(NAME) NK_CASE_SSE4(NAME) NK_CASE_SSSE3(NAME) \
        NK_CASE_SVE2_128(NAME) NK_CASE_SVE_256(NAME) NK_CASE_SVE2(NAME)          \
            NK_CASE_SVE(NAME) NK_CASE_NEON(NAME) NK_CASE_EMU128(NAME)            \
                NK_CASE_SCALAR(NAME) default : break;                            \
  }

#endif  // NK_KERNELS_DISPATCH_H_
