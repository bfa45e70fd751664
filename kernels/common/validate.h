// SPDX-License-Identifier: Apache-2.0
// validate.h: argument checks of the C entry points, in the order c-abi.md fixes:
// scalars -> shapes -> NULL pointers -> overlaps. The first failure is kept (and
// later checks skipped), with a message naming the function, argument and rule.
#ifndef NK_KERNELS_VALIDATE_H_
#define NK_KERNELS_VALIDATE_H_

#include <cstdarg>
#include <cstddef>
#include <initializer_list>

#include "include/normkernels.h"

namespace nk {

// A tensor argument, for the overlap check: `bytes` from data on, or, for a row-strided
// tensor, `rows` runs of `bytes` each, `stride` bytes apart (the elements it touches).
struct Buffer {
  const char* name;
  const void* data;
  size_t bytes;
  bool output;
  size_t rows = 1;
  size_t stride = 0;
};

// Two arguments that may be the same memory exactly (same pointer, extent and stride).
struct Alias {
  const char* a;
  const char* b;
};

class Validator {
 public:
  explicit Validator(const char* function) : function_(function) {}

  nk_status status() const { return status_; }
  bool failed() const { return status_ != NK_OK; }

  // eps must be finite and >= 0.
  Validator& Eps(float eps);
  // momentum must be finite and in [0, 1].
  Validator& Momentum(float momentum);
  // layout must be NK_LAYOUT_NCHW or NK_LAYOUT_NHWC.
  Validator& Layout(nk_layout layout);
  // A rule of one function: fails with `status` and the message unless `ok`.
  Validator& Require(bool ok, nk_status status, const char* format, ...)
      __attribute__((format(printf, 4, 5)));
  // value != 0; `rule` says why, e.g. "a row must have at least one element".
  Validator& NonZero(size_t value, const char* name, const char* rule);
  // a * b elements of elem_size bytes must fit size_t; stores a * b to *product.
  Validator& Product(size_t a, const char* a_name, size_t b, const char* b_name,
                     size_t elem_size, size_t* product);
  // A row stride `ld` (elements of elem_size bytes) of a tensor of rows x cols:
  // ld >= cols, and the tensor's extent (rows - 1) * ld + cols fits size_t in bytes.
  Validator& RowStride(size_t ld, const char* name, size_t rows, size_t cols,
                       size_t elem_size);
  Validator& NotNull(const void* p, const char* name);
  // No output may overlap another buffer, except an `allowed` pair exactly. Strided
  // buffers overlap only where rows of theirs share a byte. NULL or empty buffers take
  // no part.
  Validator& NoOverlap(std::initializer_list<Buffer> buffers,
                       std::initializer_list<Alias> allowed);

 private:
  Validator& FailV(nk_status status, const char* format, va_list args);
  Validator& Fail(nk_status status, const char* format, ...)
      __attribute__((format(printf, 3, 4)));

  const char* function_;
  nk_status status_ = NK_OK;
};

}  // namespace nk

#endif  // NK_KERNELS_VALIDATE_H_
