// SPDX-License-Identifier: Apache-2.0
// cases_layernorm.cc: the LayerNorm family's benchmark cases, forward and backward: the
// cells the documentation compares and a size sweep for the plot; with --full, rows x
// cols tensors of 4 and 64 MiB, transformer shapes and one long row, for every op.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

enum class Op { kLayerNorm, kRmsNorm, kAddLayerNorm, kAddRmsNorm };
const char* const kOpNames[] = {"layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm"};

// Registers case c (kernel, shape, bytes and output set) running `body` at c's ISA and
// threads.
void RegisterAtIsa(const Case& c, std::function<void()> body) {
  const std::string isa = c.isa;
  const int threads = c.threads;
  Register(
      c.kernel + "/" + isa + "/" + c.shape + Placement(c.offset, threads), c,
      [=] { return nk_set_isa(isa.c_str()) == NK_OK && nk_set_num_threads(threads) == NK_OK; },
      std::move(body));
}

// Registers `op` on rows x cols with the ISA, threads, offset, group and main of `c`.
void RegisterRowNorm(Op op, size_t rows, size_t cols, Case c) {
  const size_t n = rows * cols, off = c.offset;
  const bool fused = op == Op::kAddLayerNorm || op == Op::kAddRmsNorm;
  const int threads = c.threads;
  c.kernel = kOpNames[static_cast<int>(op)];
  c.shape = std::to_string(rows) + "x" + std::to_string(cols);
  c.elements = static_cast<double>(n);
  c.bytes = (fused ? 4.0 : 2.0) * n * sizeof(float);  // x, residual, sum, y / x, y
  c.copy = CopyFor(c.bytes, threads, off);
  if (op == Op::kLayerNorm) c.onednn = OneDnnLayerNorm(rows, cols, threads, off);
  const float* x = Tensor(0, n, off);
  const float* res = fused ? Tensor(1, n, off) : nullptr;
  float* sum = fused ? Tensor(2, n, off) : nullptr;
  float* y = Tensor(3, n, off);
  float* mean = Tensor(4, rows, off);
  float* rstd = Tensor(5, rows, off);
  const float* g = Gamma(cols, off);
  const float* b = Beta(cols, off);
  c.out = y;
  c.out_n = n;
  RegisterAtIsa(c, [=] {
    switch (op) {
      case Op::kLayerNorm:
        nk_layernorm_forward_f32(rows, cols, x, g, b, 1e-5f, y, mean, rstd);
        break;
      case Op::kRmsNorm:
        nk_rmsnorm_forward_f32(rows, cols, x, g, 1e-5f, y, rstd);
        break;
      case Op::kAddLayerNorm:
        nk_add_layernorm_forward_f32(rows, cols, x, res, g, b, 1e-5f, sum, y, mean, rstd);
        break;
      case Op::kAddRmsNorm:
        nk_add_rmsnorm_forward_f32(rows, cols, x, res, g, 1e-5f, sum, y, rstd);
        break;
    }
  });
}

// The same on half tensors (LayerNorm and RMSNorm): bytes at 2 per element, beside the
// copy of those bytes and oneDNN's bf16 LayerNorm.
void RegisterHalfRowNorm(Op op, Elem elem, size_t rows, size_t cols, Case c) {
  const size_t n = rows * cols, off = c.offset;
  const bool bf16 = elem == Elem::kBf16;
  c.kernel = std::string(kOpNames[static_cast<int>(op)]) + ElemSuffix(elem);
  c.shape = std::to_string(rows) + "x" + std::to_string(cols);
  c.elements = static_cast<double>(n);
  c.bytes = 2.0 * n * sizeof(uint16_t);  // x, y
  c.copy = CopyFor(c.bytes, c.threads, off);
  if (op == Op::kLayerNorm) c.onednn = OneDnnLayerNormBf16(rows, cols, c.threads, off);
  const uint16_t* x = HalfTensor(0, n, off, bf16);
  uint16_t* y = HalfTensor(3, n, off, bf16);
  float* mean = Tensor(4, rows, off);
  float* rstd = Tensor(5, rows, off);
  const float* g = Gamma(cols, off);
  const float* b = Beta(cols, off);
  c.out = y;
  c.out_n = n;
  c.out_bytes = sizeof(uint16_t);
  RegisterAtIsa(c, [=] {
    if (op == Op::kLayerNorm) {
      (bf16 ? nk_layernorm_forward_bf16 : nk_layernorm_forward_f16)(rows, cols, x, g, b,
                                                                     1e-5f, y, mean, rstd);
    } else {
      (bf16 ? nk_rmsnorm_forward_bf16 : nk_rmsnorm_forward_f16)(rows, cols, x, g, 1e-5f,
                                                                 y, rstd);
    }
  });
}

// Registers the backward of `op` (dx, dgamma and, LayerNorm's, dbeta) on rows x cols
// as RegisterRowNorm does the forward.
void RegisterRowNormBackward(Op op, size_t rows, size_t cols, Case c) {
  const size_t n = rows * cols, off = c.offset;
  const bool fused = op == Op::kAddLayerNorm || op == Op::kAddRmsNorm;
  const int threads = c.threads;
  c.kernel = std::string(kOpNames[static_cast<int>(op)]) + "_backward";
  c.shape = std::to_string(rows) + "x" + std::to_string(cols);
  c.elements = static_cast<double>(n);
  c.bytes = (fused ? 4.0 : 3.0) * n * sizeof(float);  // x or sum, dy, dsum, dx
  c.copy = CopyFor(c.bytes, threads, off);
  if (op == Op::kLayerNorm) c.onednn = OneDnnLayerNormBackward(rows, cols, threads, off);
  const float* x = Tensor(0, n, off);
  const float* dy = Tensor(1, n, off);
  const float* dsum = fused ? Tensor(2, n, off) : nullptr;
  float* dx = Tensor(3, n, off);
  const float* mean = Tensor(4, rows, off);
  const float* rstd = Tensor(5, rows, off);
  float* dgamma = Tensor(6, cols, off);
  float* dbeta = Tensor(7, cols, off);
  const float* g = Gamma(cols, off);
  c.out = dx;
  c.out_n = n;
  RegisterAtIsa(c, [=] {
    switch (op) {
      case Op::kLayerNorm:
        nk_layernorm_backward_f32(rows, cols, x, dy, mean, rstd, g, dx, dgamma, dbeta);
        break;
      case Op::kRmsNorm:
        nk_rmsnorm_backward_f32(rows, cols, x, dy, rstd, g, dx, dgamma);
        break;
      case Op::kAddLayerNorm:
        nk_add_layernorm_backward_f32(rows, cols, x, dy, dsum, mean, rstd, g, dx,
                                      dgamma, dbeta);
        break;
      case Op::kAddRmsNorm:
        nk_add_rmsnorm_backward_f32(rows, cols, x, dy, dsum, rstd, g, dx, dgamma);
        break;
    }
  });
}

constexpr size_t kCols[] = {64, 256, 768, 1024, 4096, 8192};

size_t RowsFor(size_t mib, size_t cols) { return (mib << 20) / sizeof(float) / cols; }

}  // namespace

void RegisterLayerNormCases(const Selection& s) {
  // The cells: 4 MiB of rows of 1024 (BERT-large), 64 MiB of rows of 256, 1024 and
  // 4096 (streamed).
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (auto [rows, cols] : {std::pair<size_t, size_t>{1024, 1024}, {16384, 1024},
                              {65536, 256}, {4096, 4096}}) {
      RegisterRowNorm(Op::kLayerNorm, rows, cols, c);
    }
  }
  // The backward's cells: 4 and 64 MiB (x, dy and dx each) of rows of 256, 1024 and
  // 4096.
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (size_t mib : {4, 64}) {
      for (size_t cols : {256, 1024, 4096}) {
        RegisterRowNormBackward(Op::kLayerNorm, RowsFor(mib, cols), cols, c);
      }
    }
  }
  // Half tensors: LayerNorm of the fp32 cells' 4 and 64 MiB of rows of 1024 (so 2 and
  // 32 MiB of bf16 / fp16).
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (Elem elem : {Elem::kBf16, Elem::kF16}) {
      for (size_t mib : {4, 64}) {
        RegisterHalfRowNorm(Op::kLayerNorm, elem, RowsFor(mib, 1024), 1024, c);
      }
    }
  }
  // The plot's sweep: LayerNorm, 1024 columns, 1 thread, 1/4 to 64 MiB.
  for (const Case& c : Placements(s.isas, {1}, "layernorm 1024 cols, 1 thread")) {
    for (size_t kib : {256, 1024, 4096, 16384, 65536}) {
      RegisterRowNorm(Op::kLayerNorm, (kib << 10) / sizeof(float) / 1024, 1024, c);
    }
  }
  if (!s.full) return;
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm, Op::kAddLayerNorm, Op::kAddRmsNorm}) {
    for (const Case& c : Placements(s.isas, s.threads)) {
      for (size_t mib : {4, 64}) {
        for (size_t cols : kCols) RegisterRowNorm(op, RowsFor(mib, cols), cols, c);
      }
      // Transformer shapes and one long row (batch 1, hidden 1M).
      for (size_t rows : {1, 8, 512, 4096}) {
        for (size_t cols : {768, 4096, 8192}) RegisterRowNorm(op, rows, cols, c);
      }
      RegisterRowNorm(op, 1, size_t{1} << 20, c);
      // The backwards: the same shapes.
      for (size_t mib : {4, 64}) {
        for (size_t cols : kCols) RegisterRowNormBackward(op, RowsFor(mib, cols), cols, c);
      }
      for (size_t rows : {1, 8, 512, 4096}) {
        for (size_t cols : {768, 4096, 8192}) RegisterRowNormBackward(op, rows, cols, c);
      }
      RegisterRowNormBackward(op, 1, size_t{1} << 20, c);
    }
  }
  // Half tensors of the fp32 shapes of 4 and 64 MiB (2 and 32 MiB of half).
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm}) {
    for (Elem elem : {Elem::kBf16, Elem::kF16}) {
      for (const Case& c : Placements(s.isas, s.threads)) {
        for (size_t mib : {4, 64}) {
          for (size_t cols : {256, 768, 1024, 4096, 8192}) {
            RegisterHalfRowNorm(op, elem, RowsFor(mib, cols), cols, c);
          }
        }
      }
    }
  }
}

}  // namespace nk_bench
