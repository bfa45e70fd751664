// SPDX-License-Identifier: Apache-2.0
// layernorm_api.cc: the C entry points of the LayerNorm family: validate every
// argument before any write, then describe the job to the op layer.
#include "include/normkernels.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/common/c_types.h"
#include "kernels/common/validate.h"

namespace nk {
namespace {

// A row-major tensor argument: its pointer and row stride (elements). Outputs are
// held as const too and given back to the job writable.
template <class T = float>
struct Rows {
  const T* data;
  size_t ld;
};

// All four forwards: x (+ residual) -> [sum], y, [mean], rstd/rrms, for tensors of T
// (float, hwy::bfloat16_t, hwy::float16_t).
template <class T>
nk_status RowNormForward(const char* function, bool center, bool fused, size_t rows,
                         size_t cols, Rows<T> x, Rows<T> residual, const float* gamma,
                         const float* beta, float eps, Rows<T> sum, Rows<T> y,
                         float* mean, float* rstd) {
  const char* rstd_name = center ? "rstd" : "rrms";
  size_t elements = 0;
  Validator v(function);
  // (Counted in fp32 bytes for every T: gamma and beta hold cols floats.)
  v.Eps(eps)
      .NonZero(cols, "cols", "a row must have at least one element")
      .Product(rows, "rows", cols, "cols", sizeof(float), &elements)
      .RowStride(x.ld, "ldx", rows, cols, sizeof(T));
  if (fused) v.RowStride(residual.ld, "ldr", rows, cols, sizeof(T));
  if (sum.data != nullptr) v.RowStride(sum.ld, "lds", rows, cols, sizeof(T));
  v.RowStride(y.ld, "ldy", rows, cols, sizeof(T));
  if (v.failed()) return v.status();
  if (rows == 0) return NK_OK;
  v.NotNull(x.data, "x");
  if (fused) v.NotNull(residual.data, "residual");
  v.NotNull(y.data, "y");
  const size_t row_bytes = cols * sizeof(T);
  const size_t param_bytes = cols * sizeof(float);
  const size_t stat_bytes = rows * sizeof(float);
  const auto tensor = [&](const char* name, Rows<T> t, bool output) {
    return Buffer{name, t.data, row_bytes, output, rows, t.ld * sizeof(T)};
  };
  v.NoOverlap({tensor("x", x, false),
               tensor("residual", residual, false),
               {"gamma", gamma, param_bytes, false},
               {"beta", beta, param_bytes, false},
               tensor("sum", sum, true),
               tensor("y", y, true),
               {"mean", mean, stat_bytes, true},
               {rstd_name, rstd, stat_bytes, true}},
              {{"y", "x"}, {"y", "residual"}, {"sum", "x"}, {"sum", "residual"}});
  if (v.failed()) return v.status();
  RowNormJobT<T> job = {};
  job.function = function;
  job.center = center;
  job.rows = rows;
  job.cols = cols;
  job.x = x.data;
  job.residual = residual.data;
  job.gamma = gamma;
  job.beta = beta;
  job.eps = eps;
  job.sum = const_cast<T*>(sum.data);
  job.y = const_cast<T*>(y.data);
  job.mean = mean;
  job.rstd = rstd;
  job.ldx = x.ld;
  job.ldr = residual.ld;
  job.lds = sum.ld;
  job.ldy = y.ld;
  return RunRowNorm(job);
}

// All four backwards: x (the fused forms' sum), dy, [dsum], mean, rstd/rrms, gamma ->
// dx, [dgamma], [dbeta], for tensors of T.
template <class T>
nk_status RowNormBackward(const char* function, bool center, bool fused, size_t rows,
                          size_t cols, Rows<T> x, Rows<T> dy, Rows<T> dsum,
                          const float* mean, const float* rstd, const float* gamma,
                          Rows<T> dx, float* dgamma, float* dbeta) {
  const char* x_name = fused ? "sum" : "x";
  const char* rstd_name = center ? "rstd" : "rrms";
  size_t elements = 0;
  Validator v(function);
  v.NonZero(cols, "cols", "a row must have at least one element")
      .Product(rows, "rows", cols, "cols", sizeof(float), &elements)
      .RowStride(x.ld, fused ? "lds" : "ldx", rows, cols, sizeof(T))
      .RowStride(dy.ld, "lddy", rows, cols, sizeof(T));
  if (dsum.data != nullptr) v.RowStride(dsum.ld, "ldds", rows, cols, sizeof(T));
  v.RowStride(dx.ld, "lddx", rows, cols, sizeof(T));
  if (v.failed()) return v.status();
  if (rows == 0) return NK_OK;
  v.NotNull(x.data, x_name).NotNull(dy.data, "dy");
  if (center) v.NotNull(mean, "mean");
  v.NotNull(rstd, rstd_name).NotNull(dx.data, "dx");
  const size_t row_bytes = cols * sizeof(T);
  const size_t param_bytes = cols * sizeof(float);  // gamma, dgamma, dbeta
  const size_t stat_bytes = rows * sizeof(float);
  const auto tensor = [&](const char* name, Rows<T> t, bool output) {
    return Buffer{name, t.data, row_bytes, output, rows, t.ld * sizeof(T)};
  };
  v.NoOverlap({tensor(x_name, x, false),
               tensor("dy", dy, false),
               tensor("dsum", dsum, false),
               {"mean", center ? mean : nullptr, stat_bytes, false},
               {rstd_name, rstd, stat_bytes, false},
               {"gamma", gamma, param_bytes, false},
               tensor("dx", dx, true),
               {"dgamma", dgamma, param_bytes, true},
               {"dbeta", dbeta, param_bytes, true}},
              {{"dx", "dy"}, {"dx", "dsum"}});
  if (v.failed()) return v.status();
  RowGradJobT<T> job = {};
  job.function = function;
  job.center = center;
  job.rows = rows;
  job.cols = cols;
  job.x = x.data;
  job.dy = dy.data;
  job.dsum = dsum.data;
  job.mean = mean;
  job.rstd = rstd;
  job.gamma = gamma;
  job.dx = const_cast<T*>(dx.data);
  job.ldx = x.ld;
  job.lddy = dy.ld;
  job.ldds = dsum.ld;
  job.lddx = dx.ld;
  return RunRowNormBackward(job, dgamma, dbeta);
}

}  // namespace
}  // namespace nk

extern "C" {

// The four forwards and their row-strided forms for tensors of CTYPE (the C type) held
// as ELEM (the kernels' type), named with SUFFIX.
#define NK_ROWNORM_FORWARDS(SUFFIX, CTYPE, ELEM)                                         \
  nk_status nk_layernorm_forward_##SUFFIX(                                               \
      size_t rows, size_t cols, const CTYPE* x, const float* gamma, const float* beta,   \
      float eps, CTYPE* y, float* mean, float* rstd) {                                   \
    return nk::RowNormForward<ELEM>(__func__, true, false, rows, cols,                   \
                                    {nk::As<ELEM>(x), cols}, {}, gamma, beta, eps, {},   \
                                    {nk::As<ELEM>(y), cols}, mean, rstd);                \
  }                                                                                      \
  nk_status nk_rmsnorm_forward_##SUFFIX(size_t rows, size_t cols, const CTYPE* x,        \
                                        const float* gamma, float eps, CTYPE* y,         \
                                        float* rrms) {                                   \
    return nk::RowNormForward<ELEM>(__func__, false, false, rows, cols,                  \
                                    {nk::As<ELEM>(x), cols}, {}, gamma, nullptr, eps,    \
                                    {}, {nk::As<ELEM>(y), cols}, nullptr, rrms);         \
  }                                                                                      \
  nk_status nk_add_layernorm_forward_##SUFFIX(size_t rows, size_t cols, const CTYPE* x,  \
                                              const CTYPE* residual, const float* gamma, \
                                              const float* beta, float eps, CTYPE* sum,  \
                                              CTYPE* y, float* mean, float* rstd) {      \
    return nk::RowNormForward<ELEM>(                                                     \
        __func__, true, true, rows, cols, {nk::As<ELEM>(x), cols},                       \
        {nk::As<ELEM>(residual), cols}, gamma, beta, eps, {nk::As<ELEM>(sum), cols},     \
        {nk::As<ELEM>(y), cols}, mean, rstd);                                            \
  }                                                                                      \
  nk_status nk_add_rmsnorm_forward_##SUFFIX(                                             \
      size_t rows, size_t cols, const CTYPE* x, const CTYPE* residual,                   \
      const float* gamma, float eps, CTYPE* sum, CTYPE* y, float* rrms) {                \
    return nk::RowNormForward<ELEM>(                                                     \
        __func__, false, true, rows, cols, {nk::As<ELEM>(x), cols},                      \
        {nk::As<ELEM>(residual), cols}, gamma, nullptr, eps, {nk::As<ELEM>(sum), cols},  \
        {nk::As<ELEM>(y), cols}, nullptr, rrms);                                         \
  }                                                                                      \
  nk_status nk_layernorm_forward_strided_##SUFFIX(                                       \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const float* gamma,          \
      const float* beta, float eps, CTYPE* y, size_t ldy, float* mean, float* rstd) {    \
    return nk::RowNormForward<ELEM>(__func__, true, false, rows, cols,                   \
                                    {nk::As<ELEM>(x), ldx}, {}, gamma, beta, eps, {},    \
                                    {nk::As<ELEM>(y), ldy}, mean, rstd);                 \
  }                                                                                      \
  nk_status nk_rmsnorm_forward_strided_##SUFFIX(                                         \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const float* gamma,          \
      float eps, CTYPE* y, size_t ldy, float* rrms) {                                    \
    return nk::RowNormForward<ELEM>(__func__, false, false, rows, cols,                  \
                                    {nk::As<ELEM>(x), ldx}, {}, gamma, nullptr, eps, {}, \
                                    {nk::As<ELEM>(y), ldy}, nullptr, rrms);              \
  }                                                                                      \
  nk_status nk_add_layernorm_forward_strided_##SUFFIX(                                   \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const CTYPE* residual,       \
      size_t ldr, const float* gamma, const float* beta, float eps, CTYPE* sum,          \
      size_t lds, CTYPE* y, size_t ldy, float* mean, float* rstd) {                      \
    return nk::RowNormForward<ELEM>(                                                     \
        __func__, true, true, rows, cols, {nk::As<ELEM>(x), ldx},                        \
        {nk::As<ELEM>(residual), ldr}, gamma, beta, eps, {nk::As<ELEM>(sum), lds},       \
        {nk::As<ELEM>(y), ldy}, mean, rstd);                                             \
  }                                                                                      \
  nk_status nk_add_rmsnorm_forward_strided_##SUFFIX(                                     \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const CTYPE* residual,       \
      size_t ldr, const float* gamma, float eps, CTYPE* sum, size_t lds, CTYPE* y,       \
      size_t ldy, float* rrms) {                                                         \
    return nk::RowNormForward<ELEM>(                                                     \
        __func__, false, true, rows, cols, {nk::As<ELEM>(x), ldx},                       \
        {nk::As<ELEM>(residual), ldr}, gamma, nullptr, eps, {nk::As<ELEM>(sum), lds},    \
        {nk::As<ELEM>(y), ldy}, nullptr, rrms);                                          \
  }

NK_ROWNORM_FORWARDS(f32, float, float)
NK_ROWNORM_FORWARDS(bf16, nk_bf16, hwy::bfloat16_t)
NK_ROWNORM_FORWARDS(f16, nk_f16, hwy::float16_t)
#undef NK_ROWNORM_FORWARDS

// The four backwards and their row-strided forms, as NK_ROWNORM_FORWARDS.
#define NK_ROWNORM_BACKWARDS(SUFFIX, CTYPE, ELEM)                                        \
  nk_status nk_layernorm_backward_##SUFFIX(                                              \
      size_t rows, size_t cols, const CTYPE* x, const CTYPE* dy, const float* mean,      \
      const float* rstd, const float* gamma, CTYPE* dx, float* dgamma, float* dbeta) {   \
    return nk::RowNormBackward<ELEM>(__func__, true, false, rows, cols,                  \
                                     {nk::As<ELEM>(x), cols}, {nk::As<ELEM>(dy), cols},  \
                                     {}, mean, rstd, gamma, {nk::As<ELEM>(dx), cols},    \
                                     dgamma, dbeta);                                     \
  }                                                                                      \
  nk_status nk_rmsnorm_backward_##SUFFIX(size_t rows, size_t cols, const CTYPE* x,       \
                                         const CTYPE* dy, const float* rrms,             \
                                         const float* gamma, CTYPE* dx, float* dgamma) { \
    return nk::RowNormBackward<ELEM>(__func__, false, false, rows, cols,                 \
                                     {nk::As<ELEM>(x), cols}, {nk::As<ELEM>(dy), cols},  \
                                     {}, nullptr, rrms, gamma, {nk::As<ELEM>(dx), cols}, \
                                     dgamma, nullptr);                                   \
  }                                                                                      \
  nk_status nk_add_layernorm_backward_##SUFFIX(                                          \
      size_t rows, size_t cols, const CTYPE* sum, const CTYPE* dy, const CTYPE* dsum,    \
      const float* mean, const float* rstd, const float* gamma, CTYPE* dx,               \
      float* dgamma, float* dbeta) {                                                     \
    return nk::RowNormBackward<ELEM>(                                                    \
        __func__, true, true, rows, cols, {nk::As<ELEM>(sum), cols},                     \
        {nk::As<ELEM>(dy), cols}, {nk::As<ELEM>(dsum), cols}, mean, rstd, gamma,         \
        {nk::As<ELEM>(dx), cols}, dgamma, dbeta);                                        \
  }                                                                                      \
  nk_status nk_add_rmsnorm_backward_##SUFFIX(                                            \
      size_t rows, size_t cols, const CTYPE* sum, const CTYPE* dy, const CTYPE* dsum,    \
      const float* rrms, const float* gamma, CTYPE* dx, float* dgamma) {                 \
    return nk::RowNormBackward<ELEM>(                                                    \
        __func__, false, true, rows, cols, {nk::As<ELEM>(sum), cols},                    \
        {nk::As<ELEM>(dy), cols}, {nk::As<ELEM>(dsum), cols}, nullptr, rrms, gamma,      \
        {nk::As<ELEM>(dx), cols}, dgamma, nullptr);                                      \
  }                                                                                      \
  nk_status nk_layernorm_backward_strided_##SUFFIX(                                      \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const CTYPE* dy,             \
      size_t lddy, const float* mean, const float* rstd, const float* gamma, CTYPE* dx,  \
      size_t lddx, float* dgamma, float* dbeta) {                                        \
    return nk::RowNormBackward<ELEM>(__func__, true, false, rows, cols,                  \
                                     {nk::As<ELEM>(x), ldx}, {nk::As<ELEM>(dy), lddy},   \
                                     {}, mean, rstd, gamma, {nk::As<ELEM>(dx), lddx},    \
                                     dgamma, dbeta);                                     \
  }                                                                                      \
  nk_status nk_rmsnorm_backward_strided_##SUFFIX(                                        \
      size_t rows, size_t cols, const CTYPE* x, size_t ldx, const CTYPE* dy,             \
      size_t lddy, const float* rrms, const float* gamma, CTYPE* dx, size_t lddx,        \
      float* dgamma) {                                                                   \
    return nk::RowNormBackward<ELEM>(__func__, false, false, rows, cols,                 \
                                     {nk::As<ELEM>(x), ldx}, {nk::As<ELEM>(dy), lddy},   \
                                     {}, nullptr, rrms, gamma, {nk::As<ELEM>(dx), lddx}, \
                                     dgamma, nullptr);                                   \
  }                                                                                      \
  nk_status nk_add_layernorm_backward_strided_##SUFFIX(                                  \
      size_t rows, size_t cols, const CTYPE* sum, size_t lds, const CTYPE* dy,           \
      size_t lddy, const CTYPE* dsum, size_t ldds, const float* mean, const float* rstd,  \
      const float* gamma, CTYPE* dx, size_t lddx, float* dgamma, float* dbeta) {         \
    return nk::RowNormBackward<ELEM>(                                                    \
        __func__, true, true, rows, cols, {nk::As<ELEM>(sum), lds},                      \
        {nk::As<ELEM>(dy), lddy}, {nk::As<ELEM>(dsum), ldds}, mean, rstd, gamma,         \
        {nk::As<ELEM>(dx), lddx}, dgamma, dbeta);                                        \
  }                                                                                      \
  nk_status nk_add_rmsnorm_backward_strided_##SUFFIX(                                    \
      size_t rows, size_t cols, const CTYPE* sum, size_t lds, const CTYPE* dy,           \
      size_t lddy, const CTYPE* dsum, size_t ldds, const float* rrms,                    \
      const float* gamma, CTYPE* dx, size_t lddx, float* dgamma) {                       \
    return nk::RowNormBackward<ELEM>(                                                    \
        __func__, false, true, rows, cols, {nk::As<ELEM>(sum), lds},                     \
        {nk::As<ELEM>(dy), lddy}, {nk::As<ELEM>(dsum), ldds}, nullptr, rrms, gamma,      \
        {nk::As<ELEM>(dx), lddx}, dgamma, nullptr);                                      \
  }

NK_ROWNORM_BACKWARDS(f32, float, float)
NK_ROWNORM_BACKWARDS(bf16, nk_bf16, hwy::bfloat16_t)
NK_ROWNORM_BACKWARDS(f16, nk_f16, hwy::float16_t)
#undef NK_ROWNORM_BACKWARDS

}  // extern "C"
