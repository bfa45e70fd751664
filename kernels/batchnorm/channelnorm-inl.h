// SPDX-License-Identifier: Apache-2.0
// channelnorm-inl.h: statistics and normalization per channel (BatchNorm), per target.
//
// NCHW reads channels as contiguous spans (planes) and reuses the row path's span
// moments. NHWC puts channels in lanes: a block of kBlockVectors rows gives per-column
// moments (the block's sum relative to its first row, then squared deviations, as in
// moments-inl.h), and blocks are merged in a pairwise tree per column. Rows narrower
// than a vector are first widened to a period of whole vectors (k rows of c columns,
// k a power of two) whose columns are folded back to c channels by pairwise merges.
#if defined(NK_KERNELS_CHANNELNORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_CHANNELNORM_INL_H_
#undef NK_KERNELS_CHANNELNORM_INL_H_
#else
#define NK_KERNELS_CHANNELNORM_INL_H_
#endif

#include <stdint.h>

#include <algorithm>
#include <new>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/moments-inl.h"
#include "kernels/common/moments.h"
#include "kernels/common/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- spans (NCHW)

// The statistics pass reads x from memory with nothing else in flight (the apply
// pass overlaps reads and writes) and asks for its lines kReadAheadBytes ahead. (The
// spans of 32x64x56x56 took 55-70% longer without; NHWC column blocks asking two
// blocks ahead, 32 KiB for c = 256, 10-22% longer.) An x below a quarter of
// StreamBytes() (8 MiB; fp32 forwards stream from there) is taken to be in L3, and
// asks kCacheAheadBytes ahead. Zen 4, 1 thread, GB/s at 8 KiB -> 2 KiB, +0 bytes:
// InstanceNorm 8x64x56x56 NCHW AVX3 47.6-48.5 -> 49.3-55.9, AVX2 50.1-52.6 -> 50.2-55.7
// (2 threads 104-108 -> 117), +16 and SSE4 within the noise; bf16 / fp16 BatchNorm
// training 32x64x56x56 NCHW (12 MiB of x) lost 4-9% at 2 KiB.
//
// Long spans at malloc's / NumPy's 16 bytes are read as line pairs (LinePairSource;
// the same bits). NCHW training at +16 bytes, 1 thread, A/B in one process, 10 rounds:
// planes of 3136 elements (8x64x56x56) 309-326 -> 284-290 us, 4096 466 -> 398 us,
// 8192 475 -> 378 us; statistics alone of 16x64x56x56 298 -> 218 us. Shorter planes
// lost, as if the permute (one more vector operation per vector) cost more there than
// the split loads: 784 elements 80 -> 94 us, 2048 equal, statistics alone of
// 8x64x1024 63 -> 74 us.
constexpr size_t kLinePairSpan = 3072;

template <class T>
Moments ChannelSpanMoments(const T* x, size_t n, float scale, const T* begin,
                           const T* end) {
  const hn::ScalableTag<float> d;
  using Source = TensorSource<T>;
  if (scale != 1.0f) {
    return SpanMoments<true>(d, ScaledSource<Source>{Source{x}, scale}, 0, n);
  }
  const size_t bytes = static_cast<size_t>(end - begin) * sizeof(T);
  const size_t ahead = 4 * bytes >= StreamBytes() ? kReadAheadBytes : kCacheAheadBytes;
#ifdef NK_LINE_PAIRS
  if constexpr (std::is_same_v<T, float>) {
    if (n >= kLinePairSpan && LinePairSource::Fits(x, 0, n, begin, end)) {
      return SpanMomentsAhead<true>(d, LinePairSource(x), 0, n, ahead);
    }
  }
#endif
  return SpanMomentsAhead<true>(d, Source{x}, 0, n, ahead);
}

template <class T>
float ChannelSpanMaxAbs(const T* x, size_t n) {
  return SpanMaxAbs(hn::ScalableTag<float>(), TensorSource<T>{x}, 0, n);
}

// y[i] = value(d, i) over [0, n), four vectors a step. With `stream`, the whole lines
// from y's first line boundary on take non-temporal stores (sources-inl.h), the rest
// regular ones. y may be an input of value: each vector is read before it is written.
template <class T, class Value>
HWY_INLINE void StoreSpan(size_t n, bool stream, T* y, const Value& value) {
  const auto store = [&](auto d, size_t i)
                         HWY_ATTR { StoreElems(value(d, i), d, y + i); };
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  if (stream && reinterpret_cast<uintptr_t>(y) % sizeof(T) == 0) {
    const hn::CappedTag<float, 1> d1;
    constexpr size_t kLine = kLineElems<T>;
    for (const size_t head = HWY_MIN(HeadToLine(y), n); i < head; ++i) store(d1, i);
    const size_t lines_end = i + (n - i) / kLine * kLine;
    if constexpr (StoresInPairs<decltype(d), T>()) {  // a line a step (y + i at a line)
      for (; i + 2 * N <= lines_end; i += 2 * N) {
        StreamPair(value(d, i), value(d, i + N), d, y + i);
      }
    }
    for (; i + N <= lines_end; i += N) StreamElems(value(d, i), d, y + i);
  }
  for (; i + 4 * N <= n; i += 4 * N) StoreFour(d, value, i, y);
  ForEachVector(d, i, n, store);
}

template <bool kCenter, bool kScaled, class T>
HWY_INLINE void AffineSpan(const T* x, size_t n, const SpanAffine& a, bool stream, T* y) {
  StoreSpan(n, stream, y, [&](auto d, size_t i) HWY_ATTR {
    auto v = LoadElems(d, x + i);
    if (kScaled && kCenter) {
      v = hn::MulSub(v, hn::Set(d, a.scale), hn::Set(d, a.shift));
    } else if (kScaled) {
      v = hn::Mul(v, hn::Set(d, a.scale));
    } else if (kCenter) {
      v = hn::Sub(v, hn::Set(d, a.shift));
    }
    if (kScaled) v = hn::Mul(v, hn::Set(d, a.rstd));
    return hn::MulAdd(v, hn::Set(d, a.mul), hn::Set(d, a.add));
  });
}

// y may be x: each element is read before it is written.
template <class T>
void ChannelSpanApply(const T* x, size_t n, const SpanAffine& a, bool stream, T* y) {
  const bool scaled = a.scale != 1.0f;
  if (a.center) {
    scaled ? AffineSpan<true, true>(x, n, a, stream, y)
           : AffineSpan<true, false>(x, n, a, stream, y);
  } else {
    scaled ? AffineSpan<false, true>(x, n, a, stream, y)
           : AffineSpan<false, false>(x, n, a, stream, y);
  }
}

// Short planes: at most kShortPlaneVectors whole vectors and a tail. Each plane gives
// one block per lane (the per-lane moments of its vectors) and one block of its tail
// elements; a channel's blocks over the n images are merged in a pairwise tree per
// lane, with no horizontal reduction or division per plane. Lanes and tail are merged
// once per channel.
constexpr size_t kShortPlaneVectors = 32;

inline size_t ShortPlaneMax() {
  return kShortPlaneVectors * hn::Lanes(hn::ScalableTag<float>());
}

inline size_t ShortPlaneScratchFloats(size_t n, size_t channels) {
  return ColumnLevels(n) * channels * 2 * (hn::Lanes(hn::ScalableTag<float>()) + 1);
}

template <class T>
void ShortPlaneMoments(const T* x, size_t n, size_t c, size_t spatial, size_t c0,
                       size_t c1, float* scratch, Moments* out) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  const size_t nvec = spatial / N, tail = spatial - nvec * N;
  const size_t width = c1 - c0, levels = ColumnLevels(n);
  float* vec_mean = scratch;  // [level][channel][lane]
  float* vec_m2 = vec_mean + levels * width * N;
  float* tail_mean = vec_m2 + levels * width * N;  // [level][channel]
  float* tail_m2 = tail_mean + levels * width;
  for (size_t ni = 0; ni < n; ++ni) {
    for (size_t k = 0; k < width; ++k) {
      const T* p = x + (ni * c + c0 + k) * spatial;
      PrefetchAhead(TensorSource<T>{p}, 0, spatial, kReadAheadBytes);
      if (nvec != 0) {
        hn::Vec<decltype(d)> mean, m2;
        BlockMomentsOf<true>(
            d, [&](size_t v) HWY_ATTR { return LoadElems(d, p + v * N); }, nvec, mean,
            m2);
        AddToLaneTree<true>(d, ni, mean, m2, static_cast<float>(nvec), vec_mean + k * N,
                            vec_m2 + k * N, width * N);
      }
      if (tail != 0) {
        hn::Vec<decltype(d1)> mean, m2;
        BlockMomentsOf<true>(
            d1, [&](size_t v) HWY_ATTR { return LoadElems(d1, p + nvec * N + v); }, tail,
            mean, m2);
        AddToLaneTree<true>(d1, ni, mean, m2, static_cast<float>(tail), tail_mean + k,
                            tail_m2 + k, width);
      }
    }
  }
  for (size_t k = 0; k < width; ++k) {
    Moments m = {0.0, 0.0f, 0.0f};
    if (nvec != 0) {
      hn::Vec<decltype(d)> mean, m2;
      const float count = CollapseLaneTree<true>(d, n, static_cast<float>(nvec),
                                                 vec_mean + k * N, vec_m2 + k * N,
                                                 width * N, mean, m2);
      m = ReduceLanes<true>(d, mean, m2, count);
    }
    if (tail != 0) {
      hn::Vec<decltype(d1)> mean, m2;
      const float count = CollapseLaneTree<true>(d1, n, static_cast<float>(tail),
                                                 tail_mean + k, tail_m2 + k, width, mean,
                                                 m2);
      m = MergeMoments(m, ReduceLanes<true>(d1, mean, m2, count));
    }
    out[k] = m;
  }
}

// ---------------------------------------------------------------- columns (NHWC)

// Columns are processed in widths of whole vectors, then one-lane vectors for the
// last c % N: f(d, j) for each group of columns starting at j.
template <class Func>
HWY_INLINE void ForEachColumnGroup(size_t c, const Func& f) {
  ForEachVector(hn::ScalableTag<float>(), 0, c, f);
}

// Per-column moments of a [rows][c] matrix (rows >= 1) by blocks of kBlockVectors
// rows in a pairwise tree per column; scratch holds the tree's levels.
template <class T>
void ColumnMomentsTree(const T* x, size_t rows, size_t c, bool from_memory,
                       float* scratch, float* mean_out, float* m2_out) {
  constexpr size_t K = kBlockVectors;
  const size_t levels = ColumnLevels(rows);
  float* level_mean = scratch;
  float* level_m2 = scratch + levels * c;
  const size_t blocks = rows / K;
  for (size_t b = 0; b < blocks; ++b) {
    const T* xb = x + b * K * c;
    // Only from memory: for x in the cache the requests (a line in every row of the
    // block) cost more than they save (NHWC statistics of 784 KiB and of 6.4 MiB,
    // 1 thread: 7-14% faster without). A block larger than the read-ahead (rows of
    // more than 128 fp32 at AVX-512) is read a column group at a time from all its
    // rows at once, so each group asks for its lines of the next block instead:
    // GroupNorm forward 8x256x64x64 NHWC, 1 thread, time after / before, both orders:
    // AVX3 +0 0.94-0.98, +16 0.87-0.97, 2 threads 0.93-0.94; SSE4 (blocks of 16 rows
    // too) 0.90-0.91; AVX2 (8 rows: 512 channels) 8x512x32x32 0.95-0.97; BatchNorm
    // training 256x256x14x14 NHWC AVX3 0.90-0.91, bf16 0.94-0.98, SSE4 0.91. (The whole
    // next block asked for at the block's start: 1.03-1.11.) The lines go to L2, not
    // L1: a block's loads wait on 16 rows' lines at once, and L1 has too few misses in
    // flight for both (Zen 4, 1 thread, BatchNorm training NHWC, time after / before:
    // 50176x256 AVX3 0.66-0.72, 2 threads 0.84, SSE4 0.77-0.81, bf16 0.97-0.98 (bf16
    // and fp16 0.88 with the streamed rows' map beside it); 25088x512 AVX3 0.69-0.72).
    // AVX2's blocks of exactly the read-ahead (8 rows of 256 fp32) go by column group
    // too: 0.67. Smaller blocks keep their requests into L1: into L2, 64 channels
    // took 1.31-1.36x at AVX3 and SSE4.
    const bool by_group = from_memory && K * c * sizeof(T) >= kReadAheadBytes;
    if (from_memory && !by_group) {
      PrefetchAhead(TensorSource<T>{xb}, 0, K * c, kReadAheadBytes);
    }
    ForEachColumnGroup(c, [&](auto d, size_t j) HWY_ATTR {
      if (by_group && j % kLineElems<T> == 0) {
        for (size_t k = 0; k < K; ++k) PrefetchToL2(xb + (K + k) * c + j);
      }
      hn::Vec<decltype(d)> mean, m2;
      FullBlockMomentsOf<true, K>(
          d, [&](size_t k) HWY_ATTR { return LoadElems(d, xb + k * c + j); }, mean, m2);
      AddToLaneTree<true>(d, b, mean, m2, static_cast<float>(K), level_mean + j,
                          level_m2 + j, c);
    });
  }
  const size_t rest = rows - blocks * K;
  const T* xr = x + blocks * K * c;
  ForEachColumnGroup(c, [&](auto d, size_t j) HWY_ATTR {
    hn::Vec<decltype(d)> mean, m2;
    const float count = CollapseLaneTree<true>(d, blocks, static_cast<float>(K),
                                               level_mean + j, level_m2 + j, c, mean, m2);
    if (rest != 0) {
      hn::Vec<decltype(d)> rest_mean, rest_m2;
      BlockMomentsOf<true>(
          d, [&](size_t k) HWY_ATTR { return LoadElems(d, xr + k * c + j); }, rest,
          rest_mean, rest_m2);
      AddLanes<true>(d, mean, m2, count, rest_mean, rest_m2, static_cast<float>(rest));
    }
    hn::StoreU(mean, d, mean_out + j);
    hn::StoreU(m2, d, m2_out + j);
  });
}

// Equal-count Chan merge of columns [half, 2 * half) into [0, half).
HWY_INLINE void FoldColumns(size_t half, float count, float* mean, float* m2) {
  ForEachColumnGroup(half, [&](auto d, size_t j) HWY_ATTR {
    auto a_mean = hn::LoadU(d, mean + j);
    auto a_m2 = hn::LoadU(d, m2 + j);
    MergeEqualLanes<true>(d, a_mean, a_m2, hn::LoadU(d, mean + half + j),
                          hn::LoadU(d, m2 + half + j), count);
    hn::StoreU(a_mean, d, mean + j);
    hn::StoreU(a_m2, d, m2 + j);
  });
}

template <class T>
void ColumnMoments(const T* x, size_t rows, size_t c, bool from_memory, float* scratch,
                   float* mean_out, float* m2_out) {
  const size_t k = ColumnPeriodRows(c);
  if (k == 1 || rows < k) {
    ColumnMomentsTree(x, rows, c, from_memory, scratch, mean_out, m2_out);
    return;
  }
  // Narrow rows: moments of rows / k wide rows of k * c columns, folded in halves
  // (column j and j + width / 2 are the same channel), then the rows % k left over.
  const size_t width = k * c;
  const size_t wide_rows = rows / k;
  HWY_ALIGN float mean[kMaxColumnPeriod];
  HWY_ALIGN float m2[kMaxColumnPeriod];
  ColumnMomentsTree(x, wide_rows, width, from_memory, scratch, mean, m2);
  float count = static_cast<float>(wide_rows);
  for (size_t half = width / 2; half >= c; half /= 2, count *= 2.0f) {
    FoldColumns(half, count, mean, m2);
  }
  const size_t rest = rows - wide_rows * k;
  if (rest != 0) {
    HWY_ALIGN float rest_mean[kMaxColumnPeriod];
    HWY_ALIGN float rest_m2[kMaxColumnPeriod];
    ColumnMomentsTree(x + wide_rows * width, rest, c, from_memory, scratch, rest_mean,
                      rest_m2);
    ForEachColumnGroup(c, [&](auto d, size_t j) HWY_ATTR {
      auto a_mean = hn::LoadU(d, mean + j);
      auto a_m2 = hn::LoadU(d, m2 + j);
      MergeLanes<true>(d, a_mean, a_m2, hn::LoadU(d, rest_mean + j),
                       hn::LoadU(d, rest_m2 + j), count, static_cast<float>(rest));
      hn::StoreU(a_mean, d, mean + j);
      hn::StoreU(a_m2, d, m2 + j);
    });
  }
  for (size_t j = 0; j < c; ++j) {
    mean_out[j] = mean[j];
    m2_out[j] = m2[j];
  }
}

inline void MergeColumns(size_t c, float weight_b, float weight_ab, float* mean_a,
                         float* m2_a, const float* mean_b, const float* m2_b) {
  ForEachColumnGroup(c, [&](auto d, size_t j) HWY_ATTR {
    const auto a_mean = hn::LoadU(d, mean_a + j);
    const auto delta = hn::Sub(hn::LoadU(d, mean_b + j), a_mean);
    hn::StoreU(hn::MulAdd(delta, hn::Set(d, weight_b), a_mean), d, mean_a + j);
    hn::StoreU(hn::MulAdd(hn::Mul(delta, delta), hn::Set(d, weight_ab),
                          hn::Add(hn::LoadU(d, m2_a + j), hn::LoadU(d, m2_b + j))),
               d, m2_a + j);
  });
}

// One column vector's parameters, and its affine map of an element vector.
template <bool kCenter, bool kScaled>
struct ColumnParams {
  using V = hn::Vec<hn::ScalableTag<float>>;
  const float* HWY_RESTRICT scale;
  const float* HWY_RESTRICT shift;
  const float* HWY_RESTRICT rstd;
  const float* HWY_RESTRICT mul;
  const float* HWY_RESTRICT add;
  static HWY_INLINE V Map(V v, V scale, V shift, V rstd, V mul, V add) {
    if (kScaled && kCenter) {
      v = hn::MulSub(v, scale, shift);
    } else if (kScaled) {
      v = hn::Mul(v, scale);
    } else if (kCenter) {
      v = hn::Sub(v, shift);
    }
    if (kScaled) v = hn::Mul(v, rstd);
    return hn::MulAdd(v, mul, add);
  }
#if HWY_HAVE_SCALABLE
  // Scalable vectors cannot be struct members: the column's parameters are loaded (from
  // L1) at each use.
  struct At {
    const ColumnParams* p;
    size_t j;
    HWY_INLINE V operator()(V v) const {
      const hn::ScalableTag<float> d;
      return Map(v, kScaled ? hn::LoadU(d, p->scale + j) : hn::Zero(d),
                 kCenter ? hn::LoadU(d, p->shift + j) : hn::Zero(d),
                 kScaled ? hn::LoadU(d, p->rstd + j) : hn::Zero(d),
                 hn::LoadU(d, p->mul + j), hn::LoadU(d, p->add + j));
    }
  };
  HWY_INLINE At Load(size_t j) const { return At{this, j}; }
#else
  struct At {
    V scale, shift, rstd, mul, add;
    HWY_INLINE V operator()(V v) const { return Map(v, scale, shift, rstd, mul, add); }
  };
  HWY_INLINE At Load(size_t j) const {
    const hn::ScalableTag<float> d;
    return At{kScaled ? hn::LoadU(d, scale + j) : hn::Zero(d),
              kCenter ? hn::LoadU(d, shift + j) : hn::Zero(d),
              kScaled ? hn::LoadU(d, rstd + j) : hn::Zero(d), hn::LoadU(d, mul + j),
              hn::LoadU(d, add + j)};
  }
#endif
};

// Planes p = 0 .. count - 1 of `spatial` elements each, contiguous from x, plane p
// mapped by affine[p] (ColumnParams' map), walked as one span of vectors from element
// `begin` on: a vector that straddles two planes takes each lane's parameters from its
// own plane, so no plane has a tail of its own (7x7 planes, one by one: three vectors
// and a one-element tail each). The same operations per element as AffineSpan, so the
// same bits (a plane whose map is not scaled has scale = rstd = 1, and multiplying by 1
// is exact). kStream: non-temporal stores, y + begin at a line boundary, and the lines
// of x `ahead` elements on (0: none) asked for into L2 as they are stored, once a line.
// Returns where it stopped: fewer than a vector's elements are left.
template <bool kCenter, bool kScaled, bool kStream, class T>
HWY_INLINE size_t AffinePlanes(const T* x, size_t spatial, size_t count,
                               const SpanAffine* affine, size_t begin, size_t ahead,
                               T* y) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  using Params = typename ColumnParams<kCenter, kScaled>::At;
  const auto params = [&](const SpanAffine& a) HWY_ATTR {
    return Params{hn::Set(d, a.scale), hn::Set(d, a.shift), hn::Set(d, a.rstd),
                  hn::Set(d, a.mul), hn::Set(d, a.add)};
  };
  const size_t end = spatial * count;
  size_t i = begin, p = begin / spatial, plane_end = (p + 1) * spatial;
  if (p == count) return i;
  Params cur = params(affine[p]);
  const auto value = [&](auto dv, size_t at)
                         HWY_ATTR { return cur(LoadElems(dv, x + at)); };
  const auto put = [&](hn::Vec<decltype(d)> v, size_t at) HWY_ATTR {
    if constexpr (kStream) {
      StreamElems(v, d, y + at);
    } else {
      StoreElems(v, d, y + at);
    }
  };
  while (i + N <= end) {
    // Plane p's whole vectors from i, four a step: a vector a step, with the checks
    // for the plane's end, held bf16 back (BatchNorm training NCHW 32x64x56x56, 1
    // thread, time after / before in one process: AVX3 and AVX2 bf16 0.90-0.92, fp16
    // 0.98-1.0; fp32, SSE4 and planes of 49 within 3%).
    const size_t whole = i + (plane_end - i) / N * N;
    for (; i + 4 * N <= whole; i += 4 * N) {
      if constexpr (kStream) {
        if (ahead != 0) {
          // The elements of the step that start a line (a step may be shorter).
          constexpr size_t kLine = kLineElems<T>;
          for (size_t k = (kLine - i % kLine) % kLine; k < 4 * N; k += kLine) {
            PrefetchToL2(x + ahead + i + k);
          }
        }
        // Pairs narrowed together are stored as one line: not after a straddle that
        // left y + i half a line off.
        if (!StoresInPairs<decltype(d), T>() || IsLineAligned(y + i)) {
          StreamPair(value(d, i), value(d, i + N), d, y + i);
          StreamPair(value(d, i + 2 * N), value(d, i + 3 * N), d, y + i + 2 * N);
        } else {
          for (size_t k = 0; k < 4; ++k) put(value(d, i + k * N), i + k * N);
        }
      } else {
        StoreFour(d, value, i, y);
      }
    }
    for (; i < whole; i += N) put(value(d, i), i);
    if (i == plane_end) {
      if (++p == count) break;
      plane_end += spatial;
      cur = params(affine[p]);
      continue;
    }
    if (i + N > end) break;
    // Planes p and p + 1 (spatial >= N: no more); p + 1 < count, as i + N <= end.
    const Params next = params(affine[p + 1]);
    const auto first = hn::FirstN(d, plane_end - i);
    const Params both = {hn::IfThenElse(first, cur.scale, next.scale),
                         hn::IfThenElse(first, cur.shift, next.shift),
                         hn::IfThenElse(first, cur.rstd, next.rstd),
                         hn::IfThenElse(first, cur.mul, next.mul),
                         hn::IfThenElse(first, cur.add, next.add)};
    put(both(LoadElems(d, x + i)), i);
    i += N;
    ++p;
    plane_end += spatial;
    cur = next;
  }
  return i;
}

// Elements [begin, end) of planes of `spatial` elements contiguous from x, plane by
// plane, with regular stores (AffineSpan's bits).
template <class T>
void PlanePieces(const T* x, size_t spatial, size_t begin, size_t end,
                 const SpanAffine* affine, T* y) {
  for (size_t i = begin; i < end;) {
    const size_t q = i / spatial;
    const size_t n = HWY_MIN(end, (q + 1) * spatial) - i;
    ChannelSpanApply(x + i, n, affine[q], false, y + i);
    i += n;
  }
}

// y may be x: each vector is read before it is written. With `stream`, whole vectors
// from y's first line boundary on take non-temporal stores: planes one by one as
// spans (of 196 elements, say) would take regular stores into every line two planes
// share, and element by element up to each plane's line (NCHW 256x256x14x14 inference
// streamed, 1 thread, Zen 4, time as one run / plane by plane: AVX3 0.64, AVX2
// 0.72, SSE4 0.52; training 0.61-0.78; bf16 and fp16 inference 0.36-0.52).
template <class T>
void ChannelPlanesApply(const T* x, size_t spatial, size_t count,
                        const SpanAffine* affine, bool stream, size_t ahead, T* y) {
  if (count == 0) return;
  // As one span where a plane fills a vector; not with scalable vectors, which
  // AffinePlanes' parameter sets cannot hold as struct members.
  if constexpr (!HWY_HAVE_SCALABLE) {
    if (spatial >= hn::Lanes(hn::ScalableTag<float>())) {
      // One map for the run: centred where any plane's is (x - 0 is x, so a plane
      // that is not loses nothing), scaled likewise (times 1 is exact).
      bool scaled = false, centered = false;
      for (size_t p = 0; p < count; ++p) {
        scaled |= affine[p].scale != 1.0f;
        centered |= affine[p].center;
      }
      const size_t end = spatial * count;
      stream = stream && reinterpret_cast<uintptr_t>(y) % sizeof(T) == 0;
      const size_t head = stream ? HWY_MIN(HeadToLine(y), end) : 0;
      PlanePieces(x, spatial, 0, head, affine, y);
      const auto run = [&](auto center, auto scale) HWY_ATTR {
        return stream
                   ? AffinePlanes<decltype(center)::value, decltype(scale)::value, true>(
                         x, spatial, count, affine, head, ahead, y)
                   : AffinePlanes<decltype(center)::value, decltype(scale)::value, false>(
                         x, spatial, count, affine, head, ahead, y);
      };
      using True = std::true_type;
      using False = std::false_type;
      const size_t done = centered
                              ? (scaled ? run(True(), True()) : run(True(), False()))
                              : (scaled ? run(False(), True()) : run(False(), False()));
      PlanePieces(x, spatial, done, end, affine, y);
      return;
    }
  }
  // Plane by plane, with the same bits.
  for (size_t p = 0; p < count; ++p) {
    ChannelSpanApply(x + p * spatial, spatial, affine[p], stream, y + p * spatial);
  }
}

// y[i] = p(x[i]) for one vector; kStream: a non-temporal store, asking for x[i + ahead]
// first when it lies before `end`, once per line (one prefetch a vector cost 128-bit
// vectors 3% of an inference).
template <bool kStream, class At, class T>
HWY_INLINE void AffineVector(const At& p, const T* x, T* y, size_t i, size_t ahead,
                             size_t end, size_t far) {
  const hn::ScalableTag<float> d;
  if (kStream && i % kLineElems<T> < hn::Lanes(d)) {
    if (i + ahead < end) hwy::Prefetch(x + i + ahead);
    if (far != 0) PrefetchToL2(x + i + far);
  }
  const auto v = p(LoadElems(d, x + i));
  if (kStream) {
    StreamElems(v, d, y + i);
  } else {
    StoreElems(v, d, y + i);
  }
}

// y = the affine map of x, c a multiple of the vector size: blocks of 32 rows, four
// vector columns at a time with their parameters in registers (see AffineColumns).
// kStream: non-temporal stores to a vector-aligned y, each element asking for the one a
// block below it (and the one `far` on into L2, if far != 0).
template <bool kStream, class Params, class T>
HWY_INLINE void AffineColumnBlocks(const Params& params, const T* x, size_t rows,
                                   size_t c, size_t far, T* y) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  constexpr size_t kRowBlock = 32;
  const size_t ahead = kRowBlock * c;
  const size_t end = rows * c;
  for (size_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const size_t r1 = HWY_MIN(rows, r0 + kRowBlock);
    size_t j = 0;
    for (; j + 4 * N <= c; j += 4 * N) {
      const auto p0 = params.Load(j), p1 = params.Load(j + N), p2 = params.Load(j + 2 * N),
                 p3 = params.Load(j + 3 * N);
      for (size_t r = r0; r < r1; ++r) {
        const size_t i = r * c + j;
        AffineVector<kStream>(p0, x, y, i, ahead, end, far);
        AffineVector<kStream>(p1, x, y, i + N, ahead, end, far);
        AffineVector<kStream>(p2, x, y, i + 2 * N, ahead, end, far);
        AffineVector<kStream>(p3, x, y, i + 3 * N, ahead, end, far);
      }
    }
    // The columns left (fewer than four vectors), row by row, so that each row's lines
    // are filled by consecutive stores.
    for (size_t r = r0; j < c && r < r1; ++r) {
      for (size_t k = j; k < c; k += N) {
        AffineVector<kStream>(params.Load(k), x, y, r * c + k, ahead, end, far);
      }
    }
  }
}

// Rows of at least this many bytes are mapped row by row (AffineRows) instead of in
// column blocks: a block's 32 rows lie 2 KiB or more apart, few L1 sets hold them, and
// the block's lines evict each other. NHWC, 1 thread, A/B in one process: in the cache,
// inference of 392x512 29 -> 19 us, 196x1024 54 -> 20 us, 98x2048 62 -> 29 us, training
// 48 -> 37, 71 -> 41, 88 -> 58 us (784x256: inference 22 -> 18 us but 3136x256 76 ->
// 87 us, so 256 channels stay in blocks). Streamed rows go row by row wherever a block
// would not hold the whole row (AffineColumns).
constexpr size_t kRowsMinBytes = 2048;

// y = the affine map of x row by row, c a multiple of the vector size: each parameter
// vector is loaded again for every row (from L1). kStream as in AffineColumnBlocks, the
// element asked for kReadAheadBytes ahead.
template <bool kStream, class Params, class T>
HWY_NOINLINE void AffineRows(const Params params, const T* x, size_t rows, size_t c,
                             size_t far, T* y) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  const size_t end = rows * c;
  const size_t ahead = kReadAheadBytes / sizeof(T);
  for (size_t i = 0; i < end; i += c) {
    for (size_t j = 0; j < c; j += N) {
      AffineVector<kStream>(params.Load(j), x, y, i + j, ahead, end, far);
    }
  }
}

template <bool kCenter, bool kScaled, class T>
HWY_INLINE void AffineColumns(const T* x, size_t rows, size_t c, const ColumnAffine& a,
                              bool stream, T* y) {
  const float* HWY_RESTRICT scale = a.scale;
  const float* HWY_RESTRICT shift = a.shift;
  const float* HWY_RESTRICT rstd = a.rstd;
  const float* HWY_RESTRICT mul = a.mul;
  const float* HWY_RESTRICT add = a.add;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  if (c % N == 0) {
    // Rows shorter than kRowsMinBytes: blocks of 32 rows, four vector columns at a time,
    // with their parameters held in registers (c = 256 streamed at half speed with the
    // parameters reloaded for every row, in some placements of the parameter arrays).
    // Wider rows go row by row (AffineRows).
    //
    // Streamed (far larger than the cache; y and every row on a cache line, so that
    // the stores fill whole lines): non-temporal stores, and each element asks for the
    // one a block below it: with the subtract of training before the FMA, loads
    // waiting on memory fill the FP scheduler and fewer of them are in flight (training
    // of 256x256x14x14 0-10% faster with the read-ahead, in three A/B runs). Rows of
    // more than four vectors go row by row, in memory order: a block's columns four
    // vectors at a time read 32 streams at once (Zen 4, 1 thread, time row by row /
    // in blocks: inference of 50176x256 AVX3 0.71-0.73, AVX2 0.52-0.58, SSE4 0.94,
    // 100352x128 AVX3 0.89, AVX2 0.65, SSE4 0.64; training 0.84-1.0; rows of four
    // vectors at AVX3, 200704x64, 1.05-1.17, so they stay in blocks).
    const bool nt = stream && reinterpret_cast<uintptr_t>(y) % kLineBytes == 0 &&
                    c % kLineElems<T> == 0;
    const ColumnParams<kCenter, kScaled> p{scale, shift, rstd, mul, add};
    if (nt ? c > 4 * N : c * sizeof(T) >= kRowsMinBytes) {
      if (nt) {
        AffineRows<true>(p, x, rows, c, a.ahead, y);
      } else {
        AffineRows<false>(p, x, rows, c, 0, y);
      }
      return;
    }
    if (nt) {
      AffineColumnBlocks<true>(p, x, rows, c, a.ahead, y);
    } else {
      AffineColumnBlocks<false>(p, x, rows, c, 0, y);
    }
    return;
  }
  for (size_t r = 0; r < rows; ++r) {
    const T* row = x + r * c;
    T* out = y + r * c;
    ForEachColumnGroup(c, [&](auto dv, size_t j) HWY_ATTR {
      auto v = LoadElems(dv, row + j);
      if (kScaled) v = hn::Mul(v, hn::LoadU(dv, scale + j));
      if (kCenter) v = hn::Sub(v, hn::LoadU(dv, shift + j));
      if (kScaled) v = hn::Mul(v, hn::LoadU(dv, rstd + j));
      StoreElems(hn::MulAdd(v, hn::LoadU(dv, mul + j), hn::LoadU(dv, add + j)), dv,
                 out + j);
    });
  }
}

template <class T>
HWY_INLINE void ColumnMapRows(const T* x, size_t rows, size_t c, const ColumnAffine& a,
                              bool stream, T* y) {
  const bool center = a.shift != nullptr;
  const bool scaled = a.scale != nullptr;
  if (center) {
    scaled ? AffineColumns<true, true>(x, rows, c, a, stream, y)
           : AffineColumns<true, false>(x, rows, c, a, stream, y);
  } else {
    scaled ? AffineColumns<false, true>(x, rows, c, a, stream, y)
           : AffineColumns<false, false>(x, rows, c, a, stream, y);
  }
}

// Rows of c channels (c a multiple of a line) streamed to a y off a cache line
// boundary (malloc's and NumPy's 16 bytes) would take regular stores (NHWC
// 256x256x14x14, 1 thread, y at +16 B: inference 3.5 ms, training 5.9 ms, against 2.0
// and 4.0 ms aligned). So from y's first line boundary on, the elements are mapped as
// rows of c that start at channel `head`, with the per-column arrays rotated by
// `head`; the first `head` and last c - head elements take regular stores. The same
// operations per element, so the same bits. map(at, rows, width, arrays, stream) maps
// the elements from `at` on as `rows` rows of `width` columns by arrays[p][column]
// (nullptr arrays stay nullptr).
template <size_t kArrays, class T, class MapRows>
HWY_INLINE void MapRowsFromLine(const float* const (&arrays)[kArrays], size_t rows,
                                size_t c, bool stream, const T* y, const MapRows& map) {
  const bool peel = stream && rows >= 2 && c % kLineElems<T> == 0;
  const size_t head = peel ? HeadToLine(y) : 0;
  if (head == 0) return map(size_t{0}, rows, c, arrays, stream);
  thread_local std::vector<float> buffer;  // the rotated arrays, from a line on
  try {
    const size_t floats = kArrays * c + kLineFloats;
    if (buffer.size() < floats) buffer.resize(floats);
  } catch (const std::bad_alloc&) {
    return map(size_t{0}, rows, c, arrays, stream);  // only slower
  }
  float* rotated = buffer.data() + HeadToLine(buffer.data());
  const float* from_head[kArrays];
  const float* turned[kArrays];
  for (size_t p = 0; p < kArrays; ++p) {
    from_head[p] = turned[p] = nullptr;
    if (arrays[p] == nullptr) continue;
    float* out = rotated + p * c;
    std::copy(arrays[p] + head, arrays[p] + c, out);
    std::copy(arrays[p], arrays[p] + head, out + c - head);
    from_head[p] = arrays[p] + head;
    turned[p] = out;
  }
  map(size_t{0}, size_t{1}, head, arrays, false);
  map(head, rows - 1, c, turned, true);
  map(head + (rows - 1) * c, size_t{1}, c - head, from_head, false);  // the last row's
}

template <class T>
HWY_INLINE void ColumnApplyRows(const T* x, size_t rows, size_t c, const ColumnAffine& a,
                                bool stream, T* y) {
  const float* arrays[5] = {a.scale, a.shift, a.rstd, a.mul, a.add};
  const auto map = [&](size_t at, size_t n, size_t width, const float* const(&p)[5],
                       bool streamed) {
    ColumnMapRows(x + at, n, width, ColumnAffine{p[0], p[1], p[2], p[3], p[4], a.ahead},
                  streamed, y + at);
  };
  MapRowsFromLine(arrays, rows, c, stream, y, map);
}

template <class T>
void ColumnApply(const T* x, size_t rows, size_t c, const ColumnAffine& a, bool stream,
                 T* y) {
  const size_t k = ColumnPeriodRows(c);
  if (k == 1 || rows < k) return ColumnApplyRows(x, rows, c, a, stream, y);
  // Narrow rows: the parameters repeated k times, so k rows are one row of whole
  // vectors.
  const size_t width = k * c;
  HWY_ALIGN float wide[5][kMaxColumnPeriod];
  const float* in[5] = {a.scale, a.shift, a.rstd, a.mul, a.add};
  for (size_t p = 0; p < 5; ++p) {
    if (in[p] == nullptr) continue;
    for (size_t j = 0; j < width; ++j) wide[p][j] = in[p][j % c];
  }
  const ColumnAffine wide_affine = {a.scale ? wide[0] : nullptr,
                                    a.shift ? wide[1] : nullptr,
                                    a.rstd ? wide[2] : nullptr,
                                    wide[3],
                                    wide[4],
                                    a.ahead};
  const size_t wide_rows = rows / k;
  ColumnApplyRows(x, wide_rows, width, wide_affine, stream, y);
  const size_t done = wide_rows * width;
  ColumnApplyRows(x + done, rows - wide_rows * k, c, a, stream, y + done);
}

// ---------------------------------------------------------------- strided (slow path)

// Channel ci of NHWC as a one-lane source: element i is x[i * stride], times scale.
template <class T>
struct StridedSource {
  const T* x;
  size_t stride;
  float scale;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    return hn::Mul(LoadElems(d, x + i * stride), hn::Set(d, scale));
  }
};

template <class T>
Moments ChannelStridedMoments(const T* x, size_t stride, size_t n, float scale) {
  return SpanMoments<true>(hn::CappedTag<float, 1>(), StridedSource<T>{x, stride, scale},
                           0, n);
}

template <class T>
float ChannelStridedMaxAbs(const T* x, size_t stride, size_t n) {
  return SpanMaxAbs(hn::CappedTag<float, 1>(), StridedSource<T>{x, stride, 1.0f}, 0, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_CHANNELNORM_INL_H_
