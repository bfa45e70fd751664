// SPDX-License-Identifier: Apache-2.0
// copy_baseline.h: the memory limit a kernel is measured against: the faster of
// memcpy and a non-temporal-store copy, split over the same threads as the kernel.
#ifndef NK_BENCH_COPY_BASELINE_H_
#define NK_BENCH_COPY_BASELINE_H_

#include <omp.h>

#include <cstddef>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace nk_bench {

inline void CopyPart(const float* src, float* dst, size_t n, bool streaming) {
#if defined(__x86_64__)
  if (streaming) {
    size_t i = 0;
    for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
    for (; i + 16 <= n; i += 16) {  // four 16-byte streams: one cache line a step
      _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
      _mm_stream_ps(dst + i + 4, _mm_loadu_ps(src + i + 4));
      _mm_stream_ps(dst + i + 8, _mm_loadu_ps(src + i + 8));
      _mm_stream_ps(dst + i + 12, _mm_loadu_ps(src + i + 12));
    }
    for (; i < n; ++i) dst[i] = src[i];
    _mm_sfence();
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, n * sizeof(float));
}

// Copies n floats with `threads` threads, each a contiguous part.
inline void Copy(const float* src, float* dst, size_t n, int threads, bool streaming) {
  if (threads <= 1) return CopyPart(src, dst, n, streaming);
#pragma omp parallel num_threads(threads)
  {
    const size_t t = omp_get_thread_num(), parts = omp_get_num_threads();
    const size_t b = n * t / parts, e = n * (t + 1) / parts;
    CopyPart(src + b, dst + b, e - b, streaming);
  }
}

}  // namespace nk_bench

#endif  // NK_BENCH_COPY_BASELINE_H_
