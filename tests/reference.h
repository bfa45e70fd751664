// SPDX-License-Identifier: Apache-2.0
// reference.h: the scalar long-double oracle of the LayerNorm family and the
// accuracy bound of design.md. Shares no code with the kernels.
#ifndef NK_TESTS_REFERENCE_H_
#define NK_TESTS_REFERENCE_H_

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace nk_test {

// What one row normalization should give, in long double.
struct RowRef {
  std::vector<long double> y, xhat;
  long double mean = 0, rstd = 0;
  long double max_abs = 0;  // M of the bound
};

// s = x (+ residual, rounded to fp32 as the kernels store it), then LayerNorm
// (center) or RMSNorm of s with gamma / beta (nullptr = ones / zeros).
inline RowRef ReferenceRow(bool center, size_t cols, const float* x,
                           const float* residual, const float* gamma,
                           const float* beta, float eps) {
  RowRef r;
  std::vector<long double> s(cols);
  float max_abs = 0;  // exact in fp32: the elements are fp32 values
  for (size_t i = 0; i < cols; ++i) {
    const float si = residual ? x[i] + residual[i] : x[i];
    s[i] = si;
    max_abs = std::fmax(max_abs, std::fabs(si));
    if (std::isnan(si)) max_abs = NAN;
  }
  r.max_abs = max_abs;
  long double mean = 0;
  if (center) {
    for (size_t i = 0; i < cols; ++i) mean += s[i];
    mean /= cols;
  }
  long double var = 0;
  r.xhat.resize(cols);
  for (size_t i = 0; i < cols; ++i) {
    r.xhat[i] = s[i] - mean;
    var += r.xhat[i] * r.xhat[i];
  }
  var /= cols;
  // The kernels add eps in fp32 to an fp32 variance; the reference does it exactly.
  r.mean = mean;
  r.rstd = 1.0L / std::sqrt(var + static_cast<long double>(eps));
  r.y.resize(cols);
  for (size_t i = 0; i < cols; ++i) {
    r.xhat[i] *= r.rstd;
    r.y[i] = r.xhat[i] * (gamma ? gamma[i] : 1.0L) + (beta ? beta[i] : 0.0L);
  }
  return r;
}

constexpr long double kU = 1.0L / (1 << 24);  // fp32 unit roundoff

// ceil(log2(n)), at least 1: the bit width of n - 1 (called once per element checked,
// where long double's log2 cost a tenth of the 32 MiB tests' time).
inline long double Lg(size_t n) {
  return n <= 2 ? 1 : 64 - __builtin_clzll(static_cast<unsigned long long>(n - 1));
}

// design.md, Numerics: the bound on each output element. In double: a bound needs no
// more digits, and where long double is software quad precision (aarch64, and under
// qemu ~120 ns an operation against ~12 for double) its arithmetic was most of the
// checks' time.
inline double BoundY(size_t n, const RowRef& r, size_t i, float gamma, float beta) {
  const double u = static_cast<double>(kU);
  const double mr = static_cast<double>(r.max_abs * r.rstd);
  return 4 * u * static_cast<double>(Lg(n)) * std::fabs(gamma) *
             (mr + std::fabs(static_cast<double>(r.xhat[i]))) +
         3 * u * (std::fabs(static_cast<double>(r.y[i])) + std::fabs(beta)) + 1e-30;
}
inline long double BoundMean(size_t n, const RowRef& r) {
  return 4 * kU * Lg(n) * r.max_abs;
}
inline long double BoundRstd(size_t n, const RowRef& r) {
  const long double mr = r.max_abs * r.rstd;
  return 4 * kU * Lg(n) * (1 + mr * mr) * r.rstd;
}

// A variance-valued output (M2 / count, running_var), from the rstd bound: var + eps
// is 1 / rstd^2, so its relative error is twice rstd's, i.e.
// |var - var_ref| <= 8 u lg (var + eps + M^2).
inline long double BoundVar(size_t n, const RowRef& r) {
  return 8 * kU * Lg(n) * (1 / (r.rstd * r.rstd) + r.max_abs * r.max_abs);
}

// Whether `got` meets `want` within `bound`; a non-finite `want` needs the same
// class (NaN for NaN, the same infinity for an infinity). In a row holding a NaN or
// an infinity the bound is meaningless (NaN): a finite `want` is then met exactly.
// The difference is taken in double: within 1e-16 of want's own, against a bound of at
// least 3 u |want|.
inline bool Meets(float got, long double want, long double bound) {
  if (std::isnan(bound))
    return std::isfinite(want) ? got == want : Meets(got, want, 0.0L);
  const double w = static_cast<double>(want);
  if (std::isnan(w)) return std::isnan(got);
  if (std::isinf(w)) return got == w;
  return std::isfinite(got) && std::fabs(got - w) <= static_cast<double>(bound);
}

// The same for a statistic: a mean of a row holding an infinity may come out as NaN
// (Welford's x - mean is Inf - Inf) where the plain sum gives the infinity.
inline bool MeetsStat(float got, long double want, long double bound) {
  if (std::isinf(want)) return got == want || std::isnan(got);
  return Meets(got, want, bound);
}

// The forward of one row in long double, y = x_hat * gamma + beta (RMSNorm: center
// false), from long-double inputs: what finite differences of the forward evaluate.
inline std::vector<long double> ForwardLd(bool center, size_t cols, const long double* x,
                                          const long double* gamma,
                                          const long double* beta, long double eps) {
  long double mean = 0, var = 0;
  if (center) {
    for (size_t i = 0; i < cols; ++i) mean += x[i];
    mean /= cols;
  }
  for (size_t i = 0; i < cols; ++i) var += (x[i] - mean) * (x[i] - mean);
  const long double r = 1 / std::sqrt(var / cols + eps);
  std::vector<long double> y(cols);
  for (size_t i = 0; i < cols; ++i) y[i] = (x[i] - mean) * r * gamma[i] + beta[i];
  return y;
}

// What one row's backward should give, in long double (design.md, Numerics: Backward),
// from the saved statistics taken as exact: dx, and the row's terms of dgamma
// (dy * x_hat) and dbeta (dy) with their absolute values for the bounds.
struct RowGradRef {
  std::vector<long double> dx, dx_bound, dgamma_term;
  long double r = 0;
};

// x: the row (the fused forms' sum); mean ignored for RMSNorm (center false); gamma and
// dsum may be nullptr (ones, zeros).
inline RowGradRef ReferenceRowGrad(bool center, size_t n, const float* x, const float* dy,
                                   const float* dsum, float mean, float rstd,
                                   const float* gamma) {
  RowGradRef g;
  const long double m = center ? mean : 0.0L;
  const long double r = rstd;
  std::vector<long double> xhat(n), a(n);
  long double sum_a = 0, sum_axh = 0;
  double abs_a = 0, abs_axh = 0;  // for the bounds only: in double, as BoundY
  for (size_t i = 0; i < n; ++i) {
    xhat[i] = (x[i] - m) * r;
    a[i] = (gamma ? gamma[i] : 1.0L) * dy[i];
    sum_a += a[i];
    const long double axh = a[i] * xhat[i];
    sum_axh += axh;
    abs_a += std::fabs(static_cast<double>(a[i]));
    abs_axh += std::fabs(static_cast<double>(axh));
  }
  const long double mean_a = center ? sum_a / n : 0.0L;
  const long double mean_axh = sum_axh / n;
  g.r = r;
  g.dx.resize(n);
  g.dx_bound.resize(n);
  g.dgamma_term.resize(n);
  const double u = static_cast<double>(kU);
  const double scale = 8 * u * static_cast<double>(Lg(n)) * std::fabs(rstd);
  for (size_t i = 0; i < n; ++i) {
    const float ds = dsum ? dsum[i] : 0.0f;
    g.dx[i] = r * (a[i] - mean_a - xhat[i] * mean_axh) + ds;
    g.dx_bound[i] = scale * (std::fabs(static_cast<double>(a[i])) + abs_a / n +
                             std::fabs(static_cast<double>(xhat[i])) * abs_axh / n) +
                    u * std::fabs(ds) + 1e-30;
    g.dgamma_term[i] = dy[i] * xhat[i];
  }
  return g;
}

// The parameter gradients' bounds over R rows, from the sums of |terms|.
inline long double BoundDgamma(size_t rows, long double abs_sum) {
  return 8 * kU * Lg(rows) * abs_sum + 1e-30L;
}
inline long double BoundDbeta(size_t rows, long double abs_sum) {
  return 4 * kU * Lg(rows) * abs_sum + 1e-30L;
}

}  // namespace nk_test

#endif  // NK_TESTS_REFERENCE_H_
