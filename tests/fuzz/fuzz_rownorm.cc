// SPDX-License-Identifier: Apache-2.0
// fuzz_rownorm.cc: libFuzzer target over the LayerNorm-family C ABI. The fuzz bytes
// choose the function (contiguous or row-strided form), a small shape, row stride, ISA,
// threads, eps, optional arguments, pointer offsets and aliasing, and the values (NaN,
// Inf, huge, tiny included). Checks: the status is the one c-abi.md's rules give, in
// their order; a failed call writes nothing; an accepted call writes nothing between
// rows and, on finite data, meets the design.md bound.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "../reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_rownorm", what); }

using nk_fuzz::Value;

enum Aliasing { kNone, kYIsX, kYPartial, kStatsInY, kSumIsY, kSumIsX, kYIsResidual, kCount };

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  const int op = p.ConsumeIntegralInRange<int>(0, 3);
  const bool center = op == 0 || op == 2, fused = op >= 2;
  const size_t rows = p.ConsumeIntegralInRange<size_t>(0, 6);
  const size_t cols = p.ConsumeIntegralInRange<size_t>(0, 300);
  const size_t n = rows * cols;
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_rownorm");
  float eps = 1e-5f;
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: eps = 0.0f; break;
    case 1: eps = -1e-3f; break;
    case 2: eps = NAN; break;
    case 3: eps = INFINITY; break;
    default: break;
  }
  const bool has_gamma = p.ConsumeBool(), has_beta = p.ConsumeBool(), stats = p.ConsumeBool();
  const bool want_sum = fused && p.ConsumeBool();
  const bool null_x = p.ConsumeIntegralInRange<int>(0, 15) == 0;
  const Aliasing alias = static_cast<Aliasing>(p.ConsumeIntegralInRange<int>(0, kCount - 1));
  const size_t off = p.ConsumeIntegralInRange<size_t>(0, 3);
  // The strided forms: every row-major tensor at one row stride ld (>= cols, or one
  // below it: refused), y at ld + ldy_extra (in place with another stride overlaps).
  const bool strided = p.ConsumeBool();
  const bool bad_ld = strided && cols > 0 && p.ConsumeIntegralInRange<int>(0, 7) == 0;
  size_t ld = cols, ldy = cols;
  if (bad_ld) {
    ld = ldy = cols - 1;
  } else if (strided) {
    ld = cols + p.ConsumeIntegralInRange<size_t>(0, 5);
    ldy = ld + p.ConsumeIntegralInRange<size_t>(0, 1);
  }
  const size_t extent = rows == 0 ? 0 : (rows - 1) * (ldy > ld ? ldy : ld) + cols;

  // One arena holds every tensor at its offset, so that aliasing can be arranged.
  const size_t stride = extent + cols + 8;
  std::vector<float> arena(8 * stride + 16, 12345.0f);
  float* x = arena.data() + off;
  float* res = x + stride;
  float* gamma = res + stride;
  float* beta = gamma + stride;
  float* sum = beta + stride;
  float* y = sum + stride;
  float* mean = y + stride;
  float* rstd = mean + stride;
  std::vector<float> x0(n), res0(n);  // the rows, dense
  for (size_t i = 0; i < n; ++i) x[i / cols * ld + i % cols] = x0[i] = Value(p);
  for (size_t i = 0; i < n; ++i) res[i / cols * ld + i % cols] = res0[i] = Value(p);
  for (size_t i = 0; i < cols; ++i) gamma[i] = Value(p), beta[i] = Value(p);

  float* y_arg = y;
  float* sum_arg = want_sum ? sum : nullptr;
  float* rstd_arg = stats ? rstd : nullptr;
  bool overlap = false;
  // y's rows at another stride than x's overlap x's from the second row on.
  const bool y_stride_differs = ldy != ld && rows > 1;
  switch (alias) {
    case kYIsX: y_arg = x; overlap = y_stride_differs; break;
    case kYPartial:  // one element on; do rows of y (ldy) and x (ld) share one?
      y_arg = x + 1;
      for (size_t r = 0; r < rows; ++r) {
        for (size_t j = 0; j < rows; ++j) {
          const size_t a = r * ldy + 1, b = j * ld;  // row starts, in elements from x
          overlap |= a < b + cols && b < a + cols;
        }
      }
      break;
    case kStatsInY: rstd_arg = y; overlap = rows > 0; break;
    case kSumIsY: if (fused) { sum_arg = y; overlap = true; } break;
    case kSumIsX: if (fused) sum_arg = x; break;
    case kYIsResidual: if (fused) { y_arg = res; overlap = y_stride_differs; } break;
    default: break;
  }
  const float* x_arg = null_x ? nullptr : x;

  // What c-abi.md says, in its order: scalars, shapes, empty, NULLs, overlaps.
  nk_status want = NK_OK;
  if (!std::isfinite(eps) || eps < 0) want = NK_ERR_INVALID_ARGUMENT;
  else if (cols == 0 || bad_ld) want = NK_ERR_INVALID_SHAPE;
  else if (rows == 0) want = NK_OK;
  else if (null_x) want = NK_ERR_NULL_POINTER;
  else if (overlap) want = NK_ERR_OVERLAP;

  const std::vector<float> before(arena);
  const float* g = has_gamma ? gamma : nullptr;
  const float* b = has_beta ? beta : nullptr;
  float* mean_arg = stats ? mean : nullptr;
  nk_status got;
  if (!strided) {
    switch (op) {
      case 0: got = nk_layernorm_forward_f32(rows, cols, x_arg, g, b, eps, y_arg, mean_arg, rstd_arg); break;
      case 1: got = nk_rmsnorm_forward_f32(rows, cols, x_arg, g, eps, y_arg, rstd_arg); break;
      case 2: got = nk_add_layernorm_forward_f32(rows, cols, x_arg, res, g, b, eps, sum_arg, y_arg, mean_arg, rstd_arg); break;
      default: got = nk_add_rmsnorm_forward_f32(rows, cols, x_arg, res, g, eps, sum_arg, y_arg, rstd_arg); break;
    }
  } else {
    switch (op) {
      case 0:
        got = nk_layernorm_forward_strided_f32(rows, cols, x_arg, ld, g, b, eps, y_arg,
                                               ldy, mean_arg, rstd_arg);
        break;
      case 1:
        got = nk_rmsnorm_forward_strided_f32(rows, cols, x_arg, ld, g, eps, y_arg, ldy,
                                             rstd_arg);
        break;
      case 2:
        got = nk_add_layernorm_forward_strided_f32(rows, cols, x_arg, ld, res, ld, g, b,
                                                   eps, sum_arg, ld, y_arg, ldy, mean_arg,
                                                   rstd_arg);
        break;
      default:
        got = nk_add_rmsnorm_forward_strided_f32(rows, cols, x_arg, ld, res, ld, g, eps,
                                                 sum_arg, ld, y_arg, ldy, rstd_arg);
        break;
    }
  }
  if (got != want) {
    std::fprintf(stderr, "op %d rows %zu cols %zu ld %zu ldy %zu alias %d: status %d, "
                 "expected %d: %s\n", op, rows, cols, ld, ldy, alias, got, want,
                 nk_last_error());
    Fail("status differs from the c-abi.md rules");
  }
  if (got != NK_OK || n == 0) {
    if (std::memcmp(before.data(), arena.data(), arena.size() * sizeof(float)) != 0) {
      Fail("a refused or empty call wrote memory");
    }
    return 0;
  }
  // Accepted: nothing written between the rows of a y of its own.
  if (y_arg == y) {
    for (size_t r = 0; r + 1 < rows; ++r) {
      for (size_t i = cols; i < ldy; ++i) {
        if (y[r * ldy + i] != 12345.0f) Fail("y written between rows");
      }
    }
  }
  // Rows of finite inputs meet the bound.
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x0.data() + r * cols;
    const float* rr = res0.data() + r * cols;
    bool finite = true;
    for (size_t i = 0; i < cols; ++i) {
      finite &= std::isfinite(xr[i]) && (!fused || std::isfinite(xr[i] + rr[i]));
    }
    if (!finite || eps == 0.0f) continue;
    const nk_test::RowRef ref = nk_test::ReferenceRow(center, cols, xr, fused ? rr : nullptr,
                                                      g, center ? b : nullptr, eps);
    for (size_t i = 0; i < cols; ++i) {
      const float gi = g ? g[i] : 1.0f, bi = (center && b) ? b[i] : 0.0f;
      if (!std::isfinite(gi) || !std::isfinite(bi)) continue;
      const float yi = y_arg[r * ldy + i];
      const long double bound = nk_test::BoundY(cols, ref, i, gi, bi);
      // A result, or the product x_hat * gamma before beta is added (no FMA below
      // AVX2), at the edge of the fp32 range may round to an infinity.
      const long double edge = std::numeric_limits<float>::max();
      if (std::fabs(ref.y[i]) + bound >= edge ||
          std::fabs(ref.xhat[i] * gi) + bound >= edge) {
        continue;
      }
      if (!nk_test::Meets(yi, ref.y[i], bound)) {
        std::fprintf(stderr, "op %d row %zu col %zu: y %g, reference %Lg\n", op, r, i, yi,
                     ref.y[i]);
        std::fprintf(stderr, "row (x, residual, gamma, beta), eps %g, isa %s:\n", eps,
                     nk_get_isa());
        for (size_t k = 0; k < cols; ++k) {
          std::fprintf(stderr, "  %.9g %.9g %.9g %.9g\n", xr[k], rr[k], g ? g[k] : 1.0f,
                       b ? b[k] : 0.0f);
        }
        Fail("y outside the bound");
      }
    }
  }
  return 0;
}
