// SPDX-License-Identifier: Apache-2.0
// rownorm_backward-inl.h: the LayerNorm family's backward row path, per target. Each
// row takes two sums over its elements, of a = gamma * dy and of a * x_hat (x_hat
// recomputed from x and the saved mean / rstd, never stored); then
//   dx = rstd * (a - mean(a) - x_hat * mean(a * x_hat))  (+ dsum; RMSNorm: no mean(a))
// while dy * x_hat and dy are summed over the rows for dgamma and dbeta.
#if defined(NK_KERNELS_ROWNORM_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_ROWNORM_BACKWARD_INL_H_
#undef NK_KERNELS_ROWNORM_BACKWARD_INL_H_
#else
#define NK_KERNELS_ROWNORM_BACKWARD_INL_H_
#endif

#include <stdint.h>

#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/moments-inl.h"
#include "kernels/layernorm/rownorm.h"
#include "kernels/common/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// What the backward reads of one row (tensors of T, widened): x_hat and a at element i,
// x and dy read through sources (sources-inl.h).
template <bool kCenter, class XSrc, class DySrc = XSrc>
struct GradRow {
  XSrc x;
  DySrc dy;
  const float* gamma;
  float mean, rstd;

  template <class D>
  HWY_INLINE hn::Vec<D> XHat(D d, size_t i) const {
    hn::Vec<D> v = x.Load(d, i);
    if (kCenter) v = hn::Sub(v, hn::Set(d, mean));
    return hn::Mul(v, hn::Set(d, rstd));
  }
  template <class D>
  HWY_INLINE hn::Vec<D> Dy(D d, size_t i) const {
    return dy.Load(d, i);
  }
  template <class D>
  HWY_INLINE hn::Vec<D> A(D d, size_t i) const {
    return hn::Mul(hn::LoadU(d, gamma + i), Dy(d, i));
  }
};

template <bool kCenter, class T>
HWY_INLINE GradRow<kCenter, TensorSource<T>> GradRowOf(const RowGradJobT<T>& job,
                                                       size_t r) {
  return {{job.x + r * job.ldx},
          {job.dy + r * job.lddy},
          job.gamma,
          kCenter ? job.mean[r] : 0.0f,
          job.rstd[r]};
}

// Calls fn(row) with row r's GradRow for the sums of its elements [c0, c0 + n), x and
// dy each read as line pairs where that reads the same values faster: fp32 at a
// misaligned address, as the forwards' statistics (WithStatsSource), in rows that come
// from the cache, and in streamed rows longer than job.group_cols. (Streamed rows in
// groups paid for the permutes more than for the split loads: 65536x256 at +16 bytes,
// AVX3, 1 thread, Zen 4, 8.1 -> 7.4 ms without them; Zen 5, 65536x256 and 8192x2048,
// 0-2% faster without. The longer rows, which go one at a time, gained: +16 bytes,
// calls alternating in one process, 1 thread: 4096x4096 4-6%, 64x262144 (in chunks)
// 3%, 2048x8192 0-1%; 2 threads 4096x4096 1%. The same bits.)
// The dx pass needs none: its loads are aligned where dx lies at dy's and x's offset.
template <bool kCenter, class T, class Fn>
HWY_INLINE void WithGradSumsRow(const RowGradJobT<T>& job, size_t r, size_t c0, size_t n,
                                const Fn& fn) {
  const GradRow<kCenter, TensorSource<T>> row = GradRowOf<kCenter>(job, r);
#ifdef NK_LINE_PAIRS
  if constexpr (std::is_same_v<T, float>) {
    // fn2(source) with p's elements as a LinePairSource where that fits in [p0, p0 +
    // ld * rows), else as they are.
    const auto paired = [&](const float* p, const float* p0, size_t ld,
                            const auto& fn2) NK_INLINE_LAMBDA {
      if ((!job.stream || n > job.group_cols) &&
          LinePairSource::Fits(p, c0, n, p0, p0 + (job.rows - 1) * ld + job.cols)) {
        return fn2(LinePairSource(p));
      }
      fn2(TensorSource<float>{p});
    };
    return paired(row.x.x, job.x, job.ldx, [&](const auto& xs) NK_INLINE_LAMBDA {
      paired(row.dy.x, job.dy, job.lddy, [&](const auto& dys) NK_INLINE_LAMBDA {
        using XS = std::decay_t<decltype(xs)>;
        using DS = std::decay_t<decltype(dys)>;
        fn(GradRow<kCenter, XS, DS>{xs, dys, row.gamma, row.mean, row.rstd});
      });
    });
  }
#else
  (void)c0, (void)n;
#endif
  fn(row);
}

// GradSums of a row's elements [c0, c0 + n): blocks of kBlockVectors vectors (two
// chains per lane in each) in a PairSumTree (GradSumsBlock), the vectors left over as
// one shorter block, then the last elements (fewer than a vector) one by one
// (GradSumsRest). `ahead` (bytes, 0 for none): the lines of x and dy asked for that far
// ahead, for rows from memory. (Taking a group's rows block by block side by side was
// no faster: 4 MiB, 1 thread.)
template <class T, class Row, class Tree>
HWY_INLINE void GradSumsBlock(const Row& row, size_t i, size_t ahead, Tree& tree) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  // Two chains: even vectors in sa0 / sb0, odd ones in sa1 / sb1. (Left to the
  // compiler, the step below stayed out of line in some builds, its sums through
  // memory: 1.5x slower.)
  V sa0 = hn::Zero(d), sa1 = hn::Zero(d), sb0 = hn::Zero(d), sb1 = hn::Zero(d);
  const auto add = [&](size_t at, V& sa, V& sb) NK_INLINE_LAMBDA {
    const V a = row.A(d, at);
    sa = hn::Add(sa, a);
    sb = hn::MulAdd(a, row.XHat(d, at), sb);
  };
  HWY_UNROLL(8)
  for (size_t k = 0; k < kBlockVectors; k += 2) {
    // The lines starting in these two vectors asked for among their loads, not all of
    // the block's before them (64 MiB, AVX3, 1 thread, calls of both alternating in
    // one process: 1-4% faster).
    if (ahead != 0) {
      for (size_t e = (k * N + kLineElems<T> - 1) / kLineElems<T> * kLineElems<T>;
           e < (k + 2) * N; e += kLineElems<T>) {
        row.x.Prefetch(i + e, ahead);
        row.dy.Prefetch(i + e, ahead);
      }
    }
    add(i + k * N, sa0, sb0);
    add(i + (k + 1) * N, sa1, sb1);
  }
  tree.Add(d, hn::Add(sa0, sa1), hn::Add(sb0, sb1));
}

template <class Row, class Tree>
HWY_INLINE GradSums GradSumsRest(const Row& row, size_t i, size_t end, Tree& tree) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  if (i + N <= end) {
    V sa = hn::Zero(d), sb = hn::Zero(d);
    for (; i + N <= end; i += N) {
      const V a = row.A(d, i);
      sa = hn::Add(sa, a);
      sb = hn::MulAdd(a, row.XHat(d, i), sb);
    }
    tree.Add(d, sa, sb);
  }
  GradSums s = tree.Take(d);
  const hn::CappedTag<float, 1> d1;
  for (; i < end; ++i) {
    const auto a = row.A(d1, i);
    s.a = hn::GetLane(hn::Add(hn::Set(d1, s.a), a));
    s.a_xhat = hn::GetLane(hn::MulAdd(a, row.XHat(d1, i), hn::Set(d1, s.a_xhat)));
  }
  return s;
}

template <class T, class Row>
HWY_INLINE GradSums RowGradSums(const Row& row, size_t c0, size_t n, size_t ahead) {
  const hn::ScalableTag<float> d;
  const size_t block = kBlockVectors * hn::Lanes(d);
  const size_t end = c0 + n;
  PairSumTree<decltype(d)> tree;
  size_t i = c0;
  for (; i + block <= end; i += block) GradSumsBlock<T>(row, i, ahead, tree);
  return GradSumsRest(row, i, end, tree);
}

// The whole-row sums of the kGradGroupRows rows from row r on, a block at a time
// (Step) between the column steps of the group before them: their loads from L3 then
// overlap that group's stores of dx, which alone ran below the core's rate to L3 (a
// core here moves about 28 GB/s to or from L3, loads or stores: docs/performance.md).
// The same blocks in the same order as RowGradSums, so the same bits. For fp32 rows of
// kSumsAheadCols columns or more in the cache, where a vector spans a line. Intel host,
// AVX3, 1 thread, both builds alternating in one process, time after / before, +0 /
// +16 bytes: 256x4096 0.93 / 0.92, 512x2048 0.93 (+16), 128x8192 0.95 (+0), 64x4096
// 0.93 (+0); 2 threads 256x4096 0.94; 8x4096 1.00. Shorter rows lost (1024 columns
// 0.99-1.01, 4096x256 1.11), and AVX2 and SSE4 gained nothing (256x4096 0.99-1.02).
constexpr size_t kSumsAheadCols = 2048;

template <bool kCenter, class T>
class GradSumsAhead {
 public:
  GradSumsAhead(const RowGradJobT<T>& job, size_t r, size_t ahead)
      : job_(job), r_(r), ahead_(ahead) {}

  // One block of the current row, and that row's rest once less than a block is left.
  // Out of line: inlined, it pushed GradGroup's column step out of line instead.
  HWY_NOINLINE void Step() {
    if (k_ == kGradGroupRows) return;
    WithGradSumsRow<kCenter>(job_, r_ + k_, 0, job_.cols,
                             [&](const auto& row) NK_INLINE_LAMBDA {
                               const size_t block = kBlockVectors * hn::Lanes(D());
                               if (i_ + block <= job_.cols) {
                                 GradSumsBlock<T>(row, i_, ahead_, tree_);
                                 i_ += block;
                               }
                               if (i_ + block > job_.cols) {
                                 sums_[k_++] = GradSumsRest(row, i_, job_.cols, tree_);
                                 i_ = 0;
                                 tree_.Clear();
                               }
                             });
  }

  // Every row's sums, the steps not taken taken here.
  HWY_INLINE void Finish(GradSums* out) {
    while (k_ < kGradGroupRows) Step();
    for (size_t k = 0; k < kGradGroupRows; ++k) out[k] = sums_[k];
  }

 private:
  using D = hn::ScalableTag<float>;
  const RowGradJobT<T>& job_;
  size_t r_, ahead_;
  size_t k_ = 0, i_ = 0;  // the row and the element that the next Step takes
  PairSumTree<D> tree_;
  GradSums sums_[kGradGroupRows];
};

// The `own` lanes of GradGroup's whole vectors.
struct AllLanes {};

// A `put` of GradGroup's columns that keeps row k's vector in held[k].
template <class V>
HWY_INLINE auto HoldIn(V* held) {
  return [held](auto, V v, size_t k, size_t) HWY_ATTR { held[k] = v; };
}

// dx of each row k at column i stored with held[k], the vector before it, as a pair
// (StorePair).
template <class V, class T>
HWY_INLINE auto StorePairIn(const V* held, T* const* dx) {
  return [held, dx](auto dv, V v, size_t k, size_t i)
             HWY_ATTR { StorePair(held[k], v, dv, dx[k] + i - hn::Lanes(dv)); };
}

// Streamed dx asks for the next rows' x and dy as it goes: into L1, but into L2 for the
// groups of AVX-512 (a vector spans a line) whose x and dy (kRows rows of n columns)
// reach this size (our reading: two such groups no longer fit in L1, and the next
// one's lines pushed out this one's before its dx read them). AVX3, Zen 5, 1 thread,
// p25 in alternating processes, into L1 -> into L2: fp32 16384x1024 5-10% faster at +0
// and +16 bytes (2 threads within 5%), 8192x2048 +16 6-21%, bf16 4096x4096 7%; where a
// group is smaller, into L2 cost: 65536x256 4-8% slower at +16, bf16 16384x1024 2-4%.
// Rows one at a time gained nothing (AVX3 4096x4096 within 3%) and AVX2's lost (4096 and
// 8192 columns, both libraries in one process: 2-10% slower); AVX2's groups (4096x4000)
// within 4%.
constexpr size_t kNextRowsToL2Bytes = 32 * 1024;

// How far past the column being stored the dx pass asks for each row's line of dx. A
// store asks for its line (read for ownership) only once it retires, and stores
// waiting on L2 or L3 fill the store buffer: asked for as the column's loads issue,
// the line comes earlier. The forwards ask 8 KiB ahead (kWriteAheadBytes); here that
// was the slower choice (our reading: those requests compete with the loads of x and
// dy, which come from L2 once a group's rows overflow L1). Intel host, 1 thread,
// both builds alternating in one process, time with the line itself / 8 KiB ahead, +0
// and +16 bytes: AVX3 256x4096 0.96-0.98, 1024x1024 0.94 / 0.98, 64x1024 0.89-0.92,
// 8x4096 0.93-0.95, 2048x512 0.93-0.98, 4096x256 0.93-0.99; AVX2 0.85-0.95 from 1024
// columns on, 2048x512 0.96-0.99, 4096x256 1.00. SSE4's 16-byte vectors gain only on rows
// of more than a page (256x4096 0.91-0.93, 8x4096 0.90-0.91) and lose on shorter ones
// (2048x512 1.03-1.05), so they keep the distance there (64x1024 and 1024x1024
// still 1.02-1.04, the distance no longer a constant). Half tensors keep their loop as it
// was: the rule gained nothing there (bf16, AVX3 and AVX2, 1024x1024 1.03-1.05) and any
// change to that loop cost AVX2's bf16 1024x1024 6% (compiled differently around it).
HWY_INLINE size_t DxAheadBytes(size_t n) {
  const size_t vector_bytes = hn::Lanes(hn::ScalableTag<float>()) * sizeof(float);
  return vector_bytes >= 32 || n * sizeof(float) > 4096 ? 0 : kWriteAheadBytes;
}

// dx of kRows rows from row r on, over columns [c0, c0 + n), from their whole rows'
// sums; with kParams, dy * x_hat and dy of each row added in row order to dgamma[0, n)
// and dbeta[0, n) (started from 0 where `first`). Every element is computed once: dx
// may be dy or dsum. Given `next`, the aligned columns of fp32 rows call next->Step()
// (a block of the next rows' sums) once every kBlockVectors vectors of dx.
template <bool kCenter, bool kParams, bool kDsum, size_t kRows, class T>
HWY_INLINE void GradGroup(const RowGradJobT<T>& job, size_t r, size_t c0, size_t n,
                          const GradSums* sums, bool first, float* dgamma, float* dbeta,
                          size_t next_end, GradSumsAhead<kCenter, T>* next = nullptr) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float inv_cols = 1.0f / static_cast<float>(job.cols);
  GradRow<kCenter, TensorSource<T>> row[kRows];
  float k1[kRows], k2[kRows];  // dx = rstd * a + (x_hat * k2 + k1)
  const T* dsum[kRows];
  T* dx[kRows];
  for (size_t k = 0; k < kRows; ++k) {
    row[k] = GradRowOf<kCenter>(job, r + k);
    const float rstd = row[k].rstd;
    k1[k] = kCenter ? -(rstd * (sums[k].a * inv_cols)) : 0.0f;
    k2[k] = -(rstd * (sums[k].a_xhat * inv_cols));
    dsum[k] = kDsum ? job.dsum + (r + k) * job.ldds : nullptr;
    dx[k] = job.dx + (r + k) * job.lddx;
  }
  // Column i of every row: each row's dx handed to put(dv, v, k, i), and with
  // kParams, dy * x_hat and dy added to dgamma and dbeta in the lanes of `own` (a mask,
  // or AllLanes).
  const auto column = [&](auto dv, size_t i, auto put, auto own) HWY_ATTR {
    using VV = hn::Vec<decltype(dv)>;
    constexpr bool kAll = std::is_same_v<decltype(own), AllLanes>;
    const VV g = hn::LoadU(dv, job.gamma + i);
    VV dg = hn::Zero(dv), db = hn::Zero(dv), dg_in = dg, db_in = db;
    if (kParams && (!kAll || !first)) {
      dg_in = hn::LoadU(dv, dgamma + i - c0);
      db_in = hn::LoadU(dv, dbeta + i - c0);
      if (!first) dg = dg_in, db = db_in;
    }
    const auto row_dx = [&](size_t k, VV dy, VV xhat, VV ds) HWY_ATTR {
      VV v = hn::MulAdd(hn::Mul(g, dy), hn::Set(dv, row[k].rstd),
                        hn::MulAdd(xhat, hn::Set(dv, k2[k]), hn::Set(dv, k1[k])));
      if (kDsum) v = hn::Add(v, ds);
      put(dv, v, k, i);
      if (kParams) {
        dg = hn::MulAdd(dy, xhat, dg);
        db = hn::Add(db, dy);
      }
    };
#if HWY_HAVE_SCALABLE
    // Scalable vectors cannot be array elements: row by row (each row's loads before
    // its store, as dx may be dy or dsum).
    for (size_t k = 0; k < kRows; ++k) {
      row_dx(k, row[k].Dy(dv, i), row[k].XHat(dv, i),
             kDsum ? LoadElems(dv, dsum[k] + i) : hn::Zero(dv));
    }
#else
    // Every row's loads before any row's store: rows of separately allocated tensors
    // lie at one offset from a page, so a store to dx[k] and a later load of x or dy
    // of row k + 1 at the same column share their address's low 12 bits, and the load
    // waited for the store (LayerNorm 1024x1024, 1 thread, AVX3, harness: 3-8% faster).
    VV dy[kRows], xhat[kRows], ds[kRows];
    HWY_UNROLL(4)
    for (size_t k = 0; k < kRows; ++k) {
      dy[k] = row[k].Dy(dv, i);
      xhat[k] = row[k].XHat(dv, i);
      ds[k] = kDsum ? LoadElems(dv, dsum[k] + i) : hn::Zero(dv);
    }
    HWY_UNROLL(4)
    for (size_t k = 0; k < kRows; ++k) row_dx(k, dy[k], xhat[k], ds[k]);
#endif
    if (kParams) {
      if constexpr (!kAll) {
        dg = hn::IfThenElse(own, dg, dg_in);
        db = hn::IfThenElse(own, db, db_in);
      }
      hn::StoreU(dg, dv, dgamma + i - c0);
      hn::StoreU(db, dv, dbeta + i - c0);
    }
  };
  const auto store_u = [&](auto dv, auto v, size_t k, size_t i)
                           HWY_ATTR { StoreElems(v, dv, dx[k] + i); };
  const auto each = [&](size_t begin, size_t end) HWY_ATTR {
    ForEachVectorByQuads(d, begin, end, [&](auto dv, size_t i) HWY_ATTR {
      column(dv, i, store_u, AllLanes());
    });
  };
  const size_t end = c0 + n;
  // Runs aligned(a0, a1) over whole vectors [a0, a1), and the head [c0, a0) and tail
  // [a1, end) around it: their whole vectors, then what is left of each (fewer than N
  // elements) as a whole vector overlapping its neighbours, in place of lane by lane
  // (LayerNorm backward 4096x256 at +16 bytes, AVX3, 1 thread, alternating processes:
  // 264-284 -> 251-253 us). Those two are computed, and dgamma / dbeta updated in their
  // own lanes, before anything else of the rows is stored (dx may be dy or dsum); their
  // dx is stored after it all (the overlapped elements get the same bits twice).
  const auto with_edges = [&](size_t a0, size_t a1, const auto& aligned) HWY_ATTR {
    const size_t h0 = c0 + (a0 - c0) / N * N, t1 = a1 + (end - a1) / N * N;
    const auto whole = [&](size_t begin, size_t stop) HWY_ATTR {
      for (size_t i = begin; i < stop; i += N) column(d, i, store_u, AllLanes());
    };
#if !HWY_HAVE_SCALABLE
    if (n >= N && h0 + N <= end && (h0 != a0 || t1 != end)) {
      using V = hn::Vec<decltype(d)>;
      V head[kRows], tail[kRows];
      for (size_t k = 0; k < kRows; ++k) {
        head[k] = tail[k] = hn::Zero(d);
        // The lines of the edges' stores, asked for now: the loop asks for none of
        // them, and stored at the end, each went from L3 (at +16 bytes, a row's first
        // line is the row before's last). AVX3, 1 thread, both builds alternating,
        // time after / before: 1024x1024 +16 bytes 0.95-0.96 (2 threads 0.96),
        // 4096x256 0.98, +0 unchanged; AVX2 1024x1024 1.03, SSE4 1.00.
        if (FloatVectorSpansLine()) {
          hwy::Prefetch(dx[k] + h0);
          hwy::Prefetch(dx[k] + end - 1);
        }
      }
      if (h0 != a0) column(d, h0, HoldIn(head), hn::FirstN(d, a0 - h0));
      if (t1 != end)
        column(d, end - N, HoldIn(tail), hn::Not(hn::FirstN(d, N - (end - t1))));
      whole(c0, h0);
      aligned(a0, a1);
      whole(a1, t1);
      for (size_t k = 0; k < kRows; ++k) {
        if (h0 != a0) StoreElems(head[k], d, dx[k] + h0);
        if (t1 != end) StoreElems(tail[k], d, dx[k] + end - N);
      }
      return;
    }
#endif
    each(c0, a0);
    aligned(a0, a1);
    each(a1, end);
  };
  // Streamed where every row of dx lies at one offset from a cache line, from where
  // StreamLead says (as the forwards' NormalizeGroup), while the next rows' x and dy
  // (up to row next_end) are asked for.
  const uintptr_t dx_addr = reinterpret_cast<uintptr_t>(dx[0] + c0);
  if (job.stream && n >= 2 * kLineElems<T> && dx_addr % sizeof(T) == 0 &&
      job.lddx % kLineElems<T> == 0) {
    const size_t unit = StreamUnit(d, dx[0] + c0);
    const size_t lead = c0 + StreamLead(d, dx[0] + c0);
    const size_t lines_end = lead + (end - lead) / unit * unit;
    const auto stream = [&](auto dv, auto v, size_t k, size_t i)
                            HWY_ATTR { StreamElems(v, dv, dx[k] + i); };
    const bool to_l2 = kRows > 1 && FloatVectorSpansLine() &&
                       kRows * n * 2 * sizeof(T) >= kNextRowsToL2Bytes;
    const auto lines = [&]() NK_INLINE_LAMBDA {
      for (size_t i = lead; i < lines_end; i += N) {
        if (i % kLineElems<T> < N) {
          for (size_t q = r + kRows; q < next_end; ++q) {
            if (to_l2) {
              PrefetchToL2(job.x + q * job.ldx + i);
              PrefetchToL2(job.dy + q * job.lddy + i);
            } else {
              hwy::Prefetch(job.x + q * job.ldx + i);
              hwy::Prefetch(job.dy + q * job.lddy + i);
            }
          }
        }
        column(d, i, stream, AllLanes());
      }
    };
#ifdef NK_LINE_PAIRS
    // Whole rows one after another in dx, each a line boundary past its start (malloc's
    // and NumPy's 16 bytes): row k's last elements and row k + 1's first share a line.
    // Stored by regular stores, that line was read from memory first; here the group's
    // rows take it whole, streamed, from one permute of their edge vectors. The group's
    // first and last lines hold rows of other groups, perhaps other threads': regular
    // stores there, lane by lane, as masked stores were slower (StoreWithin).
    if constexpr (std::is_same_v<T, float> && kRows > 1) {
      if (N == kLineElems<T> && c0 == 0 && n == job.cols && job.lddx == job.cols &&
          lead != c0) {
        using V = hn::Vec<decltype(d)>;
        const size_t head = lead - c0;  // the other elements of its line: tail
        V first_vec[kRows], last_vec[kRows];
        // Their own lanes lie outside the streamed columns; both before the joined
        // stores, which write row k + 1's first elements (dx may be dy or dsum).
        column(d, c0, HoldIn(first_vec), hn::FirstN(d, head));
        column(d, end - N, HoldIn(last_vec), hn::Not(hn::FirstN(d, head)));
        lines();
        const __m512i idx = ShiftedLanes(head);
        for (size_t k = 0; k + 1 < kRows; ++k) {
          const V joined{
              _mm512_permutex2var_ps(last_vec[k].raw, idx, first_vec[k + 1].raw)};
          hn::Stream(joined, d, dx[k] + lines_end);
        }
        StoreLanes(d, first_vec[0], 0, head, dx[0] + c0);
        StoreLanes(d, last_vec[kRows - 1], head, N, dx[kRows - 1] + lines_end);
        return;
      }
    }
#endif
    // Half tensors at AVX-512 16 bytes off a line: the edges streamed too, in 16-byte
    // pieces, in place of regular stores into lines that streamed stores fill (as rows
    // streamed whole from a vector boundary at +32 bytes are). LayerNorm backward bf16,
    // 1 thread, both builds alternating in one process, time after / before: 16384x1024
    // at +16 bytes 0.93, at +48 0.89 (2 threads 0.94), 4096x4096 0.98. (AVX2, whose
    // 16-byte half vectors show no such loss, is left alone: a third call of `column`
    // on its full vectors made the loop 1.25-1.7x slower there.)
#if HWY_TARGET == HWY_AVX3
    if constexpr (!std::is_same_v<T, float>) {
      constexpr size_t kQuad = hn::MaxLanes(QuadTag<T>());  // the forwards' 16 bytes
      const bool quads =
          dx_addr % 16 == 0 && (lead - c0) % kQuad == 0 && (end - lines_end) % kQuad == 0;
      const auto edge = [&](size_t begin, size_t stop) HWY_ATTR {
        if (!quads) return each(begin, stop);
        const QuadTag<T> dq;
        for (size_t i = begin; i < stop; i += kQuad) column(dq, i, stream, AllLanes());
      };
      edge(c0, lead);
      lines();
      edge(lines_end, end);
      return;
    }
#endif
    each(c0, lead);
    lines();
    each(lines_end, end);
    return;
  }
  // Else stored from dx's first vector boundary on where every row has it (NumPy's
  // arrays lie 16 bytes past one: x and dy at the same offset are then loaded aligned
  // too), asking for the lines of dx as DxAheadBytes says.
  const size_t head = job.lddx % N == 0 ? HWY_MIN(n, HeadToAlign(d, dx[0] + c0)) : 0;
  const size_t a0 = c0 + head;
  with_edges(a0, a0 + (end - a0) / N * N, [&](size_t begin, size_t stop) HWY_ATTR {
    size_t i = begin;
    if constexpr (std::is_same_v<T, float>) {
      const size_t ahead = DxAheadBytes(stop - begin);
      constexpr size_t kStepsPerBlock = HWY_MAX(size_t{1}, kBlockVectors / kRows);
      size_t steps = 0;
      for (; i < stop; i += N) {
        if (i % kLineElems<T> < N) {
          for (size_t k = 0; k < kRows; ++k) {
            hwy::Prefetch(reinterpret_cast<const char*>(dx[k] + i) + ahead);
          }
        }
        column(d, i, store_u, AllLanes());
        if (next != nullptr && ++steps == kStepsPerBlock) {
          steps = 0;
          next->Step();
        }
      }
      return;
    }
    // bf16 at AVX3: two vectors of each row a step, stored as a pair (LayerNorm
    // backward bf16, 1 thread, time after / before: 1024x1024 and 256x4096 0.95-0.96,
    // at +16 bytes 0.91-0.92). Streamed dx in pairs was 2-6% slower (16384x1024).
#if !HWY_HAVE_SCALABLE
    if constexpr (StoresInPairs<decltype(d), T>()) {
      hn::Vec<decltype(d)> lo[kRows];
      for (; i + 2 * N <= stop; i += 2 * N) {
        for (size_t k = 0; k < kRows; ++k) {
          hwy::Prefetch(reinterpret_cast<const char*>(dx[k] + i) + kWriteAheadBytes);
        }
        column(d, i, HoldIn(lo), AllLanes());
        column(d, i + N, StorePairIn(lo, dx), AllLanes());
      }
    }
#endif
    for (; i < stop; i += N) {
      if (i % kLineElems<T> < N) {
        for (size_t k = 0; k < kRows; ++k) {
          hwy::Prefetch(reinterpret_cast<const char*>(dx[k] + i) + kWriteAheadBytes);
        }
      }
      column(d, i, store_u, AllLanes());
    }
  });
}

// Calls fn(center, params, dsum) with std::integral_constant<bool> arguments for the
// job's variant (params: dgamma / dbeta wanted): one branch per call, none in the loops.
template <class Job, class Fn>
HWY_INLINE void VisitGradVariant(const Job& job, bool params, const Fn& fn) {
  using T = std::true_type;
  using F = std::false_type;
  const bool dsum = job.dsum != nullptr;
  if (job.center) {
    if (params) return dsum ? fn(T(), T(), T()) : fn(T(), T(), F());
    return dsum ? fn(T(), F(), T()) : fn(T(), F(), F());
  }
  if (params) return dsum ? fn(F(), T(), T()) : fn(F(), T(), F());
  return dsum ? fn(F(), F(), T()) : fn(F(), F(), F());
}

// How far ahead (bytes, 0 for none) the sums ask for the lines of x and dy: far for
// streamed tensors; for rows from L3, as the forwards' statistics, where a vector is a
// line or the loads split across lines. 4 MiB, 1 thread, calls of both builds
// alternating, p25: AVX3 +16 bytes 9-15% faster (1024x1024 365 -> 317 us), +0 up to 13%
// (4096x256); AVX2 +16 7-9% (1024x1024 377 -> 348 us). With narrower vectors on a
// boundary the requests only cost: AVX2 +0 1024x1024 in groups 3-8% slower, rows split
// in chunks (4x262144, 1x1048576, 16x65536) 3-4%; SSE4 64x1024 5%.
template <class T>
HWY_INLINE size_t SumsAhead(const RowGradJobT<T>& job) {
  if (job.stream) return kReadAheadBytes;
  const size_t vector_bytes = hn::Lanes(hn::ScalableTag<float>()) * sizeof(T);
  const uintptr_t addresses =
      reinterpret_cast<uintptr_t>(job.x) | reinterpret_cast<uintptr_t>(job.dy);
  const bool split = addresses % vector_bytes != 0;
  return FloatVectorSpansLine() || split ? kCacheAheadBytes : 0;
}

// grad_rows of the kernel table for one variant: groups of kGradGroupRows rows, then
// the rest one by one; each group's sums first (here, or given), then its dx.
template <bool kCenter, bool kParams, bool kDsum, class T>
void GradRowsT(const RowGradJobT<T>& job, size_t r0, size_t r1, size_t c0, size_t n,
               const GradSums* sums, float* dgamma, float* dbeta) {
  const size_t ahead = SumsAhead(job);
  const auto sums_of = [&](size_t r, auto& out) {
    for (size_t k = 0; k < sizeof(out) / sizeof(out[0]); ++k) {
      if (sums != nullptr) {
        out[k] = sums[r + k];
        continue;
      }
      WithGradSumsRow<kCenter>(job, r + k, 0, job.cols,
                               [&](const auto& row) NK_INLINE_LAMBDA {
                                 out[k] = RowGradSums<T>(row, 0, job.cols, ahead);
                               });
    }
  };
  // Where a vector spans a line, the groups won even for rows sharing L1 sets
  // (RowGradJobT::group_rows): AVX3, Zen 4, 1 thread, fastest of 21, rows one at a
  // time -> groups, +0 / +16 bytes: 1024x1024 303 / 339 -> 236 / 304 us, 16384x1024
  // 8.8 / 9.2 -> 6.9 / 7.8 ms. But not for fp32 rows of more than job.group_cols
  // columns (layernorm_backward.cc): AVX3, Zen 5, 1 thread, p25 in alternating processes,
  // groups -> rows one at a time: 4096x4096 +0 8.1-8.4 -> 5.9-6.7 ms, 2048x8192 8.3-8.5
  // -> 5.6-6.0 ms, 4096x4000 (rows that share no sets) 7-19% faster, chunked rows
  // (64x262144) 17-30%. Our reading: a group's x and dy (over 64 KiB) leave L1 between
  // its sums and its dx, the more so as the dx pass asks for the next group's lines
  // (asked into L2 instead, the groups of 4096x4096 gained 10-18%). At 2048 columns the
  // groups stay (8192x2048 +16 bytes 9-20% slower one at a time). Half rows keep them
  // (bf16 4096x4096 4.7-4.9 ms in groups, 6.5-6.7 one at a time), and so do narrower
  // vectors (AVX2 4096x4000 21% slower one at a time).
  const bool groups = FloatVectorSpansLine()
                          ? !std::is_same_v<T, float> || n <= job.group_cols
                          : job.group_rows;
  bool first = true;
  size_t r = r0;
  // fp32 rows in the cache: each group's dx pass takes the next group's sums between
  // its column steps (GradSumsAhead).
  const bool sums_ahead = std::is_same_v<T, float> && FloatVectorSpansLine() &&
                          sums == nullptr && !job.stream && job.cols >= kSumsAheadCols;
  GradSums s[kGradGroupRows];
  if (groups && sums_ahead && r + kGradGroupRows <= r1) sums_of(r, s);
  for (; groups && r + kGradGroupRows <= r1; r += kGradGroupRows) {
    // One call of GradGroup: a second one here pushed its steps out of line (GCC).
    GradSumsAhead<kCenter, T> next(job, r + kGradGroupRows, ahead);
    const bool take_next = sums_ahead && r + 2 * kGradGroupRows <= r1;
    if (!sums_ahead) sums_of(r, s);
    GradGroup<kCenter, kParams, kDsum, kGradGroupRows>(
        job, r, c0, n, s, first, dgamma, dbeta, HWY_MIN(r + 2 * kGradGroupRows, r1),
        take_next ? &next : nullptr);
    if (take_next) next.Finish(s);
    first = false;
  }
  for (; r < r1; ++r) {
    GradSums s[1];
    sums_of(r, s);
    GradGroup<kCenter, kParams, kDsum, 1>(job, r, c0, n, s, first, dgamma, dbeta,
                                          HWY_MIN(r + 2, r1));
    first = false;
  }
}

// The kernel table's two backward functions (rownorm.h) for tensors of type T.
template <class T>
GradSums RowGradChunkSums(const RowGradJobT<T>& job, size_t row, size_t c0, size_t n) {
  const size_t ahead = SumsAhead(job);
  GradSums s;
  const auto sum = [&](const auto& r)
                       NK_INLINE_LAMBDA { s = RowGradSums<T>(r, c0, n, ahead); };
  if (job.center) {
    WithGradSumsRow<true>(job, row, c0, n, sum);
  } else {
    WithGradSumsRow<false>(job, row, c0, n, sum);
  }
  return s;
}

template <class T>
void GradRows(const RowGradJobT<T>& job, size_t r0, size_t r1, size_t c0, size_t n,
              const GradSums* sums, float* dgamma, float* dbeta) {
  VisitGradVariant(job, dgamma != nullptr, [&](auto center, auto params, auto dsum)
                                               HWY_ATTR {
    GradRowsT<decltype(center)::value, decltype(params)::value, decltype(dsum)::value>(
        job, r0, r1, c0, n, sums, dgamma, dbeta);
  });
  if (job.stream) hwy::FlushStream();
}

// out[j] for j in [j0, j1): the sum over parts p of partial[p * cols + j], pairwise in
// place (part p takes part p + s at s = 1, 2, 4, ...), the last addition written to
// out. Element by element, so the same bits at any vector width. (Against the op
// layer's loop, compiled for the baseline: 1 thread, time after / before, 16x3000 AVX3
// 0.92, AVX2 0.95; 64x1024 at +16 bytes AVX3 0.94; 8x4096 AVX3 0.99, AVX2 1.02.)
template <class T>
void MergeParts(float* partial, size_t parts, size_t cols, size_t j0, size_t j1,
                float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto add = [&](const float* a, const float* b, float* to) HWY_ATTR {
    size_t j = j0;
    for (; j + N <= j1; j += N) {
      hn::StoreU(hn::Add(hn::LoadU(d, a + j), hn::LoadU(d, b + j)), d, to + j);
    }
    for (; j < j1; ++j) to[j] = a[j] + b[j];
  };
  size_t s = 1;
  for (; 2 * s < parts; s *= 2) {
    for (size_t p = 0; p + s < parts; p += 2 * s) {
      add(partial + p * cols, partial + (p + s) * cols, partial + p * cols);
    }
  }
  add(partial, partial + s * cols, out);
}

template <class T>
constexpr RowGradKernelsT<T> RowGradTable() {
  return {&RowGradChunkSums<T>, &GradRows<T>, &MergeParts<T>, HWY_TARGET};
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_ROWNORM_BACKWARD_INL_H_
