// SPDX-License-Identifier: Apache-2.0
// strided_tensor.h: a row-major tensor at a row stride, for the row-strided forms'
// tests (float, or uint16_t for half tensors).
#ifndef NK_TESTS_STRIDED_TENSOR_H_
#define NK_TESTS_STRIDED_TENSOR_H_

#include <cstring>
#include <vector>

#include "test_util.h"

namespace nk_test {

// rows x cols at a row stride of ld, alone in an exact-size buffer; the elements
// between rows hold `gap`.
template <typename T>
struct StridedTensor {
  size_t rows, cols, ld;
  ElementBuffer<T> buf;
  StridedTensor(size_t rows, size_t cols, size_t ld, size_t misalign, T gap)
      : rows(rows),
        cols(cols),
        ld(ld),
        buf(rows == 0 ? 0 : (rows - 1) * ld + cols, misalign) {
    buf.Fill(gap);
  }
  T* data() { return buf.data(); }
  void Set(const std::vector<T>& dense) {
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(data() + r * ld, dense.data() + r * cols, cols * sizeof(T));
    }
  }
  std::vector<T> Dense() {
    std::vector<T> out(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(out.data() + r * cols, data() + r * ld, cols * sizeof(T));
    }
    return out;
  }
  // Whether every element between rows still holds `gap` (bit for bit).
  bool GapsHold(T gap) {
    for (size_t r = 0; r + 1 < rows; ++r) {
      for (size_t i = cols; i < ld; ++i) {
        if (std::memcmp(&buf[r * ld + i], &gap, sizeof(T)) != 0) return false;
      }
    }
    return true;
  }
};
using Strided = StridedTensor<float>;

}  // namespace nk_test

#endif  // NK_TESTS_STRIDED_TENSOR_H_
