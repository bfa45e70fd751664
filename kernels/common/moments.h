// SPDX-License-Identifier: Apache-2.0
// moments.h: scalar Welford/Chan moments (count, mean, M2), their merge, and row statistics.
#ifndef NK_KERNELS_MOMENTS_H_
#define NK_KERNELS_MOMENTS_H_

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>

namespace nk {

// Moments of a set: count, mean and M2 = sum of squared deviations from the mean.
// Uncentered (RMSNorm) moments keep mean = 0 and M2 = sum of squares; the same merge
// then adds the sums.
struct Moments {
  double count;  // exact far beyond 2^24, unlike a float
  float mean;
  float m2;
};

// Chan et al.: the moments of the union of two disjoint sets. Either may be empty.
// Equal means give exactly that mean (a constant set stays exact).
inline Moments MergeMoments(const Moments& a, const Moments& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count;
  const float delta = b.mean - a.mean;
  Moments r;
  r.count = n;
  r.mean = a.mean + delta * static_cast<float>(b.count / n);
  r.m2 = a.m2 + b.m2 + delta * delta * static_cast<float>(a.count * b.count / n);
  return r;
}

// Merges leaf(lo) .. leaf(hi - 1) in a fixed pairwise tree (hi > lo): the order, and
// so the bits, depend only on the number of leaves, never on who computed them.
template <class Leaf>
Moments MergePairwise(size_t lo, size_t hi, const Leaf& leaf) {
  if (hi - lo == 1) return leaf(lo);
  const size_t mid = lo + (hi - lo) / 2;
  return MergeMoments(MergePairwise(lo, mid, leaf), MergePairwise(mid, hi, leaf));
}

// The two sums of a backward over a set (a row, a channel) or a piece of one: the
// LayerNorm family's sum of a = gamma * dy and of a * x_hat; BatchNorm's sum of dy and
// of dy * (x - mean).
struct GradSums {
  float a, a_xhat;
};

// Adds leaf(lo) .. leaf(hi - 1) in a fixed pairwise tree (hi > lo), as MergePairwise.
template <class Leaf>
GradSums AddPairwise(size_t lo, size_t hi, const Leaf& leaf) {
  if (hi - lo == 1) return leaf(lo);
  const size_t mid = lo + (hi - lo) / 2;
  const GradSums a = AddPairwise(lo, mid, leaf), b = AddPairwise(mid, hi, leaf);
  return {a.a + b.a, a.a_xhat + b.a_xhat};
}

// Long rows are split into chunks of this many elements, whose moments are merged
// pairwise. The split is part of the result's definition (it does not depend on the
// thread count), and lets one row be spread over threads. A multiple of every
// target's block of elements.
constexpr size_t kChunk = 16384;

inline size_t NumChunks(size_t cols) { return (cols + kChunk - 1) / kChunk; }

// A power of two s with max_abs * s in [0.5, 1): rows whose squares overflow are
// redone on x * s, which is exact.
inline float RescaleFor(float max_abs) {
  int e;
  std::frexp(max_abs, &e);
  return std::ldexp(1.0f, -e);
}

// What normalizing a set (row, channel, group) needs, in the units of the (possibly
// rescaled) source x * scale, and what is reported to the caller, in the units of x.
struct SetStats {
  float scale;      // 1, or the power of two of the rescaled slow path
  float mean;       // of x * scale (0 for RMSNorm)
  float rstd;       // 1 / sqrt(var(x * scale) + eps * scale^2)
  float mean_out;   // mean of x
  float rstd_out;   // rstd (rrms) of x
  Moments moments;  // of x * scale
};

inline SetStats FinalizeSet(const Moments& m, float scale, float eps) {
  SetStats s;
  s.scale = scale;
  s.mean = m.mean;
  const float var = m.m2 / static_cast<float>(m.count);
  if (scale == 1.0f) {
    s.rstd = 1.0f / std::sqrt(var + eps);
    s.rstd_out = s.rstd;
  } else {
    // eps * scale^2 underflows for the largest rows (scale 2^-128), so var and eps meet
    // in x's units. rstd in the units of x * scale exceeds the float range only when var
    // is 0, i.e. every deviation is exactly 0 (the scaled values are near 1): the
    // largest float normalizes them to exactly 0 as well.
    const double var_x = static_cast<double>(var) / (static_cast<double>(scale) * scale);
    const double sd_x = std::sqrt(var_x + static_cast<double>(eps));
    s.rstd_out = var_x <= FLT_MAX ? 1.0f / std::sqrt(static_cast<float>(var_x) + eps)
                                  : static_cast<float>(1.0 / sd_x);  // 1e-39 and less
    const double rstd = 1.0 / (sd_x * scale);
    s.rstd = static_cast<float>(std::min(rstd, double{FLT_MAX}));
  }
  s.mean_out = m.mean / scale;
  s.moments = m;
  return s;
}

// M2 of x (not of x * scale); may be Inf on the slow path, as c-abi.md allows.
inline double M2Of(const SetStats& s) {
  const double scale = s.scale;
  return static_cast<double>(s.moments.m2) / (scale * scale);
}

// Statistics of a set from its fast-path moments `first`. When finite data overflows
// the fast path (|x| ~ 1e19 and beyond), the set is measured again scaled by a power
// of two, so mean and rstd stay finite:
//   max_abs() -> max |x| over the set (NaN if any is NaN);
//   scaled(scale) -> Moments of the set times scale.
template <class MaxAbsFn, class ScaledFn>
SetStats SetStatistics(const Moments& first, float eps, const MaxAbsFn& max_abs,
                       const ScaledFn& scaled) {
  if (std::isfinite(first.mean) && std::isfinite(first.m2)) {
    return FinalizeSet(first, 1.0f, eps);
  }
  const float m = max_abs();
  if (!std::isfinite(m) || m == 0.0f) return FinalizeSet(first, 1.0f, eps);
  const float scale = RescaleFor(m);
  return FinalizeSet(scaled(scale), scale, eps);
}

// SetStatistics of a row of `cols` elements from per-chunk callbacks:
//   moments(c0, n, scale, first_pass) -> Moments of elements [c0, c0 + n) times scale;
//   max_abs(c0, n) -> max |x| over them.
template <class MomentsFn, class MaxAbsFn>
SetStats RowStatistics(size_t cols, float eps, const Moments& first,
                       const MomentsFn& moments, const MaxAbsFn& max_abs) {
  const auto chunk = [cols](size_t c0) { return cols - c0 < kChunk ? cols - c0 : kChunk; };
  return SetStatistics(
      first, eps,
      [&] {
        float m = 0.0f;
        for (size_t c0 = 0; c0 < cols; c0 += kChunk) {
          const float a = max_abs(c0, chunk(c0));
          m = (a > m || std::isnan(a)) ? a : m;
        }
        return m;
      },
      [&](float scale) {
        return MergePairwise(0, NumChunks(cols), [&](size_t k) {
          return moments(k * kChunk, chunk(k * kChunk), scale, false);
        });
      });
}

}  // namespace nk

#endif  // NK_KERNELS_MOMENTS_H_
