// SPDX-License-Identifier: Apache-2.0
// rownorm_case.h: runs one LayerNorm-family call (any of the four forwards, with any
// optional argument, alignment and aliasing) and checks every output against the
// long-double reference within the design.md bound.
#ifndef NK_TESTS_ROWNORM_CASE_H_
#define NK_TESTS_ROWNORM_CASE_H_

#include <functional>
#include <sstream>
#include <string>

#include "reference.h"
#include "test_util.h"

namespace nk_test {

enum class Op { kLayerNorm, kRmsNorm, kAddLayerNorm, kAddRmsNorm };

inline const char* OpName(Op op) {
  switch (op) {
    case Op::kLayerNorm: return "layernorm";
    case Op::kRmsNorm: return "rmsnorm";
    case Op::kAddLayerNorm: return "add_layernorm";
    case Op::kAddRmsNorm: return "add_rmsnorm";
  }
  return "?";
}
inline bool Centered(Op op) { return op == Op::kLayerNorm || op == Op::kAddLayerNorm; }
inline bool Fused(Op op) { return op == Op::kAddLayerNorm || op == Op::kAddRmsNorm; }

constexpr Op kAllOps[] = {Op::kLayerNorm, Op::kRmsNorm, Op::kAddLayerNorm,
                          Op::kAddRmsNorm};

// Which outputs share memory with which inputs.
enum class Alias {
  kNone,         // separate buffers
  kYIsX,         // y == x
  kSumXYRes,     // fused: sum == x, y == residual
  kSumResYX,     // fused: sum == residual, y == x
  kNoSum,        // fused: sum == NULL
};

struct Case {
  Op op = Op::kLayerNorm;
  size_t rows = 1, cols = 1;
  bool gamma = true, beta = true;
  bool stats = true;  // mean / rstd wanted
  size_t misalign = 0;
  Alias alias = Alias::kNone;
  float eps = 1e-5f;
  // Fills x and (fused) residual; default: N(0, 1) and N(0, 0.5).
  std::function<void(Buffer& x, Buffer& residual)> fill;

  std::string Describe() const {
    std::ostringstream os;
    os << OpName(op) << " rows=" << rows << " cols=" << cols << " gamma=" << gamma
       << " beta=" << beta << " stats=" << stats << " misalign=" << misalign
       << " alias=" << static_cast<int>(alias) << " eps=" << eps
       << " isa=" << nk_get_isa() << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

// The outputs of one call.
struct Outputs {
  Buffer y, sum, mean, rstd;
  Outputs(size_t n, size_t rows, size_t misalign)
      : y(n, misalign), sum(n, misalign), mean(rows, misalign), rstd(rows, misalign) {}
};

// Operands of the four forwards from seeds salt .. salt + 3: x ~ N(3, 2), residual ~
// N(0, 0.5), gamma ~ N(1, 0.25), beta ~ N(0, 0.5).
inline void FillOperands(Buffer& x, Buffer& res, Buffer& gamma, Buffer& beta,
                         size_t salt) {
  FillNormal(x, Seed(salt), 3.0f, 2.0f);
  FillNormal(res, Seed(salt + 1), 0.0f, 0.5f);
  FillNormal(gamma, Seed(salt + 2), 1.0f, 0.25f);
  FillNormal(beta, Seed(salt + 3), 0.0f, 0.5f);
}

inline nk_status CallOp(Op op, size_t rows, size_t cols, const float* x,
                        const float* res, const float* gamma, const float* beta,
                        float eps, float* sum, float* y, float* mean, float* rstd) {
  switch (op) {
    case Op::kLayerNorm:
      return nk_layernorm_forward_f32(rows, cols, x, gamma, beta, eps, y, mean, rstd);
    case Op::kRmsNorm:
      return nk_rmsnorm_forward_f32(rows, cols, x, gamma, eps, y, rstd);
    case Op::kAddLayerNorm:
      return nk_add_layernorm_forward_f32(rows, cols, x, res, gamma, beta, eps, sum, y,
                                          mean, rstd);
    case Op::kAddRmsNorm:
      return nk_add_rmsnorm_forward_f32(rows, cols, x, res, gamma, eps, sum, y, rstd);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

// The outputs as the caller sees them after the call (aliases resolved).
struct Result {
  std::vector<float> y, sum, mean, rstd;
};

// A call's operands, drawn from the case's seed (then c.fill): drawn once, they serve
// several calls (the thread-count tests).
struct Inputs {
  Buffer x, res, gamma, beta;
  explicit Inputs(const Case& c)
      : x(c.rows * c.cols), res(c.rows * c.cols), gamma(c.cols), beta(c.cols) {
    const uint32_t seed = Seed(c.rows * 1000003 + c.cols);
    FillNormal(x, seed);
    if (Fused(c.op)) FillNormal(res, seed + 1, 0.0f, 0.5f);
    FillNormal(gamma, seed + 2, 1.0f, 0.25f);
    FillNormal(beta, seed + 3, 0.0f, 0.5f);
    if (c.fill) c.fill(x, res);
  }
};

// Runs the case on copies of `in` at the case's alignment.
inline Result RunCase(const Case& c, const Inputs& in) {
  const size_t n = c.rows * c.cols;
  const bool fused = Fused(c.op);
  Buffer x(n, c.misalign), res(n, c.misalign), gamma(c.cols, c.misalign),
      beta(c.cols, c.misalign);
  x.CopyFrom(in.x);
  res.CopyFrom(in.res);
  gamma.CopyFrom(in.gamma);
  beta.CopyFrom(in.beta);

  Outputs out(n, c.rows, c.misalign);  // NaN-filled: a missed write shows
  float* y = out.y.data();
  float* sum = fused ? out.sum.data() : nullptr;
  switch (c.alias) {
    case Alias::kNone: break;
    case Alias::kYIsX: y = x.data(); break;
    case Alias::kSumXYRes: sum = x.data(); y = res.data(); break;
    case Alias::kSumResYX: sum = res.data(); y = x.data(); break;
    case Alias::kNoSum: sum = nullptr; break;
  }
  const nk_status s = CallOp(c.op, c.rows, c.cols, x.data(), fused ? res.data() : nullptr,
                             c.gamma ? gamma.data() : nullptr,
                             c.beta ? beta.data() : nullptr, c.eps, sum, y,
                             c.stats ? out.mean.data() : nullptr,
                             c.stats ? out.rstd.data() : nullptr);
  EXPECT_EQ(s, NK_OK) << nk_last_error();
  Result r;
  r.y.assign(y, y + n);
  if (sum) r.sum.assign(sum, sum + n);
  if (c.stats) {
    r.mean.assign(out.mean.data(), out.mean.data() + c.rows);
    r.rstd.assign(out.rstd.data(), out.rstd.data() + c.rows);
  }
  return r;
}

inline Result RunCase(const Case& c) { return RunCase(c, Inputs(c)); }

// Runs the case and checks it against the reference; returns the worst
// error / bound ratio of y (for reports), or -1 on a failure.
inline double CheckCase(const Case& c) {
  SCOPED_TRACE(c.Describe());
  const Inputs in(c);
  const Result r = RunCase(c, in);
  const Buffer &x = in.x, &res = in.res, &gamma = in.gamma, &beta = in.beta;
  const bool fused = Fused(c.op);
  const bool center = Centered(c.op);
  const bool use_beta = c.beta && center;
  double worst = 0;
  int failures = 0;
  for (size_t row = 0; row < c.rows && failures < 5; ++row) {
    const size_t off = row * c.cols;
    const RowRef ref = ReferenceRow(center, c.cols, x.data() + off,
                                    fused ? res.data() + off : nullptr,
                                    c.gamma ? gamma.data() : nullptr,
                                    use_beta ? beta.data() : nullptr, c.eps);
    if (!r.sum.empty()) {
      for (size_t i = 0; i < c.cols; ++i) {
        const float want = x[off + i] + res[off + i];
        if (!SameBits(r.sum[off + i], want) && !(std::isnan(want) && std::isnan(r.sum[off + i]))) {
          ADD_FAILURE() << "sum row " << row << " col " << i << ": " << r.sum[off + i]
                        << " != " << want;
          ++failures;
          break;
        }
      }
    }
    if (c.stats) {
      if (center && !MeetsStat(r.mean[row], ref.mean, BoundMean(c.cols, ref))) {
        ADD_FAILURE() << "mean row " << row << ": got " << r.mean[row] << " want "
                      << static_cast<double>(ref.mean) << " bound "
                      << static_cast<double>(BoundMean(c.cols, ref));
        ++failures;
      }
      if (!MeetsStat(r.rstd[row], ref.rstd, BoundRstd(c.cols, ref))) {
        ADD_FAILURE() << "rstd row " << row << ": got " << r.rstd[row] << " want "
                      << static_cast<double>(ref.rstd) << " bound "
                      << static_cast<double>(BoundRstd(c.cols, ref));
        ++failures;
      }
    }
    for (size_t i = 0; i < c.cols; ++i) {
      const float g = c.gamma ? gamma[i] : 1.0f;
      const float b = use_beta ? beta[i] : 0.0f;
      const long double bound = BoundY(c.cols, ref, i, g, b);
      const float got = r.y[off + i];
      if (!Meets(got, ref.y[i], bound)) {
        ADD_FAILURE() << "y row " << row << " col " << i << ": got " << got << " want "
                      << static_cast<double>(ref.y[i]) << " bound "
                      << static_cast<double>(bound);
        if (++failures >= 5) break;
        continue;
      }
      const double want = static_cast<double>(ref.y[i]);  // a ratio for reports
      if (std::isfinite(want)) {
        worst = std::max(worst, std::fabs(got - want) / static_cast<double>(bound));
      }
    }
  }
  return failures ? -1 : worst;
}

}  // namespace nk_test

#endif  // NK_TESTS_ROWNORM_CASE_H_
