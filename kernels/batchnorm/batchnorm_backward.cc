// SPDX-License-Identifier: Apache-2.0
// batchnorm_backward.cc: BatchNorm's backward op layer. Each channel's two sums (dy,
// dy * x_hat) come from pieces fixed by the shape alone, added in a fixed
// pairwise tree, so the bits do not depend on the thread count; then dx by the
// channel's map (SpanGrad), the same for every element whoever computes it.
//
// NCHW: a channel's pieces are runs of whole planes (about kChunk elements each), or
// chunks of one long plane. With channels enough for every thread, each thread takes
// whole channels and maps each right after its sums, while its x and dy are in L2.
// Otherwise every piece is summed in parallel first, then the planes are mapped in
// memory order; one thread reading short planes from memory sums them in memory order
// too (kInOrderPlaneBytes). NHWC: rows in chunks of ColumnChunkRows(c), per-column sums of each
// chunk added in a pairwise tree, as the forward's moments (batchnorm.cc).
#include <algorithm>

#include "hwy/cache_control.h"
#include "kernels/batchnorm/batchnorm.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"
#include "kernels/common/workspace.h"

namespace nk {

namespace {

template <class Job>
nk_status OutOfMemory(const Job& job) {
  return SetError(NK_ERR_OUT_OF_MEMORY, "%s: out of memory for per-channel partial sums",
                  job.function);
}

// The channel's map from its sums over every shard (of dy and of dy * x_hat), each
// factor computed in double and rounded once.
template <class Job>
SpanGrad GradMap(const Job& job, size_t ci, float sum_dy, float sum_dy_xhat) {
  const double m = job.total_count;
  const double gamma = job.gamma != nullptr ? job.gamma[ci] : 1.0;
  return {job.mean[ci], job.rstd[ci], static_cast<float>(sum_dy / m),
          static_cast<float>(sum_dy_xhat / m),
          static_cast<float>(gamma * static_cast<double>(job.rstd[ci])), 1.0f};
}

template <class T>
struct Context {
  const ChannelNormKernelsT<T>& k;
  int threads;
  bool from_memory;  // x and dy far larger than the cache: lines asked for ahead
  bool stream;       // dx written with non-temporal stores
};

template <class T>
Context<T> ContextFor(const BatchNormGradJobT<T>& job, size_t tensors) {
  const size_t elements = job.n * job.c * job.spatial;
  const bool big = tensors * elements * sizeof(T) >= StreamBytes();
  return {ChannelNormKernelsFor<T>(CurrentTarget()), ThreadsFor(elements), big,
          big && job.dx != nullptr};
}

// ---------------------------------------------------------------- NCHW

// On one thread, NCHW planes up to this size in tensors far larger than the cache are
// summed in memory order, then mapped in memory order (x and dy read twice from
// memory), rather than a channel at a time (read once, the map's pass from L2): a
// channel's planes lie c planes apart, and one core reading runs of a few lines each
// read at about half a copy's speed. Same pieces, same bits. BatchNorm backward, time
// in order / by channel, both orders in one process, 1 thread: 256x256x14x14 AVX3
// 0.74-0.79, AVX2 0.77-0.79, SSE4 0.73-0.74; 256x128x20x20 (1600 bytes) AVX3
// 0.79-0.85, AVX2 0.72-0.73, SSE4 0.62-0.67; bf16 128x128x28x28 0.67-0.68, bf16
// 256x64x32x32 (2048 bytes) 0.59-0.61; 256x512x7x7 0.86-0.87. Larger planes gained
// less or lost: 22x22 0.89-0.98, 28x28 0.93-1.05, 32x32 1.08-1.11, 56x56 0.98-1.01.
// Two threads keep more reads in flight: by channel they were faster (14x14 in order
// 1.05-1.17 of the time at AVX3 and AVX2; 28x28 and 56x56 1.17-1.21).
constexpr size_t kInOrderPlaneBytes = 2048;

template <class T>
class GradPlanes {
 public:
  GradPlanes(const Context<T>& ctx, const BatchNormGradJobT<T>& job)
      : ctx_(ctx),
        job_(job),
        whole_(job.spatial <= kChunk),
        planes_per_piece_(whole_ ? kChunk / job.spatial : 1),
        chunks_(whole_ ? 1 : NumChunks(job.spatial)),
        pieces_(whole_ ? (job.n + planes_per_piece_ - 1) / planes_per_piece_
                       : job.n * chunks_) {}

  size_t pieces() const { return pieces_; }  // per channel

  GradSums Sums(size_t ci, size_t piece) const {
    size_t first, planes, offset, len;
    Piece(piece, &first, &planes, &offset, &len);
    const size_t at = (first * job_.c + ci) * job_.spatial + offset;
    return ctx_.k.planes_grad_sums(job_.x + at, job_.dy + at, planes,
                                   job_.c * job_.spatial, len, job_.mean[ci],
                                   job_.rstd[ci], ctx_.from_memory);
  }

  GradSums ChannelSums(size_t ci) const {
    return AddPairwise(0, pieces_, [&](size_t p) { return Sums(ci, p); });
  }

  void Apply(size_t ci, size_t piece, const SpanGrad& g) const {
    size_t first, planes, offset, len;
    Piece(piece, &first, &planes, &offset, &len);
    for (size_t p = first; p < first + planes; ++p) {
      const size_t at = (p * job_.c + ci) * job_.spatial + offset;
      ctx_.k.span_grad_apply(job_.x + at, job_.dy + at, len, g, ctx_.stream,
                             job_.dx + at);
    }
  }

  // Whether ApplyChannel can join the planes' shared lines: streamed whole planes.
  bool Joins() const { return ctx_.stream && whole_; }

  // Whether the pieces are summed in memory order (SumsInOrder): one thread, planes of
  // at most kInOrderPlaneBytes from memory.
  bool InOrder() const {
    return ctx_.threads == 1 && ctx_.from_memory &&
           job_.spatial * sizeof(T) <= kInOrderPlaneBytes;
  }

  // The pieces' sums to sums[piece][c], Sums(ci, piece) of every channel, read in
  // memory order. trees, blocks: scratch (k.in_order_tree_floats() * c floats, 2 c).
  void SumsInOrder(float* trees, uint32_t* blocks, GradSums* sums) const {
    ctx_.k.planes_grad_sums_in_order(job_.x, job_.dy, job_.n, job_.c, job_.spatial,
                                     planes_per_piece_, job_.mean, job_.rstd,
                                     ctx_.from_memory, trees, blocks, sums);
  }

  // dx of channel ci. Where Joins(), the lines its planes share with channel ci - 1's
  // and ci + 1's are joined through edges (one per sample; planes_grad_apply): those
  // of ci - 1 are taken where edges_in, ci's held where hold. Returns whether they
  // were held.
  bool ApplyChannel(size_t ci, const SpanGrad& g, PlaneEdge* edges, bool edges_in,
                    bool hold) const {
    if (edges == nullptr || !Joins()) {
      for (size_t p = 0; p < pieces_; ++p) Apply(ci, p, g);
      return false;
    }
    bool held = false;
    for (size_t piece = 0; piece < pieces_; ++piece) {
      size_t first, planes, offset, len;
      Piece(piece, &first, &planes, &offset, &len);
      const size_t at = (first * job_.c + ci) * job_.spatial;
      held = ctx_.k.planes_grad_apply(job_.x + at, job_.dy + at, planes,
                                      job_.c * job_.spatial, len, g, job_.dx + at,
                                      edges + first, edges_in, hold);
    }
    return held;
  }

  // Part t of `parts` of the tensor's spans (kChunk of a plane) in memory order, each
  // by its channel's map. Where Joins(), the spans are whole planes and each shares a
  // line with the next: the part's planes are joined through one edge.
  void ApplyInOrder(size_t t, size_t parts, const SpanGrad* maps) const {
    const size_t chunks = NumChunks(job_.spatial);
    const size_t spans = job_.n * job_.c * chunks;
    const size_t begin = PartBegin(spans, t, parts), end = PartBegin(spans, t + 1, parts);
    if (Joins()) {
      PlaneEdge edge;
      bool held = false;
      for (size_t s = begin; s < end; ++s) {
        const size_t at = s * job_.spatial;
        held = ctx_.k.planes_grad_apply(job_.x + at, job_.dy + at, 1, job_.spatial,
                                        job_.spatial, maps[s % job_.c], job_.dx + at,
                                        &edge, held, s + 1 < end);
      }
      hwy::FlushStream();
      return;
    }
    for (size_t s = begin; s < end; ++s) {
      const size_t plane = s / chunks, offset = s % chunks * kChunk;
      const size_t at = plane * job_.spatial + offset;
      ctx_.k.span_grad_apply(job_.x + at, job_.dy + at,
                             std::min(kChunk, job_.spatial - offset),
                             maps[plane % job_.c], ctx_.stream, job_.dx + at);
    }
    if (ctx_.stream) hwy::FlushStream();
  }

 private:
  // Piece `piece` of a channel: planes [first, first + planes), elements [offset,
  // offset + len) of each.
  void Piece(size_t piece, size_t* first, size_t* planes, size_t* offset,
             size_t* len) const {
    if (whole_) {
      *first = piece * planes_per_piece_;
      *planes = std::min(planes_per_piece_, job_.n - *first);
      *offset = 0;
      *len = job_.spatial;
      return;
    }
    *first = piece / chunks_;
    *planes = 1;
    *offset = piece % chunks_ * kChunk;
    *len = std::min(kChunk, job_.spatial - *offset);
  }

  const Context<T>& ctx_;
  const BatchNormGradJobT<T>& job_;
  const bool whole_;  // pieces of whole planes
  const size_t planes_per_piece_, chunks_, pieces_;
};

// Whole channels per thread when that balances.
bool ByChannel(size_t c, int threads) {
  return threads == 1 || c % static_cast<size_t>(threads) == 0 ||
         c >= 4 * static_cast<size_t>(threads);
}

// The sums of every channel of NCHW, finish(ci, sums) called for each on the thread
// that added them; then, with `maps` (set by finish), dx.
template <class T, class Finish>
nk_status RunPlanes(const Context<T>& ctx, const BatchNormGradJobT<T>& job,
                    const Finish& finish, SpanGrad* maps) {
  const GradPlanes<T> planes(ctx, job);
  if (planes.InOrder()) {  // one thread
    const size_t c = job.c, pieces = planes.pieces();
    Workspace<GradSums, struct PlaneGradSumsTag> sums_ws;
    Workspace<float, struct PlaneGradTreesTag> trees_ws;
    Workspace<uint32_t, struct PlaneGradBlocksTag> blocks_ws;
    GradSums* sums = sums_ws.Get(pieces * c);
    float* trees = trees_ws.Get(ctx.k.in_order_tree_floats() * c);
    uint32_t* blocks = blocks_ws.Get(2 * c);
    if (sums == nullptr || trees == nullptr || blocks == nullptr) return OutOfMemory(job);
    planes.SumsInOrder(trees, blocks, sums);
    for (size_t ci = 0; ci < c; ++ci) {
      finish(ci, AddPairwise(0, pieces, [&](size_t p) { return sums[p * c + ci]; }));
    }
    if (maps != nullptr) planes.ApplyInOrder(0, 1, maps);
    return NK_OK;
  }
  if (ByChannel(job.c, ctx.threads)) {
    // A thread's channels in order share their planes' lines (PlaneEdge): each
    // thread's edges, one per sample, where it has more than one channel. Without the
    // memory, the lines are stored in parts (the same values).
    Workspace<PlaneEdge, struct PlaneEdgesTag> edges_ws;
    const size_t per_thread = job.n;
    PlaneEdge* edges =
        maps != nullptr && planes.Joins() && job.c > static_cast<size_t>(ctx.threads)
            ? edges_ws.Get(static_cast<size_t>(ctx.threads) * per_thread)
            : nullptr;
    ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
      const size_t end = PartBegin(job.c, t + 1, parts);
      PlaneEdge* own = edges != nullptr ? edges + t * per_thread : nullptr;
      bool held = false;
      for (size_t ci = PartBegin(job.c, t, parts); ci < end; ++ci) {
        finish(ci, planes.ChannelSums(ci));
        if (maps == nullptr) continue;
        held = planes.ApplyChannel(ci, maps[ci], own, held, ci + 1 < end);
      }
      if (maps != nullptr && ctx.stream) hwy::FlushStream();
    });
    return NK_OK;
  }
  Workspace<GradSums, struct PlaneGradSumsTag> sums_ws;
  const size_t items = job.c * planes.pieces();
  GradSums* sums = sums_ws.Get(items);
  if (sums == nullptr) return OutOfMemory(job);
  SpinBarrier barrier;
  ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
    const size_t end = PartBegin(items, t + 1, parts);
    for (size_t i = PartBegin(items, t, parts); i < end; ++i) {
      sums[i] = planes.Sums(i / planes.pieces(), i % planes.pieces());
    }
    barrier.Wait(parts);
    const size_t c1 = PartBegin(job.c, t + 1, parts);
    for (size_t ci = PartBegin(job.c, t, parts); ci < c1; ++ci) {
      const GradSums* own = sums + ci * planes.pieces();
      finish(ci, AddPairwise(0, planes.pieces(), [&](size_t p) { return own[p]; }));
    }
    if (maps == nullptr) return;
    barrier.Wait(parts);
    planes.ApplyInOrder(t, parts, maps);
  });
  return NK_OK;
}

// ---------------------------------------------------------------- NHWC

template <class T>
class GradColumns {
 public:
  GradColumns(const Context<T>& ctx, const BatchNormGradJobT<T>& job)
      : ctx_(ctx),
        job_(job),
        rows_(job.n * job.spatial, job.c),
        scratch_floats_(ColumnScratchFloats(rows_.chunk_rows(), job.c)) {}

  // The buffers of the sums (`measure`) and of the maps (`apply`), taken before
  // anything is written; false when out of memory.
  bool Reserve(bool measure, bool apply) {
    const size_t c = job_.c;
    if (measure) {
      sums_ = sums_ws_.Get(2 * rows_.chunks() * c);
      scratch_ = scratch_ws_.Get(static_cast<size_t>(ctx_.threads) * scratch_floats_);
      if (sums_ == nullptr || scratch_ == nullptr) return false;
    }
    if (apply) {
      maps_ = maps_ws_.Get(5 * c);
      if (maps_ == nullptr) return false;
    }
    return true;
  }

  // Part t of `parts`: the per-column sums of its chunks of rows.
  void Measure(size_t t, size_t parts) {
    const size_t c = job_.c;
    float* own = scratch_ + t * scratch_floats_;
    const size_t end = PartBegin(rows_.chunks(), t + 1, parts);
    for (size_t ch = PartBegin(rows_.chunks(), t, parts); ch < end; ++ch) {
      const size_t at = ch * rows_.chunk_rows() * c;
      ctx_.k.column_grad_sums(job_.x + at, job_.dy + at, rows_.RowsIn(ch, ch + 1), c,
                              job_.mean, job_.rstd, ctx_.from_memory, own, SumDy(ch),
                              SumDyXhat(ch));
    }
  }

  // Once every part is measured: the chunks' sums of channels [c0, c1) added into
  // chunk 0's, in a pairwise tree (at width w, chunk a takes in chunk a + w).
  void Merge(size_t c0, size_t c1) {
    if (c1 > c0) AddColumnChunks(rows_, c1 - c0, job_.c, sums_ + c0);
  }

  // Once merged: channel ci's sums.
  GradSums Sums(size_t ci) { return {SumDy(0)[ci], SumDyXhat(0)[ci]}; }

  void SetMap(size_t ci, const SpanGrad& g) {
    const size_t c = job_.c;
    maps_[ci] = g.mean;
    maps_[c + ci] = g.rstd;
    maps_[2 * c + ci] = g.mean_dy;
    maps_[3 * c + ci] = g.mean_dy_xhat;
    maps_[4 * c + ci] = g.k;
  }

  // Once every channel's map is set: part t of the rows mapped (ColumnRows::Part).
  void Apply(size_t t, size_t parts) const {
    const size_t c = job_.c;
    size_t r0, r1;
    rows_.Part(t, parts, &r0, &r1);
    if (r1 > r0) {
      ctx_.k.column_grad_apply(job_.x + r0 * c, job_.dy + r0 * c, r1 - r0, c,
                               ColumnGrad{maps_, maps_ + c, maps_ + 2 * c, maps_ + 3 * c,
                                          maps_ + 4 * c, nullptr},
                               ctx_.stream, 0, job_.dx + r0 * c);
    }
    if (ctx_.stream) hwy::FlushStream();
  }

 private:
  float* SumDy(size_t chunk) { return sums_ + 2 * chunk * job_.c; }
  float* SumDyXhat(size_t chunk) { return sums_ + (2 * chunk + 1) * job_.c; }

  const Context<T>& ctx_;
  const BatchNormGradJobT<T>& job_;
  const ColumnRows rows_;
  const size_t scratch_floats_;
  Workspace<float, struct ColumnGradSumsTag> sums_ws_;
  Workspace<float, struct ColumnGradScratchTag> scratch_ws_;
  Workspace<float, struct ColumnGradMapsTag> maps_ws_;
  float* sums_ = nullptr;  // per chunk: sum_dy[c], then sum_dy_xc[c]
  float* scratch_ = nullptr;
  float* maps_ = nullptr;  // mean, rstd, mean_dy, mean_dy_xhat, k: c each
};

// One NHWC call in one region: the sums (`measure`), after a barrier their merge and
// finish(columns, ci) for each channel on the thread that owns it (it sets the map
// where dx is wanted), after another barrier dx (`apply`).
template <class T, class Finish>
nk_status RunColumns(const Context<T>& ctx, const BatchNormGradJobT<T>& job, bool measure,
                     bool apply, const Finish& finish) {
  GradColumns<T> columns(ctx, job);
  if (!columns.Reserve(measure, apply)) return OutOfMemory(job);
  SpinBarrier barrier;
  ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
    if (measure) {
      columns.Measure(t, parts);
      barrier.Wait(parts);
    }
    const size_t c0 = PartBegin(job.c, t, parts), c1 = PartBegin(job.c, t + 1, parts);
    if (measure) columns.Merge(c0, c1);
    for (size_t ci = c0; ci < c1; ++ci) finish(columns, ci);
    if (!apply) return;
    barrier.Wait(parts);
    columns.Apply(t, parts);
  });
  return NK_OK;
}

}  // namespace

template <class T>
nk_status BatchNormBackward(const BatchNormGradJobT<T>& job, float* dgamma,
                            float* dbeta) {
  const Context<T> ctx = ContextFor(job, 3);
  // The channel's sums as the outputs and the map; SpanGrad is set where dx needs it.
  const auto finish = [&](size_t ci, const GradSums& s) {
    const float sum_dy_xhat = s.a_xhat;
    if (dgamma != nullptr) dgamma[ci] = sum_dy_xhat;
    if (dbeta != nullptr) dbeta[ci] = s.a;
    return GradMap(job, ci, s.a, sum_dy_xhat);
  };
  if (job.channels_last) {
    return RunColumns(ctx, job, true, true, [&](GradColumns<T>& columns, size_t ci) {
      columns.SetMap(ci, finish(ci, columns.Sums(ci)));
    });
  }
  Workspace<SpanGrad, struct PlaneMapsTag> maps_ws;
  SpanGrad* maps = maps_ws.Get(job.c);
  if (maps == nullptr) return OutOfMemory(job);
  return RunPlanes(
      ctx, job, [&](size_t ci, const GradSums& s) { maps[ci] = finish(ci, s); }, maps);
}

template <class T>
nk_status BatchNormBackwardReduce(const BatchNormGradJobT<T>& job, float* sum_dy,
                                  float* sum_dy_xhat) {
  const Context<T> ctx = ContextFor(job, 2);
  const auto finish = [&](size_t ci, const GradSums& s) {
    sum_dy[ci] = s.a;
    sum_dy_xhat[ci] = s.a_xhat;
  };
  if (job.channels_last) {
    return RunColumns(ctx, job, true, false, [&](GradColumns<T>& columns, size_t ci) {
      finish(ci, columns.Sums(ci));
    });
  }
  return RunPlanes(ctx, job, finish, nullptr);
}

template <class T>
nk_status BatchNormBackwardApply(const BatchNormGradJobT<T>& job, const float* sum_dy,
                                 const float* sum_dy_xhat) {
  const Context<T> ctx = ContextFor(job, 3);
  if (job.channels_last) {
    return RunColumns(ctx, job, false, true, [&](GradColumns<T>& columns, size_t ci) {
      columns.SetMap(ci, GradMap(job, ci, sum_dy[ci], sum_dy_xhat[ci]));
    });
  }
  Workspace<SpanGrad, struct PlaneMapsTag> maps_ws;
  SpanGrad* maps = maps_ws.Get(job.c);
  if (maps == nullptr) return OutOfMemory(job);
  for (size_t ci = 0; ci < job.c; ++ci) {
    maps[ci] = GradMap(job, ci, sum_dy[ci], sum_dy_xhat[ci]);
  }
  const GradPlanes<T> planes(ctx, job);
  ForEachPart(ctx.threads,
              [&](size_t t, size_t parts) { planes.ApplyInOrder(t, parts, maps); });
  return NK_OK;
}

#define NK_BATCHNORM_BACKWARDS(T)                                                      \
  template nk_status BatchNormBackward(const BatchNormGradJobT<T>&, float*, float*);   \
  template nk_status BatchNormBackwardReduce(const BatchNormGradJobT<T>&, float*,      \
                                             float*);                                  \
  template nk_status BatchNormBackwardApply(const BatchNormGradJobT<T>&, const float*, \
                                            const float*);
NK_BATCHNORM_BACKWARDS(float)
NK_BATCHNORM_BACKWARDS(hwy::bfloat16_t)
NK_BATCHNORM_BACKWARDS(hwy::float16_t)
#undef NK_BATCHNORM_BACKWARDS

}  // namespace nk
