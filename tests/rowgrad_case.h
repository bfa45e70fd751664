// SPDX-License-Identifier: Apache-2.0
// rowgrad_case.h: runs one LayerNorm-family backward call (any of the four, with any
// optional argument, alignment and aliasing) and checks dx, dgamma and dbeta against
// the long-double reference within the design.md bound.
#ifndef NK_TESTS_ROWGRAD_CASE_H_
#define NK_TESTS_ROWGRAD_CASE_H_

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"
#include "rownorm_case.h"
#include "test_util.h"

namespace nk_test {

// Which output shares memory with which input.
enum class GradAlias { kNone, kDxIsDy, kDxIsDsum };

struct GradCase {
  Op op = Op::kLayerNorm;
  size_t rows = 1, cols = 1;
  bool gamma = true;
  bool dgamma = true, dbeta = true;  // wanted
  bool dsum = true;                  // fused forms: given
  size_t misalign = 0;
  GradAlias alias = GradAlias::kNone;
  // Fills x (the fused forms' sum) and dy; default: N(0, 1) both.
  std::function<void(Buffer& x, Buffer& dy)> fill;

  std::string Describe() const {
    std::ostringstream os;
    os << OpName(op) << " backward rows=" << rows << " cols=" << cols
       << " gamma=" << gamma << " dgamma=" << dgamma << " dbeta=" << dbeta
       << " dsum=" << dsum << " misalign=" << misalign
       << " alias=" << static_cast<int>(alias) << " isa=" << nk_get_isa()
       << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

inline nk_status CallGrad(Op op, size_t rows, size_t cols, const float* x,
                          const float* dy, const float* dsum, const float* mean,
                          const float* rstd, const float* gamma, float* dx,
                          float* dgamma, float* dbeta) {
  switch (op) {
    case Op::kLayerNorm:
      return nk_layernorm_backward_f32(rows, cols, x, dy, mean, rstd, gamma, dx, dgamma,
                                       dbeta);
    case Op::kRmsNorm:
      return nk_rmsnorm_backward_f32(rows, cols, x, dy, rstd, gamma, dx, dgamma);
    case Op::kAddLayerNorm:
      return nk_add_layernorm_backward_f32(rows, cols, x, dy, dsum, mean, rstd, gamma,
                                           dx, dgamma, dbeta);
    case Op::kAddRmsNorm:
      return nk_add_rmsnorm_backward_f32(rows, cols, x, dy, dsum, rstd, gamma, dx,
                                         dgamma);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

// The saved statistics a forward would give, from the long-double reference rounded
// to fp32 (the backward takes them as exact).
inline void SavedStats(bool center, size_t rows, size_t cols, const float* x,
                       float* mean, float* rstd) {
  for (size_t r = 0; r < rows; ++r) {
    const RowRef ref = ReferenceRow(center, cols, x + r * cols, nullptr, nullptr,
                                    nullptr, 1e-5f);
    mean[r] = static_cast<float>(ref.mean);
    rstd[r] = static_cast<float>(ref.rstd);
  }
}

// A backward call's inputs and what the caller sees after it (aliases resolved).
struct GradRun {
  std::vector<float> x, dy, dsum, gamma, mean, rstd;  // inputs
  std::vector<float> dx, dgamma, dbeta;                // outputs (empty: not wanted)
};

// A backward call's inputs, drawn from the case's seed (then c.fill): drawn once,
// they serve several calls (the thread-count tests, where drawing them for each call
// took most of the time under qemu).
struct GradInputs {
  Buffer x, dy, dsum, gamma, mean, rstd;
  explicit GradInputs(const GradCase& c)
      : x(c.rows * c.cols),
        dy(c.rows * c.cols),
        dsum(c.rows * c.cols),
        gamma(c.cols),
        mean(c.rows),
        rstd(c.rows) {
    const uint32_t seed = Seed(c.rows * 1000033 + c.cols + 7);
    FillNormal(x, seed);
    FillNormal(dy, seed + 1);
    FillNormal(dsum, seed + 2, 0.0f, 0.5f);
    FillNormal(gamma, seed + 3, 1.0f, 0.25f);
    if (c.fill) c.fill(x, dy);
    SavedStats(Centered(c.op), c.rows, c.cols, x.data(), mean.data(), rstd.data());
  }
};

// Runs the case on copies of `in` at the case's alignment.
inline GradRun RunGradCase(const GradCase& c, const GradInputs& in) {
  const size_t n = c.rows * c.cols;
  const bool fused = Fused(c.op);
  const bool center = Centered(c.op);
  const bool has_dsum = fused && c.dsum;
  const bool has_dbeta = c.dbeta && center;
  Buffer x(n, c.misalign), dy(n, c.misalign), dsum(n, c.misalign),
      gamma(c.cols, c.misalign), mean(c.rows, c.misalign), rstd(c.rows, c.misalign);
  x.CopyFrom(in.x);
  dy.CopyFrom(in.dy);
  dsum.CopyFrom(in.dsum);
  gamma.CopyFrom(in.gamma);
  mean.CopyFrom(in.mean);
  rstd.CopyFrom(in.rstd);
  GradRun run;
  run.x.assign(x.data(), x.data() + n);
  run.dy.assign(dy.data(), dy.data() + n);
  if (has_dsum) run.dsum.assign(dsum.data(), dsum.data() + n);
  if (c.gamma) run.gamma.assign(gamma.data(), gamma.data() + c.cols);
  run.mean.assign(mean.data(), mean.data() + c.rows);
  run.rstd.assign(rstd.data(), rstd.data() + c.rows);

  // NaN-filled: a missed write shows.
  Buffer dx(n, c.misalign), dgamma(c.cols, c.misalign), dbeta(c.cols, c.misalign);
  float* dx_p = dx.data();
  if (c.alias == GradAlias::kDxIsDy) dx_p = dy.data();
  if (c.alias == GradAlias::kDxIsDsum) dx_p = dsum.data();
  const nk_status s =
      CallGrad(c.op, c.rows, c.cols, x.data(), dy.data(), has_dsum ? dsum.data() : nullptr,
               mean.data(), rstd.data(), c.gamma ? gamma.data() : nullptr, dx_p,
               c.dgamma ? dgamma.data() : nullptr, has_dbeta ? dbeta.data() : nullptr);
  EXPECT_EQ(s, NK_OK) << nk_last_error();
  run.dx.assign(dx_p, dx_p + n);
  if (c.dgamma) run.dgamma.assign(dgamma.data(), dgamma.data() + c.cols);
  if (has_dbeta) run.dbeta.assign(dbeta.data(), dbeta.data() + c.cols);
  return run;
}

inline GradRun RunGradCase(const GradCase& c) { return RunGradCase(c, GradInputs(c)); }

// Checks dx of every row and dgamma / dbeta of every column against the reference
// (rows listed in `skip_rows` are left out of dx's check and make the parameter
// gradients unchecked); returns the run.
inline GradRun CheckGradCase(const GradCase& c, const std::vector<size_t>& skip_rows = {}) {
  SCOPED_TRACE(c.Describe());
  const GradRun run = RunGradCase(c);
  const bool center = Centered(c.op);
  const size_t cols = c.cols;
  std::vector<long double> dg(cols, 0), dg_abs(cols, 0), db(cols, 0), db_abs(cols, 0);
  int failures = 0;
  for (size_t row = 0; row < c.rows; ++row) {
    const size_t off = row * cols;
    const RowGradRef ref = ReferenceRowGrad(
        center, cols, run.x.data() + off, run.dy.data() + off,
        run.dsum.empty() ? nullptr : run.dsum.data() + off, run.mean[row], run.rstd[row],
        run.gamma.empty() ? nullptr : run.gamma.data());
    for (size_t i = 0; i < cols; ++i) {
      dg[i] += ref.dgamma_term[i];
      dg_abs[i] += std::fabs(ref.dgamma_term[i]);
      db[i] += run.dy[off + i];
      db_abs[i] += std::fabs(run.dy[off + i]);
    }
    bool skip = false;
    for (size_t s : skip_rows) skip = skip || s == row;
    if (skip) continue;
    for (size_t i = 0; i < cols && failures < 5; ++i) {
      if (!Meets(run.dx[off + i], ref.dx[i], ref.dx_bound[i])) {
        ADD_FAILURE() << "dx row " << row << " col " << i << ": got " << run.dx[off + i]
                      << " want " << static_cast<double>(ref.dx[i]) << " bound "
                      << static_cast<double>(ref.dx_bound[i]);
        ++failures;
      }
    }
  }
  if (!skip_rows.empty()) return run;
  for (size_t i = 0; i < cols && failures < 10; ++i) {
    if (!run.dgamma.empty() &&
        !Meets(run.dgamma[i], dg[i], BoundDgamma(c.rows, dg_abs[i]))) {
      ADD_FAILURE() << "dgamma col " << i << ": got " << run.dgamma[i] << " want "
                    << static_cast<double>(dg[i]) << " bound "
                    << static_cast<double>(BoundDgamma(c.rows, dg_abs[i]));
      ++failures;
    }
    if (!run.dbeta.empty() && !Meets(run.dbeta[i], db[i], BoundDbeta(c.rows, db_abs[i]))) {
      ADD_FAILURE() << "dbeta col " << i << ": got " << run.dbeta[i] << " want "
                    << static_cast<double>(db[i]) << " bound "
                    << static_cast<double>(BoundDbeta(c.rows, db_abs[i]));
      ++failures;
    }
  }
  return run;
}

}  // namespace nk_test

#endif  // NK_TESTS_ROWGRAD_CASE_H_
