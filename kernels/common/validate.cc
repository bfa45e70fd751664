// SPDX-License-Identifier: Apache-2.0
// validate.cc: the argument checks shared by every C entry point.
#include "kernels/common/validate.h"

#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/common/errors.h"

namespace nk {

Validator& Validator::FailV(nk_status status, const char* format, va_list args) {
  char detail[400];
  std::vsnprintf(detail, sizeof(detail), format, args);
  status_ = SetError(status, "%s: %s", function_, detail);
  return *this;
}

Validator& Validator::Fail(nk_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  FailV(status, format, args);
  va_end(args);
  return *this;
}

Validator& Validator::Eps(float eps) {
  if (failed()) return *this;
  if (!std::isfinite(eps) || eps < 0.0f) {
    return Fail(NK_ERR_INVALID_ARGUMENT, "eps is %g; it must be finite and >= 0",
                static_cast<double>(eps));
  }
  return *this;
}

Validator& Validator::Momentum(float momentum) {
  if (failed()) return *this;
  if (!std::isfinite(momentum) || momentum < 0.0f || momentum > 1.0f) {
    return Fail(NK_ERR_INVALID_ARGUMENT, "momentum is %g; it must be finite and in [0, 1]",
                static_cast<double>(momentum));
  }
  return *this;
}

Validator& Validator::Layout(nk_layout layout) {
  if (failed()) return *this;
  if (layout != NK_LAYOUT_NCHW && layout != NK_LAYOUT_NHWC) {
    return Fail(NK_ERR_INVALID_ARGUMENT,
                "layout is %d; it must be NK_LAYOUT_NCHW (0) or NK_LAYOUT_NHWC (1)",
                static_cast<int>(layout));
  }
  return *this;
}

Validator& Validator::Require(bool ok, nk_status status, const char* format, ...) {
  if (failed() || ok) return *this;
  va_list args;
  va_start(args, format);
  FailV(status, format, args);
  va_end(args);
  return *this;
}

Validator& Validator::NonZero(size_t value, const char* name, const char* rule) {
  if (failed()) return *this;
  if (value == 0) return Fail(NK_ERR_INVALID_SHAPE, "%s is 0; %s", name, rule);
  return *this;
}

Validator& Validator::Product(size_t a, const char* a_name, size_t b,
                              const char* b_name, size_t elem_size, size_t* product) {
  if (failed()) return *this;
  const size_t max = std::numeric_limits<size_t>::max();
  if (b != 0 && a > max / b) {
    return Fail(NK_ERR_INVALID_SHAPE, "%s * %s (%zu * %zu) overflows size_t", a_name,
                b_name, a, b);
  }
  if (a * b > max / elem_size) {
    return Fail(NK_ERR_INVALID_SHAPE,
                "%s * %s (%zu * %zu) elements of %zu bytes overflow size_t", a_name,
                b_name, a, b, elem_size);
  }
  *product = a * b;
  return *this;
}

Validator& Validator::NotNull(const void* p, const char* name) {
  if (failed()) return *this;
  if (p == nullptr) return Fail(NK_ERR_NULL_POINTER, "%s is NULL", name);
  return *this;
}

Validator& Validator::RowStride(size_t ld, const char* name, size_t rows, size_t cols,
                                size_t elem_size) {
  if (failed()) return *this;
  if (ld < cols) {
    return Fail(NK_ERR_INVALID_SHAPE, "%s is %zu; a row stride must be >= cols (%zu)", name,
                ld, cols);
  }
  const size_t max = std::numeric_limits<size_t>::max() / elem_size;
  if (rows > 1 && (ld > (max - cols) / (rows - 1))) {
    return Fail(NK_ERR_INVALID_SHAPE,
                "(rows - 1) * %s + cols ((%zu - 1) * %zu + %zu) elements of %zu bytes "
                "overflow size_t",
                name, rows, ld, cols, elem_size);
  }
  return *this;
}

namespace {

bool Allowed(const Buffer& a, const Buffer& b, std::initializer_list<Alias> allowed) {
  for (const Alias& alias : allowed) {
    if ((std::strcmp(alias.a, a.name) == 0 && std::strcmp(alias.b, b.name) == 0) ||
        (std::strcmp(alias.a, b.name) == 0 && std::strcmp(alias.b, a.name) == 0)) {
      return true;
    }
  }
  return false;
}

// A buffer as the bytes it touches: `rows` runs of `bytes`, `stride` apart (a strided
// buffer whose runs touch each other is one run).
struct Runs {
  uintptr_t begin;
  size_t bytes, rows, stride;
  explicit Runs(const Buffer& b)
      : begin(reinterpret_cast<uintptr_t>(b.data)), bytes(b.bytes), rows(b.rows),
        stride(b.stride) {
    if (rows <= 1 || stride == bytes) {
      bytes *= rows;  // NoOverlap skips buffers of no rows
      rows = 1;
      stride = bytes;
    }
  }
  uintptr_t end() const { return begin + (rows - 1) * stride + bytes; }
  bool operator==(const Runs& o) const {
    return begin == o.begin && bytes == o.bytes && rows == o.rows && stride == o.stride;
  }
};

// Whether a run of b shares a byte with [p, p + w).
bool HitsRun(const Runs& b, uintptr_t p, size_t w) {
  if (p + w <= b.begin || p >= b.end()) return false;
  // Runs j with begin + j * stride < p + w and begin + j * stride + bytes > p.
  const size_t first = p < b.begin + b.bytes ? 0 : (p - b.begin - b.bytes) / b.stride + 1;
  const size_t last = (p + w - 1 - b.begin) / b.stride;
  return first <= last && first < b.rows;
}

// floor(n / d) for d > 0.
__int128 FloorDiv(__int128 n, __int128 d) {
  const __int128 q = n / d;
  return q * d != n && n < 0 ? q - 1 : q;
}

bool Overlap(const Runs& a, const Runs& b) {
  if (a.begin >= b.end() || b.begin >= a.end()) return false;
  if (a.rows == 1) return HitsRun(b, a.begin, a.bytes);
  if (b.rows == 1) return HitsRun(a, b.begin, b.bytes);
  if (a.stride == b.stride) {
    // Run i of a and run j of b meet iff -b.bytes < d + (j - i) * stride < a.bytes.
    const __int128 s = a.stride;
    const __int128 d = static_cast<__int128>(b.begin) - static_cast<__int128>(a.begin);
    const __int128 k_min = FloorDiv(-static_cast<__int128>(b.bytes) - d, s) + 1;
    const __int128 k_max = -FloorDiv(d - static_cast<__int128>(a.bytes), s) - 1;
    const __int128 lo = std::max<__int128>(k_min, -static_cast<__int128>(a.rows - 1));
    const __int128 hi = std::min<__int128>(k_max, static_cast<__int128>(b.rows - 1));
    return lo <= hi;
  }
  const Runs& few = a.rows <= b.rows ? a : b;
  const Runs& many = a.rows <= b.rows ? b : a;
  for (size_t i = 0; i < few.rows; ++i) {
    if (HitsRun(many, few.begin + i * few.stride, few.bytes)) return true;
  }
  return false;
}

}  // namespace

Validator& Validator::NoOverlap(std::initializer_list<Buffer> buffers,
                                std::initializer_list<Alias> allowed) {
  if (failed()) return *this;
  for (const Buffer* a = buffers.begin(); a != buffers.end(); ++a) {
    for (const Buffer* b = a + 1; b != buffers.end(); ++b) {
      if (!a->output && !b->output) continue;
      if (a->data == nullptr || b->data == nullptr || a->bytes == 0 || b->bytes == 0 ||
          a->rows == 0 || b->rows == 0) {
        continue;
      }
      const Runs ra(*a), rb(*b);
      if (!Overlap(ra, rb)) continue;
      if (ra == rb && Allowed(*a, *b, allowed)) continue;
      const Buffer& out = a->output ? *a : *b;
      const Buffer& other = a->output ? *b : *a;
      if (Allowed(*a, *b, allowed)) {
        return Fail(NK_ERR_OVERLAP,
                    "%s overlaps %s partially; they may only be the same buffer "
                    "exactly (same pointer, extent and row stride)",
                    out.name, other.name);
      }
      return Fail(NK_ERR_OVERLAP, "%s overlaps %s; these may not share memory",
                  out.name, other.name);
    }
  }
  return *this;
}

}  // namespace nk
