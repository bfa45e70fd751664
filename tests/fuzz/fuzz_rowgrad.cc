// SPDX-License-Identifier: Apache-2.0
// fuzz_rowgrad.cc: libFuzzer target over the LayerNorm family's backward C ABI. The fuzz
// bytes choose the function (contiguous or row-strided form), a small shape, the row
// strides (one below cols: refused), ISA, threads, the optional arguments (gamma, dsum,
// dgamma, dbeta), a NULL required pointer, pointer offsets and aliasing (any argument
// moved onto another, by 0, 1, a row or any number of elements), the saved statistics
// (fuzzed, or a forward's) and the values (NaN, Inf, huge, tiny included). Checks: the
// status is the one c-abi.md's rules give, in their order, and a refusal's message
// names the function; a refused or empty call writes nothing; an accepted call writes
// nothing but its outputs' elements and, on rows where fp32 neither overflows nor
// underflows, meets the design.md bound (dgamma and dbeta where every row does).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_rowgrad", what); }

using nk_fuzz::Filler;
using nk_fuzz::Value;

// The arguments: row-major tensors (x is the fused forms' sum) with a row stride each,
// then the vectors, mean / rstd of [rows] and gamma / dgamma / dbeta of [cols].
enum Arg { kX, kDy, kDsum, kDx, kMean, kRstd, kGamma, kDgamma, kDbeta, kArgs };
const char* const kArgName[kArgs] = {"x", "dy", "dsum", "dx", "mean",
                                     "rstd", "gamma", "dgamma", "dbeta"};
bool RowMajor(int a) { return a <= kDx; }
bool Output(int a) { return a == kDx || a == kDgamma || a == kDbeta; }

// One call: which function, its shape, and where each argument lies in the arena.
struct Call {
  int op = 0;  // layernorm, rmsnorm, add_layernorm, add_rmsnorm
  bool center = false, fused = false, strided = false;
  size_t rows = 0, cols = 0;
  size_t ld[kArgs] = {};    // row strides of the row-major arguments
  size_t at[kArgs] = {};    // arena index of each argument
  bool given[kArgs] = {};   // passed (else NULL)

  size_t RowsOf(int a) const { return RowMajor(a) ? rows : 1; }
  size_t ColsOf(int a) const { return a == kMean || a == kRstd ? rows : cols; }
  size_t LdOf(int a) const { return RowMajor(a) ? ld[a] : ColsOf(a); }
  // The elements the call may touch (none if not passed): runs [begin, end) of
  // consecutive arena indices, in order (rows that touch each other make one run).
  struct Run {
    size_t begin, end;
  };
  std::vector<Run> Runs(int a) const {
    std::vector<Run> runs;
    if (!given[a]) return runs;
    for (size_t r = 0; r < RowsOf(a); ++r) {
      const size_t begin = at[a] + r * LdOf(a), end = begin + ColsOf(a);
      if (!runs.empty() && runs.back().end == begin) {
        runs.back().end = end;
      } else if (begin < end) {
        runs.push_back({begin, end});
      }
    }
    return runs;
  }
  // fn(i) for each arena index i of the elements the call may touch (the runs').
  template <class Fn>
  void ForEachElement(int a, const Fn& fn) const {
    for (const Run& run : Runs(a)) {
      for (size_t i = run.begin; i < run.end; ++i) fn(i);
    }
  }
  std::string Name() const {
    static const char* const kOps[] = {"nk_layernorm", "nk_rmsnorm", "nk_add_layernorm",
                                       "nk_add_rmsnorm"};
    return std::string(kOps[op]) + (strided ? "_backward_strided_f32" : "_backward_f32");
  }
};

// What c-abi.md's rules give, in their order: shapes (cols == 0, a row stride below
// cols; ldds only with dsum), empty (rows == 0), NULL required pointers, overlaps (the
// sets of elements touched; only dx == dy and dx == dsum exactly may share one).
nk_status Expected(const Call& c) {
  if (c.cols == 0) return NK_ERR_INVALID_SHAPE;
  for (int a : {kX, kDy, kDsum, kDx}) {
    if ((a != kDsum || c.given[kDsum]) && c.ld[a] < c.cols) return NK_ERR_INVALID_SHAPE;
  }
  if (c.rows == 0) return NK_OK;
  for (int a : {kX, kDy, kMean, kRstd, kDx}) {
    if (!c.given[a] && (a != kMean || c.center)) return NK_ERR_NULL_POINTER;
  }
  for (int a = 0; a < kArgs; ++a) {
    for (int b = a + 1; b < kArgs; ++b) {
      if (!Output(a) && !Output(b)) continue;
      const std::vector<Call::Run> ra = c.Runs(a), rb = c.Runs(b);
      bool shared = false;
      for (const Call::Run& u : ra) {
        for (const Call::Run& v : rb) shared |= u.begin < v.end && v.begin < u.end;
      }
      if (!shared) continue;
      const bool pair = b == kDx && (a == kDy || a == kDsum);  // may be the same
      const auto same = [](const Call::Run& u, const Call::Run& v) {
        return u.begin == v.begin && u.end == v.end;
      };
      if (!pair || !std::equal(ra.begin(), ra.end(), rb.begin(), rb.end(), same)) {
        return NK_ERR_OVERLAP;
      }
    }
  }
  return NK_OK;
}

nk_status Invoke(const Call& c, float* arena) {
  const auto in = [&](int a) -> const float* {
    return c.given[a] ? arena + c.at[a] : nullptr;
  };
  const auto out = [&](int a) { return c.given[a] ? arena + c.at[a] : nullptr; };
  const size_t r = c.rows, n = c.cols;
  const size_t* ld = c.ld;
  if (!c.strided) {
    switch (c.op) {
      case 0:
        return nk_layernorm_backward_f32(r, n, in(kX), in(kDy), in(kMean), in(kRstd),
                                         in(kGamma), out(kDx), out(kDgamma), out(kDbeta));
      case 1:
        return nk_rmsnorm_backward_f32(r, n, in(kX), in(kDy), in(kRstd), in(kGamma),
                                       out(kDx), out(kDgamma));
      case 2:
        return nk_add_layernorm_backward_f32(r, n, in(kX), in(kDy), in(kDsum), in(kMean),
                                             in(kRstd), in(kGamma), out(kDx),
                                             out(kDgamma), out(kDbeta));
      default:
        return nk_add_rmsnorm_backward_f32(r, n, in(kX), in(kDy), in(kDsum), in(kRstd),
                                           in(kGamma), out(kDx), out(kDgamma));
    }
  }
  switch (c.op) {
    case 0:
      return nk_layernorm_backward_strided_f32(r, n, in(kX), ld[kX], in(kDy), ld[kDy],
                                               in(kMean), in(kRstd), in(kGamma), out(kDx),
                                               ld[kDx], out(kDgamma), out(kDbeta));
    case 1:
      return nk_rmsnorm_backward_strided_f32(r, n, in(kX), ld[kX], in(kDy), ld[kDy],
                                             in(kRstd), in(kGamma), out(kDx), ld[kDx],
                                             out(kDgamma));
    case 2:
      return nk_add_layernorm_backward_strided_f32(
          r, n, in(kX), ld[kX], in(kDy), ld[kDy], in(kDsum), ld[kDsum], in(kMean),
          in(kRstd), in(kGamma), out(kDx), ld[kDx], out(kDgamma), out(kDbeta));
    default:
      return nk_add_rmsnorm_backward_strided_f32(
          r, n, in(kX), ld[kX], in(kDy), ld[kDy], in(kDsum), ld[kDsum], in(kRstd),
          in(kGamma), out(kDx), ld[kDx], out(kDgamma));
  }
}

// Whether the bound is meaningful on a row: it counts roundings, not overflow and
// underflow. Every value the kernel forms stays below FLT_MAX / 16 (with room for its
// sums), and every rounded product whose error later scales (a = gamma * dy, x_hat,
// a * x_hat and dy * x_hat in the sums, mean(a), mean(a * x_hat) and rstd times it) is
// 0 or at least 2^-122: a subnormal's absolute error (2^-150) times rstd or dy would
// exceed the bound's relative terms and its 1e-30.
bool RowInRange(bool center, size_t n, const float* x, const float* dy, const float* dsum,
                float mean, float rstd, const float* gamma) {
  const long double lo = 0x1p-122L, hi = FLT_MAX / 16.0L;
  const auto small = [&](long double v) { return std::fabs(v) <= hi; };
  const auto product = [&](long double v) {
    return v == 0 || (std::fabs(v) >= lo && std::fabs(v) <= hi);
  };
  if (!std::isfinite(mean) || !std::isfinite(rstd)) return false;
  const long double m = center ? mean : 0.0L, r = rstd;
  std::vector<long double> xhat(n);
  long double sum_a = 0, sum_axh = 0, abs_a = 0, abs_axh = 0, abs_dy = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = gamma ? gamma[i] : 1.0f, ds = dsum ? dsum[i] : 0.0f;
    if (!std::isfinite(x[i]) || !std::isfinite(dy[i]) || !std::isfinite(g) ||
        !std::isfinite(ds)) {
      return false;
    }
    xhat[i] = (x[i] - m) * r;
    const long double a = static_cast<long double>(g) * dy[i];
    if (!small(x[i] - m) || !product(xhat[i]) || !product(a) || !product(a * xhat[i]) ||
        !product(dy[i] * xhat[i]) || !small(r * a) || !small(ds)) {
      return false;
    }
    sum_a += a;
    sum_axh += a * xhat[i];
    abs_a += std::fabs(a);
    abs_axh += std::fabs(a * xhat[i]);
    abs_dy += std::fabs(dy[i]);
  }
  const long double mean_a = center ? sum_a / n : 0.0L, mean_axh = sum_axh / n;
  if (!small(abs_a) || !small(abs_axh) || !small(abs_dy) || !product(mean_a) ||
      !product(mean_axh) || !small(r * abs_a) || !product(r * mean_axh)) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!small(xhat[i] * r * mean_axh)) return false;
  }
  return true;
}

[[noreturn]] void FailRow(const Call& c, size_t row, const float* x, const float* dy,
                          const float* dsum, const float* gamma, float mean, float rstd,
                          const char* what) {
  std::fprintf(stderr, "%s rows %zu cols %zu, isa %s; row %zu, mean %.9g rstd %.9g\n"
               "  (x, dy, dsum, gamma):\n", c.Name().c_str(), c.rows, c.cols,
               nk_get_isa(), row, mean, rstd);
  for (size_t k = 0; k < c.cols; ++k) {
    std::fprintf(stderr, "  %.9g %.9g %.9g %.9g\n", x[k], dy[k], dsum ? dsum[k] : 0.0f,
                 gamma ? gamma[k] : 1.0f);
  }
  Fail(what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Call c;
  c.op = p.ConsumeIntegralInRange<int>(0, 3);
  c.center = c.op == 0 || c.op == 2;
  c.fused = c.op >= 2;
  c.rows = p.ConsumeIntegralInRange<size_t>(0, 9);  // 3 parts of 4 rows for dgamma
  c.cols = p.ConsumeIntegralInRange<size_t>(0, 300);
  const size_t rows = c.rows, cols = c.cols, n = rows * cols;
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_rowgrad");
  for (int a = 0; a < kArgs; ++a) c.given[a] = true;
  c.given[kMean] = c.center;
  c.given[kDbeta] = c.center && p.ConsumeBool();
  c.given[kDgamma] = p.ConsumeBool();
  c.given[kGamma] = p.ConsumeBool();
  c.given[kDsum] = c.fused && p.ConsumeBool();
  const int required[] = {kX, kDy, kMean, kRstd, kDx};
  const int null_arg = p.ConsumeIntegralInRange<int>(0, 47);  // one of five, 1 in 10
  if (null_arg < 5) c.given[required[null_arg]] = false;

  // Row strides: cols, a few more, or a whole row more (rows that interleave); one
  // below cols for one tensor now and then (refused; ldds only with dsum).
  c.strided = p.ConsumeBool();
  for (int a = kX; a <= kDx; ++a) {
    const size_t extra[] = {0, 0, 1, 3, 5, cols, cols + 1};
    c.ld[a] = cols + (c.strided ? extra[p.ConsumeIntegralInRange<int>(0, 6)] : 0);
  }
  if (c.strided && cols > 0 && p.ConsumeIntegralInRange<int>(0, 7) == 0) {
    c.ld[p.ConsumeIntegralInRange<int>(kX, kDx)] = cols - 1;
  }
  // Up to two moves of an argument onto another (from the pairs worth trying first, or
  // any), by a fuzzed number of elements; rows of both row-major ones may share a stride.
  struct Move {
    int to, onto;
    long delta;
  } moves[2];
  const int nmoves = p.ConsumeIntegralInRange<int>(0, 2);
  const long lcols = static_cast<long>(cols);
  for (int k = 0; k < nmoves; ++k) {
    Move& m = moves[k];
    const int grad = p.ConsumeBool() ? kDgamma : kDbeta;
    switch (p.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: m = {kDx, kDy, 0}; break;
      case 1: m = {kDx, kDsum, 0}; break;
      case 2: m = {kDx, kX, 0}; break;
      case 3: m = {grad, kDx, 0}; break;       // dgamma / dbeta inside dx
      case 4: m = {kDgamma, kDbeta, 0}; break;
      case 5: m = {grad, p.ConsumeIntegralInRange<int>(kX, kGamma), 0}; break;  // input
      case 6: m = {p.ConsumeBool() ? kMean : kRstd, kDx, 0}; break;  // stats inside dx
      default:
        m.to = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
        m.onto = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
        break;
    }
    switch (p.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: m.delta = 1; break;
      case 1: m.delta = -1; break;
      case 2: m.delta = lcols; break;
      case 3: m.delta = -lcols; break;
      case 4: m.delta = p.ConsumeIntegralInRange<long>(-3 * lcols, 3 * lcols); break;
      default: m.delta = 0; break;
    }
    if (RowMajor(m.to) && RowMajor(m.onto) && p.ConsumeBool()) c.ld[m.to] = c.ld[m.onto];
  }

  // One arena: each argument in a slot of its own at a small offset, with a slot's
  // room before the first and after the last, so that a move stays inside.
  size_t extent = rows > cols ? rows : cols;
  for (int a = kX; a <= kDx; ++a) {
    const size_t e = rows == 0 ? 0 : (rows - 1) * c.ld[a] + cols;
    extent = e > extent ? e : extent;
  }
  const size_t slot = extent + 3 * cols + 8;  // room for a move of 3 * cols
  // NaN-filled (all bits set; by memset: cheaper than a loop under libFuzzer's
  // instrumentation): an output left unwritten fails the bound.
  std::vector<float> arena((kArgs + 2) * slot);
  std::memset(arena.data(), 0xff, arena.size() * sizeof(float));
  for (int a = 0; a < kArgs; ++a) {
    c.at[a] = (a + 1) * slot + p.ConsumeIntegralInRange<size_t>(0, 3);
  }
  for (int k = 0; k < nmoves; ++k) {
    const Move& m = moves[k];
    const long at = static_cast<long>(c.at[m.onto]) + m.delta;
    if (m.to != m.onto && at >= 0) c.at[m.to] = static_cast<size_t>(at);
  }

  // The inputs' values, written in order (where inputs share memory, the later wins),
  // then read back as the call sees them. Statistics: fuzzed, or the forward's (eps
  // 1e-5) of the row as read.
  for (int a : {kX, kDy, kDsum, kGamma}) {
    Filler fill(p);
    c.ForEachElement(a, [&](size_t e) { arena[e] = fill.Next(); });
  }
  const auto read = [&](int a) {
    std::vector<float> v;
    c.ForEachElement(a, [&](size_t e) { v.push_back(arena[e]); });
    return v;
  };
  const bool forward_stats = p.ConsumeBool();
  std::vector<float> x0 = read(kX);
  for (size_t r = 0; r < rows; ++r) {
    float mean = Value(p), rstd = Value(p);
    if (forward_stats && n > 0 && x0.size() == n) {
      const nk_test::RowRef ref = nk_test::ReferenceRow(c.center, cols, &x0[r * cols],
                                                        nullptr, nullptr, nullptr, 1e-5f);
      mean = static_cast<float>(ref.mean);
      rstd = static_cast<float>(ref.rstd);
    }
    if (c.given[kMean]) arena[c.at[kMean] + r] = mean;
    if (c.given[kRstd]) arena[c.at[kRstd] + r] = rstd;
  }
  x0 = read(kX);
  const std::vector<float> dy0 = read(kDy), dsum0 = read(kDsum), gamma0 = read(kGamma),
                           mean0 = read(kMean), rstd0 = read(kRstd);

  const nk_status want = Expected(c);
  const std::vector<float> before(arena);
  const nk_status got = Invoke(c, arena.data());
  const std::string name = c.Name();
  if (got != want) {
    std::fprintf(stderr, "%s rows %zu cols %zu ld (x dy dsum dx) %zu %zu %zu %zu, "
                 "moves %d: status %d, expected %d: %s\n", name.c_str(), rows, cols,
                 c.ld[kX], c.ld[kDy], c.ld[kDsum], c.ld[kDx], nmoves, got, want,
                 nk_last_error());
    for (int a = 0; a < kArgs; ++a) {
      std::fprintf(stderr, "  %s %s at %zu\n", kArgName[a],
                   c.given[a] ? "given" : "NULL", c.at[a]);
    }
    Fail("status differs from the c-abi.md rules");
  }
  if (got != NK_OK && std::strncmp(nk_last_error(), (name + ": ").c_str(),
                                   name.size() + 2) != 0) {
    std::fprintf(stderr, "%s refused with: %s\n", name.c_str(), nk_last_error());
    Fail("the error message does not name the function");
  }
  if (got != NK_OK || n == 0) {
    if (std::memcmp(before.data(), arena.data(), arena.size() * sizeof(float)) != 0) {
      Fail("a refused or empty call wrote memory");
    }
    return 0;
  }
  // Accepted: nothing written but dx, dgamma and dbeta (nor between dx's rows).
  std::vector<float> rest(arena);  // the arena with the outputs' elements as before
  for (int a : {kDx, kDgamma, kDbeta}) {
    c.ForEachElement(a, [&](size_t e) { rest[e] = before[e]; });
  }
  if (std::memcmp(before.data(), rest.data(), rest.size() * sizeof(float)) != 0) {
    size_t e = 0;
    while (std::memcmp(&before[e], &rest[e], sizeof(float)) == 0) ++e;
    std::fprintf(stderr, "%s rows %zu cols %zu lddx %zu: arena[%zu] written\n",
                 name.c_str(), rows, cols, c.ld[kDx], e);
    Fail("an accepted call wrote outside its outputs");
  }

  // Rows in range meet the bound on dx; dgamma and dbeta where every row is in range.
  const float* dx = arena.data() + c.at[kDx];
  const float* g = c.given[kGamma] ? gamma0.data() : nullptr;
  std::vector<long double> dg(cols, 0), dg_abs(cols, 0), db(cols, 0), db_abs(cols, 0);
  bool all_rows = true;
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = &x0[r * cols];
    const float* dyr = &dy0[r * cols];
    const float* dsr = c.given[kDsum] ? &dsum0[r * cols] : nullptr;
    const float mean = c.center ? mean0[r] : 0.0f, rstd = rstd0[r];
    if (!RowInRange(c.center, cols, xr, dyr, dsr, mean, rstd, g)) {
      all_rows = false;
      continue;
    }
    const nk_test::RowGradRef ref =
        nk_test::ReferenceRowGrad(c.center, cols, xr, dyr, dsr, mean, rstd, g);
    for (size_t i = 0; i < cols; ++i) {
      dg[i] += ref.dgamma_term[i];
      dg_abs[i] += std::fabs(ref.dgamma_term[i]);
      db[i] += dyr[i];
      db_abs[i] += std::fabs(dyr[i]);
      // A result at the edge of the fp32 range (a huge dsum) may round to an infinity.
      if (std::fabs(ref.dx[i]) + ref.dx_bound[i] >= FLT_MAX) continue;
      const float got_dx = dx[r * c.ld[kDx] + i];
      if (!nk_test::Meets(got_dx, ref.dx[i], ref.dx_bound[i])) {
        std::fprintf(stderr, "dx row %zu col %zu: %.9g, reference %.12Lg, bound %.3Lg\n",
                     r, i, got_dx, ref.dx[i], ref.dx_bound[i]);
        FailRow(c, r, xr, dyr, dsr, g, mean, rstd, "dx outside the bound");
      }
    }
  }
  if (!all_rows) return 0;
  for (size_t i = 0; i < cols; ++i) {
    const long double bounds[2] = {nk_test::BoundDgamma(rows, dg_abs[i]),
                                   nk_test::BoundDbeta(rows, db_abs[i])};
    const long double wants[2] = {dg[i], db[i]};
    for (int k = 0; k < 2; ++k) {
      const int a = k == 0 ? kDgamma : kDbeta;
      if (!c.given[a]) continue;
      const float v = arena[c.at[a] + i];
      if (!nk_test::Meets(v, wants[k], bounds[k])) {
        std::fprintf(stderr, "%s rows %zu cols %zu, isa %s: %s[%zu] %.9g, reference "
                     "%.12Lg, bound %.3Lg\n", name.c_str(), rows, cols, nk_get_isa(),
                     kArgName[a], i, v, wants[k], bounds[k]);
        Fail("dgamma or dbeta outside the bound");
      }
    }
  }
  return 0;
}
