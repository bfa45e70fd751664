// SPDX-License-Identifier: Apache-2.0
// rownorm.h: the job description and per-target kernel table of the LayerNorm family
// (LayerNorm, RMSNorm and their fused residual-add forms share one row path).
#ifndef NK_KERNELS_ROWNORM_H_
#define NK_KERNELS_ROWNORM_H_

#include <stdint.h>

#include <cstddef>

#include "hwy/base.h"
#include "kernels/common/moments.h"

namespace nk {

// One validated call, as plain data. Tensors are rows of `cols` elements of type T
// (float, hwy::bfloat16_t or hwy::float16_t; parameters and statistics are float), row
// r of x at x + r * ldx (likewise residual, sum, y); optional pointers are nullptr.
template <class T>
struct RowNormJobT {
  const char* function;     // the C entry point, for errors found after validation
  bool center;              // LayerNorm (x - mean); false: RMSNorm
  size_t rows, cols;
  const T* x;
  const T* residual;        // fused add: s = x + residual (rounded to T) is normalized
  const float* gamma;       // [cols]; the kernels get ones where the caller gave none
  const float* beta;        // [cols], LayerNorm only; the kernels get -0.0 for none
  float eps;
  T* sum;                   // receives s in the fused forms
  T* y;
  float* mean;              // [rows]
  float* rstd;              // [rows], rrms for RMSNorm
  size_t ldx, ldr, lds, ldy;  // row strides (elements) of x, residual, sum, y
  bool stream;              // write y with non-temporal stores
  bool stream_groups;       // streamed rows go in groups at any width (StreamGroups)
  bool align_y;             // y is stored from its first vector boundary on (see
                            // AlignY in layernorm.cc)
};
using RowNormJob = RowNormJobT<float>;

// Rows the backward's dx pass takes together (gamma, dgamma and dbeta are loaded and
// stored once for all of them), where RowGradJobT::group_rows says.
constexpr size_t kGradGroupRows = 4;
// Where a vector spans a line, the longest fp32 rows (or chunks) whose dx goes in such
// groups: on AMD's cores, and on the others (RowGradJobT::group_cols).
constexpr size_t kAmdGroupedGradCols = 2048;
constexpr size_t kGroupedGradCols = 8192;

// One validated backward call on tensors of type T. Row r of x (the fused forms' saved
// sum) is at x + r * ldx, likewise dy, dsum and dx; dx may be dy or dsum.
template <class T>
struct RowGradJobT {
  const char* function;
  bool center;              // LayerNorm; false: RMSNorm (mean is not read)
  size_t rows, cols;
  const T* x;               // x, or the fused forms' saved sum
  const T* dy;
  const T* dsum;            // fused forms: added to dx, or nullptr
  const float* mean;        // [rows]
  const float* rstd;        // [rows], rrms for RMSNorm
  const float* gamma;       // [cols], never nullptr (ones where the caller gave none)
  T* dx;
  size_t ldx, lddy, ldds, lddx;  // row strides (elements)
  bool stream;              // write dx with non-temporal stores
  bool group_rows;          // dx of kGradGroupRows rows at a time (or where a
                            // vector spans a line: GradRowsT)
  size_t group_cols;        // where a vector spans a line: the longest fp32 rows
                            // (or chunks) taken in groups (GradRowsT)
};
using RowGradJob = RowGradJobT<float>;

// What one Highway target provides for the forward of tensors of type T. The op layer
// (layernorm.cc) partitions the work and calls these; every function is thread-safe on
// disjoint rows or chunks.
template <class T>
struct RowNormKernelsT {
  // Normalizes rows [r0, r1) completely, statistics outputs included.
  void (*rows)(const RowNormJobT<T>& job, size_t r0, size_t r1);
  // Moments of elements [c0, c0 + n) of a row, times `scale`. With first_pass, the
  // fused forms first store s = x + residual to job.sum (when requested).
  Moments (*moments)(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
                     float scale, bool first_pass);
  // max |s| over elements [c0, c0 + n) of a row (NaN if any is NaN).
  float (*max_abs)(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n);
  // Writes y for elements [c0, c0 + n) of a row.
  void (*apply)(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
                const SetStats& stats);
  // The target's vector of T in bytes (y's stores are whole at multiples).
  size_t vector_bytes;
  // The HWY_* bit of the target the table was compiled for (test_dispatch checks that
  // the table chosen for an ISA is that ISA's).
  int64_t target;
};
using RowNormKernels = RowNormKernelsT<float>;

// The same for the backward.
template <class T>
struct RowGradKernelsT {
  // GradSums of elements [c0, c0 + n) of a row (rows longer than kChunk).
  GradSums (*grad_sums)(const RowGradJobT<T>& job, size_t row, size_t c0, size_t n);
  // dx of rows [r0, r1) over columns [c0, c0 + n), and the sums over those rows, in
  // row order, of dy * x_hat and dy into dgamma[0, n) and dbeta[0, n) (overwritten).
  // `sums` holds each row's GradSums over all columns (indexed by row), or is nullptr
  // where n == cols and they are taken here.
  void (*grad_rows)(const RowGradJobT<T>& job, size_t r0, size_t r1, size_t c0,
                    size_t n, const GradSums* sums, float* dgamma, float* dbeta);
  // out[j0, j1) = the pairwise sums over `parts` (at least 2) of grad_rows' sums, part
  // p's at partial + p * cols, added in place.
  void (*merge_parts)(float* partial, size_t parts, size_t cols, size_t j0, size_t j1,
                      float* out);
  int64_t target;  // as RowNormKernelsT's
};
using RowGradKernels = RowGradKernelsT<float>;

// The tables of `target` (a single HWY_* bit that this library compiled), defined by
// rownorm_{f32,bf16,f16}.cc.
template <class T>
const RowNormKernelsT<T>& RowNormKernelsFor(long long target);
template <>
const RowNormKernelsT<float>& RowNormKernelsFor<float>(long long target);
template <>
const RowNormKernelsT<hwy::bfloat16_t>& RowNormKernelsFor<hwy::bfloat16_t>(
    long long target);
template <>
const RowNormKernelsT<hwy::float16_t>& RowNormKernelsFor<hwy::float16_t>(
    long long target);
template <class T>
const RowGradKernelsT<T>& RowGradKernelsFor(long long target);
template <>
const RowGradKernelsT<float>& RowGradKernelsFor<float>(long long target);
template <>
const RowGradKernelsT<hwy::bfloat16_t>& RowGradKernelsFor<hwy::bfloat16_t>(
    long long target);
template <>
const RowGradKernelsT<hwy::float16_t>& RowGradKernelsFor<hwy::float16_t>(
    long long target);

}  // namespace nk

#endif  // NK_KERNELS_ROWNORM_H_
