// SPDX-License-Identifier: Apache-2.0
// groupnorm.cc: GroupNorm's forward op layer, on BatchNorm's per-target steps
// (channelnorm.h). A set is one (sample, group): cg = c / groups channels.
//
// NCHW: a set is cg contiguous planes, one span of cg * spatial elements, measured as
// a LayerNorm row is (kChunk pieces merged pairwise, or the short-plane step's
// per-lane tree for sets of a few vectors), then mapped plane by plane with its
// channel's gamma and beta. Each thread takes whole sets and maps each right after
// its statistics, while it is in cache; with too few sets for the threads, every
// piece is measured in parallel first.
// NHWC: a sample is a [spatial][c] matrix; per-column moments of chunks of its rows
// (ColumnRows) merge in a pairwise tree, then a group's cg columns merge pairwise.
#include "kernels/groupnorm/groupnorm.h"

#include <algorithm>

#include "hwy/cache_control.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"
#include "kernels/common/workspace.h"
#include "kernels/groupnorm/groupsets.h"

namespace nk {

namespace {

template <class Job>
nk_status OutOfMemory(const Job& job) {
  return SetError(NK_ERR_OUT_OF_MEMORY, "%s: out of memory for per-group statistics",
                  job.function);
}

// Channel ch's map in a set: y = (x - mean) * (rstd * gamma) + beta; on the slow
// path ((x * scale - mean) * rstd) * gamma + beta in the scaled units. x - mean comes
// first, so a constant set gives exactly beta.
template <class Job>
SpanAffine ChannelAffine(const Job& job, size_t ch, const SetStats& st) {
  const float gamma = job.gamma != nullptr ? job.gamma[ch] : 1.0f;
  const float beta = job.beta != nullptr ? job.beta[ch] : 0.0f;
  if (st.scale == 1.0f) return {true, 1.0f, st.mean, 1.0f, st.rstd * gamma, beta};
  return {true, st.scale, st.mean, st.rstd, gamma, beta};
}

// ---------------------------------------------------------------- NCHW

// Set s's statistics and outputs, and the maps of its planes into affine[s * cg ...].
template <class Job>
void FinishSet(const Job& job, size_t s, const SetStats& st, float* mean, float* rstd,
               SpanAffine* affine) {
  if (mean != nullptr) mean[s] = st.mean_out;
  if (rstd != nullptr) rstd[s] = st.rstd_out;
  const size_t cg = job.group_channels(), g = s % job.groups;
  for (size_t j = 0; j < cg; ++j) affine[s * cg + j] = ChannelAffine(job, g * cg + j, st);
}

// Planes [p0, p1) (p = sample * c + channel) by their maps.
template <class T>
void ApplyPlanes(const GroupSets<T>& sets, const GroupNormJobT<T>& job, size_t p0,
                 size_t p1, const SpanAffine* affine, bool stream, size_t ahead = 0) {
  const size_t spatial = job.spatial;
  sets.k().planes_apply(job.x + p0 * spatial, spatial, p1 - p0, affine + p0, stream,
                        ahead, job.y + p0 * spatial);
}

template <class T>
nk_status ForwardPlanes(const GroupSets<T>& sets, const GroupNormJobT<T>& job,
                        int threads, bool stream, float* mean, float* rstd) {
  const ChannelNormKernelsT<T>& k = sets.k();
  const size_t count = sets.count(), cg = job.group_channels();
  Workspace<SpanAffine, struct GroupAffineTag> affine_ws;
  SpanAffine* affine = affine_ws.Get(job.n * job.c);
  if (affine == nullptr) return OutOfMemory(job);
  if (sets.Short()) {
    // A few vectors per set: each thread measures its sets with the per-lane tree
    // (one call), then maps them, still in L1 / L2.
    const size_t per_thread = k.short_plane_scratch(1, (count + threads - 1) / threads);
    Workspace<Moments, struct GroupShortMomentsTag> moments_ws;
    Workspace<float, struct GroupShortScratchTag> scratch_ws;
    Moments* moments = moments_ws.Get(count);
    float* scratch = scratch_ws.Get(per_thread * static_cast<size_t>(threads));
    if (moments == nullptr || scratch == nullptr) return OutOfMemory(job);
    ForEachPart(threads, [&](size_t t, size_t parts) {
      const size_t s0 = PartBegin(count, t, parts), s1 = PartBegin(count, t + 1, parts);
      if (s1 == s0) return;
      k.short_plane_moments(job.x, 1, count, sets.length(), s0, s1,
                            scratch + t * per_thread, moments + s0);
      for (size_t s = s0; s < s1; ++s) {
        FinishSet(job, s, sets.Stats(s, moments[s], job.eps), mean, rstd, affine);
      }
      ApplyPlanes(sets, job, s0 * cg, s1 * cg, affine, stream);
      if (stream) hwy::FlushStream();
    });
    return NK_OK;
  }
  if (sets.BySet(threads)) {
    ForEachPart(threads, [&](size_t t, size_t parts) {
      const size_t s1 = PartBegin(count, t + 1, parts);
      for (size_t s = PartBegin(count, t, parts); s < s1; ++s) {
        FinishSet(job, s, sets.Stats(s, job.eps), mean, rstd, affine);
        // Streamed, the next set's x is asked for into L2 while this one's y is
        // written, as a copy reads while it writes; its statistics then read from L2
        // (8x256x64x64, 1 thread, Zen 4: AVX3 18.8-19.5 -> 25.0-25.3 GB/s, AVX2
        // 16.2-17.7 -> 23.2-23.7, SSE4 +3-7%; 2 threads AVX3 +20-30%, AVX2 +30-50%).
        const size_t next = s + 1 < s1 ? sets.length() : 0;
        ApplyPlanes(sets, job, s * cg, (s + 1) * cg, affine, stream, next);
      }
      if (stream) hwy::FlushStream();
    });
    return NK_OK;
  }
  // Few large sets: every piece in parallel, then each set's statistics, then the
  // planes in memory order.
  Workspace<Moments, struct GroupPieceMomentsTag> moments_ws;
  Moments* moments = moments_ws.Get(sets.pieces());
  if (moments == nullptr) return OutOfMemory(job);
  ParallelFor(threads, sets.pieces(),
              [&](size_t i) { moments[i] = sets.PieceMoments(i, 1.0f); });
  for (size_t s = 0; s < count; ++s) {
    const SetStats st =
        sets.Stats(s, sets.MergePieces(s, [&](size_t i) { return moments[i]; }), job.eps);
    FinishSet(job, s, st, mean, rstd, affine);
  }
  const size_t planes = job.n * job.c;
  ForEachPart(threads, [&](size_t t, size_t parts) {
    ApplyPlanes(sets, job, PartBegin(planes, t, parts), PartBegin(planes, t + 1, parts),
                affine, stream);
    if (stream) hwy::FlushStream();
  });
  return NK_OK;
}

// ---------------------------------------------------------------- NHWC

// Set s's outputs and its channels' maps in its sample's ColumnAffine arrays a
// (scale, shift, rstd, mul, add: c each).
template <class Job>
void FinishColumnSet(const Job& job, size_t s, const SetStats& st, float* a, float* mean,
                     float* rstd) {
  if (mean != nullptr) mean[s] = st.mean_out;
  if (rstd != nullptr) rstd[s] = st.rstd_out;
  const size_t c = job.c, cg = job.group_channels();
  for (size_t ch = (s % job.groups) * cg, end = ch + cg; ch < end; ++ch) {
    const SpanAffine m = ChannelAffine(job, ch, st);
    a[ch] = m.scale;
    a[c + ch] = m.shift;
    a[2 * c + ch] = m.rstd;
    a[3 * c + ch] = m.mul;
    a[4 * c + ch] = m.add;
  }
}

// Rows [r0, r1) of a sample by its maps a; the slow path's steps only where one of
// its sets took it. With `next`, the same rows of the next sample are asked for into
// L2 meanwhile.
template <class T>
void ApplyRows(const ChannelNormKernelsT<T>& k, const GroupNormJobT<T>& job,
               size_t sample, size_t r0, size_t r1, const float* a, bool stream,
               bool next = false) {
  const size_t c = job.c, at = (sample * job.spatial + r0) * c;
  const bool scaled = std::any_of(a, a + c, [](float v) { return v != 1.0f; });
  k.column_apply(job.x + at, r1 - r0, c,
                 ColumnAffine{scaled ? a : nullptr, a + c, a + 2 * c, a + 3 * c,
                              a + 4 * c, next ? job.spatial * c : 0},
                 stream, job.y + at);
}

template <class T>
nk_status ForwardColumns(const ChannelNormKernelsT<T>& k, const GroupNormJobT<T>& job,
                         int threads, bool stream, float* mean, float* rstd) {
  GroupColumns<T> columns(k, job, threads, stream);
  Workspace<float, struct GroupColumnAffineTag> affine_ws;
  float* affine = affine_ws.Get(job.n * 5 * job.c);  // per sample: ColumnAffine's 5
  if (!columns.Reserve() || affine == nullptr) return OutOfMemory(job);
  const size_t c = job.c, groups = job.groups, count = job.n * groups;
  if (columns.chunks().BySample(threads)) {
    // Each sample normalized right after its statistics, while it is in cache.
    ForEachPart(threads, [&](size_t t, size_t parts) {
      const size_t end = PartBegin(job.n, t + 1, parts);
      for (size_t sample = PartBegin(job.n, t, parts); sample < end; ++sample) {
        float* a = affine + sample * 5 * c;
        size_t i0, i1;
        columns.chunks().OfSample(sample, &i0, &i1);
        columns.Measure(i0, i1, t);
        for (size_t s = sample * groups; s < (sample + 1) * groups; ++s) {
          FinishColumnSet(job, s, columns.Stats(s, job.eps), a, mean, rstd);
        }
        // Streamed, the next sample's x goes to L2 (and from there to L3) while this
        // one's y is written, so its statistics do not wait on memory (8x256x64x64,
        // Zen 4, GB/s: AVX3 1 thread 24.3-24.8 -> 26.6-27.9, 2 threads 32 -> 39; AVX2
        // 23 -> 24-25, 35 -> 43-50; SSE4 14.5 -> 17.5, 22 -> 29; 32x512x14x14 +0-16%).
        ApplyRows(k, job, sample, 0, job.spatial, a, stream, sample + 1 < end);
      }
      if (stream) hwy::FlushStream();
    });
    return NK_OK;
  }
  SpinBarrier barrier;
  ForEachPart(threads, [&](size_t t, size_t parts) {
    size_t i0, i1;
    columns.chunks().Part(t, parts, &i0, &i1);
    columns.Measure(i0, i1, t);
    barrier.Wait(parts);
    const size_t s1 = PartBegin(count, t + 1, parts);
    for (size_t s = PartBegin(count, t, parts); s < s1; ++s) {
      FinishColumnSet(job, s, columns.Stats(s, job.eps), affine + s / groups * 5 * c,
                      mean, rstd);
    }
    barrier.Wait(parts);
    columns.chunks().ForEachRowPart(t, parts, [&](size_t sample, size_t r0, size_t r1) {
      ApplyRows(k, job, sample, r0, r1, affine + sample * 5 * c, stream);
    });
    if (stream) hwy::FlushStream();
  });
  return NK_OK;
}

}  // namespace

template <class T>
nk_status GroupNormForward(const GroupNormJobT<T>& job, float* mean, float* rstd) {
  const ChannelNormKernelsT<T>& k = ChannelNormKernelsFor<T>(CurrentTarget());
  const size_t elements = job.n * job.c * job.spatial;
  const int threads = ThreadsFor(elements);
  const bool stream = StreamsChannels(elements, sizeof(T));  // as BatchNorm's
  if (job.channels_last) return ForwardColumns(k, job, threads, stream, mean, rstd);
  return ForwardPlanes(GroupSets<T>(k, job), job, threads, stream, mean, rstd);
}

template nk_status GroupNormForward(const GroupNormJobT<float>&, float*, float*);
template nk_status GroupNormForward(const GroupNormJobT<hwy::bfloat16_t>&, float*,
                                    float*);
template nk_status GroupNormForward(const GroupNormJobT<hwy::float16_t>&, float*, float*);

}  // namespace nk
