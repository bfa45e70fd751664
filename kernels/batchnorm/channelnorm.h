// SPDX-License-Identifier: Apache-2.0
// channelnorm.h: the per-target kernels of statistics per channel (BatchNorm), on the
// two layouts' building blocks: contiguous spans (a plane of NCHW, or a chunk of one)
// and column blocks (rows of NHWC, one column per channel).
#ifndef NK_KERNELS_CHANNELNORM_H_
#define NK_KERNELS_CHANNELNORM_H_

#include <stdint.h>

#include <cstddef>

#include "hwy/base.h"
#include "kernels/common/moments.h"

namespace nk {

// y = (x - shift) * mul + add on a span; with center == false the shift is skipped
// (inference folds the mean into add). On the overflow slow path (scale != 1, the
// power of two the statistics were taken at) y = ((x * scale - shift) * rstd) * mul
// + add: rstd in scaled units times gamma could overflow where rstd * gamma in the
// units of x does not.
struct SpanAffine {
  bool center;
  float scale, shift, rstd, mul, add;
};

// The same per column of a [rows][c] matrix: arrays of c values. scale == nullptr
// means no channel is on the slow path (then rstd is unused); shift == nullptr means
// no centering.
struct ColumnAffine {
  const float* scale;
  const float* shift;
  const float* rstd;
  const float* mul;
  const float* add;
  // Streamed, the lines of x this many elements on (0: none) are asked for into L2 as
  // y is stored (GroupNorm's next sample).
  size_t ahead = 0;
};

// The backward's map of a channel, with x_hat = (x - mean) * rstd formed per element
// (a folded rstd^2 factor underflows fp32 where x_hat does not, |x| ~ 1e25):
//   dx = (dy * dy_scale - mean_dy - x_hat * mean_dy_xhat) * k.
// BatchNorm: k = gamma * rstd, dy_scale = 1 (exact). GroupNorm, whose set spans
// channels of different gamma: k = rstd, dy_scale = gamma, the means those of gamma dy.
struct SpanGrad {
  float mean, rstd, mean_dy, mean_dy_xhat, k, dy_scale;
};

// The end of a plane of NCHW whose last line it shares with the next channel's plane
// of the same sample (a plane of 14x14 fp32 is 12.25 lines): held until that plane is
// computed, then streamed with it as one line, where regular stores of each part
// would read the line from memory first. A vector of 16 fp32 values, the plane's last.
struct alignas(64) PlaneEdge {
  float lanes[16];
};

// The same per column of a [rows][c] matrix: arrays of c values; dy_scale == nullptr
// means ones.
struct ColumnGrad {
  const float* mean;
  const float* rstd;
  const float* mean_dy;
  const float* mean_dy_xhat;
  const float* k;
  const float* dy_scale;
};

// Rows per chunk of an NHWC tensor with c channels: the fixed partition whose
// per-column moments are merged in a fixed tree, so the bits do not depend on the
// thread count. About 64 Ki elements, a multiple of every target's row block.
inline size_t ColumnChunkRows(size_t c) {
  const size_t rows = (size_t{1} << 16) / c / 64 * 64;
  return rows < 64 ? 64 : rows;
}

// The rows of an NHWC tensor as the op layer splits them: chunks of ColumnChunkRows(c)
// rows, the fixed partition whose per-column results are merged in a pairwise tree,
// and parts of rows for the threads that map them.
class ColumnRows {
 public:
  ColumnRows(size_t rows, size_t c)
      : rows_(rows),
        chunk_rows_(ColumnChunkRows(c)),
        chunks_((rows + chunk_rows_ - 1) / chunk_rows_) {}

  size_t rows() const { return rows_; }
  size_t chunks() const { return chunks_; }
  size_t chunk_rows() const { return chunk_rows_; }
  size_t RowsIn(size_t first, size_t end) const {  // rows of chunks [first, end)
    return (end * chunk_rows_ < rows_ ? end * chunk_rows_ : rows_) - first * chunk_rows_;
  }

  // merge(a, b, rows_a, rows_b): chunk a takes in chunk b, in a pairwise tree (at
  // width w, chunk a takes in chunk a + w).
  template <class Merge>
  void MergePairwise(const Merge& merge) const {
    for (size_t w = 1; w < chunks_; w *= 2) {
      for (size_t a = 0; a + w < chunks_; a += 2 * w) {
        const size_t b_end = a + 2 * w < chunks_ ? a + 2 * w : chunks_;
        merge(a, a + w, RowsIn(a, a + w), RowsIn(a + w, b_end));
      }
    }
  }

  // Rows [*r0, *r1) of part t of `parts`: equal parts of blocks of 16 rows (a narrow
  // row's period, see ColumnPeriodRows). Maps are per element, so any partition gives
  // the same bits. (Parts of whole chunks split 8x512x7x7's 392 rows 256 / 136.)
  void Part(size_t t, size_t parts, size_t* r0, size_t* r1) const {
    constexpr size_t kRowBlock = 16;
    const size_t blocks = (rows_ + kRowBlock - 1) / kRowBlock;
    *r0 = blocks * t / parts * kRowBlock;
    *r1 = blocks * (t + 1) / parts * kRowBlock;
    if (*r0 > rows_) *r0 = rows_;
    if (*r1 > rows_) *r1 = rows_;
  }

 private:
  size_t rows_, chunk_rows_, chunks_;
};

// What one Highway target provides for tensors (x, y, dy, dx) of type T (float,
// hwy::bfloat16_t, hwy::float16_t: widened as read, rounded once as written);
// parameters, statistics and scratch are fp32.
template <class T>
struct ChannelNormKernelsT {
  // Moments of x[0, n) times scale; x lies in the tensor [begin, end), whose elements
  // around the span may be read too (never past its bounds), and whose size says
  // whether its lines come from memory or from the cache (how far ahead to ask).
  Moments (*span_moments)(const T* x, size_t n, float scale, const T* begin,
                          const T* end);
  // NCHW planes of at most short_plane_max() elements: the moments of channels
  // [c0, c1) straight from x [n][c][spatial]. scratch: short_plane_scratch(n, c1 - c0).
  size_t (*short_plane_max)();
  size_t (*short_plane_scratch)(size_t n, size_t channels);
  void (*short_plane_moments)(const T* x, size_t n, size_t c, size_t spatial, size_t c0,
                              size_t c1, float* scratch, Moments* out);
  // max |x| over x[0, n); NaN if any is NaN.
  float (*span_max_abs)(const T* x, size_t n);
  // Affine map of x[0, n) into y (which may be x). With `stream`, non-temporal
  // stores; the caller flushes (hwy::FlushStream) before the output is read.
  void (*span_apply)(const T* x, size_t n, const SpanAffine& a, bool stream, T* y);
  // Affine map of `count` whole planes of `spatial` elements, contiguous from x (one
  // image's channels), plane p by affine[p], into y (which may be x). With `stream`,
  // non-temporal stores as span_apply's, and the lines of x `ahead` elements on (0:
  // none; the next run, as long as this one) asked for into L2 as the run is stored
  // (planes of a vector or more).
  void (*planes_apply)(const T* x, size_t spatial, size_t count, const SpanAffine* affine,
                       bool stream, size_t ahead, T* y);
  // Per-column moments (count `rows` each) of a [rows][c] matrix: mean[c], m2[c].
  // scratch: ColumnScratchFloats(rows, c) floats. from_memory: x is far larger than
  // the cache, so its lines are asked for ahead of the reads.
  void (*column_moments)(const T* x, size_t rows, size_t c, bool from_memory,
                         float* scratch, float* mean, float* m2);
  // Chan merge of columns b into a, given the weights nb / n and na * nb / n.
  void (*merge_columns)(size_t c, float weight_b, float weight_ab, float* mean_a,
                        float* m2_a, const float* mean_b, const float* m2_b);
  // Affine map per column of a [rows][c] matrix into y (which may be x).
  void (*column_apply)(const T* x, size_t rows, size_t c, const ColumnAffine& a,
                       bool stream, T* y);
  // Moments and max |x| of x[0], x[stride], ... (n elements), times scale: one
  // channel of NHWC, on the overflow slow path only.
  Moments (*strided_moments)(const T* x, size_t stride, size_t n, float scale);
  float (*strided_max_abs)(const T* x, size_t stride, size_t n);

  // Backward. GradSums {sum of dy, sum of dy * x_hat} over `planes` runs of `len`
  // elements, `stride` apart, of x and dy (a channel's planes of NCHW, or a chunk of
  // each). from_memory: the lines are asked for ahead, the next run's included.
  GradSums (*planes_grad_sums)(const T* x, const T* dy, size_t planes, size_t stride,
                               size_t len, float mean, float rstd, bool from_memory);
  // planes_grad_sums of the pieces of whole planes of x and dy [n][c][len], per_piece
  // samples' planes of a channel a piece, read in memory order: the pieces' sums to
  // out[piece][c], the same bits as planes_grad_sums gives each. Scratch: trees,
  // in_order_tree_floats() floats per channel; blocks, 2 c.
  size_t (*in_order_tree_floats)();
  void (*planes_grad_sums_in_order)(const T* x, const T* dy, size_t n, size_t c,
                                    size_t len, size_t per_piece, const float* mean,
                                    const float* rstd, bool from_memory, float* trees,
                                    uint32_t* blocks, GradSums* out);
  // dx of a span by the channel's map; dx may be dy. `stream` as span_apply's.
  void (*span_grad_apply)(const T* x, const T* dy, size_t n, const SpanGrad& g,
                          bool stream, T* dx);
  // dx of one channel's `planes` planes of NCHW (`len` elements, `stride` apart),
  // streamed, where the target can with the lines they share joined (PlaneEdge):
  // with edges_in, edges[p] holds the end of the previous channel's plane p, whose
  // shared line is then stored whole; with hold, the end of plane p is left unstored,
  // in edges[p], for the next channel's call. Returns false where it stored every
  // element itself (edges untouched): the same for every call of a job, as it depends
  // on len, dx's alignment and the target only.
  bool (*planes_grad_apply)(const T* x, const T* dy, size_t planes, size_t stride,
                            size_t len, const SpanGrad& g, T* dx, PlaneEdge* edges,
                            bool edges_in, bool hold);
  // Per-column sums of dy and dy * x_hat (x_hat = (x - mean[j]) * rstd[j]) of
  // [rows][c] matrices into sum_dy[c], sum_dy_xhat[c]; scratch:
  // ColumnScratchFloats(rows, c) floats.
  void (*column_grad_sums)(const T* x, const T* dy, size_t rows, size_t c,
                           const float* mean, const float* rstd, bool from_memory,
                           float* scratch, float* sum_dy, float* sum_dy_xhat);
  // dx per column of [rows][c] matrices by the columns' maps; dx may be dy. Streamed,
  // the lines of x and dy `ahead` elements on (0: none) are asked for into L2 as dx
  // is stored.
  void (*column_grad_apply)(const T* x, const T* dy, size_t rows, size_t c,
                            const ColumnGrad& g, bool stream, size_t ahead, T* dx);
  // The HWY_* bit of the target the table was compiled for (test_dispatch).
  int64_t target;
};
using ChannelNormKernels = ChannelNormKernelsT<float>;

// Levels of planes_grad_sums_in_order's trees: a piece holds at most kChunk elements,
// so at most 2 kChunk blocks (a plane's vectors left over are a block of their own).
constexpr size_t kInOrderTreeLevels = 16;

// Rows narrower than the widest vector (16 floats) are processed k at a time, as one
// row of k * c columns, k = 16 / gcd(c, 16), when that is at most kMaxColumnPeriod
// columns; 1 otherwise. ColumnChunkRows(c) is a multiple of k.
constexpr size_t kMaxColumnPeriod = 1024;
inline size_t ColumnPeriodRows(size_t c) {
  size_t k = 16;
  while (k > 1 && c % (16 / k * 2) == 0) k /= 2;
  return k * c <= kMaxColumnPeriod ? k : 1;
}

// Levels of column_moments' per-column tree for `rows` rows: one per bit.
inline size_t ColumnLevels(size_t rows) {
  size_t levels = 1;
  while ((rows >> levels) != 0) ++levels;
  return levels;
}

// Scratch of column_moments: two stacks of per-column moments, for the narrow rows'
// widened period too.
inline size_t ColumnScratchFloats(size_t rows, size_t c) {
  const size_t width = ColumnPeriodRows(c) * c;
  return 2 * ColumnLevels(rows) * (width > c ? width : c);
}

// The table of `target` (a single HWY_* bit that this library compiled) for tensors
// of type T.
template <class T>
const ChannelNormKernelsT<T>& ChannelNormKernelsFor(long long target);
template <>
const ChannelNormKernelsT<float>& ChannelNormKernelsFor<float>(long long target);
template <>
const ChannelNormKernelsT<hwy::bfloat16_t>& ChannelNormKernelsFor<hwy::bfloat16_t>(
    long long target);
template <>
const ChannelNormKernelsT<hwy::float16_t>& ChannelNormKernelsFor<hwy::float16_t>(
    long long target);

// `width` columns of per-chunk moments (chunk i's at mean + i * ld, m2 + i * ld)
// merged into chunk 0's in rows' pairwise tree, Chan's weights in double. Per column:
// which columns one call takes does not change the bits.
template <class T>
inline void MergeColumnChunks(const ChannelNormKernelsT<T>& k, const ColumnRows& rows,
                              size_t width, size_t ld, float* mean, float* m2) {
  if (width == 0) return;
  rows.MergePairwise([&](size_t a, size_t b, size_t rows_a, size_t rows_b) {
    const double na = static_cast<double>(rows_a), nb = static_cast<double>(rows_b);
    const double n = na + nb;
    k.merge_columns(width, static_cast<float>(nb / n), static_cast<float>(na * nb / n),
                    mean + a * ld, m2 + a * ld, mean + b * ld, m2 + b * ld);
  });
}

// The same for the backward's per-chunk column sums: `width` columns, chunk i's sums
// of dy at sums + 2 * i * ld and of dy * x_hat ld further, added into chunk 0's.
inline void AddColumnChunks(const ColumnRows& rows, size_t width, size_t ld,
                            float* sums) {
  rows.MergePairwise([&](size_t a, size_t b, size_t, size_t) {
    for (size_t j = 0; j < width; ++j) {
      sums[2 * a * ld + j] += sums[2 * b * ld + j];
      sums[(2 * a + 1) * ld + j] += sums[(2 * b + 1) * ld + j];
    }
  });
}

}  // namespace nk

#endif  // NK_KERNELS_CHANNELNORM_H_
