// SPDX-License-Identifier: Apache-2.0
// moments-inl.h: vectorized Welford/Chan moments of a span, per target; shared by
// every op that needs statistics (rows, channels, groups).
//
// The span is cut into blocks of K vectors. Each lane of a block gets its mean (a
// pairwise sum), then its squared deviations from that mean (the block is still in
// registers or L1), so a constant lane yields exactly its value and 0. Blocks are
// merged by Chan's formula in a pairwise tree (a binary counter over a small stack),
// which keeps the error at O(log n) ulps even for a sorted ramp, where one Welford
// chain per lane would drift. Lanes and the tail are merged last.
#if defined(NK_KERNELS_MOMENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_MOMENTS_INL_H_
#undef NK_KERNELS_MOMENTS_INL_H_
#else
#define NK_KERNELS_MOMENTS_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"
#include "kernels/common/moments.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors per block: at most a few dozen elements per lane.
constexpr size_t kBlockVectors =
    HWY_MAX_BYTES >= 64 ? 16 : HWY_MAX_BYTES >= 32 ? 8 : HWY_MAX_BYTES >= 16 ? 16 : 64;

// Per-lane moments of `nvec` vectors load(0) .. load(nvec - 1): a run of a row, or
// the same columns of consecutive rows (BatchNorm NHWC).
// kCenter = false: uncentered (mean 0, M2 = sum of squares) for RMSNorm.
template <bool kCenter, class D, class Load, class V = hn::Vec<D>>
HWY_INLINE void BlockMomentsOf(D d, const Load& load, size_t nvec, V& mean, V& m2) {
  V q0 = hn::Zero(d), q1 = hn::Zero(d);
  if (!kCenter) {
    size_t k = 0;
    for (; k + 2 <= nvec; k += 2) {
      const V v0 = load(k);
      const V v1 = load(k + 1);
      q0 = hn::MulAdd(v0, v0, q0);
      q1 = hn::MulAdd(v1, v1, q1);
    }
    if (k < nvec) {
      const V v0 = load(k);
      q0 = hn::MulAdd(v0, v0, q0);
    }
    mean = hn::Zero(d);
    m2 = hn::Add(q0, q1);
    return;
  }
  const V x0 = load(0);
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t k = 1;
  for (; k + 2 <= nvec; k += 2) {
    s0 = hn::Add(s0, hn::Sub(load(k), x0));
    s1 = hn::Add(s1, hn::Sub(load(k + 1), x0));
  }
  if (k < nvec) s0 = hn::Add(s0, hn::Sub(load(k), x0));
  mean = hn::MulAdd(hn::Add(s0, s1), hn::Set(d, 1.0f / static_cast<float>(nvec)), x0);
  k = 0;
  for (; k + 2 <= nvec; k += 2) {
    const V e0 = hn::Sub(load(k), mean);
    const V e1 = hn::Sub(load(k + 1), mean);
    q0 = hn::MulAdd(e0, e0, q0);
    q1 = hn::MulAdd(e1, e1, q1);
  }
  if (k < nvec) {
    const V e0 = hn::Sub(load(k), mean);
    q0 = hn::MulAdd(e0, e0, q0);
  }
  m2 = hn::Add(q0, q1);
}

// The same for `nvec` consecutive vectors of src from element i.
template <bool kCenter, class D, class Src, class V = hn::Vec<D>>
HWY_INLINE void BlockMoments(D d, const Src& src, size_t i, size_t nvec, V& mean,
                             V& m2) {
  const size_t N = hn::Lanes(d);
  BlockMomentsOf<kCenter>(
      d, [&](size_t k) HWY_ATTR { return src.Load(d, i + k * N); }, nvec, mean, m2);
}

// The two steps of a full block's moments on vectors load(0) .. load(kVecs - 1) (kVecs
// a power of two), each loading what it needs: the per-lane mean, then the sum of the
// squared deviations from it (kCenter; of the squares otherwise). The hot loop of every
// statistics pass, so its arithmetic is balanced over the two kinds of FP pipes (Zen 4
// and 5 add on two, multiply and FMA on two others): the sum is a pairwise tree of adds
// (exact for a constant lane: sums of 2^k equal values are exact), half the deviations
// are FMAs x * 1 - mean (the same rounding as x - mean), and the squares go to four
// accumulators so that their chains overlap.
template <size_t kVecs, class D, class Load, class V = hn::Vec<D>>
HWY_INLINE V PairwiseBlockMean(D d, const Load& load) {
  static_assert(kVecs >= 4 && (kVecs & (kVecs - 1)) == 0, "a power of two, at least 4");
  V sum[kVecs / 2];
  HWY_UNROLL(32)
  for (size_t k = 0; k < kVecs / 2; ++k) sum[k] = hn::Add(load(2 * k), load(2 * k + 1));
  for (size_t w = kVecs / 4; w != 0; w /= 2) {
    HWY_UNROLL(16)
    for (size_t k = 0; k < w; ++k) sum[k] = hn::Add(sum[2 * k], sum[2 * k + 1]);
  }
  return hn::Mul(sum[0], hn::Set(d, 1.0f / kVecs));
}

template <bool kCenter, size_t kVecs, class D, class Load, class V = hn::Vec<D>>
HWY_INLINE V BlockSquares(D d, const Load& load, V mean) {
  const V one = hn::Set(d, 1.0f);
  const V neg_mean = hn::Neg(mean);
  V q[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
  HWY_UNROLL(64)
  for (size_t k = 0; k < kVecs; ++k) {
    V e = load(k);
    if (kCenter) e = (k & 1) ? hn::MulAdd(e, one, neg_mean) : hn::Sub(e, mean);
    q[k % 4] = hn::MulAdd(e, e, q[k % 4]);
  }
  return hn::Add(hn::Add(q[0], q[1]), hn::Add(q[2], q[3]));
}

// Both steps for a full block, loaded once and kept in registers (where vectors have a
// size; scalable ones read the block twice from L1).
template <bool kCenter, size_t kVecs, class D, class Load, class V = hn::Vec<D>>
HWY_INLINE void FullBlockMomentsOf(D d, const Load& load, V& mean, V& m2) {
  static_assert(kVecs >= 4 && (kVecs & (kVecs - 1)) == 0, "a power of two, at least 4");
#if HWY_HAVE_SCALABLE
  BlockMomentsOf<kCenter>(d, load, kVecs, mean, m2);
#else
  V v[kVecs];
  HWY_UNROLL(64)
  for (size_t k = 0; k < kVecs; ++k) v[k] = load(k);
  const auto held = [&v](size_t k) HWY_ATTR { return v[k]; };
  mean = kCenter ? PairwiseBlockMean<kVecs>(d, held) : hn::Zero(d);
  m2 = BlockSquares<kCenter, kVecs>(d, held, mean);
#endif
}

template <bool kCenter, size_t kVecs, class D, class Src, class V = hn::Vec<D>>
HWY_INLINE void FullBlockMoments(D d, const Src& src, size_t i, V& mean, V& m2) {
  const size_t N = hn::Lanes(d);
  FullBlockMomentsOf<kCenter, kVecs>(
      d, [&](size_t k) HWY_ATTR { return src.Load(d, i + k * N); }, mean, m2);
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

// The same where a may be empty (na == 0: a becomes b); returns the count na + nb.
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE float AddLanes(D d, V& mean_a, V& m2_a, float na, V mean_b, V m2_b,
                          float nb) {
  if (na == 0.0f) {
    mean_a = mean_b;
    m2_a = m2_b;
  } else {
    MergeLanes<kCenter>(d, mean_a, m2_a, mean_b, m2_b, na, nb);
  }
  return na + nb;
}

// The same for equal counts n on both sides: no division, weights 1/2 and n/2.
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE void MergeEqualLanes(D d, V& mean_a, V& m2_a, V mean_b, V m2_b, float n) {
  if (!kCenter) {
    m2_a = hn::Add(m2_a, m2_b);
    return;
  }
  const V delta = hn::Sub(mean_b, mean_a);
  mean_a = hn::MulAdd(delta, hn::Set(d, 0.5f), mean_a);
  m2_a = hn::MulAdd(hn::Mul(delta, delta), hn::Set(d, 0.5f * n), hn::Add(m2_a, m2_b));
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

#if HWY_TARGET != HWY_SCALAR
// The sum of v's 128-bit blocks, as one block.
template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::CappedTag<float, 4>> SumOfBlocks(D d, V v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return SumOfBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    (void)d;
    return v;
  }
}

// Four rows' lane sums at once: lane i of the 128-bit result is the sum of all lanes of
// s[i]. Two interleaving steps then halving the width: 13-17 operations where four
// horizontal reductions take 28-32 (rows of a few vectors spend most of their work
// here). Pairwise throughout, so equal lanes (a constant row) still sum exactly.
template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::CappedTag<float, 4>> SumOfLanes4(D d, V s0, V s1, V s2, V s3) {
  // Within each 128-bit block: lane i = row i's sum of that block.
  const V u01 = hn::Add(hn::InterleaveLower(d, s0, s1), hn::InterleaveUpper(d, s0, s1));
  const V u23 = hn::Add(hn::InterleaveLower(d, s2, s3), hn::InterleaveUpper(d, s2, s3));
  const hn::Repartition<uint64_t, D> d64;
  const auto a = hn::BitCast(d64, u01);
  const auto b = hn::BitCast(d64, u23);
  const V w = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, a, b)),
                      hn::BitCast(d, hn::InterleaveUpper(d64, a, b)));
  return SumOfBlocks(d, w);
}
#endif

// ReduceLanes of four sets at once: lane i of each sum is set i's, and one joint
// reduction replaces four (rows of a few KiB spend much of their statistics in these
// reductions; see RowMoments). Each set's sums see only its own lanes, in a fixed
// order, so a set passed alone (the same vectors four times) gets the bits it gets
// beside others.
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE void ReduceLanes4(D d, const V (&mean)[4], const V (&m2)[4], float n_lane,
                             Moments (&out)[4]) {
#if HWY_TARGET == HWY_SCALAR
  for (size_t k = 0; k < 4; ++k) out[k] = ReduceLanes<kCenter>(d, mean[k], m2[k], n_lane);
#else
  const hn::CappedTag<float, 4> d4;
  const double count = static_cast<double>(n_lane) * static_cast<double>(hn::Lanes(d));
  HWY_ALIGN float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  HWY_ALIGN float sum[4];
  const auto sum_m2 = SumOfLanes4(d, m2[0], m2[1], m2[2], m2[3]);
  if (!kCenter) {
    hn::Store(sum_m2, d4, sum);
  } else {
    // As ReduceLanes: scaled before summing, then the spread of the lane means.
    const V inv = hn::Set(d, 1.0f / static_cast<float>(hn::Lanes(d)));
    hn::Store(SumOfLanes4(d, hn::Mul(mean[0], inv), hn::Mul(mean[1], inv),
                          hn::Mul(mean[2], inv), hn::Mul(mean[3], inv)),
              d4, total);
    V dev[4];
    for (size_t k = 0; k < 4; ++k) {
      dev[k] = hn::Sub(mean[k], hn::Set(d, total[k]));
      dev[k] = hn::Mul(dev[k], dev[k]);
    }
    const auto spread = SumOfLanes4(d, dev[0], dev[1], dev[2], dev[3]);
    hn::Store(hn::MulAdd(spread, hn::Set(d4, n_lane), sum_m2), d4, sum);
  }
  for (size_t k = 0; k < 4; ++k) out[k] = Moments{count, total[k], sum[k]};
#endif
}

// A pairwise Chan tree of per-lane blocks kept as a binary counter: level l (at
// mean_levels / m2_levels + l * stride) holds the moments of 2^l blocks, and block b
// completes the levels given by the trailing ones of b. Adds block b of `count` per
// lane.
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE void AddToLaneTree(D d, size_t b, V mean, V m2, float count, float* mean_levels,
                              float* m2_levels, size_t stride) {
  size_t level = 0;
  for (size_t t = b; t & 1; t >>= 1, ++level) {
    V lower_mean = hn::LoadU(d, mean_levels + level * stride);
    V lower_m2 = hn::LoadU(d, m2_levels + level * stride);
    MergeEqualLanes<kCenter>(d, lower_mean, lower_m2, mean, m2, count);
    mean = lower_mean;
    m2 = lower_m2;
    count *= 2.0f;
  }
  hn::StoreU(mean, d, mean_levels + level * stride);
  hn::StoreU(m2, d, m2_levels + level * stride);
}

// The per-lane moments of a tree of `blocks` blocks of `count` per lane: the levels
// merged smallest first, each into the larger, older one. Returns the count per lane
// (0, with zero moments, for an empty tree).
template <bool kCenter, class D, class V = hn::Vec<D>>
HWY_INLINE float CollapseLaneTree(D d, size_t blocks, float count,
                                  const float* mean_levels, const float* m2_levels,
                                  size_t stride, V& mean, V& m2) {
  mean = hn::Zero(d);
  m2 = hn::Zero(d);
  float have = 0.0f;
  for (size_t level = 0; (blocks >> level) != 0; ++level) {
    if (((blocks >> level) & 1) == 0) continue;
    V big_mean = hn::LoadU(d, mean_levels + level * stride);
    V big_m2 = hn::LoadU(d, m2_levels + level * stride);
    const float big = count * static_cast<float>(size_t{1} << level);
    if (have != 0.0f) MergeLanes<kCenter>(d, big_mean, big_m2, mean, m2, big, have);
    mean = big_mean;
    m2 = big_m2;
    have += big;
  }
  return have;
}

// The pairwise Chan tree over full blocks, fed one block at a time, so that a caller
// can interleave other work (normalizing the previous row). Level l of the stack
// holds the per-lane moments of 2^l blocks; block b completes the levels given by
// the trailing ones of b.
template <bool kCenter, class D>
class BlockTree {
 public:
  using V = hn::Vec<D>;
  static constexpr size_t kBlock = kBlockVectors;  // vectors

  // Adds the block of kBlock vectors at element i of src.
  template <class Src>
  HWY_INLINE void Add(D d, const Src& src, size_t i) {
    V mean, m2;
    FullBlockMoments<kCenter, kBlock>(d, src, i, mean, m2);
    AddToLaneTree<kCenter>(d, blocks_, mean, m2, static_cast<float>(kBlock), mean_, m2_,
                           hn::Lanes(d));
    ++blocks_;
  }

  // Adds the pairs of full blocks of src's elements [i, end) where vectors are narrower
  // than 64 bytes, asking for the lines `ahead` bytes past each block as it goes (with
  // kAhead; 0 for none); returns where the pairs end (i where there are none).
  //
  // With a mean at AVX2 (full 32-byte vectors), a pair is one block of 2 kBlock
  // vectors, too many for the registers: its mean, then its deviations loaded again
  // from L1, the next pair's mean taken before this pair's deviations, so that those
  // find their mean ready while the next sums fill the wait. Two blocks of 8 in
  // registers left the statistics bound by each block's chain of sum, mean, deviations
  // (LayerNorm, AVX2, median of 5-6 processes: 1024x1024 1 thread 171 -> 149 us, 2
  // threads 92 -> 82 us; 2048x8192 streamed 14-16% faster, 16384x1024 streamed 5-8%
  // slower, where x's rows meet the last streamed stores of y a page apart). At SSE4 it
  // gained 2-8% in the cache and lost 4% streamed: not taken there.
  //
  // Elsewhere (RMSNorm's sums of squares, 16-byte vectors, one-lane strided sources), a
  // pair's Chan merge is done in registers, as the tree's level 0 would do it (its first
  // block even): the same bits, half the tree's loads, stores and branches. (LayerNorm, 1
  // thread, fastest of 11 in alternating processes: 64x1024 to 1024x1024 at AVX2 8-12%
  // faster, SSE4 5-9%; at AVX3, where a block is 256 elements, 64x1024 and 256x1024 ran
  // 5-10% slower. A build whose pairs lost the read-ahead ran streamed rows 14-37%
  // slower.)
  template <bool kAhead, class Src>
  HWY_INLINE size_t AddPairs(D d, const Src& src, size_t i, size_t end, size_t ahead) {
    if constexpr (HWY_MAX_BYTES >= 64) {
      (void)d, (void)src, (void)end, (void)ahead;
      return i;
    } else if constexpr (kCenter && !HWY_HAVE_SCALABLE &&
                         hn::MaxLanes(D()) * sizeof(float) == 32) {
      constexpr size_t kPair = 2 * kBlock;
      const size_t N = hn::Lanes(d);
      const size_t pair = kPair * N;
      if (i + pair > end || (blocks_ & 1)) return i;  // not after a lone block
      const auto pair_at = [&](size_t at) HWY_ATTR {
        return [&src, d, N, at](size_t k) HWY_ATTR { return src.Load(d, at + k * N); };
      };
      if constexpr (kAhead) {
        if (ahead != 0) PrefetchAhead(src, i, pair, ahead);
      }
      V mean = PairwiseBlockMean<kPair>(d, pair_at(i));
      for (;;) {
        const size_t next = i + pair;
        const bool more = next + pair <= end;
        V next_mean = mean;
        if (more) {
          if constexpr (kAhead) {
            if (ahead != 0) PrefetchAhead(src, next, pair, ahead);
          }
          next_mean = PairwiseBlockMean<kPair>(d, pair_at(next));
        }
        const V m2 = BlockSquares<kCenter, kPair>(d, pair_at(i), mean);
        AddPair(d, mean, m2);
        i = next;
        if (!more) return i;
        mean = next_mean;
      }
    } else {
      const size_t block = kBlock * hn::Lanes(d);
      for (; i + 2 * block <= end; i += 2 * block) {
        if (HWY_UNLIKELY(blocks_ & 1)) break;  // not after a lone block
        V mean, m2, mean_b, m2_b;
        if constexpr (kAhead) {
          if (ahead != 0) PrefetchAhead(src, i, block, ahead);
        }
        FullBlockMoments<kCenter, kBlock>(d, src, i, mean, m2);
        if constexpr (kAhead) {
          if (ahead != 0) PrefetchAhead(src, i + block, block, ahead);
        }
        FullBlockMoments<kCenter, kBlock>(d, src, i + block, mean_b, m2_b);
        MergeEqualLanes<kCenter>(d, mean, m2, mean_b, m2_b, static_cast<float>(kBlock));
        AddPair(d, mean, m2);
      }
      return i;
    }
  }

  // Moments of the blocks added so far and of src's elements [i, end), fewer than a
  // block; then the tree is empty again.
  template <class Src>
  Moments Finish(D d, const Src& src, size_t i, size_t end) {
    Moments result = {0.0, 0.0f, 0.0f};
    V mean, m2;
    const float count = TakeLanes(d, mean, m2);
    if (count != 0.0f) result = ReduceLanes<kCenter>(d, mean, m2, count);
    return AddTail(d, src, i, end, result);
  }

  // The per-lane moments of the blocks added so far, and their count per lane (0, with
  // zero moments, for none); then the tree is empty again.
  float TakeLanes(D d, V& mean, V& m2) {
    const float count = CollapseLaneTree<kCenter>(d, blocks_, static_cast<float>(kBlock),
                                                  mean_, m2_, hn::Lanes(d), mean, m2);
    blocks_ = 0;
    return count;
  }

  // `result` merged with the moments of src's elements [i, end), fewer than a block.
  template <class Src>
  static Moments AddTail(D d, const Src& src, size_t i, size_t end, Moments result) {
    const size_t N = hn::Lanes(d);
    // Whole vectors left over: one shorter block.
    const size_t nvec = (end - i) / N;
    if (nvec != 0) {
      V mean, m2;
      BlockMoments<kCenter>(d, src, i, nvec, mean, m2);
      result = MergeMoments(result,
                            ReduceLanes<kCenter>(d, mean, m2, static_cast<float>(nvec)));
      i += nvec * N;
    }
    // Fewer than N elements: a block of one-lane vectors.
    if (i < end) {
      const hn::CappedTag<float, 1> d1;
      hn::Vec<decltype(d1)> mean, m2;
      const size_t rest = end - i;
      BlockMoments<kCenter>(d1, src, i, rest, mean, m2);
      result = MergeMoments(result, ReduceLanes<kCenter>(d1, mean, m2,
                                                         static_cast<float>(rest)));
    }
    return result;
  }

 private:
  // Adds the moments of a pair of blocks (after an even number of blocks): level 1 on,
  // as pair blocks_ / 2 of a tree of pairs.
  HWY_INLINE void AddPair(D d, V mean, V m2) {
    const size_t stride = hn::Lanes(d);
    AddToLaneTree<kCenter>(d, blocks_ / 2, mean, m2, static_cast<float>(2 * kBlock),
                           mean_ + stride, m2_ + stride, stride);
    blocks_ += 2;
  }

  static constexpr size_t kLevels = 48;  // 2^48 blocks: more than any memory
  size_t blocks_ = 0;
  HWY_ALIGN float mean_[kLevels * hn::MaxLanes(D())];
  HWY_ALIGN float m2_[kLevels * hn::MaxLanes(D())];
};

// Elements per full block.
template <class D>
HWY_INLINE size_t BlockElements(D d) {
  return kBlockVectors * hn::Lanes(d);
}

// Moments of src's elements [begin, begin + n). src by value: held by reference, a
// source is read again after each of the tree's vector stores (which may alias it), and
// a LinePairSource then kept a pointer per vector of a block.
template <bool kCenter, class D, class Src>
Moments SpanMoments(D d, const Src src, size_t begin, size_t n) {
  BlockTree<kCenter, D> tree;
  const size_t block = BlockElements(d);
  size_t i = tree.template AddPairs<false>(d, src, begin, begin + n, 0);
  for (; i + block <= begin + n; i += block) tree.Add(d, src, i);
  return tree.Finish(d, src, i, begin + n);
}

// The same, asking for the cache lines `ahead` bytes past each block as it goes (see
// kReadAheadBytes in sources-inl.h): for spans that come from the outer caches or
// memory. The same operations, so the same bits.
template <bool kCenter, class D, class Src>
Moments SpanMomentsAhead(D d, const Src src, size_t begin, size_t n, size_t ahead) {
  BlockTree<kCenter, D> tree;
  const size_t block = BlockElements(d);
  size_t i = tree.template AddPairs<true>(d, src, begin, begin + n, ahead);
  for (; i + block <= begin + n; i += block) {
    PrefetchAhead(src, i, block, ahead);
    tree.Add(d, src, i);
  }
  return tree.Finish(d, src, i, begin + n);
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

// Per-lane sums of two quantities, fed one block at a time and added in a pairwise
// tree (a binary counter over a stack of levels, `stride` floats apart, as
// AddToLaneTree's): O(log n) roundings, which design.md's backward bounds ask of the
// sums; one chain per lane over a long row or channel would not meet them. Block b
// (counting from 0) is added to the levels a and b.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void AddToSumTree(D d, size_t block, V a, V b, float* a_levels,
                             float* b_levels, size_t stride) {
  size_t level = 0;
  for (size_t t = block; t & 1; t >>= 1, ++level) {
    a = hn::Add(hn::LoadU(d, a_levels + level * stride), a);
    b = hn::Add(hn::LoadU(d, b_levels + level * stride), b);
  }
  hn::StoreU(a, d, a_levels + level * stride);
  hn::StoreU(b, d, b_levels + level * stride);
}

// The sums of `blocks` blocks added by AddToSumTree (0 for none); levels smallest first.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void CollapseSumTree(D d, size_t blocks, const float* a_levels,
                                const float* b_levels, size_t stride, V& a, V& b) {
  a = hn::Zero(d);
  b = hn::Zero(d);
  for (size_t level = 0; (blocks >> level) != 0; ++level) {
    if (((blocks >> level) & 1) == 0) continue;
    a = hn::Add(hn::LoadU(d, a_levels + level * stride), a);
    b = hn::Add(hn::LoadU(d, b_levels + level * stride), b);
  }
}

// The two sums of `blocks` blocks added by AddToSumTree, lanes included.
template <class D, class V = hn::Vec<D>>
HWY_INLINE GradSums SumTreeTotals(D d, size_t blocks, const float* a_levels,
                                  const float* b_levels, size_t stride) {
  V a, b;
  CollapseSumTree(d, blocks, a_levels, b_levels, stride, a, b);
  return {hn::GetLane(hn::SumOfLanes(d, a)), hn::GetLane(hn::SumOfLanes(d, b))};
}

// The same tree over a stack of its own, for one set's sums.
template <class D>
class PairSumTree {
 public:
  using V = hn::Vec<D>;

  HWY_INLINE void Add(D d, V a, V b) { AddToSumTree(d, blocks_++, a, b, a_, b_, kMax); }

  HWY_INLINE void Clear() { blocks_ = 0; }

  // The sums of every block added (0 for none), lanes included.
  HWY_INLINE GradSums Take(D d) const { return SumTreeTotals(d, blocks_, a_, b_, kMax); }

 private:
  static constexpr size_t kMax = hn::MaxLanes(D());
  static constexpr size_t kLevels = 48;  // 2^48 blocks: more than any memory
  size_t blocks_ = 0;
  HWY_ALIGN float a_[kLevels * kMax];
  HWY_ALIGN float b_[kLevels * kMax];
};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_MOMENTS_INL_H_
