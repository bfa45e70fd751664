// SPDX-License-Identifier: Apache-2.0
// groupnorm_backward.cc: GroupNorm's backward op layer, on BatchNorm's per-target
// backward steps. Per channel of each sample, the sums of dy and dy * x_hat (pieces
// fixed by the shape, added pairwise); a set's sums of a = gamma dy and a x_hat are
// its channels' weighted by gamma (in double, in channel order), and its dx the map
//   dx = rstd (gamma dy - mean(a) - x_hat mean(a x_hat))      (SpanGrad, ColumnGrad)
// dgamma and dbeta per channel add the samples' sums pairwise: the same bits for any
// thread count.
//
// NCHW: each thread takes whole sets (when they balance the threads) and maps each
// right after its sums, while it is in cache; else every piece is summed in parallel
// first. NHWC: per-column sums of chunks of each sample's rows, as the forward.
#include <algorithm>

#include "hwy/cache_control.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"
#include "kernels/common/workspace.h"
#include "kernels/groupnorm/groupnorm.h"
#include "kernels/groupnorm/groupsets.h"

namespace nk {

namespace {

template <class Job>
nk_status OutOfMemory(const Job& job) {
  return SetError(NK_ERR_OUT_OF_MEMORY, "%s: out of memory for per-channel sums",
                  job.function);
}

template <class T>
struct Context {
  const ChannelNormKernelsT<T>& k;
  int threads;
  bool from_memory;  // x and dy far larger than the cache: lines asked for ahead
  bool stream;       // dx written with non-temporal stores
};

// Means over set s's m values of a = gamma dy and a x_hat, from its channels' sums
// sum(j), j < cg (of dy, dy x_hat), in double, in channel order.
template <class Job, class SumOf>
GradSums SetMeans(const Job& job, size_t s, const SumOf& sum) {
  const size_t cg = job.group_channels(), c0 = (s % job.groups) * cg;
  double a = 0.0, a_xhat = 0.0;
  for (size_t j = 0; j < cg; ++j) {
    const double gamma = job.gamma != nullptr ? job.gamma[c0 + j] : 1.0;
    const GradSums sj = sum(j);
    a += gamma * sj.a;
    a_xhat += gamma * sj.a_xhat;
  }
  const double m = static_cast<double>(cg * job.spatial);
  return {static_cast<float>(a / m), static_cast<float>(a_xhat / m)};
}

// dgamma, dbeta of channels [c0, c1) from the samples' sums sum(sample, ch).
template <class Job, class SumOf>
void ParamGrads(const Job& job, size_t c0, size_t c1, const SumOf& sum, float* dgamma,
                float* dbeta) {
  for (size_t ch = c0; ch < c1; ++ch) {
    const GradSums s = AddPairwise(0, job.n, [&](size_t i) { return sum(i, ch); });
    if (dgamma != nullptr) dgamma[ch] = s.a_xhat;
    if (dbeta != nullptr) dbeta[ch] = s.a;
  }
}

// ---------------------------------------------------------------- NCHW

// Plane p = sample * c + ch is set p / cg's; its pieces are kChunk runs of it.
template <class T>
class GradPlanes {
 public:
  GradPlanes(const Context<T>& ctx, const GroupNormJobT<T>& job, const float* mean,
             const float* rstd)
      : ctx_(ctx),
        job_(job),
        mean_(mean),
        rstd_(rstd),
        per_plane_(NumChunks(job.spatial)) {}

  size_t planes() const { return job_.n * job_.c; }
  size_t pieces() const { return planes() * per_plane_; }

  GradSums PieceSums(size_t i) const {
    const size_t p = i / per_plane_, begin = (i % per_plane_) * kChunk;
    const size_t at = p * job_.spatial + begin, s = p / job_.group_channels();
    return ctx_.k.planes_grad_sums(job_.x + at, job_.dy + at, 1, 0,
                                   std::min(kChunk, job_.spatial - begin), mean_[s],
                                   rstd_[s], ctx_.from_memory);
  }
  template <class SumOf>
  GradSums PlaneSums(size_t p, const SumOf& piece) const {
    return AddPairwise(p * per_plane_, (p + 1) * per_plane_, piece);
  }
  GradSums PlaneSums(size_t p) const {
    return PlaneSums(p, [&](size_t i) { return PieceSums(i); });
  }

  // dx of set s's planes, from their sums sums[s * cg ...].
  void ApplySet(size_t s, const GradSums* sums) const {
    const size_t cg = job_.group_channels(), spatial = job_.spatial;
    const GradSums means = SetMeans(job_, s, [&](size_t j) { return sums[s * cg + j]; });
    for (size_t p = s * cg; p < (s + 1) * cg; ++p) {
      const size_t ch = p % job_.c;
      const SpanGrad g{mean_[s], rstd_[s],
                       means.a,  means.a_xhat,
                       rstd_[s], job_.gamma != nullptr ? job_.gamma[ch] : 1.0f};
      ctx_.k.span_grad_apply(job_.x + p * spatial, job_.dy + p * spatial, spatial, g,
                             ctx_.stream, job_.dx + p * spatial);
    }
  }

 private:
  const Context<T>& ctx_;
  const GroupNormJobT<T>& job_;
  const float* mean_;
  const float* rstd_;
  const size_t per_plane_;
};

template <class T>
nk_status BackwardPlanes(const Context<T>& ctx, const GroupNormJobT<T>& job,
                         const float* mean, const float* rstd, float* dgamma,
                         float* dbeta) {
  const GradPlanes<T> planes(ctx, job, mean, rstd);
  const GroupSets<T> sets(ctx.k, job);
  const size_t count = sets.count();
  Workspace<GradSums, struct GroupPlaneSumsTag> sums_ws;
  GradSums* sums = sums_ws.Get(planes.planes());
  if (sums == nullptr) return OutOfMemory(job);
  const bool by_set = sets.BySet(ctx.threads);
  Workspace<GradSums, struct GroupPieceSumsTag> pieces_ws;
  GradSums* pieces = by_set ? nullptr : pieces_ws.Get(planes.pieces());
  if (!by_set && pieces == nullptr) return OutOfMemory(job);
  const size_t cg = job.group_channels();
  SpinBarrier barrier;
  ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
    const size_t s0 = PartBegin(count, t, parts), s1 = PartBegin(count, t + 1, parts);
    if (by_set) {
      // Each set mapped right after its sums, while its x and dy are in cache.
      for (size_t s = s0; s < s1; ++s) {
        for (size_t p = s * cg; p < (s + 1) * cg; ++p) sums[p] = planes.PlaneSums(p);
        planes.ApplySet(s, sums);
      }
    } else {
      const size_t end = PartBegin(planes.pieces(), t + 1, parts);
      for (size_t i = PartBegin(planes.pieces(), t, parts); i < end; ++i) {
        pieces[i] = planes.PieceSums(i);
      }
      barrier.Wait(parts);
      for (size_t p = s0 * cg; p < s1 * cg; ++p) {
        sums[p] = planes.PlaneSums(p, [&](size_t i) { return pieces[i]; });
      }
      for (size_t s = s0; s < s1; ++s) planes.ApplySet(s, sums);
    }
    if (ctx.stream) hwy::FlushStream();
    barrier.Wait(parts);
    ParamGrads(
        job, PartBegin(job.c, t, parts), PartBegin(job.c, t + 1, parts),
        [&](size_t sample, size_t ch) { return sums[sample * job.c + ch]; }, dgamma,
        dbeta);
  });
  return NK_OK;
}

// ---------------------------------------------------------------- NHWC

// Per sample: the sets' mean and rstd repeated over their channels, and after the
// sums the sets' means of a and a x_hat likewise: ColumnGrad's arrays.
template <class T>
class GradColumns {
 public:
  GradColumns(const Context<T>& ctx, const GroupNormJobT<T>& job)
      : ctx_(ctx),
        job_(job),
        chunks_(job),
        scratch_floats_(ColumnScratchFloats(chunks_.rows().chunk_rows(), job.c)) {}

  const SampleChunks<T>& chunks() const { return chunks_; }

  bool Reserve() {
    const size_t c = job_.c;
    sums_ = sums_ws_.Get(2 * chunks_.count() * c);
    scratch_ = scratch_ws_.Get(static_cast<size_t>(ctx_.threads) * scratch_floats_);
    maps_ = maps_ws_.Get(4 * job_.n * c);
    return sums_ != nullptr && scratch_ != nullptr && maps_ != nullptr;
  }

  // Sets [s0, s1)'s mean and rstd over their channels.
  void SetStats(size_t s0, size_t s1, const float* mean, const float* rstd) {
    const size_t cg = job_.group_channels();
    for (size_t s = s0; s < s1; ++s) {
      float* m = Map(s / job_.groups, 0) + (s % job_.groups) * cg;
      std::fill(m, m + cg, mean[s]);
      std::fill(m + job_.c, m + job_.c + cg, rstd[s]);
    }
  }

  // The per-column sums of chunks [i0, i1) (SampleChunks' ranges), on thread t.
  void Measure(size_t i0, size_t i1, size_t t) {
    float* own = scratch_ + t * scratch_floats_;
    for (size_t i = i0; i < i1; ++i) {
      size_t rows;
      const size_t at = chunks_.Chunk(i, &rows);
      const size_t sample = i / chunks_.rows().chunks();
      ctx_.k.column_grad_sums(job_.x + at, job_.dy + at, rows, job_.c, Map(sample, 0),
                              Map(sample, 1), ctx_.from_memory, own, SumDy(i),
                              SumDyXhat(i));
    }
  }

  // Once measured: set s's columns' chunks added into the sample's first chunk in a
  // pairwise tree, and its means of a and a x_hat set over its channels.
  void Finish(size_t s) {
    const size_t cg = job_.group_channels(), c0 = (s % job_.groups) * cg;
    const size_t sample = s / job_.groups, first = sample * chunks_.rows().chunks();
    AddColumnChunks(chunks_.rows(), cg, job_.c, SumDy(first) + c0);
    const GradSums means =
        SetMeans(job_, s, [&](size_t j) { return Sums(sample, c0 + j); });
    std::fill(Map(sample, 2) + c0, Map(sample, 2) + c0 + cg, means.a);
    std::fill(Map(sample, 3) + c0, Map(sample, 3) + c0 + cg, means.a_xhat);
  }

  // Once finished: channel ch's sums over a sample.
  GradSums Sums(size_t sample, size_t ch) {
    const size_t first = sample * chunks_.rows().chunks();
    return {SumDy(first)[ch], SumDyXhat(first)[ch]};
  }

  // Once every set is finished: part t of the rows mapped.
  void Apply(size_t t, size_t parts) {
    chunks_.ForEachRowPart(t, parts, [&](size_t sample, size_t r0, size_t r1) {
      ApplyRows(sample, r0, r1);
    });
  }

  // Once a sample's sets are finished: its rows [r0, r1) mapped. With `next`, the
  // same rows of the next sample are asked for into L2 meanwhile.
  void ApplyRows(size_t sample, size_t r0, size_t r1, bool next = false) {
    const size_t c = job_.c, at = (sample * job_.spatial + r0) * c;
    const float* rstd = Map(sample, 1);
    ctx_.k.column_grad_apply(job_.x + at, job_.dy + at, r1 - r0, c,
                             ColumnGrad{Map(sample, 0), rstd, Map(sample, 2),
                                        Map(sample, 3), rstd, job_.gamma},
                             ctx_.stream, next ? job_.spatial * c : 0, job_.dx + at);
  }

 private:
  float* SumDy(size_t chunk) { return sums_ + 2 * chunk * job_.c; }
  float* SumDyXhat(size_t chunk) { return sums_ + (2 * chunk + 1) * job_.c; }
  // Array k of a sample's maps: mean, rstd, mean of a, mean of a x_hat.
  float* Map(size_t sample, size_t k) { return maps_ + (4 * sample + k) * job_.c; }

  const Context<T>& ctx_;
  const GroupNormJobT<T>& job_;
  const SampleChunks<T> chunks_;
  const size_t scratch_floats_;
  Workspace<float, struct GroupGradSumsTag> sums_ws_;
  Workspace<float, struct GroupGradScratchTag> scratch_ws_;
  Workspace<float, struct GroupGradMapsTag> maps_ws_;
  float* sums_ = nullptr;  // per chunk: sum_dy[c], then sum_dy_xhat[c]
  float* scratch_ = nullptr;
  float* maps_ = nullptr;
};

template <class T>
nk_status BackwardColumns(const Context<T>& ctx, const GroupNormJobT<T>& job,
                          const float* mean, const float* rstd, float* dgamma,
                          float* dbeta) {
  GradColumns<T> columns(ctx, job);
  if (!columns.Reserve()) return OutOfMemory(job);
  const size_t count = job.n * job.groups;
  const size_t groups = job.groups;
  const bool by_sample = columns.chunks().BySample(ctx.threads);
  SpinBarrier barrier;
  ForEachPart(ctx.threads, [&](size_t t, size_t parts) {
    if (by_sample) {
      // Each sample mapped right after its sums, while its x and dy are in cache.
      const size_t end = PartBegin(job.n, t + 1, parts);
      for (size_t sample = PartBegin(job.n, t, parts); sample < end; ++sample) {
        columns.SetStats(sample * groups, (sample + 1) * groups, mean, rstd);
        size_t i0, i1;
        columns.chunks().OfSample(sample, &i0, &i1);
        columns.Measure(i0, i1, t);
        for (size_t s = sample * groups; s < (sample + 1) * groups; ++s) {
          columns.Finish(s);
        }
        // Streamed, the next sample's x and dy are asked for into L2 while this one's
        // dx is written; from there they go to L3, where its sums then read them
        // rather than from memory (8x256x64x64, 1 thread, Zen 4: AVX3 12.2-13.6 ->
        // 14.9-15.5 GB/s, AVX2 10.0-10.4 -> 10.9-12.6; 2 threads within the noise).
        columns.ApplyRows(sample, 0, job.spatial, sample + 1 < end);
      }
    } else {
      const size_t s0 = PartBegin(count, t, parts), s1 = PartBegin(count, t + 1, parts);
      columns.SetStats(s0, s1, mean, rstd);
      barrier.Wait(parts);
      size_t i0, i1;
      columns.chunks().Part(t, parts, &i0, &i1);
      columns.Measure(i0, i1, t);
      barrier.Wait(parts);
      for (size_t s = s0; s < s1; ++s) columns.Finish(s);
      barrier.Wait(parts);
      columns.Apply(t, parts);
    }
    if (ctx.stream) hwy::FlushStream();
    barrier.Wait(parts);
    ParamGrads(
        job, PartBegin(job.c, t, parts), PartBegin(job.c, t + 1, parts),
        [&](size_t sample, size_t ch) { return columns.Sums(sample, ch); }, dgamma,
        dbeta);
  });
  return NK_OK;
}

}  // namespace

template <class T>
nk_status GroupNormBackward(const GroupNormJobT<T>& job, const float* mean,
                            const float* rstd, float* dgamma, float* dbeta) {
  const size_t elements = job.n * job.c * job.spatial;
  const bool big = 3 * elements * sizeof(T) >= StreamBytes();
  const Context<T> ctx{ChannelNormKernelsFor<T>(CurrentTarget()), ThreadsFor(elements),
                       big, big};
  if (job.channels_last) return BackwardColumns(ctx, job, mean, rstd, dgamma, dbeta);
  return BackwardPlanes(ctx, job, mean, rstd, dgamma, dbeta);
}

#define NK_GROUPNORM_BACKWARD(T)                                              \
  template nk_status GroupNormBackward(const GroupNormJobT<T>&, const float*, \
                                       const float*, float*, float*);
NK_GROUPNORM_BACKWARD(float)
NK_GROUPNORM_BACKWARD(hwy::bfloat16_t)
NK_GROUPNORM_BACKWARD(hwy::float16_t)
#undef NK_GROUPNORM_BACKWARD

}  // namespace nk
