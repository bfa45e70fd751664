// SPDX-License-Identifier: Apache-2.0
// cache_sets.h: where tensors fall in the L1 cache's sets, for the op layers' choices
// of row groups and of where parameters are copied.
#ifndef NK_KERNELS_CACHE_SETS_H_
#define NK_KERNELS_CACHE_SETS_H_

#include <stdint.h>

#include <algorithm>
#include <cstddef>

namespace nk {

// Addresses this far apart share an L1 set (x86 cores: 64 sets of 64-byte lines, 8 or
// 12 ways): a tensor's rows whose stride is a multiple of it share one set at each
// column.
constexpr uintptr_t kSetStride = 4096;
constexpr uintptr_t kSetLine = 64;

inline uintptr_t PageOffset(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kSetStride;
}

// The distance between two offsets from a page, around the page.
inline uintptr_t PageDistance(uintptr_t a, uintptr_t b) {
  const uintptr_t d = (a - b) % kSetStride;
  return std::min(d, kSetStride - d);
}

// Whether two of `rows` consecutive rows `row_bytes` apart lie within a line of each
// other modulo kSetStride (rows of 1024 floats: every row; of 512: every other row).
inline bool RowsShareSets(size_t row_bytes, size_t rows) {
  for (size_t k = 1; k < rows; ++k) {
    if (PageDistance(k * row_bytes % kSetStride, 0) < kSetLine) return true;
  }
  return false;
}

}  // namespace nk

#endif  // NK_KERNELS_CACHE_SETS_H_
