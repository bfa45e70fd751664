// SPDX-License-Identifier: Apache-2.0
// channelnorm_backward-inl.h: BatchNorm's backward per target. A channel's two
// sums, of dy and of dy * x_hat, as pairwise trees of per-lane block sums (the bound
// of design.md), then its dx by one map per channel (SpanGrad):
//   dx = gamma * rstd * (dy - mean(dy) - x_hat * mean(dy * x_hat))
// NCHW reads a channel as runs of contiguous planes; NHWC puts channels in
// lanes, as the forward's columns (channelnorm-inl.h), narrow rows widened to
// whole vectors.
#if defined(NK_KERNELS_CHANNELNORM_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_CHANNELNORM_BACKWARD_INL_H_
#undef NK_KERNELS_CHANNELNORM_BACKWARD_INL_H_
#else
#define NK_KERNELS_CHANNELNORM_BACKWARD_INL_H_
#endif

#include <stdint.h>

#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/batchnorm/channelnorm-inl.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/moments-inl.h"
#include "kernels/common/sources-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- planes
// (NCHW)

// Adds one plane's sums, x and dy [0, len), to `tree` (each full block of kBlockVectors
// vectors, then the vectors left as one block) and `tails` (the elements left, one
// lane, as one block): both Add(d, a, b). ask(i, n) asks for what elements [i, i + n)
// will need next.
template <class T, class Tree, class Tails, class Ask>
HWY_INLINE void PlaneGradBlocks(const T* xp, const T* dp, size_t len, float mean,
                                float rstd, const Ask& ask, Tree& tree, Tails& tails) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t block = kBlockVectors * N;
  const V vmean = hn::Set(d, mean);
  const V vrstd = hn::Set(d, rstd);
  size_t i = 0;
  for (; i + block <= len; i += block) {
    ask(i, block);
    // Two chains: even vectors in sa0 / sb0, odd ones in sa1 / sb1.
    V sa0 = hn::Zero(d), sa1 = hn::Zero(d), sb0 = hn::Zero(d), sb1 = hn::Zero(d);
    const auto add = [&](size_t at, V& sa, V& sb) HWY_ATTR {
      const V g = LoadElems(d, dp + at);
      sa = hn::Add(sa, g);
      sb = hn::MulAdd(g, hn::Mul(hn::Sub(LoadElems(d, xp + at), vmean), vrstd), sb);
    };
    HWY_UNROLL(8)
    for (size_t k = 0; k < kBlockVectors; k += 2) {
      add(i + k * N, sa0, sb0);
      add(i + (k + 1) * N, sa1, sb1);
    }
    tree.Add(d, hn::Add(sa0, sa1), hn::Add(sb0, sb1));
  }
  if (i < len) ask(i, len - i);
  if (i + N <= len) {
    V sa = hn::Zero(d), sb = hn::Zero(d);
    for (; i + N <= len; i += N) {
      const V g = LoadElems(d, dp + i);
      sa = hn::Add(sa, g);
      sb = hn::MulAdd(g, hn::Mul(hn::Sub(LoadElems(d, xp + i), vmean), vrstd), sb);
    }
    tree.Add(d, sa, sb);
  }
  if (i < len) {  // fewer than a vector: one lane, one block per plane
    hn::Vec<decltype(d1)> sa = hn::Zero(d1), sb = hn::Zero(d1);
    for (; i < len; ++i) {
      const auto g = LoadElems(d1, dp + i);
      sa = hn::Add(sa, g);
      const auto xhat =
          hn::Mul(hn::Sub(LoadElems(d1, xp + i), hn::Set(d1, mean)), hn::Set(d1, rstd));
      sb = hn::MulAdd(g, xhat, sb);
    }
    tails.Add(d1, sa, sb);
  }
}

template <class T>
GradSums PlanesGradSums(const T* x, const T* dy, size_t planes, size_t stride, size_t len,
                        float mean, float rstd, bool from_memory) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  PairSumTree<decltype(d)> tree;
  PairSumTree<decltype(d1)> tails;
  for (size_t p = 0; p < planes; ++p) {
    // The lines of elements [i, i + n) of plane p, kReadAheadBytes further on in
    // the planes' sequence: the next plane's first lines near the end of one.
    const auto ask_ahead = [&](size_t i, size_t n) {
      if (!from_memory) return;
      constexpr size_t kLine = kLineElems<T>;
      size_t at = p * len + i + kReadAheadBytes / sizeof(T);
      size_t q = at / len;  // plane q, element `at` of it
      at -= q * len;
      for (size_t k = 0; k < n && q < planes; k += kLine) {
        hwy::Prefetch(x + q * stride + at);
        hwy::Prefetch(dy + q * stride + at);
        for (at += kLine; at >= len; at -= len) ++q;
      }
    };
    PlaneGradBlocks(x + p * stride, dy + p * stride, len, mean, rstd, ask_ahead, tree,
                    tails);
  }
  const GradSums v = tree.Take(d), t = tails.Take(d1);
  return {v.a + t.a, v.a_xhat + t.a_xhat};
}

// A PairSumTree kept in the caller's memory (kInOrderTreeLevels levels): a channel's
// tree while the planes of the other channels are read between its blocks.
template <class D>
class HeldSumTree {
 public:
  using V = hn::Vec<D>;
  static constexpr size_t kLanes = hn::MaxLanes(D());
  static constexpr size_t kFloats = 2 * kInOrderTreeLevels * kLanes;

  HeldSumTree(float* levels, uint32_t* blocks) : levels_(levels), blocks_(blocks) {}
  HWY_INLINE void Add(D d, V a, V b) {
    AddToSumTree(d, (*blocks_)++, a, b, levels_, levels_ + kInOrderTreeLevels * kLanes,
                 kLanes);
  }
  // As PairSumTree::Take; then the tree is empty again.
  HWY_INLINE GradSums Take(D d) {
    const GradSums sums = SumTreeTotals(d, *blocks_, levels_,
                                        levels_ + kInOrderTreeLevels * kLanes, kLanes);
    *blocks_ = 0;
    return sums;
  }

 private:
  float* levels_;
  uint32_t* blocks_;
};

// Floats of PlanesGradSumsInOrder's trees per channel.
inline size_t InOrderTreeFloats() {
  return HeldSumTree<hn::ScalableTag<float>>::kFloats +
         HeldSumTree<hn::CappedTag<float, 1>>::kFloats;
}

// planes_grad_sums' pieces of whole planes (channelnorm.h), read in memory order.
template <class T>
void PlanesGradSumsInOrder(const T* x, const T* dy, size_t n, size_t c, size_t len,
                           size_t per_piece, const float* mean, const float* rstd,
                           bool from_memory, float* trees, uint32_t* blocks,
                           GradSums* out) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t floats = InOrderTreeFloats();
  for (size_t ci = 0; ci < 2 * c; ++ci) blocks[ci] = 0;
  for (size_t sample = 0; sample < n; ++sample) {
    const bool last = (sample + 1) % per_piece == 0 || sample + 1 == n;
    for (size_t ci = 0; ci < c; ++ci) {
      const size_t at = (sample * c + ci) * len;
      // The lines kReadAheadBytes further on: planes follow each other in memory.
      const auto ask_ahead = [&](size_t i, size_t count) {
        if (!from_memory) return;
        constexpr size_t kLine = kLineElems<T>;
        const size_t ahead = at + i + kReadAheadBytes / sizeof(T);
        for (size_t k = 0; k < count; k += kLine) {
          hwy::Prefetch(x + ahead + k);
          hwy::Prefetch(dy + ahead + k);
        }
      };
      float* own = trees + ci * floats;
      HeldSumTree<decltype(d)> tree(own, blocks + 2 * ci);
      HeldSumTree<decltype(d1)> tails(own + HeldSumTree<decltype(d)>::kFloats,
                                      blocks + 2 * ci + 1);
      PlaneGradBlocks(x + at, dy + at, len, mean[ci], rstd[ci], ask_ahead, tree, tails);
      if (last) {
        const GradSums v = tree.Take(d), t = tails.Take(d1);
        out[ci] = {v.a + t.a, v.a_xhat + t.a_xhat};
      }
    }
    if (last) out += c;
  }
}

// dx of the element(s) at i by the channel's map.
template <class D, class T>
HWY_INLINE hn::Vec<D> GradValue(D d, const T* x, const T* dy, size_t i,
                                const SpanGrad& g) {
  const auto xhat =
      hn::Mul(hn::Sub(LoadElems(d, x + i), hn::Set(d, g.mean)), hn::Set(d, g.rstd));
  const auto t =
      hn::MulSub(LoadElems(d, dy + i), hn::Set(d, g.dy_scale), hn::Set(d, g.mean_dy));
  return hn::Mul(hn::NegMulAdd(xhat, hn::Set(d, g.mean_dy_xhat), t), hn::Set(d, g.k));
}

// dx may be dy: each element is read before it is written.
template <class T>
void SpanGradApply(const T* x, const T* dy, size_t n, const SpanGrad& g, bool stream,
                   T* dx) {
  StoreSpan(n, stream, dx,
            [&](auto d, size_t i) HWY_ATTR { return GradValue(d, x, dy, i, g); });
}

// Planes of up to this many lines have their shared lines joined (PlanesGradApply):
// BatchNorm backward NCHW, AVX3, 1 and 2 threads, +0 and +16 bytes, time joined /
// stored in parts: 256x512x7x7 0.70-0.75, 256x256x14x14 0.93-0.99; 256x128x20x20 and
// 64x128x28x28 0.98-1.03, 32x64x56x56 at +16 bytes 1.02-1.05 (the lines a plane
// shares are fewer, and its first and last vectors cost a computation each).
constexpr size_t kJoinedPlaneLines = 16;

// dx of a channel's planes, streamed, their shared lines joined (channelnorm.h). fp32
// at AVX-512, where a vector is a line: each plane's first and last vectors are
// computed before its lines are streamed (dx may be dy); the line it shares with the
// previous channel's plane is streamed whole from that plane's last vector (edges[p])
// and its own first one, by one two-table permute, and its own last vector is held in
// edges[p] for the next channel's plane.
template <class T>
bool PlanesGradApply(const T* x, const T* dy, size_t planes, size_t stride, size_t len,
                     const SpanGrad& g, T* dx, PlaneEdge* edges, bool edges_in,
                     bool hold) {
#ifdef NK_LINE_PAIRS
  const hn::ScalableTag<float> d;
  if constexpr (std::is_same_v<T, float> &&
                hn::MaxLanes(hn::ScalableTag<float>()) == kLineFloats) {
    if (len >= 2 * kLineFloats && len <= kJoinedPlaneLines * kLineFloats &&
        reinterpret_cast<uintptr_t>(dx) % sizeof(T) == 0) {
      using V = hn::Vec<decltype(d)>;
      constexpr size_t N = kLineFloats;
      for (size_t p = 0; p < planes; ++p) {
        const T* xp = x + p * stride;
        const T* dp = dy + p * stride;
        T* y = dx + p * stride;
        const size_t head = HeadToLine(y);
        const size_t lines_end = head + (len - head) / N * N;
        const V first = GradValue(d, xp, dp, 0, g);
        const V last = GradValue(d, xp, dp, len - N, g);
        for (size_t i = head; i < lines_end; i += N) {
          hn::Stream(GradValue(d, xp, dp, i, g), d, y + i);
        }
        if (head != 0) {
          if (edges_in) {
            const V prev = hn::Load(d, edges[p].lanes);
            hn::Stream(V{_mm512_permutex2var_ps(prev.raw, ShiftedLanes(head), first.raw)},
                       d, y + head - N);
          } else {
            StoreLanes(d, first, 0, head, y);
          }
        }
        if (lines_end != len) {
          if (hold) {
            hn::Store(last, d, edges[p].lanes);
          } else {
            StoreLanes(d, last, N - (len - lines_end), N, y + lines_end);
          }
        }
      }
      return true;
    }
  }
#endif
  (void)edges, (void)edges_in, (void)hold;
  for (size_t p = 0; p < planes; ++p) {
    SpanGradApply(x + p * stride, dy + p * stride, len, g, true, dx + p * stride);
  }
  return false;
}

// ---------------------------------------------------------------- columns
// (NHWC)

// Whether the column sums take four vectors of a row at a time (panel_sums below): on
// AVX-512, where it was measured.
constexpr bool kColumnPanels = HWY_MAX_BYTES >= 64 && !HWY_HAVE_SCALABLE;

// Per-column sums of [rows][c] by blocks of kBlockVectors rows (two chains per
// lane) in a pairwise tree per column; scratch holds the tree's levels.
template <class T>
void ColumnGradSumsTree(const T* x, const T* dy, size_t rows, size_t c, const float* mean,
                        const float* rstd, bool from_memory, float* scratch,
                        float* sum_dy, float* sum_dy_xhat) {
  constexpr size_t K = kBlockVectors;
  const size_t levels = ColumnLevels(rows);
  float* level_a = scratch;
  float* level_b = scratch + levels * c;
  const size_t blocks = rows / K;
  // k rows of the columns at j, from row r0 on, summed into a and b (two
  // chains).
  const auto rows_sums = [&](auto d, size_t r0, size_t k, size_t j, auto& a,
                             auto& b) HWY_ATTR {
    using VV = hn::Vec<decltype(d)>;
    const VV m = hn::LoadU(d, mean + j);
    const VV rs = hn::LoadU(d, rstd + j);
    // Two chains: even rows in sa0 / sb0, odd ones in sa1 / sb1.
    VV sa0 = hn::Zero(d), sa1 = hn::Zero(d), sb0 = hn::Zero(d), sb1 = hn::Zero(d);
    const auto add = [&](size_t r, VV& sa, VV& sb) HWY_ATTR {
      const size_t at = (r0 + r) * c + j;
      const VV g = LoadElems(d, dy + at);
      sa = hn::Add(sa, g);
      sb = hn::MulAdd(g, hn::Mul(hn::Sub(LoadElems(d, x + at), m), rs), sb);
    };
    size_t r = 0;
    for (; r + 2 <= k; r += 2) {
      add(r, sa0, sb0);
      add(r + 1, sa1, sb1);
    }
    if (r < k) add(r, sa0, sb0);
    a = hn::Add(sa0, sa1);
    b = hn::Add(sb0, sb1);
  };
  // Block blk's sums of the four column vectors at j (a panel), each as rows_sums
  // takes them (the same bits), added to their trees. A row's four vectors are read
  // together, so that the block's lines come in memory order rather than a line of
  // every row in turn. With 32 registers (AVX-512) the 16 chains stay in them:
  // BatchNorm and GroupNorm backward NHWC 7-13% faster from memory (requests into L1
  // for the lines ahead slowed it; into L2 they help, below); with 16 (AVX2, SSE4)
  // they spill, 10-40% slower.
  const auto panel_sums = [&](auto d, size_t blk, size_t j, const auto& sx,
                              const auto& sdy) NK_INLINE_LAMBDA {
    using VV = hn::Vec<decltype(d)>;
    const size_t N = hn::Lanes(d);
    const VV m0 = hn::LoadU(d, mean + j), m1 = hn::LoadU(d, mean + j + N);
    const VV m2 = hn::LoadU(d, mean + j + 2 * N), m3 = hn::LoadU(d, mean + j + 3 * N);
    const VV r0 = hn::LoadU(d, rstd + j), r1 = hn::LoadU(d, rstd + j + N);
    const VV r2 = hn::LoadU(d, rstd + j + 2 * N), r3 = hn::LoadU(d, rstd + j + 3 * N);
    // Per vector q, two chains as rows_sums': even rows in a<q>0 / b<q>0, odd ones in
    // a<q>1 / b<q>1.
    VV a00 = hn::Zero(d), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    VV a30 = a00, a31 = a00, b00 = a00, b01 = a00, b10 = a00, b11 = a00, b20 = a00;
    VV b21 = a00, b30 = a00, b31 = a00;
    // Vector q of the panel in the row from element `at`.
    const auto add = [&](size_t at, size_t q, VV m, VV rs, VV& sa,
                         VV& sb) NK_INLINE_LAMBDA {
      const VV g = sdy.Load(d, at + q * N);
      sa = hn::Add(sa, g);
      sb = hn::MulAdd(g, hn::Mul(hn::Sub(sx.Load(d, at + q * N), m), rs), sb);
    };
    for (size_t r = blk * K; r < (blk + 1) * K; r += 2) {
      const size_t at = r * c + j;
      add(at, 0, m0, r0, a00, b00);
      add(at, 1, m1, r1, a10, b10);
      add(at, 2, m2, r2, a20, b20);
      add(at, 3, m3, r3, a30, b30);
      add(at + c, 0, m0, r0, a01, b01);
      add(at + c, 1, m1, r1, a11, b11);
      add(at + c, 2, m2, r2, a21, b21);
      add(at + c, 3, m3, r3, a31, b31);
    }
    AddToSumTree(d, blk, hn::Add(a00, a01), hn::Add(b00, b01), level_a + j, level_b + j,
                 c);
    AddToSumTree(d, blk, hn::Add(a10, a11), hn::Add(b10, b11), level_a + j + N,
                 level_b + j + N, c);
    AddToSumTree(d, blk, hn::Add(a20, a21), hn::Add(b20, b21), level_a + j + 2 * N,
                 level_b + j + 2 * N, c);
    AddToSumTree(d, blk, hn::Add(a30, a31), hn::Add(b30, b31), level_a + j + 3 * N,
                 level_b + j + 3 * N, c);
  };
  static_assert(K % 2 == 0, "panel_sums takes rows in pairs");
  const hn::ScalableTag<float> d;
  const size_t panel = 4 * hn::Lanes(d);
  const bool panels = kColumnPanels && c >= panel;
  for (size_t blk = 0; blk < blocks; ++blk) {
    // From memory, the lines a block ahead are asked for into L2, not L1 (as the
    // forward's column statistics): Zen 4, 1 thread, BatchNorm backward NHWC, time
    // after / before: 50176x256 AVX2 0.80, SSE4 0.91; 200704x64 AVX2 0.87, SSE4 0.79.
    if (from_memory && !panels) {
      const char* const bx = reinterpret_cast<const char*>(x + blk * K * c);
      const char* const bdy = reinterpret_cast<const char*>(dy + blk * K * c);
      for (size_t k = 0; k < K * c * sizeof(T); k += kLineBytes) {
        PrefetchToL2(bx + k + kReadAheadBytes);
        PrefetchToL2(bdy + k + kReadAheadBytes);
      }
    }
    size_t j = 0;
    if constexpr (kColumnPanels) {
#if NK_LINE_PAIRS
      // fp32 off a line (NumPy's 16 bytes): every vector straddles two lines. Rows of
      // one or two panels take them from aligned line pairs instead, where the block's
      // pairs lie in the chunk (all blocks but, maybe, the first and the last):
      // BatchNorm backward at +16 bytes, 64 channels 17% faster, 128 7%; 192 and 256
      // 4-8% slower, so they keep plain loads.
      if constexpr (std::is_same_v<T, float>) {
        const size_t at = blk * K * c, n = K * c, end = rows * c;
        if (panels && c <= 2 * panel && LinePairSource::Fits(x, at, n, x, x + end) &&
            LinePairSource::Fits(dy, at, n, dy, dy + end)) {
          const LinePairSource sx(x), sdy(dy);
          for (; j + panel <= c; j += panel) panel_sums(d, blk, j, sx, sdy);
        }
      }
#endif
      const TensorSource<T> sx{x}, sdy{dy};
      for (; j + panel <= c; j += panel) {
        // From memory, each panel asks for its lines of the next block into L2
        // (50176x256 AVX3, time after / before: 1 thread 0.74, 2 threads 0.87).
        if (from_memory && blk + 1 < blocks) {
          for (size_t k = 0; k < K; ++k) {
            const size_t at = ((blk + 1) * K + k) * c + j;
            for (size_t l = 0; l < panel; l += kLineElems<T>) {
              PrefetchToL2(x + at + l);
              PrefetchToL2(dy + at + l);
            }
          }
        }
        panel_sums(d, blk, j, sx, sdy);
      }
    }
    ForEachVector(d, j, c, [&](auto dv, size_t jv) HWY_ATTR {
      hn::Vec<decltype(dv)> a, b;
      rows_sums(dv, blk * K, K, jv, a, b);
      AddToSumTree(dv, blk, a, b, level_a + jv, level_b + jv, c);
    });
  }
  const size_t rest = rows - blocks * K;
  ForEachColumnGroup(c, [&](auto d, size_t j) HWY_ATTR {
    hn::Vec<decltype(d)> a, b;
    CollapseSumTree(d, blocks, level_a + j, level_b + j, c, a, b);
    if (rest != 0) {
      hn::Vec<decltype(d)> ra, rb;
      rows_sums(d, blocks * K, rest, j, ra, rb);
      a = hn::Add(a, ra);
      b = hn::Add(b, rb);
    }
    hn::StoreU(a, d, sum_dy + j);
    hn::StoreU(b, d, sum_dy_xhat + j);
  });
}

template <class T>
void ColumnGradSums(const T* x, const T* dy, size_t rows, size_t c, const float* mean,
                    const float* rstd, bool from_memory, float* scratch, float* sum_dy,
                    float* sum_dy_xhat) {
  const size_t k = ColumnPeriodRows(c);
  if (k == 1 || rows < k) {
    ColumnGradSumsTree(x, dy, rows, c, mean, rstd, from_memory, scratch, sum_dy,
                       sum_dy_xhat);
    return;
  }
  // Narrow rows: sums of rows / k wide rows of k * c columns (the means
  // repeated), folded in halves (column j and j + width / 2 are the same
  // channel), then the rows % k left over.
  const size_t width = k * c;
  const size_t wide_rows = rows / k;
  HWY_ALIGN float wide_mean[kMaxColumnPeriod];
  HWY_ALIGN float wide_rstd[kMaxColumnPeriod];
  HWY_ALIGN float a[kMaxColumnPeriod];
  HWY_ALIGN float b[kMaxColumnPeriod];
  for (size_t j = 0; j < width; ++j) {
    wide_mean[j] = mean[j % c];
    wide_rstd[j] = rstd[j % c];
  }
  ColumnGradSumsTree(x, dy, wide_rows, width, wide_mean, wide_rstd, from_memory, scratch,
                     a, b);
  for (size_t half = width / 2; half >= c; half /= 2) {
    ForEachColumnGroup(half, [&](auto d, size_t j) HWY_ATTR {
      hn::StoreU(hn::Add(hn::LoadU(d, a + j), hn::LoadU(d, a + half + j)), d, a + j);
      hn::StoreU(hn::Add(hn::LoadU(d, b + j), hn::LoadU(d, b + half + j)), d, b + j);
    });
  }
  const size_t rest = rows - wide_rows * k;
  if (rest != 0) {
    HWY_ALIGN float ra[kMaxColumnPeriod];
    HWY_ALIGN float rb[kMaxColumnPeriod];
    ColumnGradSumsTree(x + wide_rows * width, dy + wide_rows * width, rest, c, mean, rstd,
                       from_memory, scratch, ra, rb);
    for (size_t j = 0; j < c; ++j) {
      a[j] += ra[j];
      b[j] += rb[j];
    }
  }
  for (size_t j = 0; j < c; ++j) {
    sum_dy[j] = a[j];
    sum_dy_xhat[j] = b[j];
  }
}

// dx of [rows][c] row by row, the columns' maps loaded from L1 for every row.
// Streamed where every row starts a cache line (whole lines, sources-inl.h).
template <bool kScaleDy, class T>
void GradColumnRows(const T* x, const T* dy, size_t rows, size_t c, const ColumnGrad& g,
                    bool stream, size_t ahead, T* dx) {
  const auto value = [&](auto d, size_t i, size_t j) HWY_ATTR {
    const auto xhat = hn::Mul(hn::Sub(LoadElems(d, x + i), hn::LoadU(d, g.mean + j)),
                              hn::LoadU(d, g.rstd + j));
    const auto gy = LoadElems(d, dy + i), mean_dy = hn::LoadU(d, g.mean_dy + j);
    const auto t = kScaleDy ? hn::MulSub(gy, hn::LoadU(d, g.dy_scale + j), mean_dy)
                            : hn::Sub(gy, mean_dy);
    return hn::Mul(hn::NegMulAdd(xhat, hn::LoadU(d, g.mean_dy_xhat + j), t),
                   hn::LoadU(d, g.k + j));
  };
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kLine = kLineElems<T>;
  if (stream && reinterpret_cast<uintptr_t>(dx) % kLineBytes == 0 && c % kLine == 0) {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < c; j += N) {
        const size_t i = r * c + j;
        if (i % kLine == 0) {
          hwy::Prefetch(reinterpret_cast<const char*>(x + i) + kReadAheadBytes);
          hwy::Prefetch(reinterpret_cast<const char*>(dy + i) + kReadAheadBytes);
          if (ahead != 0) {
            PrefetchToL2(x + i + ahead);
            PrefetchToL2(dy + i + ahead);
          }
        }
        StreamElems(value(d, i, j), d, dx + i);
      }
    }
    return;
  }
  for (size_t r = 0; r < rows; ++r) {
    ForEachColumnGroup(c, [&](auto dv, size_t j) HWY_ATTR {
      StoreElems(value(dv, r * c + j, j), dv, dx + r * c + j);
    });
  }
}

// GradColumnRows streamed from dx's first line boundary on (MapRowsFromLine).
template <class T>
HWY_INLINE void GradColumnRowsFromLine(const T* x, const T* dy, size_t rows, size_t c,
                                       const ColumnGrad& g, bool stream, size_t ahead,
                                       T* dx) {
  const float* arrays[6] = {g.mean, g.rstd, g.mean_dy, g.mean_dy_xhat, g.k, g.dy_scale};
  MapRowsFromLine(
      arrays, rows, c, stream, dx,
      [&](size_t at, size_t n, size_t width, const float* const(&p)[6], bool streamed) {
        const ColumnGrad map{p[0], p[1], p[2], p[3], p[4], p[5]};
        (map.dy_scale != nullptr ? GradColumnRows<true, T>
                                 : GradColumnRows<false, T>)(x + at, dy + at, n, width,
                                                             map, streamed, ahead,
                                                             dx + at);
      });
}

template <class T>
void ColumnGradApply(const T* x, const T* dy, size_t rows, size_t c, const ColumnGrad& g,
                     bool stream, size_t ahead, T* dx) {
  const size_t k = ColumnPeriodRows(c);
  if (k == 1 || rows < k) {
    return GradColumnRowsFromLine(x, dy, rows, c, g, stream, ahead, dx);
  }
  // Narrow rows: the maps repeated k times, so k rows are one row of whole
  // vectors.
  const size_t width = k * c;
  HWY_ALIGN float wide[6][kMaxColumnPeriod];
  const float* in[6] = {g.mean, g.rstd, g.mean_dy, g.mean_dy_xhat, g.k, g.dy_scale};
  for (size_t p = 0; p < 6; ++p) {
    if (in[p] == nullptr) continue;
    for (size_t j = 0; j < width; ++j) wide[p][j] = in[p][j % c];
  }
  const size_t wide_rows = rows / k;
  GradColumnRowsFromLine(x, dy, wide_rows, width,
                         ColumnGrad{wide[0], wide[1], wide[2], wide[3], wide[4],
                                    g.dy_scale != nullptr ? wide[5] : nullptr},
                         stream, ahead, dx);
  const size_t done = wide_rows * width;
  GradColumnRowsFromLine(x + done, dy + done, rows - wide_rows * k, c, g, stream, ahead,
                         dx + done);
}

// The target's table for tensors of type T; constexpr, so the tables are constant-
// initialized (a dynamic initializer compiled for AVX-512 would run at load time on
// any CPU).
template <class T>
constexpr ChannelNormKernelsT<T> ChannelNormTable() {
  return {&ChannelSpanMoments<T>,
          &ShortPlaneMax,
          &ShortPlaneScratchFloats,
          &ShortPlaneMoments<T>,
          &ChannelSpanMaxAbs<T>,
          &ChannelSpanApply<T>,
          &ChannelPlanesApply<T>,
          &ColumnMoments<T>,
          &MergeColumns,
          &ColumnApply<T>,
          &ChannelStridedMoments<T>,
          &ChannelStridedMaxAbs<T>,
          &PlanesGradSums<T>,
          &InOrderTreeFloats,
          &PlanesGradSumsInOrder<T>,
          &SpanGradApply<T>,
          &PlanesGradApply<T>,
          &ColumnGradSums<T>,
          &ColumnGradApply<T>,
          HWY_TARGET};
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_CHANNELNORM_BACKWARD_INL_H_
