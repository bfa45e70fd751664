// SPDX-License-Identifier: Apache-2.0
// layernorm_api.cc: the C entry points of the LayerNorm family: validate every
// argument before any write, then describe the job to the op layer.
#include "include/normkernels.h"
#include "kernels/layernorm.h"
#include "kernels/validate.h"

namespace nk {
namespace {

// All four forwards: x (+ residual) -> [sum], y, [mean], rstd/rrms.
nk_status RowNormForward(const char* function, bool center, bool fused, size_t rows,
                         size_t cols,
                         const float* x, const float* residual, const float* gamma,
                         const float* beta, float eps, float* sum, float* y,
                         float* mean, float* rstd) {
  const char* rstd_name = center ? "rstd" : "rrms";
  size_t elements = 0;
  Validator v(function);
  v.Eps(eps)
      .NonZero(cols, "cols", "a row must have at least one element")
      .Product(rows, "rows", cols, "cols", sizeof(float), &elements);
  if (v.failed()) return v.status();
  if (rows == 0) return NK_OK;
  v.NotNull(x, "x");
  if (fused) v.NotNull(residual, "residual");
  v.NotNull(y, "y");
  const size_t bytes = elements * sizeof(float);
  const size_t col_bytes = cols * sizeof(float);
  const size_t row_bytes = rows * sizeof(float);
  v.NoOverlap({{"x", x, bytes, false},
               {"residual", residual, bytes, false},
               {"gamma", gamma, col_bytes, false},
               {"beta", beta, col_bytes, false},
               {"sum", sum, bytes, true},
               {"y", y, bytes, true},
               {"mean", mean, row_bytes, true},
               {rstd_name, rstd, row_bytes, true}},
              {{"y", "x"}, {"y", "residual"}, {"sum", "x"}, {"sum", "residual"}});
  if (v.failed()) return v.status();
  RowNormJob job = {};
  job.function = function;
  job.center = center;
  job.rows = rows;
  job.cols = cols;
  job.x = x;
  job.residual = residual;
  job.gamma = gamma;
  job.beta = beta;
  job.eps = eps;
  job.sum = sum;
  job.y = y;
  job.mean = mean;
  job.rstd = rstd;
  return RunRowNorm(job);
}

}  // namespace
}  // namespace nk

extern "C" {

nk_status nk_layernorm_forward_f32(size_t rows, size_t cols, const float* x,
                                   const float* gamma, const float* beta, float eps,
                                   float* y, float* mean, float* rstd) {
  return nk::RowNormForward(__func__, true, false, rows, cols, x, nullptr, gamma, beta, eps,
                            nullptr, y, mean, rstd);
}

nk_status nk_rmsnorm_forward_f32(size_t rows, size_t cols, const float* x,
                                 const float* gamma, float eps, float* y, float* rrms) {
  return nk::RowNormForward(__func__, false, false, rows, cols, x, nullptr, gamma, nullptr,
                            eps, nullptr, y, nullptr, rrms);
}

nk_status nk_add_layernorm_forward_f32(size_t rows, size_t cols, const float* x,
                                       const float* residual, const float* gamma,
                                       const float* beta, float eps, float* sum,
                                       float* y, float* mean, float* rstd) {
  return nk::RowNormForward(__func__, true, true, rows, cols, x, residual, gamma, beta, eps,
                            sum, y, mean, rstd);
}

nk_status nk_add_rmsnorm_forward_f32(size_t rows, size_t cols, const float* x,
                                     const float* residual, const float* gamma,
                                     float eps, float* sum, float* y, float* rrms) {
  return nk::RowNormForward(__func__, false, true, rows, cols, x, residual, gamma, nullptr,
                            eps, sum, y, nullptr, rrms);
}

}  // extern "C"
