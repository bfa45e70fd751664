// moments-inl.h: vectorized Welford/Chan moments of a span, per target; shared by
// every op that needs statistics (rows, channels, groups).
//
// The span is cut into blocks of K vectors. Each lane of a block gets its sum taken
// relative to the block's first vector, then its squared deviations from its own
// mean (the block is still in registers or L1), so a constant lane yields exactly its
// value and 0. Blocks are merged by Chan's formula in a pairwise tree (a binary
// counter over a small stack), which keeps the error at O(log n) ulps even for a
// sorted ramp, where one Welford chain per lane would drift. Lanes and the tail are
// merged last.
#if defined(NK_KERNELS_MOMENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_MOMENTS_INL_H_
#undef NK_KERNELS_MOMENTS_INL_H_
#else
#define NK_KERNELS_MOMENTS_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"
#include "kernels/moments.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors per block: at most a few dozen elements per lane.
template <class D>
HWY_INLINE size_t BlockVectors(D d) {
  const size_t N = hn::Lanes(d);
  return N >= 8 ? 8 : 64 / N;
}

// Per-lane moments of `nvec` vectors from element i (lane j sees i + k*N + j).
// kCenter = false: uncentered (mean 0, M2 = sum of squares) for RMSNorm.
template <bool kCenter, class D, class Src, class V = hn::Vec<D>>
HWY_INLINE void BlockMoments(D d, const Src& src, size_t i, size_t nvec, V& mean,
                             V& m2) {
  const size_t N = hn::Lanes(d);
  V q0 = hn::Zero(d), q1 = hn::Zero(d);
  if (!kCenter) {
    size_t k = 0;
    for (; k + 2 <= nvec; k += 2) {
      const V v0 = src.Load(d, i + k * N);
      const V v1 = src.Load(d, i + (k + 1) * N);
      q0 = hn::MulAdd(v0, v0, q0);
      q1 = hn::MulAdd(v1, v1, q1);
    }
    if (k < nvec) {
      const V v0 = src.Load(d, i + k * N);
      q0 = hn::MulAdd(v0, v0, q0);
    }
    mean = hn::Zero(d);
    m2 = hn::Add(q0, q1);
    return;
  }
  const V x0 = src.Load(d, i);
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t k = 1;
  for (; k + 2 <= nvec; k += 2) {
    s0 = hn::Add(s0, hn::Sub(src.Load(d, i + k * N), x0));
    s1 = hn::Add(s1, hn::Sub(src.Load(d, i + (k + 1) * N), x0));
  }
  if (k < nvec) s0 = hn::Add(s0, hn::Sub(src.Load(d, i + k * N), x0));
  mean = hn::MulAdd(hn::Add(s0, s1), hn::Set(d, 1.0f / static_cast<float>(nvec)), x0);
  k = 0;
  for (; k + 2 <= nvec; k += 2) {
    const V e0 = hn::Sub(src.Load(d, i + k * N), mean);
    const V e1 = hn::Sub(src.Load(d, i + (k + 1) * N), mean);
    q0 = hn::MulAdd(e0, e0, q0);
    q1 = hn::MulAdd(e1, e1, q1);
  }
  if (k < nvec) {
    const V e0 = hn::Sub(src.Load(d, i + k * N), mean);
    q0 = hn::MulAdd(e0, e0, q0);
  }
  m2 = hn::Add(q0, q1);
}

// Chan merge of per-lane moments b (count nb per lane) into a (count na per lane).
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE void MergeLanes(D d, V& mean_a, V& m2_a, V mean_b, V m2_b, float na,
                           float nb) {
  if (!kCenter) {
    m2_a = hn::Add(m2_a, m2_b);
    return;
  }
  const float n = na + nb;
  const V delta = hn::Sub(mean_b, mean_a);
  mean_a = hn::MulAdd(delta, hn::Set(d, nb / n), mean_a);
  m2_a = hn::MulAdd(hn::Mul(delta, delta), hn::Set(d, na * nb / n),
                    hn::Add(m2_a, m2_b));
}

// Moments of the lanes together; every lane has count `n_lane`.
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE Moments ReduceLanes(D d, V mean, V m2, float n_lane) {
  const size_t N = hn::Lanes(d);
  Moments r;
  r.count = static_cast<double>(n_lane) * static_cast<double>(N);
  if (!kCenter) {
    r.mean = 0.0f;
    r.m2 = hn::GetLane(hn::SumOfLanes(d, m2));
    return r;
  }
  // Scale before summing: no overflow for lanes near the fp32 limit, and equal lane
  // means (a constant set) still sum exactly.
  const V total = hn::SumOfLanes(d, hn::Mul(mean, hn::Set(d, 1.0f / N)));
  const V dev = hn::Sub(mean, total);
  const V spread = hn::SumOfLanes(d, hn::Mul(dev, dev));
  r.mean = hn::GetLane(total);
  r.m2 = hn::GetLane(hn::MulAdd(spread, hn::Set(d, n_lane), hn::SumOfLanes(d, m2)));
  return r;
}

// Moments of src's elements [begin, begin + n).
template <bool kCenter, class D, class Src>
Moments SpanMoments(D d, const Src& src, size_t begin, size_t n) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t K = BlockVectors(d);
  const size_t nblocks = n / (K * N);
  Moments result = {0.0, 0.0f, 0.0f};

  if (nblocks == 1) {
    V mean, m2;
    BlockMoments<kCenter>(d, src, begin, K, mean, m2);
    result = ReduceLanes<kCenter>(d, mean, m2, static_cast<float>(K));
  } else if (nblocks > 1) {
    // Level l of the stack holds the moments of 2^l blocks; block b completes the
    // levels given by the trailing ones of b.
    constexpr size_t kLevels = 48;
    HWY_ALIGN float stack_mean[kLevels * hn::MaxLanes(d)];
    HWY_ALIGN float stack_m2[kLevels * hn::MaxLanes(d)];
    for (size_t b = 0; b < nblocks; ++b) {
      V mean, m2;
      BlockMoments<kCenter>(d, src, begin + b * K * N, K, mean, m2);
      float count = static_cast<float>(K);
      size_t level = 0;
      for (size_t t = b; t & 1; t >>= 1, ++level) {
        V lower_mean = hn::Load(d, stack_mean + level * N);
        V lower_m2 = hn::Load(d, stack_m2 + level * N);
        MergeLanes<kCenter>(d, lower_mean, lower_m2, mean, m2, count, count);
        mean = lower_mean;
        m2 = lower_m2;
        count *= 2.0f;
      }
      hn::Store(mean, d, stack_mean + level * N);
      hn::Store(m2, d, stack_m2 + level * N);
    }
    // Collapse the levels that nblocks has, smallest first.
    V mean = hn::Zero(d), m2 = hn::Zero(d);
    float count = 0.0f;
    for (size_t level = 0; (nblocks >> level) != 0; ++level) {
      if (((nblocks >> level) & 1) == 0) continue;
      const V m = hn::Load(d, stack_mean + level * N);
      const V q = hn::Load(d, stack_m2 + level * N);
      const float c = static_cast<float>(K << level);
      if (count == 0.0f) {
        mean = m;
        m2 = q;
      } else {
        // The higher level is the larger, older part: merge the small one into it.
        V big_mean = m, big_m2 = q;
        MergeLanes<kCenter>(d, big_mean, big_m2, mean, m2, c, count);
        mean = big_mean;
        m2 = big_m2;
      }
      count += c;
    }
    result = ReduceLanes<kCenter>(d, mean, m2, count);
  }

  // Whole vectors left over: one shorter block.
  size_t i = begin + nblocks * K * N;
  const size_t nvec = (begin + n - i) / N;
  if (nvec != 0) {
    V mean, m2;
    BlockMoments<kCenter>(d, src, i, nvec, mean, m2);
    result = MergeMoments(result,
                          ReduceLanes<kCenter>(d, mean, m2, static_cast<float>(nvec)));
    i += nvec * N;
  }
  // Fewer than N elements: a block of one-lane vectors.
  if (i < begin + n) {
    const hn::CappedTag<float, 1> d1;
    hn::Vec<decltype(d1)> mean, m2;
    const size_t rest = begin + n - i;
    BlockMoments<kCenter>(d1, src, i, rest, mean, m2);
    result = MergeMoments(result, ReduceLanes<kCenter>(d1, mean, m2,
                                                       static_cast<float>(rest)));
  }
  return result;
}

// max |x| over src's elements [begin, begin + n); NaN if any element is NaN.
template <class D, class Src>
float SpanMaxAbs(D d, const Src& src, size_t begin, size_t n) {
  float m = 0.0f;
  bool nan = false;
  ForEachVector(d, begin, begin + n, [&](auto dv, size_t i) HWY_ATTR {
    const auto v = src.Load(dv, i);
    nan |= !hn::AllFalse(dv, hn::IsNaN(v));
    m = std::max(m, hn::GetLane(hn::MaxOfLanes(dv, hn::Abs(v))));
  });
  return nan ? NAN : m;
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_MOMENTS_INL_H_
