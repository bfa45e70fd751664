// SPDX-License-Identifier: Apache-2.0
// validate.cc: the argument checks shared by every C entry point.
#include "kernels/validate.h"

#include <stdint.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/errors.h"

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

}  // namespace

Validator& Validator::NoOverlap(std::initializer_list<Buffer> buffers,
                                std::initializer_list<Alias> allowed) {
  if (failed()) return *this;
  for (const Buffer* a = buffers.begin(); a != buffers.end(); ++a) {
    for (const Buffer* b = a + 1; b != buffers.end(); ++b) {
      if (!a->output && !b->output) continue;
      if (a->data == nullptr || b->data == nullptr || a->bytes == 0 || b->bytes == 0) {
        continue;
      }
      const uintptr_t a0 = reinterpret_cast<uintptr_t>(a->data);
      const uintptr_t b0 = reinterpret_cast<uintptr_t>(b->data);
      if (a0 >= b0 + b->bytes || b0 >= a0 + a->bytes) continue;
      const bool exact = a0 == b0 && a->bytes == b->bytes;
      if (exact && Allowed(*a, *b, allowed)) continue;
      const Buffer& out = a->output ? *a : *b;
      const Buffer& other = a->output ? *b : *a;
      if (Allowed(*a, *b, allowed)) {
        return Fail(NK_ERR_OVERLAP,
                    "%s overlaps %s partially; they may only be the same buffer "
                    "exactly (same pointer and extent)",
                    out.name, other.name);
      }
      return Fail(NK_ERR_OVERLAP, "%s overlaps %s; these may not share memory",
                  out.name, other.name);
    }
  }
  return *this;
}

}  // namespace nk
