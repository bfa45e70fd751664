// SPDX-License-Identifier: Apache-2.0
// batchnorm.cc: BatchNorm's op layer: a fixed partition of each channel into pieces
// whose moments merge in a fixed tree (so the bits do not depend on the thread count),
// the work spread with OpenMP, and the per-channel outputs.
//
// NCHW: channel ci is n planes of `spatial` elements, each cut into kChunk spans; its
// moments are merged over (plane, span) pairwise. With enough channels every thread
// takes whole channels and normalizes each right after its statistics, while the
// channel is still in L2; otherwise all spans are measured in parallel first.
// NHWC: rows (n * spatial of them, c channels each) are cut into chunks of
// ColumnChunkRows(c); per-column moments of each chunk merge in a pairwise tree.
#include "kernels/batchnorm/batchnorm.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "hwy/cache_control.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"
#include "kernels/common/workspace.h"

namespace nk {

namespace {

// Declared here, so that BatchNormTraining's two uses name one tag (as local classes
// of a function template, clang gave them one mangled name and refused the second).
struct TrainingAffineTag;

// Training's affine map of a channel: y = (x - mean) * (rstd * gamma) + beta; on the
// slow path ((x * scale - mean) * rstd) * gamma + beta in the scaled units. x - mean
// comes first, so a constant channel gives exactly beta.
template <class Job>
SpanAffine TrainingAffine(const Job& job, size_t ci, const SetStats& st) {
  const float gamma = job.gamma != nullptr ? job.gamma[ci] : 1.0f;
  const float beta = job.beta != nullptr ? job.beta[ci] : 0.0f;
  if (st.scale == 1.0f) return {true, 1.0f, st.mean, 1.0f, st.rstd * gamma, beta};
  return {true, st.scale, st.mean, st.rstd, gamma, beta};
}

// Inference folds everything into one multiply-add: y = x * mul + add. Where the
// fold overflows fp32 but its parts do not (gamma near the fp32 limit, found by
// fuzz_batchnorm), y = ((x - mean) * rstd) * gamma + beta, as training's slow path maps
// it: scale 0.5 and the halved mean and doubled rstd (exact) select that map.
template <class Job>
SpanAffine InferenceAffine(const Job& job, size_t ci, float mean, float var) {
  const double gamma = job.gamma != nullptr ? job.gamma[ci] : 1.0;
  const double beta = job.beta != nullptr ? job.beta[ci] : 0.0;
  const double root = std::sqrt(static_cast<double>(var) + job.eps);
  const double mul = gamma / root;
  const float mul_f = static_cast<float>(mul);
  const float add_f = static_cast<float>(beta - mean * mul);
  const float rstd = static_cast<float>(1.0 / root);
  const float g = static_cast<float>(gamma), b = static_cast<float>(beta);
  if ((std::isinf(mul_f) || std::isinf(add_f)) && std::isfinite(2.0f * rstd) &&
      std::isfinite(mean) && std::isfinite(g)) {
    return {true, 0.5f, 0.5f * mean, 2.0f * rstd, g, b};
  }
  return {false, 1.0f, 0.0f, 1.0f, mul_f, add_f};
}

template <class Job>
nk_status OutOfMemory(const Job& job) {
  return SetError(NK_ERR_OUT_OF_MEMORY,
                  "%s: out of memory for per-channel partial statistics", job.function);
}

// ---------------------------------------------------------------- NCHW

template <class T>
class Planes {
 public:
  Planes(const ChannelNormKernelsT<T>& k, const BatchNormJobT<T>& job)
      : k_(k), job_(job), spans_(NumChunks(job.spatial)) {}

  size_t spans_per_channel() const { return job_.n * spans_; }
  size_t spans() const { return job_.n * job_.c * spans_; }

  // Span `s` of the tensor in memory order: its offset, length and channel.
  size_t Span(size_t s, size_t* len, size_t* ci) const {
    const size_t plane = s / spans_;
    const size_t s0 = (s % spans_) * kChunk;
    *len = std::min(kChunk, job_.spatial - s0);
    *ci = plane % job_.c;
    return plane * job_.spatial + s0;
  }
  // Span `i` of channel ci (i < spans_per_channel()), as an index in memory order.
  size_t ChannelSpan(size_t ci, size_t i) const {
    return ((i / spans_) * job_.c + ci) * spans_ + i % spans_;
  }

  Moments SpanMoments(size_t s, float scale) const {
    size_t len, ci;
    const size_t off = Span(s, &len, &ci);
    return k_.span_moments(job_.x + off, len, scale, job_.x,
                           job_.x + job_.n * job_.c * job_.spatial);
  }

  // The channel's statistics from its spans' moments `moment(i)`.
  // With `whole`, moment(0) is already the channel's.
  template <class MomentOf>
  SetStats Stats(size_t ci, const MomentOf& moment, bool whole = false) const {
    const size_t count = spans_per_channel();
    return SetStatistics(
        whole ? moment(0) : MergePairwise(0, count, moment), job_.eps,
        [&] {
          float m = 0.0f;
          for (size_t i = 0; i < count; ++i) {
            size_t len, unused;
            const size_t off = Span(ChannelSpan(ci, i), &len, &unused);
            const float a = k_.span_max_abs(job_.x + off, len);
            m = (a > m || std::isnan(a)) ? a : m;
          }
          return m;
        },
        [&](float scale) {
          return MergePairwise(0, count, [&](size_t i) {
            return SpanMoments(ChannelSpan(ci, i), scale);
          });
        });
  }

  SetStats Stats(size_t ci) const {
    return Stats(ci, [&](size_t i) { return SpanMoments(ChannelSpan(ci, i), 1.0f); });
  }

  // The channel's statistics from its fast-path moments.
  SetStats Stats(size_t ci, const Moments& first) const {
    return Stats(ci, [&](size_t) { return first; }, true);
  }

  // Whether every plane is one span (at most kChunk elements).
  bool whole() const { return spans_ == 1; }

  // Planes [p0, p1) when whole(), each image's run of them in one call.
  void ApplyWhole(size_t p0, size_t p1, const SpanAffine* affine, bool stream) const {
    const size_t c = job_.c, spatial = job_.spatial;
    for (size_t p = p0; p < p1;) {
      const size_t ci = p % c;
      const size_t count = std::min(p1 - p, c - ci);
      k_.planes_apply(job_.x + p * spatial, spatial, count, affine + ci, stream, 0,
                      job_.y + p * spatial);
      p += count;
    }
  }

  void Apply(size_t s, const SpanAffine& a, bool stream) const {
    size_t len, ci;
    const size_t off = Span(s, &len, &ci);
    k_.span_apply(job_.x + off, len, a, stream, job_.y + off);
  }

 private:
  const ChannelNormKernelsT<T>& k_;
  const BatchNormJobT<T>& job_;
  size_t spans_;  // per plane
};

// Part t of `parts` of y, with each channel's affine map. Planes of one span each go
// a run of an image's planes at a time (planes_apply): 8x512x7x7, 1 thread, A/B
// against a call per plane: inference 31-33 -> 21-22 us, training 75 -> 62-65 us;
// 8x2048x7x7 inference 125 -> 89-96 us; streamed, see ChannelPlanesApply.
template <class T>
void ApplyPlanesPart(const Planes<T>& planes, size_t t, size_t parts, bool stream,
                     const SpanAffine* affine) {
  const size_t s0 = PartBegin(planes.spans(), t, parts);
  const size_t s1 = PartBegin(planes.spans(), t + 1, parts);
  if (planes.whole()) {
    planes.ApplyWhole(s0, s1, affine, stream);
  } else {
    for (size_t s = s0; s < s1; ++s) {
      size_t len, ci;
      planes.Span(s, &len, &ci);
      planes.Apply(s, affine[ci], stream);
    }
  }
  if (stream) hwy::FlushStream();
}

template <class T>
void ApplyPlanes(const Planes<T>& planes, int threads, bool stream,
                 const SpanAffine* affine) {
  ForEachPart(threads, [&](size_t t, size_t parts) {
    ApplyPlanesPart(planes, t, parts, stream, affine);
  });
}

// Tensors up to this size are normalized channel by channel, each right after its
// statistics while it is in L2. Larger ones are read in memory order in both passes:
// a channel's planes lie far apart, and jumping between them defeats the hardware
// prefetchers (measured: 0.32x against 0.45x of a copy for 32x64x56x56).
constexpr size_t kByChannelBytes = size_t{8} << 20;

// Whole channels per thread: for cached tensors (of `bytes`), when that balances.
bool ByChannel(size_t c, size_t bytes, int threads) {
  if (bytes > kByChannelBytes) return false;
  return threads == 1 || c % static_cast<size_t>(threads) == 0 ||
         c >= 8 * static_cast<size_t>(threads);
}

// NCHW with short planes (kernel's short_plane_max): channels split among threads, each
// channel's moments from the per-lane tree over images.
template <class T>
bool ShortPlanes(const ChannelNormKernelsT<T>& k, const BatchNormJobT<T>& job) {
  return !job.channels_last && job.spatial <= k.short_plane_max();
}

// Short planes in one region: each thread measures its channels and calls
// finish(ci, stats) for each; with `affine` (set by finish), it then maps its part of
// the planes after a barrier (ApplyPlanesPart).
template <class T, class Finish>
nk_status RunShortPlanes(const ChannelNormKernelsT<T>& k, const BatchNormJobT<T>& job,
                         const Planes<T>& planes, int threads, bool stream,
                         const Finish& finish, const SpanAffine* affine) {
  const size_t per_thread = k.short_plane_scratch(job.n, (job.c + threads - 1) / threads);
  Workspace<Moments, struct ShortPlaneMomentsTag> moments_ws;
  Workspace<float, struct ShortPlaneScratchTag> scratch_ws;
  Moments* moments = moments_ws.Get(job.c);
  float* scratch = scratch_ws.Get(per_thread * static_cast<size_t>(threads));
  if (moments == nullptr || scratch == nullptr) return OutOfMemory(job);
  SpinBarrier barrier;
  ForEachPart(threads, [&](size_t t, size_t parts) {
    const size_t c0 = PartBegin(job.c, t, parts), c1 = PartBegin(job.c, t + 1, parts);
    if (c1 > c0) {
      k.short_plane_moments(job.x, job.n, job.c, job.spatial, c0, c1,
                            scratch + t * per_thread, moments + c0);
    }
    for (size_t ci = c0; ci < c1; ++ci) finish(ci, planes.Stats(ci, moments[ci]));
    if (affine == nullptr) return;
    barrier.Wait(parts);
    ApplyPlanesPart(planes, t, parts, stream, affine);
  });
  return NK_OK;
}

// Statistics of every channel, all spans measured in parallel.
template <class T>
nk_status AllPlaneStats(const BatchNormJobT<T>& job, const Planes<T>& planes, int threads,
                        SetStats* stats) {
  Workspace<Moments, struct SpanMomentsTag> moments_ws;
  Moments* moments = moments_ws.Get(planes.spans());
  if (moments == nullptr) return OutOfMemory(job);
  ParallelFor(threads, planes.spans(),
              [&](size_t s) { moments[s] = planes.SpanMoments(s, 1.0f); });
  ParallelFor(threads, job.c, [&](size_t ci) {
    stats[ci] = planes.Stats(
        ci, [&](size_t i) { return moments[planes.ChannelSpan(ci, i)]; });
  });
  return NK_OK;
}

// ---------------------------------------------------------------- NHWC

// An NHWC call, run in one OpenMP region: each thread measures its chunks of rows;
// after a barrier it merges and finishes its part of the channels and sets their
// affine maps; after another it maps its part of the rows. A region costs about 3 us
// on this VM; against three regions with the per-channel finish on the calling thread,
// 2 threads: 8x2048x7x7 training 160-175 -> 132-137 us, inference 73-88 -> 67 us,
// 8x256x7x7 training 29-31 -> 19-22 us.
enum class ColumnPass { kMoments, kTraining, kInference };

template <class T>
class Columns {
 public:
  Columns(const ChannelNormKernelsT<T>& k, const BatchNormJobT<T>& job, int threads,
          bool stream)
      : k_(k),
        job_(job),
        threads_(threads),
        stream_(stream),
        rows_(job.n * job.spatial, job.c),
        scratch_floats_(ColumnScratchFloats(rows_.chunk_rows(), job.c)) {}

  // The buffers of the statistics (`measure`) and of the affine map (`apply`), taken
  // before anything is written; false when out of memory.
  bool Reserve(bool measure, bool apply) {
    const size_t c = job_.c;
    if (measure) {
      mean_ = mean_ws_.Get(rows_.chunks() * c);
      m2_ = m2_ws_.Get(rows_.chunks() * c);
      scratch_ = scratch_ws_.Get(static_cast<size_t>(threads_) * scratch_floats_);
      if (mean_ == nullptr || m2_ == nullptr || scratch_ == nullptr) return false;
    }
    if (apply) {
      params_ = params_ws_.Get(5 * c);
      if (params_ == nullptr) return false;
    }
    return true;
  }

  // Part t of `parts`: the per-column moments of its chunks of rows.
  void Measure(size_t t, size_t parts) {
    const size_t c = job_.c;
    float* own = scratch_ + t * scratch_floats_;
    const size_t end = PartBegin(rows_.chunks(), t + 1, parts);
    for (size_t ch = PartBegin(rows_.chunks(), t, parts); ch < end; ++ch) {
      k_.column_moments(job_.x + ch * rows_.chunk_rows() * c, rows_.RowsIn(ch, ch + 1), c,
                        stream_, own, mean_ + ch * c, m2_ + ch * c);
    }
  }

  // Once every part is measured: the chunks' moments of channels [c0, c1) merged into
  // chunk 0's, in a pairwise tree (at width w, chunk a takes in chunk a + w). The merge
  // is per column, so the channels' partition does not change the bits.
  void Merge(size_t c0, size_t c1) {
    if (c1 > c0) MergeColumnChunks(k_, rows_, c1 - c0, job_.c, mean_ + c0, m2_ + c0);
  }

  // Once merged: channel ci's statistics.
  SetStats Stats(size_t ci) const {
    const size_t c = job_.c;
    const Moments first = {static_cast<double>(rows_.rows()), mean_[ci], m2_[ci]};
    return SetStatistics(
        first, job_.eps, [&] { return k_.strided_max_abs(job_.x + ci, c, rows_.rows()); },
        [&](float scale) {
          return k_.strided_moments(job_.x + ci, c, rows_.rows(), scale);
        });
  }

  // Channel ci's affine map, for Apply.
  void SetAffine(size_t ci, const SpanAffine& a) {
    const size_t c = job_.c;
    params_[ci] = a.scale;
    params_[c + ci] = a.shift;
    params_[2 * c + ci] = a.rstd;
    params_[3 * c + ci] = a.mul;
    params_[4 * c + ci] = a.add;
    if (a.scale != 1.0f) scaled_.store(true, std::memory_order_relaxed);
  }

  // Once every channel's map is set: part t of the rows mapped (ColumnRows::Part).
  void Apply(size_t t, size_t parts, bool center) const {
    const size_t c = job_.c;
    const bool scaled = scaled_.load(std::memory_order_relaxed);
    // Scaled maps subtract their shift (inference's overflow fallback); the others'
    // shift is then 0, which changes nothing.
    const ColumnAffine columns = {scaled ? params_ : nullptr,
                                  center || scaled ? params_ + c : nullptr,
                                  params_ + 2 * c, params_ + 3 * c, params_ + 4 * c};
    size_t r0, r1;
    rows_.Part(t, parts, &r0, &r1);
    if (r1 > r0) {
      k_.column_apply(job_.x + r0 * c, r1 - r0, c, columns, stream_, job_.y + r0 * c);
    }
    if (stream_) hwy::FlushStream();
  }

 private:
  const ChannelNormKernelsT<T>& k_;
  const BatchNormJobT<T>& job_;
  const int threads_;
  const bool stream_;
  const ColumnRows rows_;
  const size_t scratch_floats_;
  Workspace<float, struct ColumnMeanTag> mean_ws_;
  Workspace<float, struct ColumnM2Tag> m2_ws_;
  Workspace<float, struct ColumnScratchTag> scratch_ws_;
  Workspace<float, struct ColumnParamsTag> params_ws_;
  float* mean_ = nullptr;
  float* m2_ = nullptr;
  float* scratch_ = nullptr;
  float* params_ = nullptr;  // scale, shift, rstd, mul, add: c each
  std::atomic<bool> scaled_{false};
};

// One NHWC pass: finish(columns, ci) runs for each channel on the thread that owns it,
// after the statistics (kMoments, kTraining); it sets the channel's affine map where
// the pass applies one (kTraining, kInference).
template <class T, class Finish>
nk_status RunColumns(const ChannelNormKernelsT<T>& k, const BatchNormJobT<T>& job,
                     int threads, bool stream, ColumnPass pass, const Finish& finish) {
  const bool measure = pass != ColumnPass::kInference;
  const bool apply = pass != ColumnPass::kMoments;
  Columns<T> columns(k, job, threads, stream);
  if (!columns.Reserve(measure, apply)) return OutOfMemory(job);
  SpinBarrier barrier;
  ForEachPart(threads, [&](size_t t, size_t parts) {
    if (measure) {
      columns.Measure(t, parts);
      barrier.Wait(parts);
    }
    const size_t c0 = PartBegin(job.c, t, parts), c1 = PartBegin(job.c, t + 1, parts);
    if (measure) columns.Merge(c0, c1);
    for (size_t ci = c0; ci < c1; ++ci) finish(columns, ci);
    if (!apply) return;
    barrier.Wait(parts);
    columns.Apply(t, parts, pass == ColumnPass::kTraining);
  });
  return NK_OK;
}

// ---------------------------------------------------------------- shared

template <class T>
struct Context {
  const ChannelNormKernelsT<T>& k;
  int threads;
  bool stream;
  size_t bytes;  // of x
};

template <class T>
Context<T> ContextFor(const BatchNormJobT<T>& job) {
  const size_t elements = job.n * job.c * job.spatial;
  const size_t bytes = elements * sizeof(T);
  // Streaming pays once x and y together overflow the cache: the second pass over x
  // then comes from memory too.
  return {ChannelNormKernelsFor<T>(CurrentTarget()), ThreadsFor(elements),
          StreamsChannels(elements, sizeof(T)), bytes};
}

// Statistics of every channel of NCHW.
template <class T>
nk_status AllStats(const Context<T>& ctx, const BatchNormJobT<T>& job, SetStats* stats) {
  const Planes<T> planes(ctx.k, job);
  if (ShortPlanes(ctx.k, job)) {
    return RunShortPlanes(
        ctx.k, job, planes, ctx.threads, ctx.stream,
        [&](size_t ci, const SetStats& st) { stats[ci] = st; }, nullptr);
  }
  if (!ByChannel(job.c, ctx.bytes, ctx.threads)) {
    return AllPlaneStats(job, planes, ctx.threads, stats);
  }
  ParallelFor(ctx.threads, job.c, [&](size_t ci) { stats[ci] = planes.Stats(ci); });
  return NK_OK;
}

}  // namespace

template <class T>
nk_status BatchNormTraining(const BatchNormJobT<T>& job, float* running_mean,
                            float* running_var, float* save_mean, float* save_rstd) {
  const Context<T> ctx = ContextFor(job);
  const double count = static_cast<double>(job.n * job.spatial);
  const auto outputs = [&](size_t ci, const SetStats& st) {
    if (save_mean != nullptr) save_mean[ci] = st.mean_out;
    if (save_rstd != nullptr) save_rstd[ci] = st.rstd_out;
    if (running_mean != nullptr) {
      UpdateRunning(1.0 / (count - 1.0), st.mean_out, M2Of(st), job.momentum,
                    running_mean + ci,
                    running_var + ci);
    }
  };
  if (job.channels_last) {
    return RunColumns(ctx.k, job, ctx.threads, ctx.stream, ColumnPass::kTraining,
                      [&](Columns<T>& columns, size_t ci) {
                        const SetStats st = columns.Stats(ci);
                        outputs(ci, st);
                        columns.SetAffine(ci, TrainingAffine(job, ci, st));
                      });
  }
  if (ShortPlanes(ctx.k, job)) {
    Workspace<SpanAffine, struct TrainingAffineTag> affine_ws;
    SpanAffine* affine = affine_ws.Get(job.c);
    if (affine == nullptr) return OutOfMemory(job);
    return RunShortPlanes(
        ctx.k, job, Planes<T>(ctx.k, job), ctx.threads, ctx.stream,
        [&](size_t ci, const SetStats& st) {
          outputs(ci, st);
          affine[ci] = TrainingAffine(job, ci, st);
        },
        affine);
  }
  if (ByChannel(job.c, ctx.bytes, ctx.threads)) {
    // Each channel normalized right after its statistics, while it is in cache.
    const Planes<T> planes(ctx.k, job);
    ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
      const size_t end = PartBegin(job.c, t + 1, parts);
      for (size_t ci = PartBegin(job.c, t, parts); ci < end; ++ci) {
        const SetStats st = planes.Stats(ci);
        outputs(ci, st);
        const SpanAffine a = TrainingAffine(job, ci, st);
        for (size_t i = 0; i < planes.spans_per_channel(); ++i) {
          planes.Apply(planes.ChannelSpan(ci, i), a, ctx.stream);
        }
      }
      if (ctx.stream) hwy::FlushStream();
    });
    return NK_OK;
  }
  Workspace<SetStats, struct TrainingStatsTag> stats_ws;
  Workspace<SpanAffine, struct TrainingAffineTag> affine_ws;
  SetStats* stats = stats_ws.Get(job.c);
  SpanAffine* affine = affine_ws.Get(job.c);
  if (stats == nullptr || affine == nullptr) return OutOfMemory(job);
  const nk_status status = AllStats(ctx, job, stats);
  if (status != NK_OK) return status;
  for (size_t ci = 0; ci < job.c; ++ci) {
    outputs(ci, stats[ci]);
    affine[ci] = TrainingAffine(job, ci, stats[ci]);
  }
  ApplyPlanes(Planes<T>(ctx.k, job), ctx.threads, ctx.stream, affine);
  return NK_OK;
}

template <class T>
nk_status BatchNormInference(const BatchNormJobT<T>& job, const float* mean,
                             const float* var) {
  const Context<T> ctx = ContextFor(job);
  if (job.channels_last) {
    return RunColumns(ctx.k, job, ctx.threads, ctx.stream, ColumnPass::kInference,
                      [&](Columns<T>& columns, size_t ci) {
                        columns.SetAffine(ci, InferenceAffine(job, ci, mean[ci], var[ci]));
                      });
  }
  Workspace<SpanAffine, struct InferenceAffineTag> affine_ws;
  SpanAffine* affine = affine_ws.Get(job.c);
  if (affine == nullptr) return OutOfMemory(job);
  for (size_t ci = 0; ci < job.c; ++ci) {
    affine[ci] = InferenceAffine(job, ci, mean[ci], var[ci]);
  }
  ApplyPlanes(Planes<T>(ctx.k, job), ctx.threads, ctx.stream, affine);
  return NK_OK;
}

template <class T>
nk_status BatchNormMoments(const BatchNormJobT<T>& job, float* mean, float* m2) {
  const Context<T> ctx = ContextFor(job);
  const auto outputs = [&](size_t ci, const SetStats& st) {
    mean[ci] = st.mean_out;
    m2[ci] = static_cast<float>(M2Of(st));
  };
  if (job.channels_last) {
    return RunColumns(
        ctx.k, job, ctx.threads, ctx.stream, ColumnPass::kMoments,
        [&](Columns<T>& columns, size_t ci) { outputs(ci, columns.Stats(ci)); });
  }
  Workspace<SetStats, struct MomentsStatsTag> stats_ws;
  SetStats* stats = stats_ws.Get(job.c);
  if (stats == nullptr) return OutOfMemory(job);
  const nk_status status = AllStats(ctx, job, stats);
  if (status != NK_OK) return status;
  for (size_t ci = 0; ci < job.c; ++ci) outputs(ci, stats[ci]);
  return NK_OK;
}

#define NK_BATCHNORM_FORWARDS(T)                                                        \
  template nk_status BatchNormTraining(const BatchNormJobT<T>&, float*, float*, float*, \
                                       float*);                                         \
  template nk_status BatchNormInference(const BatchNormJobT<T>&, const float*,          \
                                        const float*);                                  \
  template nk_status BatchNormMoments(const BatchNormJobT<T>&, float*, float*);
NK_BATCHNORM_FORWARDS(float)
NK_BATCHNORM_FORWARDS(hwy::bfloat16_t)
NK_BATCHNORM_FORWARDS(hwy::float16_t)
#undef NK_BATCHNORM_FORWARDS

}  // namespace nk
