// SPDX-License-Identifier: Apache-2.0
// cases_layernorm.cc: the LayerNorm family's benchmark cases: rows x cols tensors of
// 4 and 64 MiB, transformer shapes, one long row, and a size sweep for the plot.
#include <string>
#include <vector>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

enum class Op { kLayerNorm, kRmsNorm, kAddLayerNorm, kAddRmsNorm };
const char* const kOpNames[] = {"layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm"};

void RegisterRowNorm(Op op, const std::string& isa, size_t rows, size_t cols, int threads,
                     const std::string& group = "") {
  const size_t n = rows * cols;
  const bool fused = op == Op::kAddLayerNorm || op == Op::kAddRmsNorm;
  Case c;
  c.kernel = kOpNames[static_cast<int>(op)];
  c.shape = std::to_string(rows) + "x" + std::to_string(cols);
  c.isa = isa;
  c.threads = threads;
  c.elements = static_cast<double>(n);
  c.bytes = (fused ? 4.0 : 2.0) * n * sizeof(float);  // x, residual, sum, y / x, y
  c.copy = CopyFor(c.bytes, threads);
  if (op == Op::kLayerNorm) c.onednn = OneDnnLayerNorm(rows, cols, threads);
  c.group = group;
  const float* x = Tensor(0, n);
  const float* res = Tensor(1, n);
  float* sum = Tensor(2, n);
  float* y = Tensor(3, n);
  float* mean = Tensor(4, rows);
  float* rstd = Tensor(5, rows);
  const float* g = Gamma(cols);
  const float* b = Beta(cols);
  c.out = y;
  c.out_n = n;
  const std::string name = c.kernel + "/" + isa + "/" + c.shape + "/threads:" +
                           std::to_string(threads);
  Register(
      name, c,
      [=] { return nk_set_isa(isa.c_str()) == NK_OK && nk_set_num_threads(threads) == NK_OK; },
      [=] {
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

constexpr size_t kCols[] = {64, 256, 768, 1024, 4096, 8192};

size_t RowsFor(size_t mib, size_t cols) { return (mib << 20) / sizeof(float) / cols; }

}  // namespace

void RegisterLayerNormCases(const Selection& s) {
  const std::string& best = s.isas.front();
  for (int op = 0; op < 4; ++op) {
    for (const std::string& isa : s.isas) {
      // Quick: every op on the best ISA; LayerNorm at 1024 columns on the others.
      const bool all_shapes = s.full || isa == best;
      if (!all_shapes && op != 0) continue;
      for (int threads : s.threads) {
        for (size_t mib : {4, 64}) {
          for (size_t cols : kCols) {
            if (all_shapes || cols == 1024) {
              RegisterRowNorm(static_cast<Op>(op), isa, RowsFor(mib, cols), cols, threads);
            }
          }
        }
      }
    }
  }
  // Transformer shapes and one long row (batch 1, hidden 1M).
  for (const std::string& isa : s.isas) {
    if (!s.full && isa != best) continue;
    for (int op = 0; op < (s.full ? 4 : 2); ++op) {
      for (int threads : s.threads) {
        for (size_t rows : {1, 8, 512, 4096}) {
          for (size_t cols : {768, 4096, 8192}) {
            RegisterRowNorm(static_cast<Op>(op), isa, rows, cols, threads);
          }
        }
        RegisterRowNorm(static_cast<Op>(op), isa, 1, size_t{1} << 20, threads);
      }
    }
  }
  // The plot's sweep: LayerNorm, 1024 columns, 1 thread, every ISA, 1/4 to 64 MiB.
  for (const std::string& isa : s.isas) {
    for (size_t kib : {256, 1024, 4096, 16384, 65536}) {
      RegisterRowNorm(Op::kLayerNorm, isa, (kib << 10) / sizeof(float) / 1024, 1024, 1,
                      "layernorm 1024 cols, 1 thread");
    }
  }
}

}  // namespace nk_bench
