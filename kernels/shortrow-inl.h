// shortrow-inl.h: rows of kVecs full vectors (cols == kVecs * Lanes), up to 16, held in
// registers, kRows rows at a time so that their reductions overlap. Small rows spend
// their time in horizontal reductions, sqrt/div and loop overhead, not in memory.
//
// Statistics take two passes over the registers: a pairwise sum (a constant row gets
// exactly its value as mean), then the squared deviations from the mean; the
// deviations are kept for normalization. A row
// whose statistics are not finite is finished by the general path.
#if defined(NK_KERNELS_SHORTROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_SHORTROW_INL_H_
#undef NK_KERNELS_SHORTROW_INL_H_
#else
#define NK_KERNELS_SHORTROW_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"
#include "kernels/moments.h"
#include "kernels/rownorm.h"
#include "kernels/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows as short as this many vectors take the register path (x86 and NEON vectors
// have a size, so arrays of them live in registers).
constexpr size_t kMaxShortVectors = HWY_HAVE_SCALABLE ? 0 : 16;

// Stand-ins for an absent gamma / beta: short rows always apply both (an exact
// multiply by 1 and add of 0), which keeps the number of compiled variants small.
HWY_ALIGN constexpr float kOnes[256] = {
#define NK_ONE4 1.0f, 1.0f, 1.0f, 1.0f
#define NK_ONE16 NK_ONE4, NK_ONE4, NK_ONE4, NK_ONE4
#define NK_ONE64 NK_ONE16, NK_ONE16, NK_ONE16, NK_ONE16
    NK_ONE64, NK_ONE64, NK_ONE64, NK_ONE64};
#undef NK_ONE64
#undef NK_ONE16
#undef NK_ONE4
HWY_ALIGN constexpr float kZeros[256] = {};
static_assert(kMaxShortVectors * hn::MaxLanes(hn::ScalableTag<float>()) <= 256,
              "kOnes / kZeros must cover the longest short row");

// The sum of t[0] .. t[n - 1] (n a power of two) as a pairwise tree; overwrites t.
template <size_t n, class V>
HWY_INLINE V PairwiseSum(V (&t)[n]) {
  static_assert((n & (n - 1)) == 0, "a power of two");
  HWY_UNROLL(16)
  for (size_t w = n / 2; w != 0; w /= 2) {
    HWY_UNROLL(16)
    for (size_t k = 0; k < w; ++k) t[k] = hn::Add(t[2 * k], t[2 * k + 1]);
  }
  return t[0];
}

// y of rows [r, r + kRows) from their deviations v (RMSNorm: values) and rstd;
// rows whose bit is set in `skip` are not written.
template <size_t kVecs, size_t kRows, class D, class V = hn::Vec<D>>
HWY_INLINE void StoreNormalized(D d, const V (&v)[kRows][kVecs], const V (&rstd)[kRows],
                                const float* HWY_RESTRICT gamma,
                                const float* HWY_RESTRICT beta, float* y, size_t cols,
                                bool stream, uint32_t skip) {
  const size_t N = hn::Lanes(d);
  HWY_UNROLL(16)
  for (size_t k = 0; k < kVecs; ++k) {
    const V g = hn::LoadU(d, gamma + k * N);
    const V b = hn::LoadU(d, beta + k * N);
    HWY_UNROLL(16)
    for (size_t i = 0; i < kRows; ++i) {
      if (skip & (1u << i)) continue;
      const V out = hn::MulAdd(hn::Mul(v[i][k], rstd[i]), g, b);
      float* p = y + i * cols + k * N;
      if (stream) {
        hn::Stream(out, d, p);
      } else {
        hn::StoreU(out, d, p);
      }
    }
  }
}

// Rows [r, r + kRows). Returns the rows (a bit mask) whose statistics came out
// non-finite, with their fast-path moments in bad_moments: their sum is stored,
// everything else of theirs is left to the caller. With `stream`, y (aligned to the
// vector size) is written with non-temporal stores.
template <size_t kVecs, size_t kRows, bool kCenter, class Src>
HWY_INLINE uint32_t ShortRows(const RowNormJob& job, const Src& src0, size_t r,
                              bool stream, Moments* bad_moments) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t cols = job.cols;
  float* HWY_RESTRICT sum = job.sum;
  float* HWY_RESTRICT y = job.y + r * cols;
  V v[kRows][kVecs];
  HWY_UNROLL(16)
  for (size_t i = 0; i < kRows; ++i) {
    const Src src = src0.At((r + i) * cols);
    if (job.stream) PrefetchAhead(src, 0, kVecs * N, kReadAheadBytes);  // from memory
    HWY_UNROLL(16)
    for (size_t k = 0; k < kVecs; ++k) v[i][k] = src.Load(d, k * N);
  }
  if (sum != nullptr) {
    HWY_UNROLL(16)
    for (size_t i = 0; i < kRows; ++i) {
      HWY_UNROLL(16)
      for (size_t k = 0; k < kVecs; ++k) hn::StoreU(v[i][k], d, sum + (r + i) * cols + k * N);
    }
  }
  const V inv_n = hn::Set(d, 1.0f / static_cast<float>(cols));
  const V eps = hn::Set(d, job.eps);
  V mean[kRows], m2[kRows], rstd[kRows];
  HWY_UNROLL(16)
  for (size_t i = 0; i < kRows; ++i) {
    if (kCenter) {
      // cols is a power of two here, so the pairwise sum of a constant row and its
      // scaling by 1 / cols are exact: no shift by the first element is needed.
      V t[kVecs];
      HWY_UNROLL(16)
      for (size_t k = 0; k < kVecs; ++k) t[k] = v[i][k];
      mean[i] = hn::Mul(hn::SumOfLanes(d, PairwiseSum(t)), inv_n);
      HWY_UNROLL(16)
      for (size_t k = 0; k < kVecs; ++k) v[i][k] = hn::Sub(v[i][k], mean[i]);
    } else {
      mean[i] = hn::Zero(d);
    }
    constexpr size_t kChains = kVecs < 4 ? kVecs : 4;  // squares: short FMA chains
    V q[kChains];
    HWY_UNROLL(4)
    for (size_t k = 0; k < kChains; ++k) q[k] = hn::Mul(v[i][k], v[i][k]);
    HWY_UNROLL(16)
    for (size_t k = kChains; k < kVecs; ++k) {
      q[k % kChains] = hn::MulAdd(v[i][k], v[i][k], q[k % kChains]);
    }
    m2[i] = hn::SumOfLanes(d, PairwiseSum(q));
    rstd[i] = hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::MulAdd(m2[i], inv_n, eps)));
  }
  uint32_t bad = 0;
  for (size_t i = 0; i < kRows; ++i) {
    const float mean_i = hn::GetLane(mean[i]);
    const float m2_i = hn::GetLane(m2[i]);
    if (HWY_UNLIKELY(!std::isfinite(mean_i) || !std::isfinite(m2_i))) {
      bad |= 1u << i;
      bad_moments[i] = Moments{static_cast<double>(cols), mean_i, m2_i};
      continue;
    }
    if (job.mean != nullptr) job.mean[r + i] = mean_i;
    if (job.rstd != nullptr) job.rstd[r + i] = hn::GetLane(rstd[i]);
  }
  const float* gamma = job.gamma != nullptr ? job.gamma : kOnes;
  const float* beta = job.beta != nullptr ? job.beta : kZeros;
  if (HWY_LIKELY(bad == 0)) {
    StoreNormalized<kVecs, kRows>(d, v, rstd, gamma, beta, y, cols, stream, 0);
  } else {
    StoreNormalized<kVecs, kRows>(d, v, rstd, gamma, beta, y, cols, stream, bad);
  }
  return bad;
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_SHORTROW_INL_H_
