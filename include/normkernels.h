/* SPDX-License-Identifier: Apache-2.0 */
/* normkernels.h: the C ABI of libnormkernels, SIMD normalization kernels for CPUs.
 *
 * Conventions (every function below follows them):
 * - Every kernel returns nk_status. A failing call writes nothing to any output
 *   (all arguments are validated first) and leaves a thread-local reason in
 *   nk_last_error() naming the function and the argument. Checks run in this order,
 *   the first failure is returned: scalar arguments (eps) -> shapes (zero where not
 *   allowed, element or byte count overflowing size_t) -> NULL pointers -> overlaps.
 *   (BatchNorm: layout, eps, momentum are the scalar arguments.)
 * - Sizes are element counts; tensors are dense, contiguous, row-major (the LayerNorm
 *   family's _strided forms take a row stride per tensor). No pointer needs any
 *   alignment.
 * - rows == 0 is a valid empty call: a no-op returning NK_OK that writes nothing;
 *   its pointers may then be NULL.
 * - gamma == NULL means all ones, beta == NULL all zeros. Statistics outputs (mean,
 *   rstd, rrms) are optional: NULL means "not wanted".
 * - Aliasing: y may be x exactly (in place). In the fused add forms, sum may be x or
 *   residual exactly and y may be x or residual exactly, but y and sum are never the
 *   same buffer. Any other overlap of an output with an input or another output, and
 *   any overlap involving a statistics output, is NK_ERR_OVERLAP.
 * - eps must be finite and >= 0 (NK_ERR_INVALID_ARGUMENT otherwise).
 * - Non-finite data is not an error: NaN or Inf in a row makes that row's outputs
 *   NaN/Inf as the formula gives; other rows are unaffected.
 * - Finite data gives finite y, mean and rstd (rrms) over the whole fp32 range when
 *   eps > 0 or the row's variance is not 0 (rows near |x| ~ 1e19 and beyond, whose
 *   squares overflow fp32, are redone scaled by a power of two). A constant row has a
 *   mean exactly equal to the constant, so with eps > 0 its y is exactly beta. With
 *   eps == 0 a constant row gives NaN, as in PyTorch. (y = x_hat * gamma + beta is
 *   evaluated in fp32: a gamma so large that x_hat * gamma overflows gives +-Inf.)
 * - Statistics are Welford/Chan (count, mean, M2) in fp32, one pass over memory,
 *   merged in a fixed tree; variance is the biased one, as torch.nn.LayerNorm.
 * - Results do not depend on the thread count: for a given ISA, the same inputs give
 *   the same bits with any number of threads. Each call reads the ISA once, at entry.
 * - Kernels may be called concurrently from any number of threads, including from
 *   inside the caller's own OpenMP parallel regions.
 */
#ifndef NORMKERNELS_H_
#define NORMKERNELS_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(NK_STATIC)
#if defined(NK_BUILDING_LIBRARY)
#define NK_API __declspec(dllexport)
#else
#define NK_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define NK_API __attribute__((visibility("default")))
#else
#define NK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#define NK_VERSION_MAJOR 0
#define NK_VERSION_MINOR 1
#define NK_VERSION_PATCH 0

/* "0.1.0": the version of the library actually loaded, which may differ from the
   macros above if the program was built against another header. */
NK_API const char* nk_version(void);

/* ---------------------------------------------------------------- status */

/* Values are pinned: they never change meaning between versions. */
typedef enum nk_status {
  NK_OK = 0,
  NK_ERR_NULL_POINTER = 1,     /* a required pointer is NULL */
  NK_ERR_INVALID_SHAPE = 2,    /* a size is 0 where not allowed, or overflows size_t */
  NK_ERR_INVALID_ARGUMENT = 3, /* a scalar argument is out of its domain */
  NK_ERR_OVERLAP = 4,          /* an output overlaps something it may not */
  NK_ERR_UNSUPPORTED = 5,      /* valid request that this build or CPU cannot serve */
  NK_ERR_OUT_OF_MEMORY = 6,
  /* Not statuses: they give the enum the range of int, so that any int a caller
     passes (or a C++ caller casts) is a value of the type. */
  NK_STATUS_MIN_ENUM = -0x7FFFFFFF - 1,
  NK_STATUS_MAX_ENUM = 0x7FFFFFFF
} nk_status;

/* A short English name of s ("NK_OK: success", ...); never NULL, also for values
   that are not in the enum. */
NK_API const char* nk_status_string(nk_status s);

/* The reason for this thread's most recent failed call, e.g.
   "nk_layernorm_forward_f32: cols is 0; a row must have at least one element".
   "" if no call on this thread has failed. Successful calls leave it unchanged.
   The pointer stays valid until this thread's next failing call. */
NK_API const char* nk_last_error(void);

/* ---------------------------------------------------------------- types */

typedef uint16_t nk_bf16; /* bfloat16 bit pattern (the top half of an IEEE float) */
typedef uint16_t nk_f16;  /* IEEE 754 binary16 bit pattern (NumPy's float16) */

typedef enum nk_layout {  /* spatial dims flattened into `spatial` */
  NK_LAYOUT_NCHW = 0,     /* [n][c][spatial], channels first */
  NK_LAYOUT_NHWC = 1,     /* [n][spatial][c], channels last */
  /* Not layouts: they give the enum the range of int, so that any int a caller
     passes (or a C++ caller's static_cast<nk_layout>(2)) is a value of the type,
     which the kernels refuse. */
  NK_LAYOUT_MIN_ENUM = -0x7FFFFFFF - 1,
  NK_LAYOUT_MAX_ENUM = 0x7FFFFFFF
} nk_layout;

/* ---------------------------------------------------------------- ISA and threads */

/* Instruction sets are named as Highway names its targets: on x86 "AVX3", "AVX2",
   "SSE4", "SSSE3", and the baseline ("SCALAR" with Debian's g++ 12; "EMU128" with newer
   compilers); on aarch64 "SVE2_128", "SVE_256" (CPUs of exactly those vector lengths),
   "SVE2", "SVE", and "NEON", the baseline. Every returned string is static, valid for
   the life of the process. */

/* The ISA that kernels starting now use. */
NK_API const char* nk_get_isa(void);

/* The ISAs compiled into this library AND supported by this CPU, best first.
   Writes min(count, capacity) names to `names` (which may be NULL when capacity is
   0) and returns the count. */
NK_API size_t nk_list_isas(const char** names, size_t capacity);

/* Select the ISA for calls that start afterwards, process-wide. Case-insensitive,
   surrounding white space ignored; "AVX512" and "AVX-512" name AVX3. NULL or "auto"
   selects the best one. A name that is not a Highway target name:
   NK_ERR_INVALID_ARGUMENT. A target name that is not compiled in or not supported by
   this CPU: NK_ERR_UNSUPPORTED. Either message lists the names this CPU runs. On
   failure the selection is unchanged. */
NK_API nk_status nk_set_isa(const char* name);

/* The number of threads kernels use (>= 1). Small tensors run on one thread
   whatever this says; the results are the same bits either way. */
NK_API int nk_get_num_threads(void);

/* n >= 1 threads, or 0 for the default (OpenMP's omp_get_max_threads() at the time
   of the call); n < 0 is NK_ERR_INVALID_ARGUMENT. Process-wide. */
NK_API nk_status nk_set_num_threads(int n);

/* Environment, read once at first use of the library: NK_ISA (as nk_set_isa),
   NK_NUM_THREADS (as nk_set_num_threads) and NK_STREAM_BYTES (calls whose tensors
   together reach that many bytes, by default 32 MiB, write their outputs with
   non-temporal stores; the BatchNorm and GroupNorm forwards of fp32 tensors from half
   that many: for a CPU with a larger last-level cache). A value those
   functions would refuse (NK_STREAM_BYTES: not a positive integer) is ignored and the
   default stays, with one line on stderr naming the variable, its
   value and what is used instead. NK_AVX512BF16=0 keeps the AVX3 kernels from
   AVX512-BF16's rounding instruction (bfloat16 outputs, same bits; for testing).
   Fork: libgomp's thread pool does not survive fork(), and a parallel region in the
   child would wait for the parent's threads forever (as PyTorch's own kernels do). So
   after fork() the child runs kernels on one thread (same bits) until it calls
   nk_set_num_threads itself; the parent keeps its setting. DataLoader and
   multiprocessing workers need nothing more. (A count above 1 set in such a child
   would hang there too, if the parent had run parallel regions: libgomp's limit.) */

/* ---------------------------------------------------------------- LayerNorm family */

/* LayerNorm over each row of x [rows][cols]:
     mean = sum(x) / cols, var = sum((x - mean)^2) / cols (biased), rstd = 1/sqrt(var + eps),
     y = (x - mean) * rstd * gamma + beta.
   gamma, beta: [cols] or NULL. mean, rstd: [rows] or NULL (the forward's saved
   statistics, as torch.native_layer_norm returns them). y: [rows][cols], may be x.
   rows == 0 is a no-op; cols == 0 is NK_ERR_INVALID_SHAPE. LayerNorm over several
   trailing dims ([C,H,W]) is the same call with cols = C*H*W. */
NK_API nk_status nk_layernorm_forward_f32(size_t rows, size_t cols, const float* x,
                                          const float* gamma, const float* beta,
                                          float eps, float* y, float* mean,
                                          float* rstd);

/* RMSNorm over each row: rrms = 1/sqrt(sum(x^2)/cols + eps), y = x * rrms * gamma.
   gamma: [cols] or NULL. rrms: [rows] or NULL. y may be x. */
NK_API nk_status nk_rmsnorm_forward_f32(size_t rows, size_t cols, const float* x,
                                        const float* gamma, float eps, float* y,
                                        float* rrms);

/* Pre-norm residual step: s = x + residual (rounded to fp32); y = LayerNorm(s).
   sum: [rows][cols] receives s, or NULL when only y is wanted. sum may be x or
   residual; y may be x or residual; y and sum are different buffers. */
NK_API nk_status nk_add_layernorm_forward_f32(size_t rows, size_t cols,
                                              const float* x, const float* residual,
                                              const float* gamma, const float* beta,
                                              float eps, float* sum, float* y,
                                              float* mean, float* rstd);

/* s = x + residual; y = RMSNorm(s); as nk_add_layernorm_forward_f32. */
NK_API nk_status nk_add_rmsnorm_forward_f32(size_t rows, size_t cols, const float* x,
                                            const float* residual, const float* gamma,
                                            float eps, float* sum, float* y,
                                            float* rrms);

/* Row-strided forms, for slices of larger buffers (the q / k part of a fused QKV
   projection, one head of a [tokens][heads][dim] view, a column block): each row-major
   tensor pointer is followed by its row stride in elements (row r of x at x + r * ldx),
   otherwise as the contiguous forms above, which are these with every stride = cols
   and give the same bits. A stride < cols, or an extent (rows - 1) * ld + cols
   overflowing size_t in bytes, is NK_ERR_INVALID_SHAPE (lds is not checked when sum
   is NULL). In place means the same pointer and the same stride. Overlap is judged
   over the elements the call touches: tensors whose rows interleave without sharing
   an element (q and k of one QKV buffer) do not overlap. Elements between rows are
   neither written nor used (they may be read as part of a vector and discarded). */
NK_API nk_status nk_layernorm_forward_strided_f32(size_t rows, size_t cols,
                                                  const float* x, size_t ldx,
                                                  const float* gamma, const float* beta,
                                                  float eps, float* y, size_t ldy,
                                                  float* mean, float* rstd);
NK_API nk_status nk_rmsnorm_forward_strided_f32(size_t rows, size_t cols, const float* x,
                                                size_t ldx, const float* gamma, float eps,
                                                float* y, size_t ldy, float* rrms);
NK_API nk_status nk_add_layernorm_forward_strided_f32(
    size_t rows, size_t cols, const float* x, size_t ldx, const float* residual,
    size_t ldr, const float* gamma, const float* beta, float eps, float* sum, size_t lds,
    float* y, size_t ldy, float* mean, float* rstd);
NK_API nk_status nk_add_rmsnorm_forward_strided_f32(
    size_t rows, size_t cols, const float* x, size_t ldx, const float* residual,
    size_t ldr, const float* gamma, float eps, float* sum, size_t lds, float* y,
    size_t ldy, float* rrms);

/* Half precision (bfloat16 _bf16, fp16 _f16): the same calls with the tensors x,
   residual, sum and y in half; gamma, beta and the statistics stay float. Inputs are
   widened exactly to fp32 and all arithmetic is fp32, so mean, rstd (rrms) are the
   f32 kernel's on the widened input, bit for bit; every stored value is rounded once
   to nearest, ties to even (NaN stays a quiet NaN; fp16 beyond 65504 by half a step,
   |v| >= 65520, is Inf; subnormal results are kept). In the fused forms s = x +
   residual is rounded to half once, and that rounded s is stored to sum and is what
   is normalized, as a half residual stream holds it. Validation, aliasing, strides (in
   elements) and thread independence as the f32 forms. */
NK_API nk_status nk_layernorm_forward_bf16(size_t rows, size_t cols, const nk_bf16* x,
                                           const float* gamma, const float* beta,
                                           float eps, nk_bf16* y, float* mean,
                                           float* rstd);
NK_API nk_status nk_rmsnorm_forward_bf16(size_t rows, size_t cols, const nk_bf16* x,
                                         const float* gamma, float eps, nk_bf16* y,
                                         float* rrms);
NK_API nk_status nk_add_layernorm_forward_bf16(size_t rows, size_t cols,
                                               const nk_bf16* x, const nk_bf16* residual,
                                               const float* gamma, const float* beta,
                                               float eps, nk_bf16* sum, nk_bf16* y,
                                               float* mean, float* rstd);
NK_API nk_status nk_add_rmsnorm_forward_bf16(size_t rows, size_t cols, const nk_bf16* x,
                                             const nk_bf16* residual, const float* gamma,
                                             float eps, nk_bf16* sum, nk_bf16* y,
                                             float* rrms);
NK_API nk_status nk_layernorm_forward_strided_bf16(size_t rows, size_t cols,
                                                   const nk_bf16* x, size_t ldx,
                                                   const float* gamma, const float* beta,
                                                   float eps, nk_bf16* y, size_t ldy,
                                                   float* mean, float* rstd);
NK_API nk_status nk_rmsnorm_forward_strided_bf16(size_t rows, size_t cols,
                                                 const nk_bf16* x, size_t ldx,
                                                 const float* gamma, float eps, nk_bf16* y,
                                                 size_t ldy, float* rrms);
NK_API nk_status nk_add_layernorm_forward_strided_bf16(
    size_t rows, size_t cols, const nk_bf16* x, size_t ldx, const nk_bf16* residual,
    size_t ldr, const float* gamma, const float* beta, float eps, nk_bf16* sum,
    size_t lds, nk_bf16* y, size_t ldy, float* mean, float* rstd);
NK_API nk_status nk_add_rmsnorm_forward_strided_bf16(
    size_t rows, size_t cols, const nk_bf16* x, size_t ldx, const nk_bf16* residual,
    size_t ldr, const float* gamma, float eps, nk_bf16* sum, size_t lds, nk_bf16* y,
    size_t ldy, float* rrms);
NK_API nk_status nk_layernorm_forward_f16(size_t rows, size_t cols, const nk_f16* x,
                                          const float* gamma, const float* beta,
                                          float eps, nk_f16* y, float* mean,
                                          float* rstd);
NK_API nk_status nk_rmsnorm_forward_f16(size_t rows, size_t cols, const nk_f16* x,
                                        const float* gamma, float eps, nk_f16* y,
                                        float* rrms);
NK_API nk_status nk_add_layernorm_forward_f16(size_t rows, size_t cols, const nk_f16* x,
                                              const nk_f16* residual, const float* gamma,
                                              const float* beta, float eps, nk_f16* sum,
                                              nk_f16* y, float* mean, float* rstd);
NK_API nk_status nk_add_rmsnorm_forward_f16(size_t rows, size_t cols, const nk_f16* x,
                                            const nk_f16* residual, const float* gamma,
                                            float eps, nk_f16* sum, nk_f16* y,
                                            float* rrms);
NK_API nk_status nk_layernorm_forward_strided_f16(size_t rows, size_t cols,
                                                  const nk_f16* x, size_t ldx,
                                                  const float* gamma, const float* beta,
                                                  float eps, nk_f16* y, size_t ldy,
                                                  float* mean, float* rstd);
NK_API nk_status nk_rmsnorm_forward_strided_f16(size_t rows, size_t cols, const nk_f16* x,
                                                size_t ldx, const float* gamma, float eps,
                                                nk_f16* y, size_t ldy, float* rrms);
NK_API nk_status nk_add_layernorm_forward_strided_f16(
    size_t rows, size_t cols, const nk_f16* x, size_t ldx, const nk_f16* residual,
    size_t ldr, const float* gamma, const float* beta, float eps, nk_f16* sum, size_t lds,
    nk_f16* y, size_t ldy, float* mean, float* rstd);
NK_API nk_status nk_add_rmsnorm_forward_strided_f16(
    size_t rows, size_t cols, const nk_f16* x, size_t ldx, const nk_f16* residual,
    size_t ldr, const float* gamma, float eps, nk_f16* sum, size_t lds, nk_f16* y,
    size_t ldy, float* rrms);

/* Backward of the four forwards, for training: mean and rstd (rrms) are the forward's
   saved statistics (required), taken as exact. With x_hat = (x - mean) * rstd
   (RMSNorm: x * rrms) recomputed from x, and a = gamma * dy (gamma NULL = ones):
     dx = rstd * (a - mean(a) - x_hat * mean(a * x_hat))   (RMSNorm: no mean(a) term)
     dgamma = sum over rows of dy * x_hat,  dbeta = sum over rows of dy
   as torch.nn.LayerNorm's autograd gives. dgamma and dbeta ([cols] each, or NULL: not
   wanted) are overwritten, not accumulated. dx may be dy exactly (in place); nothing
   else may overlap an output. The row sums and the sums over rows are pairwise trees
   (the bound of design.md), in a fixed order: the same bits for any thread count. */
NK_API nk_status nk_layernorm_backward_f32(size_t rows, size_t cols, const float* x,
                                           const float* dy, const float* mean,
                                           const float* rstd, const float* gamma,
                                           float* dx, float* dgamma, float* dbeta);
NK_API nk_status nk_rmsnorm_backward_f32(size_t rows, size_t cols, const float* x,
                                         const float* dy, const float* rrms,
                                         const float* gamma, float* dx, float* dgamma);
/* Backward of the fused residual step, from the forward's saved sum s = x + residual:
   dx = norm_backward(dy) + dsum, where dsum (or NULL = 0) is the gradient that
   reached `sum` from its later uses (the residual stream); dx is the gradient of both
   x and residual. dx may be dy or dsum exactly. */
NK_API nk_status nk_add_layernorm_backward_f32(size_t rows, size_t cols, const float* sum,
                                               const float* dy, const float* dsum,
                                               const float* mean, const float* rstd,
                                               const float* gamma, float* dx,
                                               float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_f32(size_t rows, size_t cols, const float* sum,
                                             const float* dy, const float* dsum,
                                             const float* rrms, const float* gamma,
                                             float* dx, float* dgamma);
/* The backward's row-strided forms, as the forwards' (a stride after each row-major
   tensor: x or sum, dy, dsum, dx); the contiguous forms give the same bits. */
NK_API nk_status nk_layernorm_backward_strided_f32(size_t rows, size_t cols,
                                                   const float* x, size_t ldx,
                                                   const float* dy, size_t lddy,
                                                   const float* mean, const float* rstd,
                                                   const float* gamma, float* dx,
                                                   size_t lddx, float* dgamma,
                                                   float* dbeta);
NK_API nk_status nk_rmsnorm_backward_strided_f32(size_t rows, size_t cols, const float* x,
                                                 size_t ldx, const float* dy, size_t lddy,
                                                 const float* rrms, const float* gamma,
                                                 float* dx, size_t lddx, float* dgamma);
NK_API nk_status nk_add_layernorm_backward_strided_f32(
    size_t rows, size_t cols, const float* sum, size_t lds, const float* dy, size_t lddy,
    const float* dsum, size_t ldds, const float* mean, const float* rstd,
    const float* gamma, float* dx, size_t lddx, float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_strided_f32(
    size_t rows, size_t cols, const float* sum, size_t lds, const float* dy, size_t lddy,
    const float* dsum, size_t ldds, const float* rrms, const float* gamma, float* dx,
    size_t lddx, float* dgamma);

/* The backwards' half-precision forms (_bf16, _f16): x (sum), dy, dsum and dx in
   half, widened exactly; mean, rstd (rrms), gamma, dgamma and dbeta float; all
   arithmetic fp32, dx rounded once to nearest even. dgamma and dbeta are the f32
   kernel's on the widened tensors, bit for bit. */
NK_API nk_status nk_layernorm_backward_bf16(size_t rows, size_t cols, const nk_bf16* x,
    const nk_bf16* dy, const float* mean, const float* rstd, const float* gamma, nk_bf16* dx,
    float* dgamma, float* dbeta);
NK_API nk_status nk_rmsnorm_backward_bf16(size_t rows, size_t cols, const nk_bf16* x,
    const nk_bf16* dy, const float* rrms, const float* gamma, nk_bf16* dx, float* dgamma);
NK_API nk_status nk_add_layernorm_backward_bf16(size_t rows, size_t cols, const nk_bf16* sum,
    const nk_bf16* dy, const nk_bf16* dsum, const float* mean, const float* rstd,
    const float* gamma, nk_bf16* dx, float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_bf16(size_t rows, size_t cols, const nk_bf16* sum,
    const nk_bf16* dy, const nk_bf16* dsum, const float* rrms, const float* gamma, nk_bf16* dx,
    float* dgamma);
NK_API nk_status nk_layernorm_backward_strided_bf16(size_t rows, size_t cols,
    const nk_bf16* x, size_t ldx, const nk_bf16* dy, size_t lddy, const float* mean,
    const float* rstd, const float* gamma, nk_bf16* dx, size_t lddx, float* dgamma,
    float* dbeta);
NK_API nk_status nk_rmsnorm_backward_strided_bf16(size_t rows, size_t cols,
    const nk_bf16* x, size_t ldx, const nk_bf16* dy, size_t lddy, const float* rrms,
    const float* gamma, nk_bf16* dx, size_t lddx, float* dgamma);
NK_API nk_status nk_add_layernorm_backward_strided_bf16(size_t rows, size_t cols,
    const nk_bf16* sum, size_t lds, const nk_bf16* dy, size_t lddy, const nk_bf16* dsum,
    size_t ldds, const float* mean, const float* rstd, const float* gamma, nk_bf16* dx,
    size_t lddx, float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_strided_bf16(size_t rows, size_t cols,
    const nk_bf16* sum, size_t lds, const nk_bf16* dy, size_t lddy, const nk_bf16* dsum,
    size_t ldds, const float* rrms, const float* gamma, nk_bf16* dx, size_t lddx,
    float* dgamma);
NK_API nk_status nk_layernorm_backward_f16(size_t rows, size_t cols, const nk_f16* x,
    const nk_f16* dy, const float* mean, const float* rstd, const float* gamma, nk_f16* dx,
    float* dgamma, float* dbeta);
NK_API nk_status nk_rmsnorm_backward_f16(size_t rows, size_t cols, const nk_f16* x,
    const nk_f16* dy, const float* rrms, const float* gamma, nk_f16* dx, float* dgamma);
NK_API nk_status nk_add_layernorm_backward_f16(size_t rows, size_t cols, const nk_f16* sum,
    const nk_f16* dy, const nk_f16* dsum, const float* mean, const float* rstd,
    const float* gamma, nk_f16* dx, float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_f16(size_t rows, size_t cols, const nk_f16* sum,
    const nk_f16* dy, const nk_f16* dsum, const float* rrms, const float* gamma, nk_f16* dx,
    float* dgamma);
NK_API nk_status nk_layernorm_backward_strided_f16(size_t rows, size_t cols,
    const nk_f16* x, size_t ldx, const nk_f16* dy, size_t lddy, const float* mean,
    const float* rstd, const float* gamma, nk_f16* dx, size_t lddx, float* dgamma,
    float* dbeta);
NK_API nk_status nk_rmsnorm_backward_strided_f16(size_t rows, size_t cols,
    const nk_f16* x, size_t ldx, const nk_f16* dy, size_t lddy, const float* rrms,
    const float* gamma, nk_f16* dx, size_t lddx, float* dgamma);
NK_API nk_status nk_add_layernorm_backward_strided_f16(size_t rows, size_t cols,
    const nk_f16* sum, size_t lds, const nk_f16* dy, size_t lddy, const nk_f16* dsum,
    size_t ldds, const float* mean, const float* rstd, const float* gamma, nk_f16* dx,
    size_t lddx, float* dgamma, float* dbeta);
NK_API nk_status nk_add_rmsnorm_backward_strided_f16(size_t rows, size_t cols,
    const nk_f16* sum, size_t lds, const nk_f16* dy, size_t lddy, const nk_f16* dsum,
    size_t ldds, const float* rrms, const float* gamma, nk_f16* dx, size_t lddx,
    float* dgamma);

/* ---------------------------------------------------------------- BatchNorm */

/* BatchNorm statistics are per channel, over the n * spatial values of that channel:
   NCHW x is [n][c][spatial], NHWC x is [n][spatial][c] (spatial = H*W, or D*H*W).
   n * c * spatial == 0 is an empty call (a no-op; pointers may be NULL), except
   where said otherwise. Results are the same bits for any thread count, per ISA. */

/* Training forward, as torch.nn.functional.batch_norm(training=True):
     mean = sum(x) / m, var = sum((x - mean)^2) / m over the channel's m = n * spatial
     values (biased), save_rstd = 1/sqrt(var + eps),
     y = (x - mean) * (save_rstd * gamma) + beta
   and, when running_mean / running_var are given (both or neither; one alone is
   NK_ERR_NULL_POINTER), PyTorch's momentum convention with the unbiased variance:
     running_mean = (1 - momentum) * running_mean + momentum * mean
     running_var  = (1 - momentum) * running_var  + momentum * var * m / (m - 1)
   (computed in double). PyTorch's momentum=None (a cumulative average) is
   momentum = 1 / num_batches_tracked. momentum: finite, in [0, 1].
   gamma, beta: [c] or NULL. save_mean, save_rstd: [c] or NULL (what
   torch.native_batch_norm returns as save_mean / save_invstd). y may be x.
   m == 1 is NK_ERR_INVALID_SHAPE whatever c is, as PyTorch's "expected more than 1
   value per channel when training". A constant channel gives y == beta exactly when
   eps > 0. (save_rstd * gamma is one fp32 factor per channel: a gamma so large that
   it overflows gives Inf/NaN for that channel.) */
NK_API nk_status nk_batchnorm_forward_training_f32(
    size_t n, size_t c, size_t spatial, nk_layout layout, const float* x,
    const float* gamma, const float* beta, float eps, float momentum,
    float* running_mean, float* running_var, float* y, float* save_mean,
    float* save_rstd);

/* Normalize with given statistics, as batch_norm(training=False): running stats at
   inference, or statistics merged across processes (SyncBatchNorm). mean, var: [c]
   (var is used as given; a negative var + eps gives NaN for that channel). Folded
   per channel, in double, into y = x * a + b with a = gamma / sqrt(var + eps) and
   b = beta - mean * a: one multiply-add per element (a, b, x * a and mean * a beyond
   the fp32 range give Inf/NaN for that channel). gamma, beta: [c] or NULL.
   y may be x. */
NK_API nk_status nk_batchnorm_forward_inference_f32(
    size_t n, size_t c, size_t spatial, nk_layout layout, const float* x,
    const float* mean, const float* var, const float* gamma, const float* beta,
    float eps, float* y);

/* Backward of the training forward, as torch.nn.BatchNorm's autograd gives: per
   channel, over its m = n * spatial values, with x_hat = (x - save_mean) * save_rstd
   recomputed from x (save_* as the training forward returned them, taken as exact):
     dbeta = sum dy,  dgamma = sum dy * x_hat,
     dx = gamma * save_rstd * (dy - dbeta / m - x_hat * dgamma / m).
   gamma: [c] or NULL (ones); dgamma, dbeta: [c] or NULL (not wanted), overwritten.
   dx may be dy exactly (in place); nothing else may overlap an output. The sums are
   pairwise trees over pieces fixed by the shape: the same bits for any thread count.
   m == 1 is allowed (dx is then 0 up to rounding). An empty tensor is a no-op. */
NK_API nk_status nk_batchnorm_backward_f32(size_t n, size_t c, size_t spatial,
                                           nk_layout layout, const float* x,
                                           const float* dy, const float* save_mean,
                                           const float* save_rstd, const float* gamma,
                                           float* dx, float* dgamma, float* dbeta);

/* SyncBatchNorm's building blocks. One process holds a shard of the batch:
     1. nk_batchnorm_moments_f32 on the shard (count = n * spatial),
     2. an allreduce of (count, mean, m2) with nk_moments_merge_f32 as the operation,
     3. nk_batchnorm_update_running_f32 with the merged moments,
     4. nk_batchnorm_forward_inference_f32 with mean and var = m2 / count.
   The result equals a training forward on the whole batch within the accuracy bound
   (not bitwise: the merge tree differs). The backward likewise:
     1. nk_batchnorm_backward_reduce_f32 on the shard, with the merged mean and
        rstd = 1 / sqrt(var + eps) that normalized it,
     2. an allreduce (sum) of sum_dy and sum_dy_xhat (dbeta and dgamma),
     3. nk_batchnorm_backward_apply_f32 with the summed sums and the total count. */

/* Per-channel moments of this shard: mean[c] and m2[c] = sum((x - mean)^2), both [c],
   never aliasing anything. An empty shard (n * spatial == 0, x may be NULL) writes
   mean 0 and m2 0; c == 0 is a no-op. m2 may overflow to Inf for |x| ~ 1e19 and
   beyond; mean stays finite. */
NK_API nk_status nk_batchnorm_moments_f32(size_t n, size_t c, size_t spatial,
                                          nk_layout layout, const float* x,
                                          float* mean, float* m2);

/* Chan et al.'s merge of the moments of two disjoint sets, per channel:
     n = count_a + count_b, delta = mean_b - mean_a,
     mean = mean_a + delta * count_b / n, m2 = m2_a + m2_b + delta^2 * count_a * count_b / n.
   A zero count leaves the other side unchanged; both zero give mean 0, m2 0.
   mean_out may be mean_a and m2_out may be m2_a exactly (an in-place reduction).
   count_a + count_b overflowing uint64_t is NK_ERR_INVALID_SHAPE; c == 0 a no-op. */
NK_API nk_status nk_moments_merge_f32(size_t c, uint64_t count_a, const float* mean_a,
                                      const float* m2_a, uint64_t count_b,
                                      const float* mean_b, const float* m2_b,
                                      float* mean_out, float* m2_out);

/* The running-statistics update of the training forward from merged moments:
   running_mean = (1 - momentum) * running_mean + momentum * mean,
   running_var = (1 - momentum) * running_var + momentum * m2 / (count - 1), in double.
   count < 2 is NK_ERR_INVALID_SHAPE (before the c == 0 no-op, as in training).
   running_mean and running_var are updated in place and may not overlap the inputs
   or each other. */
NK_API nk_status nk_batchnorm_update_running_f32(size_t c, uint64_t count,
                                                 const float* mean, const float* m2,
                                                 float momentum, float* running_mean,
                                                 float* running_var);

/* The shard's backward sums per channel: sum_dy[c] = sum of dy and sum_dy_xhat[c] =
   sum of dy * (x - mean) * rstd over its n * spatial values (its dbeta and dgamma), as
   nk_batchnorm_backward_f32 adds them. A shard with one value per channel is valid; an
   empty shard (n * spatial == 0, x and dy may be NULL) writes zeros; c == 0 is a
   no-op. The outputs never alias anything. */
NK_API nk_status nk_batchnorm_backward_reduce_f32(size_t n, size_t c, size_t spatial,
                                                  nk_layout layout, const float* x,
                                                  const float* dy, const float* mean,
                                                  const float* rstd, float* sum_dy,
                                                  float* sum_dy_xhat);

/* dx of the shard from the sums over every shard and total_count, the values per
   channel over every shard: dx = gamma * rstd * (dy - sum_dy / total_count - x_hat *
   sum_dy_xhat / total_count), gamma [c] or NULL (ones). total_count below this shard's
   n * spatial is NK_ERR_INVALID_SHAPE whatever c is (a shape check, before the empty
   no-op). dx may be dy exactly. With one shard, reduce then apply gives the bits of
   nk_batchnorm_backward_f32. */
NK_API nk_status nk_batchnorm_backward_apply_f32(size_t n, size_t c, size_t spatial,
                                                 nk_layout layout, const float* x,
                                                 const float* dy, const float* mean,
                                                 const float* rstd, const float* gamma,
                                                 uint64_t total_count, const float* sum_dy,
                                                 const float* sum_dy_xhat, float* dx);

/* BatchNorm's tensor kernels in half precision (bfloat16 _bf16, fp16 _f16): x, y, dy
   and dx in half, widened exactly; gamma, beta, statistics, moments, running stats,
   sums, dgamma and dbeta float; all arithmetic fp32 on the f32 forms' paths, so every
   float output is the f32 kernel's on the widened tensors, bit for bit, and every
   stored tensor value is the f32 kernel's rounded once to nearest even (NaN quiet,
   fp16 |v| >= 65520 Inf, subnormals kept). Validation, aliasing and thread
   independence as the f32 forms. */
NK_API nk_status nk_batchnorm_forward_training_bf16(
    size_t n, size_t c, size_t spatial, nk_layout layout, const nk_bf16* x,
    const float* gamma, const float* beta, float eps, float momentum, float* running_mean,
    float* running_var, nk_bf16* y, float* save_mean, float* save_rstd);
NK_API nk_status nk_batchnorm_forward_inference_bf16(size_t n, size_t c, size_t spatial,
                                                     nk_layout layout, const nk_bf16* x,
                                                     const float* mean, const float* var,
                                                     const float* gamma,
                                                     const float* beta, float eps,
                                                     nk_bf16* y);
NK_API nk_status nk_batchnorm_backward_bf16(size_t n, size_t c, size_t spatial,
                                            nk_layout layout, const nk_bf16* x,
                                            const nk_bf16* dy, const float* save_mean,
                                            const float* save_rstd, const float* gamma,
                                            nk_bf16* dx, float* dgamma, float* dbeta);
NK_API nk_status nk_batchnorm_moments_bf16(size_t n, size_t c, size_t spatial,
                                           nk_layout layout, const nk_bf16* x,
                                           float* mean, float* m2);
NK_API nk_status nk_batchnorm_backward_reduce_bf16(size_t n, size_t c, size_t spatial,
                                                   nk_layout layout, const nk_bf16* x,
                                                   const nk_bf16* dy, const float* mean,
                                                   const float* rstd, float* sum_dy,
                                                   float* sum_dy_xhat);
NK_API nk_status nk_batchnorm_backward_apply_bf16(
    size_t n, size_t c, size_t spatial, nk_layout layout, const nk_bf16* x,
    const nk_bf16* dy, const float* mean, const float* rstd, const float* gamma,
    uint64_t total_count, const float* sum_dy, const float* sum_dy_xhat, nk_bf16* dx);
NK_API nk_status nk_batchnorm_forward_training_f16(
    size_t n, size_t c, size_t spatial, nk_layout layout, const nk_f16* x,
    const float* gamma, const float* beta, float eps, float momentum, float* running_mean,
    float* running_var, nk_f16* y, float* save_mean, float* save_rstd);
NK_API nk_status nk_batchnorm_forward_inference_f16(size_t n, size_t c, size_t spatial,
                                                    nk_layout layout, const nk_f16* x,
                                                    const float* mean, const float* var,
                                                    const float* gamma, const float* beta,
                                                    float eps, nk_f16* y);
NK_API nk_status nk_batchnorm_backward_f16(size_t n, size_t c, size_t spatial,
                                           nk_layout layout, const nk_f16* x,
                                           const nk_f16* dy, const float* save_mean,
                                           const float* save_rstd, const float* gamma,
                                           nk_f16* dx, float* dgamma, float* dbeta);
NK_API nk_status nk_batchnorm_moments_f16(size_t n, size_t c, size_t spatial,
                                          nk_layout layout, const nk_f16* x, float* mean,
                                          float* m2);
NK_API nk_status nk_batchnorm_backward_reduce_f16(size_t n, size_t c, size_t spatial,
                                                  nk_layout layout, const nk_f16* x,
                                                  const nk_f16* dy, const float* mean,
                                                  const float* rstd, float* sum_dy,
                                                  float* sum_dy_xhat);
NK_API nk_status nk_batchnorm_backward_apply_f16(
    size_t n, size_t c, size_t spatial, nk_layout layout, const nk_f16* x,
    const nk_f16* dy, const float* mean, const float* rstd, const float* gamma,
    uint64_t total_count, const float* sum_dy, const float* sum_dy_xhat, nk_f16* dx);

/* ---------------------------------------------------------------- GroupNorm

   GroupNorm and InstanceNorm of x [n][c][spatial] (NCHW) or [n][spatial][c] (NHWC):
   the c channels of a sample fall into `groups` groups of cg = c / groups consecutive
   channels; each (sample, group) is one set of m = cg * spatial values with its own
   statistics, and gamma, beta are per channel. InstanceNorm is groups == c, LayerNorm
   over (c, spatial) with a per-channel affine is groups == 1. groups == 0, or groups
   not dividing c, is NK_ERR_INVALID_SHAPE (a shape check, after eps), with a message
   naming both numbers. c == 0 or n * spatial == 0 is an empty no-op. Statistics are
   Welford/Chan over pieces fixed by the shape, merged in a fixed tree: the same bits
   for any thread count. */

/* Forward, as torch.nn.functional.group_norm (F.instance_norm without running
   statistics is groups == c): per set, mean = sum(x) / m, var = sum((x - mean)^2) / m
   (biased), rstd = 1/sqrt(var + eps),
     y = (x - mean) * (rstd * gamma[ch]) + beta[ch]
   gamma, beta: [c] or NULL (ones, zeros). mean, rstd: [n * groups] (sample-major, as
   torch.native_group_norm returns them) or NULL. y may be x. A set of one value
   (m == 1) is valid, as in F.group_norm: var 0, y == beta with eps > 0; a constant
   set gives y == beta exactly. */
NK_API nk_status nk_groupnorm_forward_f32(size_t n, size_t c, size_t spatial,
                                          size_t groups, nk_layout layout,
                                          const float* x, const float* gamma,
                                          const float* beta, float eps, float* y,
                                          float* mean, float* rstd);

/* Backward of the forward, as torch.nn.GroupNorm's autograd gives: per set, with
   x_hat = (x - mean) * rstd recomputed from x (mean, rstd [n * groups] as the forward
   returned them, taken as exact) and a = gamma[ch] * dy,
     dx = rstd * (a - sum(a) / m - x_hat * sum(a * x_hat) / m),
   and per channel over the n samples and spatial positions
     dgamma = sum dy * x_hat,  dbeta = sum dy.
   gamma: [c] or NULL (ones); dgamma, dbeta: [c] or NULL (not wanted), overwritten.
   dx may be dy exactly (in place); nothing else may overlap an output. The sums are
   pairwise trees over pieces fixed by the shape: the same bits for any thread count.
   An empty tensor is a no-op (dgamma, dbeta not written). */
NK_API nk_status nk_groupnorm_backward_f32(size_t n, size_t c, size_t spatial,
                                           size_t groups, nk_layout layout,
                                           const float* x, const float* dy,
                                           const float* mean, const float* rstd,
                                           const float* gamma, float* dx, float* dgamma,
                                           float* dbeta);

/* GroupNorm's half-precision forms (_bf16, _f16): x, y, dy and dx in half, as
   BatchNorm's: float outputs bit for bit the f32 kernel's on the widened tensors,
   tensor outputs its values rounded once to nearest even. */
NK_API nk_status nk_groupnorm_forward_bf16(size_t n, size_t c, size_t spatial,
                                           size_t groups, nk_layout layout,
                                           const nk_bf16* x, const float* gamma,
                                           const float* beta, float eps, nk_bf16* y,
                                           float* mean, float* rstd);
NK_API nk_status nk_groupnorm_backward_bf16(size_t n, size_t c, size_t spatial,
                                            size_t groups, nk_layout layout,
                                            const nk_bf16* x, const nk_bf16* dy,
                                            const float* mean, const float* rstd,
                                            const float* gamma, nk_bf16* dx,
                                            float* dgamma, float* dbeta);
NK_API nk_status nk_groupnorm_forward_f16(size_t n, size_t c, size_t spatial,
                                          size_t groups, nk_layout layout,
                                          const nk_f16* x, const float* gamma,
                                          const float* beta, float eps, nk_f16* y,
                                          float* mean, float* rstd);
NK_API nk_status nk_groupnorm_backward_f16(size_t n, size_t c, size_t spatial,
                                           size_t groups, nk_layout layout,
                                           const nk_f16* x, const nk_f16* dy,
                                           const float* mean, const float* rstd,
                                           const float* gamma, nk_f16* dx, float* dgamma,
                                           float* dbeta);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NORMKERNELS_H_ */
