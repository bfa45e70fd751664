// SPDX-License-Identifier: Apache-2.0
// rownorm-inl.h: the LayerNorm family's row path, per target: sum store, statistics
// and normalization of a row or a chunk of one. LayerNorm / RMSNorm (kCenter) is a
// template parameter, chosen once per call.
#if defined(NK_KERNELS_ROWNORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_ROWNORM_INL_H_
#undef NK_KERNELS_ROWNORM_INL_H_
#else
#define NK_KERNELS_ROWNORM_INL_H_
#endif

#include <stdint.h>

#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/moments-inl.h"
#include "kernels/common/moments.h"
#include "kernels/layernorm/rownorm.h"
#include "kernels/common/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls fn(center) with a std::integral_constant<bool> for LayerNorm / RMSNorm: one
// branch per call, none in the loops. gamma (and LayerNorm's beta) are always applied:
// the op layer stands ones and -0.0 in for absent ones (layernorm.cc).
template <class Job, class Fn>
HWY_INLINE void VisitVariant(const Job& job, const Fn& fn) {
  if (job.center) return fn(std::true_type());
  return fn(std::false_type());
}

// Calls fn(src) with the source that row `row` is normalized from, once the fused
// forms' sum has been stored (their first pass).
template <class T, class Fn>
HWY_INLINE void WithRowSource(const RowNormJobT<T>& job, size_t row, const Fn& fn) {
  if (job.residual == nullptr) return fn(TensorSource<T>{job.x, job.ldx}.Row(row));
  if (job.sum != nullptr) return fn(TensorSource<T>{job.sum, job.lds}.Row(row));
  return fn(AddSourceT<T>{job.x, job.residual, job.ldx, job.ldr}.Row(row));
}

// Calls fn(src), or fn(LinePairSource) where that reads the same values of src's
// elements [c0, c0 + n) faster: a plain fp32 source at a misaligned address (x, or
// the fused forms' stored sum), for the statistics, whose loads feed several
// operations each. (The normalization's loads of x are aligned already where y lies
// at x's offset, as from NumPy; each is used once. Where x lies at another offset,
// pairs for them were slower: LayerNorm 1024x1024, x at +16 and y at +32 bytes, 1
// thread, 210 -> 229 us.) Its lambdas are NK_INLINE_LAMBDA:
// left to the compiler, the call stayed, and LayerNorm of 4 MiB with 1024 aligned
// columns, 1 thread, ran 5% slower than without this function (0.59 against 0.62 of a
// copy, 8 alternating processes; inlined: 0.66 against 0.61 in 6).
template <class T, class Src, class Fn>
HWY_INLINE void WithStatsSource(const RowNormJobT<T>& job, const Src& src, size_t c0,
                                size_t n, const Fn& fn) {
#ifdef NK_LINE_PAIRS
  if constexpr (std::is_same_v<Src, F32Source>) {
    const float* begin = job.residual != nullptr ? job.sum : job.x;
    const size_t ld = job.residual != nullptr ? job.lds : job.ldx;
    if (LinePairSource::Fits(src.x, c0, n, begin, begin + (job.rows - 1) * ld + job.cols)) {
      return fn(LinePairSource(src.x));
    }
  }
#else
  (void)job, (void)c0, (void)n;
#endif
  fn(src);
}

// sum = x + residual over elements [c0, c0 + n) of a row, rounded to T once (as
// AddSourceT rounds it). sum may be x or residual.
template <class T>
HWY_INLINE void StoreSum(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n) {
  const T* x = job.x + row * job.ldx;
  const T* r = job.residual + row * job.ldr;
  T* s = job.sum + row * job.lds;
  ForEachVector(hn::ScalableTag<float>(), c0, c0 + n, [&](auto d, size_t i) HWY_ATTR {
    StoreElems(hn::Add(LoadElems(d, x + i), LoadElems(d, r + i)), d, s + i);
  });
}

template <bool kCenter, class T>
Moments ChunkMomentsT(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
                      float scale, bool first_pass) {
  const hn::ScalableTag<float> d;
  if (first_pass && job.residual != nullptr && job.sum != nullptr) {
    StoreSum(job, row, c0, n);
  }
  Moments m;
  WithRowSource(job, row, [&](const auto& src) HWY_ATTR {
    using Src = std::decay_t<decltype(src)>;
    if (scale == 1.0f) {
      WithStatsSource(job, src, c0, n, [&](const auto& s) NK_INLINE_LAMBDA {
        m = SpanMoments<kCenter>(d, s, c0, n);
      });
    } else {
      m = SpanMoments<kCenter>(d, ScaledSource<Src>{src, scale}, c0, n);
    }
  });
  return m;
}

// ((v - mean) * rstd) * gamma + beta for a loaded v, gamma, beta (RMSNorm: no mean, no
// beta; beta is not read).
template <bool kCenter, class V>
HWY_INLINE V Affine(V v, V mean, V rstd, V gamma, V beta) {
  if (kCenter) return hn::MulAdd(hn::Mul(hn::Sub(v, mean), rstd), gamma, beta);
  return hn::Mul(hn::Mul(v, rstd), gamma);
}

// The normalized value of element i of src.
template <bool kCenter, class Src>
struct Normalized {
  const Src& src;
  const float* HWY_RESTRICT gamma;
  const float* HWY_RESTRICT beta;
  float mean, rstd;
  template <class D>
  HWY_INLINE hn::Vec<D> operator()(D d, size_t i) const {
    const hn::Vec<D> b = kCenter ? hn::LoadU(d, beta + i) : hn::Zero(d);
    return Affine<kCenter>(src.Load(d, i), hn::Set(d, mean), hn::Set(d, rstd),
                           hn::LoadU(d, gamma + i), b);
  }
};

// Whether fp32 vectors are narrower than a cache line (below AVX-512; NEON): the
// write-ahead rule below differs for them.
constexpr bool kNarrowVectors =
    hn::MaxLanes(hn::ScalableTag<float>()) * sizeof(float) < kLineBytes;

// How far past the column being stored the in-cache loops ask for each row's line of
// y (a store asks for its line only once it retires). 8 KiB ahead, except for fp32
// rows of a page or more below AVX-512, which ask for the line itself as they store
// it. Intel host, 1 thread, both builds alternating in one process, time with the line
// itself / 8 KiB ahead, +0 and +16 bytes: AVX2 64x1024 0.91-0.92, 256x1024 0.91-0.96,
// 1024x1024 0.98 / 1.03; SSE4 64x1024 to 1024x1024 0.88-0.93; 2 threads AVX2
// 0.89-0.92 and SSE4 0.78-0.91 on the two in L2; RMSNorm 0.87-0.97; 256x4096, 8x4096
// and 2048x512 0.98-1.01. Not at AVX3 (1024x1024 at +16 1.04, 2 threads 1.05) nor for
// shorter rows (SSE4 4096x256 1.04).
template <class T>
HWY_INLINE constexpr size_t YAheadBytes(size_t n) {
  if constexpr (!kNarrowVectors || !std::is_same_v<T, float>) return kWriteAheadBytes;
  return n * sizeof(T) >= 4096 ? 0 : kWriteAheadBytes;
}

// How far ahead the statistics of rows in groups ask for the lines of x: from L3
// kCacheAheadBytes; streamed (from memory) kReadAheadBytes. (Narrower vectors asked
// kCacheAheadBytes ahead, better on an Intel host when only AVX-512 asked for the rows
// of the groups ahead. Since every width asks for the group after next (NormalizeGroup),
// 8 KiB is better on Zen 4 and equal on the Intel host. p25 time 8 KiB / 2 KiB, 1
// thread, +0 / +16 bytes: Zen 4 AVX2 16384x1024 0.82-0.86, 4096x4096 0.80-0.86,
// 2048x8192 0.81-0.83, 21845x768 0.99 / 0.82, 2 threads 0.77-0.82; SSE4 0.90-1.00, 2
// threads 0.94-0.97; half tensors 0.96-1.01. Sapphire Rapids class, 2 KiB / 8 KiB: AVX2
// 0.99-1.01 (1 and 2 threads), SSE4 0.96-1.05 (once 0.87).)
HWY_INLINE constexpr size_t StatsAheadBytes(bool stream) {
  return stream ? kReadAheadBytes : kCacheAheadBytes;
}

// y = Normalized over [c0, c0 + n). With `stream` (outputs far larger than the
// cache), y is written with non-temporal stores while `prefetch` (the next row's x, or
// NULL) is fetched, so that reads from memory go on during the writes, as in a copy.
template <bool kCenter, class Src, class T>
HWY_INLINE void NormalizeSpan(const Src& src, const float* HWY_RESTRICT gamma,
                              const float* HWY_RESTRICT beta, float mean, float rstd,
                              bool stream, bool align_y, size_t c0, size_t n, T* y,
                              const T* prefetch = nullptr) {
  const Normalized<kCenter, Src> normalized{src, gamma, beta, mean, rstd};
  const auto store = [&](auto d, size_t i) HWY_ATTR {
    StoreElems(normalized(d, i), d, y + i);
  };
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = c0;
  size_t end = c0 + n;
  if (stream && reinterpret_cast<uintptr_t>(y) % sizeof(T) == 0 &&
      n >= 2 * kLineElems<T>) {
    // Streamed while the next row is asked for, from y's first line boundary on
    // (StreamLead); the elements before it and after the last streamed vector take
    // regular stores that touch no streamed line.
    const size_t unit = StreamUnit(d, y + c0);
    i += StreamLead(d, y + c0);
    const size_t lines_end = i + (end - i) / unit * unit;
    StoreWithin(d, normalized, c0, i, y);
    if constexpr (StoresInPairs<decltype(d), T>()) {  // a line a step, from a line on
      if (i + N <= lines_end && !IsLineAligned(y + i)) {
        StreamElems(normalized(d, i), d, y + i);
        i += N;
      }
      for (; i + 2 * N <= lines_end; i += 2 * N) {
        if (prefetch != nullptr) hwy::Prefetch(prefetch + i);
        StreamPair(normalized(d, i), normalized(d, i + N), d, y + i);
      }
    }
    for (; i + N <= lines_end; i += N) {
      if (prefetch != nullptr) hwy::Prefetch(prefetch + i);
      StreamElems(normalized(d, i), d, y + i);
    }
    StoreWithin(d, normalized, lines_end, end, y);
    return;
  }
  // With align_y, stores from y's first vector boundary on: y at malloc's or NumPy's
  // 16 bytes would split every vector store across two lines. (LayerNorm with every
  // tensor at +16 bytes, 1 thread, best of 60 in one process: 1024x1024 4-9% faster,
  // 16x4096 15-22%, 64x1024 6-13%, 768 and 1536 columns within 3%; aligned tensors
  // unchanged. With x aligned and y not, it split the loads instead: 0-5% slower,
  // hence align_y.) The span's first and last vectors are computed before the aligned
  // ones between them are stored (y may be x), and stored last over elements that get
  // the same values again.
  const size_t head = align_y && n >= 2 * N ? HeadToAlign(d, y + c0) : 0;
  hn::Vec<decltype(d)> first, last;
  if (head != 0) {
    first = normalized(d, c0);
    last = normalized(d, end - N);
    i += head;
    end = i + (end - i) / N * N;
  }
  const size_t ahead = YAheadBytes<T>(n);
  for (; i + 4 * N <= end; i += 4 * N) {  // unrolled: loop overhead is a third otherwise
    hwy::Prefetch(reinterpret_cast<const char*>(y + i) + ahead);
    StoreFour(d, normalized, i, y);
  }
  ForEachVector(d, i, end, store);
  if (head != 0) {
    StoreElems(last, d, y + c0 + n - N);
    StoreElems(first, d, y + c0);
  }
}

// Normalizes elements [c0, c0 + n) of a row read through src, with its statistics
// (rescaling the source on the slow path).
template <bool kCenter, class T, class Src>
HWY_INLINE void NormalizeRow(const RowNormJobT<T>& job, const Src& src,
                             const SetStats& st, size_t c0, size_t n, T* y,
                             const T* prefetch = nullptr) {
  if (HWY_LIKELY(st.scale == 1.0f)) {
    NormalizeSpan<kCenter>(src, job.gamma, job.beta, st.mean, st.rstd, job.stream,
                           job.align_y, c0, n, y, prefetch);
  } else {
    NormalizeSpan<kCenter>(ScaledSource<Src>{src, st.scale}, job.gamma, job.beta, st.mean,
                           st.rstd, job.stream, job.align_y, c0, n, y);
  }
}

// Rows normalized together: loading gamma and beta for each row costs as much as the
// row's own arithmetic (LayerNorm of 4 MiB, 768 and 1024 columns, 1 thread: 0.46-0.54x
// of a copy one row at a time, 0.63-0.68x four at a time). Eight rows did worse (their
// x no longer stays in L1).
constexpr size_t kGroupRows = 4;
// The part of L1 (48 KiB on this machine's CPU) a group's rows of x may fill and stay
// there between the statistics and the normalization: rows of up to 2048 columns. (The
// A/B measured 768 / 1024 columns, where asking for y helps, and 4096 / 8192, where it
// does not; 2048 is the boundary this size gives, not a measured one.)
constexpr size_t kGroupL1Bytes = 32 * 1024;

// Per-lane moments of a row's whole vectors: its full blocks as SpanMoments takes them,
// then the vectors left over as one shorter block merged lane by lane. (Reduced and
// merged on their own, those vectors held LayerNorm of 4 MiB, 1 thread, at 0.46-0.49x
// of a copy for 384 / 640 / 960 columns, against 0.67-0.70x for 512 and 768; merged
// here, 9-16% faster.) Returns the count per lane. `ahead` (bytes, 0 for none) as in
// SpanMomentsAhead. src by value, as there: a copy in registers.
template <bool kCenter, class D, class Src, class V = hn::Vec<D>>
HWY_INLINE float RowLanes(D d, const Src src, size_t cols, size_t ahead, V& mean, V& m2) {
  BlockTree<kCenter, D> tree;
  const size_t block = BlockElements(d);
  size_t i = tree.template AddPairs<true>(d, src, 0, cols, ahead);
  for (; i + block <= cols; i += block) {
    if (ahead != 0) PrefetchAhead(src, i, block, ahead);
    tree.Add(d, src, i);
  }
  float count = tree.TakeLanes(d, mean, m2);
  const size_t nvec = (cols - i) / hn::Lanes(d);
  if (nvec != 0) {
    V rest_mean, rest_m2;
    BlockMoments<kCenter>(d, src, i, nvec, rest_mean, rest_m2);
    count = AddLanes<kCenter>(d, mean, m2, count, rest_mean, rest_m2,
                              static_cast<float>(nvec));
  }
  return count;
}

// The moments of rows src[0, n) (n <= kGroupRows) from their RowLanes: the lanes of all
// of them reduced at once (ReduceLanes4), then each row's last elements (fewer than a
// vector) merged. With FinalizeGroup, LayerNorm of 4 MiB, 1 thread, A/B in one
// process: 768 columns 10-12% faster than a reduction per row, 1024 columns 4-6%, 4096
// and 8192 unchanged. A group of fewer rows repeats its first, so a row gets the same
// bits alone as beside others (which rows share a group depends on the threads'
// partition).
template <bool kCenter, class D, class Src, class V = hn::Vec<D>>
HWY_INLINE void RowMoments(D d, const Src* src, size_t n, size_t cols, float lane_count,
                           V (&mean)[kGroupRows], V (&m2)[kGroupRows], Moments* m) {
  static_assert(kGroupRows == 4, "ReduceLanes4 takes four rows");
  for (size_t k = n; k < kGroupRows; ++k) {
    mean[k] = mean[0];
    m2[k] = m2[0];
  }
  Moments lanes[kGroupRows] = {};
  if (lane_count != 0.0f) ReduceLanes4<kCenter>(d, mean, m2, lane_count, lanes);
  const size_t whole = cols - cols % hn::Lanes(d);
  for (size_t k = 0; k < n; ++k) {
    m[k] = BlockTree<kCenter, D>::AddTail(d, src[k], whole, cols, lanes[k]);
  }
}

// FinalizeSet(m[k], 1, eps) of a group's rows at once: the same IEEE operations (a
// divide, a square root, a divide; no contraction), so the same bits, in one vector
// (a few percent of RowMoments' gain: 2-7% at 768 columns in a harness).
HWY_INLINE void FinalizeGroup(const Moments (&m)[kGroupRows], float eps,
                              SetStats (&st)[kGroupRows]) {
  const hn::CappedTag<float, 4> d4;
  HWY_ALIGN float m2[kGroupRows], count[kGroupRows], rstd[kGroupRows];
  for (size_t k = 0; k < kGroupRows; ++k) {
    m2[k] = m[k].m2;
    count[k] = static_cast<float>(m[k].count);
  }
  for (size_t k = 0; k < kGroupRows; k += hn::Lanes(d4)) {
    const auto var = hn::Div(hn::Load(d4, m2 + k), hn::Load(d4, count + k));
    hn::Store(hn::Div(hn::Set(d4, 1.0f), hn::Sqrt(hn::Add(var, hn::Set(d4, eps)))), d4,
              rstd + k);
  }
  for (size_t k = 0; k < kGroupRows; ++k) {
    st[k] = SetStats{1.0f, m[k].mean, rstd[k], m[k].mean, rstd[k], m[k]};
  }
}

// Whether streamed rows of `cols` columns go in groups: at AVX-512 (an fp32 vector
// spans a cache line; half tensors too), where the rows are short, or on a core that
// runs AVX-512 (`any_width`, RowNormJobT::stream_groups) whatever the target. With
// narrower vectors, groups stream a line of each row at a time, and on Zen 3 (no
// AVX-512) rows of 768 columns and more were faster one at a time: LayerNorm, 1 thread,
// fastest of 5 in two alternating rounds, groups -> rows one at a time: AVX2
// 16384x1024 8.3-10.2 -> 5.1-6.3 ms, 4096x4096 9.4-10.0 -> 6.1-6.8, 2048x8192
// 9.6-10.0 -> 6.7-6.9, 21845x768 6.7-7.3 -> 5.0-5.5 (oneDNN 8.6-11 ms); SSE4
// 16384x1024 at +16 bytes 15.5-16.2 -> 9.1-10.1 ms, 4096x4096 14.4-16.1 -> 8.4-9.7.
// For 256 columns the groups were faster (AVX2 65536x256 at +16 bytes: 7.8-8.0 ms
// against 9.4-9.8). Zen 4 and 5 keep a group's lines: capped at AVX2 or SSE4 there,
// the groups win at every width (Zen 5, 1 thread, p25, rows one at a time -> groups:
// AVX2 16384x1024 3.5 -> 3.1 ms, 2048x8192 3.7 -> 3.1; SSE4 16384x1024 5.4 -> 4.8,
// 21845x768 5.8 -> 4.9; docs/performance.md), as at AVX3 for half tensors (Zen 4,
// 16384x1024, fastest of 21: bf16 2.2-2.3 ms in groups against 3.2-3.3 one at a time,
// fp16 1.8-1.9 against 2.8-2.9).
constexpr size_t kShortStreamCols = 512;
HWY_INLINE bool StreamGroups(size_t cols, bool any_width) {
  return FloatVectorSpansLine() || any_width || cols <= kShortStreamCols;
}

// y of kGroupRows rows (at y's row stride) from their sources and statistics
// (scale 1): each gamma / beta vector is loaded once for all of them. The same
// operations per element as NormalizeSpan, so the same bits.
//
// With `stream` (StreamGroups; outputs far larger than the cache; every row of y at one
// offset from a cache line, streamed from where StreamLead says), y is written with
// non-temporal stores while the rows of the group after next (up to row ask_end; for the
// types AsksGroupAfterNext names) of x (and residual) are asked for into L2, a line of
// each row per column: memory reads ahead while this group is written, as in a copy,
// and the statistics find their rows in the cache. LayerNorm of 64 MiB, 768-8192 columns,
// AVX3, 1 thread, Zen 4, benchmark: 0.68-0.83x of a copy with the next group asked for
// into L1, where taking the next row's statistics block by block between the stores of
// this one gave 0.49-0.61x (asking for one line in four: 0.52-0.76x; without the
// statistics' own read-ahead: 0.40-0.48x). The group after next, into L2 (Zen 4, 1
// thread, both alternating in one process, p25 time after / before, +0 / +16 bytes): AVX3
// 16384x1024 0.67-0.70 / 0.70-0.71, 4096x4096 0.79-0.80 / 0.75-0.80, 2048x8192 0.80 /
// 0.77, 21845x768 0.64 / 0.67-0.76, 2 threads 0.79-0.99; AVX2 16384x1024 0.90-0.92 /
// 0.84-0.87, 4096x4096 0.83-0.95, 2 threads 0.88-0.97; SSE4 0.95-0.99; fp16 at AVX3
// 0.80-0.92 and at AVX2 0.90-0.95; bf16 0.99-1.04. (At AVX3, the next group into L2:
// 0.83-0.88; the group after next into L1: 0.84-1.01; the group after that, into L2: no
// better.)
#if !HWY_HAVE_SCALABLE  // arrays of vectors; scalable vectors take rows one by one
// Whether streamed groups of T ask for the group after next: fp32 always, fp16 with
// vectors of 32 bytes or more. Half tensors lost or held elsewhere (Zen 4, 1 thread,
// both builds alternating in one process, p25 time asking / not, 16384x1024 and
// 4096x4096, +0 / +16 bytes): fp16 at SSE4 1.02-1.10; bf16 at SSE4 1.04-1.09, at AVX2
// 0.98-1.06, at AVX3 0.97-1.03.
template <class T>
constexpr bool AsksGroupAfterNext() {
  constexpr size_t vector_bytes = hn::MaxLanes(hn::ScalableTag<float>()) * sizeof(float);
  return std::is_same_v<T, float> ||
         (std::is_same_v<T, hwy::float16_t> && vector_bytes >= 32);
}

template <bool kCenter, class T, class Src>
HWY_INLINE void NormalizeGroup(const RowNormJobT<T>& job, const Src (&src)[kGroupRows],
                               const SetStats (&st)[kGroupRows], size_t r, bool stream,
                               size_t ask_end) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t cols = job.cols;
  const size_t ldy = job.ldy;
  const float* HWY_RESTRICT gamma = job.gamma;
  const float* HWY_RESTRICT beta = job.beta;
  T* y = job.y + r * ldy;
  // The rows asked for while streaming: the group after next, [ask_from, ask_end).
  const size_t ask_from = r + 2 * kGroupRows;
  const size_t ask_rows = ask_end > ask_from ? ask_end - ask_from : 0;
  // NK_INLINE_LAMBDA: left to the compiler (HWY_ATTR), the call stayed, and streamed
  // rows took 1.02-1.42x the time of the loops written out in place (16384x1024 and
  // 4096x4096 at AVX3 and AVX2, 1 thread).
  const auto ask = [&](size_t i) NK_INLINE_LAMBDA {
    for (size_t k = 0; k < ask_rows; ++k) {  // the same line of those rows
      const size_t row = ask_from + k;
      PrefetchToL2(job.x + row * job.ldx + i);
      if (job.residual != nullptr) PrefetchToL2(job.residual + row * job.ldr + i);
    }
  };
  V mean[kGroupRows], rstd[kGroupRows];
  for (size_t k = 0; k < kGroupRows; ++k) {
    mean[k] = hn::Set(d, st[k].mean);
    rstd[k] = hn::Set(d, st[k].rstd);
  }
  const auto vector = [&](const Src(&rows)[kGroupRows], size_t i, auto store) HWY_ATTR {
    const V g = hn::LoadU(d, gamma + i);
    const V b = kCenter ? hn::LoadU(d, beta + i) : hn::Zero(d);
    // Every row's x before any row's y. Rows of 1024 floats (any multiple of 4 KiB) put
    // x of row k + 1 at y of row k modulo 4 KiB where x and y lie at one offset from a
    // page, as large allocations do; a load issued after a store whose address matches
    // in those 12 bits waits for it (4K aliasing), and behind streamed stores it waits
    // long. LayerNorm 16384x1024 streamed, AVX2, 1 thread, Zen 3, stored a row at a
    // time: 31-39 ms with y at x's page offset, 10-12 ms with y 1-3 KiB further on;
    // this order: 17-19 ms and 12-14 ms (docs/performance.md).
    V v[kGroupRows];
    HWY_UNROLL(4)
    for (size_t k = 0; k < kGroupRows; ++k) v[k] = rows[k].Load(d, i);
    HWY_UNROLL(4)
    for (size_t k = 0; k < kGroupRows; ++k) {
      store(Affine<kCenter>(v[k], mean[k], rstd[k], g, b), k, y + k * ldy + i);
    }
  };
  // Two vectors of each row, stored as pairs (StoresInPairs).
  const auto pair = [&](const Src(&rows)[kGroupRows], size_t i, auto store) HWY_ATTR {
    const V g0 = hn::LoadU(d, gamma + i), g1 = hn::LoadU(d, gamma + i + N);
    const V b0 = kCenter ? hn::LoadU(d, beta + i) : hn::Zero(d);
    const V b1 = kCenter ? hn::LoadU(d, beta + i + N) : hn::Zero(d);
    V v[kGroupRows][2];  // every row's x before any row's y, as above
    HWY_UNROLL(4)
    for (size_t k = 0; k < kGroupRows; ++k) {
      v[k][0] = rows[k].Load(d, i);
      v[k][1] = rows[k].Load(d, i + N);
    }
    HWY_UNROLL(4)
    for (size_t k = 0; k < kGroupRows; ++k) {
      store(Affine<kCenter>(v[k][0], mean[k], rstd[k], g0, b0),
            Affine<kCenter>(v[k][1], mean[k], rstd[k], g1, b1), d, y + k * ldy + i);
    }
  };
  if (stream) {
    // Streamed from where StreamLead says (sources-inl.h), the same in every row (cols
    // and ldy whole lines, as RowsT checks); the elements before it and after the last
    // streamed vector take regular stores that touch no streamed line, unless joined.
    constexpr size_t kLineVecs = HWY_MIN(4, HWY_MAX(1, kLineElems<T> / hn::MaxLanes(d)));
    // Rows back to back in y at a 16-byte offset from a line (malloc's, NumPy's), with
    // vectors narrower than a line (fp32 below AVX-512; half tensors at AVX2 and AVX3,
    // kQuadsStreamable): row k's last elements and row k + 1's first share a line.
    // Joined, each row is streamed from its line boundary on and each such line whole, by
    // 16-byte streamed stores of both rows' pieces back to back; only the group's first
    // and last lines, shared with other groups, go in pieces. Before, AVX2 wrote those
    // lines by regular stores (read from memory first), and SSE4's vector-aligned rows
    // went in line-sized steps that straddled two lines. Intel host, +16 bytes, 1 thread,
    // both builds alternating in one process, time after / before: SSE4 4096x4096 0.75,
    // 16384x1024 0.77, 65536x256 0.78, RMSNorm 0.69; AVX2 4096x1024 0.88, 16384x1024
    // 0.83, 4096x4096 0.97, RMSNorm 0.83; 2 threads 0.80-0.83; aligned tensors unchanged.
    // Half tensors (LayerNorm 16384x1024, AVX3): bf16 at +16 / +32 / +48 bytes 0.85 /
    // 0.77 / 0.91, fp16 0.85 / 0.72 (at +32 their rows had been streamed whole from the
    // vector boundary, a line in two halves); AVX2 fp16 0.82, bf16 1.00.
    const auto value = [&](size_t k) {
      return Normalized<kCenter, Src>{src[k], gamma, beta, st[k].mean, st[k].rstd};
    };
    constexpr bool kJoinable = kQuadsStreamable<T> && kLineVecs > 1;
    const bool joined = kJoinable && ldy == cols &&
                        reinterpret_cast<uintptr_t>(y) % 16 == 0 && !IsLineAligned(y);
    const auto stream_quads = [&](size_t k, size_t begin, size_t end) HWY_ATTR {
      if constexpr (kJoinable) StreamQuads(value(k), begin, end, y + k * ldy);
    };
    const size_t unit = joined ? kLineElems<T> : StreamUnit(d, y);
    const size_t lead = joined ? HeadToLine(y) : StreamLead(d, y);
    const size_t lines_end = lead + (cols - lead) / unit * unit;
    const auto ends = [&](size_t begin, size_t end) HWY_ATTR {
      for (size_t k = 0; k < kGroupRows; ++k) {
        StoreWithin(d, value(k), begin, end, y + k * ldy);
      }
    };
    if (joined) {
      stream_quads(0, 0, lead);
    } else {
      ends(0, lead);
    }
    size_t i = lead;
    // Vectors narrower than a line (AVX2, SSE4; half tensors at AVX-512) go a line of
    // y at a time: a row's vectors of the line back to back, then the next row's. Four
    // rows a vector at a time kept four lines part filled at once, written to memory in
    // pieces (LayerNorm 65536x256 at +0, 1 thread, alternating processes: AVX2 3.4 ->
    // 2.6-2.8 ms, SSE4 5.8 -> 4.3-4.4 ms). On Zen 4 the statistics' own read-ahead
    // alone left a third of AVX2's time stalled on x's first loads (1 thread, GB/s, +0
    // and +16 bytes, with the next group asked for into L1: 16384x1024 14.0-15.5 ->
    // 18.0-20.7, 4096x4096 14.5-16.3 -> 19.3-20.4, 2 threads 27.6-31.2 -> 39.5-43.2).
    if constexpr (kLineVecs > 1) {
      // The sources copied, as for the in-cache loops below (SSE4 65536x256 and
      // 16384x1024, 1 thread, fastest of 7 in alternating processes: 5-10% faster;
      // AVX2 and half tensors at AVX3 unchanged).
      Src held[kGroupRows];
      for (size_t k = 0; k < kGroupRows; ++k) held[k] = src[k];
      // [lead, lines_end) is whole steps: cols and ldy are whole lines (RowsT checks),
      // and a step of kLineVecs vectors divides a line.
      if constexpr (StoresInPairs<decltype(d), T>()) {  // a line of each row a step
        static_assert(kLineVecs == 2, "a pair of vectors is a line");
        if (IsLineAligned(y + i)) {
          for (; i + 2 * N <= lines_end; i += 2 * N) {
            pair(held, i,
                 [&](V lo, V hi, auto dv, T* p) HWY_ATTR { StreamPair(lo, hi, dv, p); });
          }
        }
      }
      // A step shorter than a line (SCALAR; half tensors at SSE4 / SSSE3) asks once a
      // line: requests a line apart cover every line of x once.
      constexpr size_t kStep = kLineVecs * hn::MaxLanes(d);
      for (; i + kLineVecs * N <= lines_end; i += kLineVecs * N) {
        if (kStep >= kLineElems<T> || (i - lead) % kLineElems<T> == 0) ask(i);
        V g[kLineVecs], b[kLineVecs];
        for (size_t j = 0; j < kLineVecs; ++j) {
          g[j] = hn::LoadU(d, gamma + i + j * N);
          b[j] = kCenter ? hn::LoadU(d, beta + i + j * N) : hn::Zero(d);
        }
        V v[kGroupRows][kLineVecs];  // every row's x before any row's y, as above
        HWY_UNROLL(4)
        for (size_t k = 0; k < kGroupRows; ++k) {
          HWY_UNROLL(4)
          for (size_t j = 0; j < kLineVecs; ++j) v[k][j] = held[k].Load(d, i + j * N);
        }
        HWY_UNROLL(4)
        for (size_t k = 0; k < kGroupRows; ++k) {
          HWY_UNROLL(4)
          for (size_t j = 0; j < kLineVecs; ++j) {
            StreamElems(Affine<kCenter>(v[k][j], mean[k], rstd[k], g[j], b[j]), d,
                        y + k * ldy + i + j * N);
          }
        }
      }
    } else {
      for (; i + N <= lines_end; i += N) {
        ask(i);
        vector(src, i, [&](V v, size_t, T* p) HWY_ATTR { StreamElems(v, d, p); });
      }
    }
    if (joined) {
      for (size_t k = 0; k < kGroupRows; ++k) {
        stream_quads(k, lines_end, cols);
        if (k + 1 < kGroupRows) stream_quads(k + 1, 0, lead);
      }
    } else {
      ends(lines_end, cols);
    }
    return;
  }
  // The sources copied here: the loops below then keep their pointers in registers,
  // where through the reference they were read again after every store of y (a vector
  // store may alias anything). LayerNorm, 1 thread, alternating processes, fastest of
  // 11: AVX2 64x1024 / 256x1024 / 1024x1024 7-11% faster, SSE4 3-5%, AVX3 2-5%. (Copied
  // for AVX3's streamed loop above too: 4096x4096 3% slower.)
  Src held[kGroupRows];
  for (size_t k = 0; k < kGroupRows; ++k) held[k] = src[k];
  // As NormalizeSpan, with align_y, stores from y's first vector boundary on, the same
  // in every row (cols and ldy multiples of N): each row's first and last vectors are
  // computed first and stored last.
  const size_t head = job.align_y && cols % N == 0 && ldy % N == 0 && cols >= 2 * N
                          ? HeadToAlign(d, y)
                          : 0;
  V first[kGroupRows], last[kGroupRows];
  for (size_t k = 0; k < kGroupRows; ++k) first[k] = last[k] = hn::Zero(d);  // for gcc
  if (head != 0) {
    vector(held, 0, [&](V v, size_t k, T*) HWY_ATTR { first[k] = v; });
    vector(held, cols - N, [&](V v, size_t k, T*) HWY_ATTR { last[k] = v; });
  }
  // The aligned vectors: [head, body_end).
  const size_t body_end = head != 0 ? cols - N + head : cols - cols % N;
  size_t i = head;
  const auto store = [&](V v, size_t, T* p) HWY_ATTR { StoreElems(v, d, p); };
  if (cols * sizeof(T) * kGroupRows <= kGroupL1Bytes) {
    // As NormalizeSpan, each row's y line every four vectors, while the group's x is in
    // L1; once it comes from L2 the requests cost more than they save (4 MiB, 4096 and
    // 8192 columns, 1 thread, A/B in the benchmark: 2-4% faster without). Four vectors
    // a step: a step of one spent a third of its instructions on the loop and read two
    // rows' mean and rstd from the stack (LayerNorm, 1 thread, time after / before in
    // one process: AVX2 64x1024 0.89-0.94, 1024x1024 0.96, 2048x512 0.91-0.94; AVX3
    // 64x1024 0.91-0.93; SSE4 0.97). (From the end back, below, it gained nothing: 4096
    // and 8192 columns wait on L2.)
    const size_t ahead = YAheadBytes<T>(cols);
    for (; i + 4 * N <= body_end; i += 4 * N) {
      for (size_t k = 0; k < kGroupRows; ++k) {
        hwy::Prefetch(reinterpret_cast<const char*>(y + k * ldy + i) + ahead);
      }
      if constexpr (StoresInPairs<decltype(d), T>()) {
        const auto store_pair = [&](V lo, V hi, auto dv, T* p)
                                    HWY_ATTR { StorePair(lo, hi, dv, p); };
        pair(held, i, store_pair);
        pair(held, i + 2 * N, store_pair);
      } else {
        HWY_UNROLL(4)
        for (size_t j = 0; j < 4; ++j) vector(held, i + j * N, store);
      }
    }
    for (; i + N <= body_end; i += N) vector(held, i, store);
  } else {
    // The group's x larger than L1: walked from the end back, the columns the statistics
    // read last are still in L1 when asked for first (LayerNorm, 1 thread, A/B in one
    // process: 4096 / 5120 columns 1-4 MiB 2.5-3.5% faster, 8192 2.3%, 16 MiB equal).
    for (size_t j = body_end; j != head; j -= N) vector(held, j - N, store);
    i = body_end;
  }
  if (head != 0) {
    for (size_t k = 0; k < kGroupRows; ++k) {
      StoreElems(last[k], d, y + k * ldy + cols - N);
      StoreElems(first[k], d, y + k * ldy);
    }
    return;
  }
  for (size_t k = 0; k < kGroupRows; ++k) {
    const Normalized<kCenter, Src> value{src[k], gamma, beta, st[k].mean, st[k].rstd};
    const hn::CappedTag<float, 1> d1;
    for (size_t t = i; t < cols; ++t) StoreElems(value(d1, t), d1, y + k * ldy + t);
  }
}
#endif

template <bool kCenter, class T>
void ApplyT(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
            const SetStats& st) {
  WithRowSource(job, row, [&](const auto& src) HWY_ATTR {
    NormalizeRow<kCenter>(job, src, st, c0, n, job.y + row * job.ldy);
  });
}

// The register path for short rows (shortrow-inl.h), instantiated per element type by
// shortrow_{layernorm,rmsnorm}_*.cc.
template <bool kCenter, class T>
bool NormalizeShortRows(const RowNormJobT<T>& job, size_t r0, size_t r1);

// max |s| over elements [c0, c0 + n) of a row (the kernel table's max_abs).
template <class T>
HWY_NOINLINE float RowMaxAbs(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n) {
  float m = 0.0f;
  WithRowSource(job, row, [&](const auto& src) HWY_ATTR {
    m = SpanMaxAbs(hn::ScalableTag<float>(), src, c0, n);
  });
  return m;
}

// Statistics of row r from its fast-path moments `first` (RowStatistics, out of line).
template <bool kCenter, class T>
HWY_NOINLINE SetStats SlowRowStatistics(const RowNormJobT<T>& job, size_t r,
                                        const Moments& first) {
  return RowStatistics(
      job.cols, job.eps, first,
      [&](size_t c0, size_t n, float scale, bool first_pass) {
        return ChunkMomentsT<kCenter>(job, r, c0, n, scale, first_pass);
      },
      [&](size_t c0, size_t n) { return RowMaxAbs(job, r, c0, n); });
}

// Statistics of row r of at most kChunk columns (after the fused forms' sum store).
template <bool kCenter, class T, class Src>
HWY_INLINE SetStats ShortRowStatistics(const RowNormJobT<T>& job, const Src& src,
                                       size_t r) {
  const hn::ScalableTag<float> d;
  const size_t cols = job.cols;
  if (job.residual != nullptr && job.sum != nullptr) StoreSum(job, r, 0, cols);
  // Streamed rows were asked for during the previous row's stores.
  const size_t ahead = job.stream ? 0 : kCacheAheadBytes;
  Moments first;
#if HWY_HAVE_SCALABLE
  // Rows one at a time (no group path): the lanes reduced on their own.
  hn::Vec<decltype(d)> mean, m2;
  const float lane_count = RowLanes<kCenter>(d, src, cols, ahead, mean, m2);
  first = Moments{0.0, 0.0f, 0.0f};
  if (lane_count != 0.0f) first = ReduceLanes<kCenter>(d, mean, m2, lane_count);
  first = BlockTree<kCenter, decltype(d)>::AddTail(d, src, cols - cols % hn::Lanes(d),
                                                   cols, first);
#else
  hn::Vec<decltype(d)> mean[kGroupRows], m2[kGroupRows];
  float lane_count = 0.0f;
  WithStatsSource(job, src, 0, cols, [&](const auto& s) NK_INLINE_LAMBDA {
    lane_count = RowLanes<kCenter>(d, s, cols, ahead, mean[0], m2[0]);
  });
  RowMoments<kCenter>(d, &src, 1, cols, lane_count, mean, m2, &first);
#endif
  return SlowRowStatistics<kCenter>(job, r, first);
}

// Rows [r0, r1); src reads row 0 (after the fused forms' sum store).
template <bool kCenter, class T, class Src>
void RowsT(const RowNormJobT<T>& job, const Src& src0, size_t r0, size_t r1) {
  const hn::ScalableTag<float> d;
  const size_t cols = job.cols;
  const bool store_sum = job.residual != nullptr && job.sum != nullptr;
  const auto store_stats = [&](size_t r, const SetStats& st) {
    if (job.mean != nullptr) job.mean[r] = st.mean_out;
    if (job.rstd != nullptr) job.rstd[r] = st.rstd_out;
  };
  const size_t ahead = StatsAheadBytes(job.stream);
  // Groups stream y where every row of it lies at the same offset from a cache line,
  // streamed from its line boundary on (NormalizeGroup), where StreamGroups says;
  // other streamed rows go one at a time, each from its own
  // (NormalizeSpan). (AVX3, Zen 4: rows one at a time were twice as slow for y at
  // malloc's and NumPy's 16 bytes, 1 thread: 2048x4096 3.5 ms against 1.7 ms aligned,
  // 16384x1024 8.2 ms against 4.4 ms.)
  const uintptr_t y_addr = reinterpret_cast<uintptr_t>(job.y);
  const bool rows_alike = y_addr % sizeof(T) == 0 && cols % kLineElems<T> == 0 &&
                          job.ldy % kLineElems<T> == 0;
  size_t r = r0;
#if !HWY_HAVE_SCALABLE  // whose vectors arrays cannot hold: rows one at a time there
  const bool groups =
      !job.stream || (rows_alike && StreamGroups(cols, job.stream_groups));
  if (cols <= kChunk && groups) {
    for (; r + kGroupRows <= r1; r += kGroupRows) {
      Src src[kGroupRows];
      hn::Vec<decltype(d)> mean[kGroupRows], m2[kGroupRows];
      float lane_count = 0.0f;
      for (size_t k = 0; k < kGroupRows; ++k) {
        src[k] = src0.Row(r + k);
        if (store_sum) StoreSum(job, r + k, 0, cols);
        WithStatsSource(job, src[k], 0, cols, [&](const auto& s) NK_INLINE_LAMBDA {
          lane_count = RowLanes<kCenter>(d, s, cols, ahead, mean[k], m2[k]);
        });
      }
      Moments m[kGroupRows];
      RowMoments<kCenter>(d, src, kGroupRows, cols, lane_count, mean, m2, m);
      // RowStatistics' fast path inline, its slow path after the group: rows of a few
      // KiB spent 7-10% of their time in its calls.
      SetStats st[kGroupRows];
      FinalizeGroup(m, job.eps, st);
      bool finite = true;
      for (size_t k = 0; k < kGroupRows; ++k) {
        finite = finite && std::isfinite(m[k].mean) && std::isfinite(m[k].m2);
      }
      if (HWY_UNLIKELY(!finite)) {
        for (size_t k = 0; k < kGroupRows; ++k) {
          st[k] = SlowRowStatistics<kCenter>(job, r + k, m[k]);
        }
      }
      bool scaled = false;
      for (size_t k = 0; k < kGroupRows; ++k) {
        store_stats(r + k, st[k]);
        scaled |= st[k].scale != 1.0f;
      }
      if (HWY_LIKELY(!scaled)) {
        const size_t ask_end =
            AsksGroupAfterNext<T>() ? HWY_MIN(r + 3 * kGroupRows, r1) : r;
        NormalizeGroup<kCenter>(job, src, st, r, job.stream, ask_end);
        continue;
      }
      for (size_t k = 0; k < kGroupRows; ++k) {
        NormalizeRow<kCenter>(job, src[k], st[k], 0, cols, job.y + (r + k) * job.ldy);
      }
    }
  }
#else
  (void)rows_alike, (void)ahead, (void)store_sum;
#endif
  for (; r < r1; ++r) {
    const Src src = src0.Row(r);
    SetStats st;
    if (cols <= kChunk) {  // one chunk: straight to the span's moments
      st = ShortRowStatistics<kCenter>(job, src, r);
    } else {
      const auto moments = [&](size_t c0, size_t n, float scale, bool first_pass) {
        return ChunkMomentsT<kCenter>(job, r, c0, n, scale, first_pass);
      };
      const Moments first = MergePairwise(0, NumChunks(cols), [&](size_t k) {
        const size_t c0 = k * kChunk;
        return moments(c0, cols - c0 < kChunk ? cols - c0 : kChunk, 1.0f, true);
      });
      st = RowStatistics(cols, job.eps, first, moments,
                         [&](size_t c0, size_t n) { return RowMaxAbs(job, r, c0, n); });
    }
    NormalizeRow<kCenter>(job, src, st, 0, cols, job.y + r * job.ldy,
                          r + 1 < r1 ? job.x + (r + 1) * job.ldx : nullptr);
    store_stats(r, st);
  }
}

// The kernel table's forward entries (rownorm.h) for tensors of type T.
template <class T>
Moments RowChunkMoments(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
                        float scale, bool first_pass) {
  return job.center ? ChunkMomentsT<true>(job, row, c0, n, scale, first_pass)
                    : ChunkMomentsT<false>(job, row, c0, n, scale, first_pass);
}

template <class T>
void RowApply(const RowNormJobT<T>& job, size_t row, size_t c0, size_t n,
              const SetStats& st) {
  VisitVariant(job, [&](auto center) HWY_ATTR {
    ApplyT<decltype(center)::value>(job, row, c0, n, st);
  });
  if (job.stream) hwy::FlushStream();
}

template <class T>
void Rows(const RowNormJobT<T>& job, size_t r0, size_t r1) {
  const bool short_rows = job.center ? NormalizeShortRows<true>(job, r0, r1)
                                     : NormalizeShortRows<false>(job, r0, r1);
  if (!short_rows) {
    VisitVariant(job, [&](auto center) HWY_ATTR {
      WithRowSource(job, 0, [&](const auto& src) HWY_ATTR {
        RowsT<decltype(center)::value>(job, src, r0, r1);
      });
    });
  }
  if (job.stream) hwy::FlushStream();
}

template <class T>
constexpr RowNormKernelsT<T> RowNormTable() {
  return {&Rows<T>,
          &RowChunkMoments<T>,
          &RowMaxAbs<T>,
          &RowApply<T>,
          hn::MaxLanes(hn::ScalableTag<float>()) * sizeof(T),
          HWY_TARGET};
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_ROWNORM_INL_H_
