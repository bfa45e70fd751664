// SPDX-License-Identifier: Apache-2.0
// groupsets.h: GroupNorm's sets as the forward and backward op layers cut them: NCHW
// sets as contiguous spans in pieces of kChunk, NHWC samples as chunks of rows, and
// the per-set statistics of both from per-target steps (channelnorm.h). The pieces and
// merge trees depend on the shape alone, so the bits do not depend on the threads.
#ifndef NK_KERNELS_GROUPSETS_H_
#define NK_KERNELS_GROUPSETS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/moments.h"
#include "kernels/common/workspace.h"
#include "kernels/groupnorm/groupnorm.h"

namespace nk {

// NCHW: set s (sample s / groups, group s % groups) is the span of length() elements
// at x + s * length(), its cg planes one after another.
template <class T>
class GroupSets {
 public:
  GroupSets(const ChannelNormKernelsT<T>& k, const GroupNormJobT<T>& job)
      : k_(k),
        job_(job),
        length_(job.group_channels() * job.spatial),
        per_set_(NumChunks(length_)) {}

  const ChannelNormKernelsT<T>& k() const { return k_; }
  size_t count() const { return job_.n * job_.groups; }
  size_t length() const { return length_; }
  // Sets of a few vectors: measured by the short-plane step, many per call.
  bool Short() const { return length_ <= k_.short_plane_max(); }
  // Whole sets per thread, when that balances the threads.
  bool BySet(int threads) const {
    const size_t t = static_cast<size_t>(threads);
    return t == 1 || count() % t == 0 || count() >= 8 * t;
  }

  size_t pieces() const { return count() * per_set_; }
  // Piece i (of set i / the set's pieces): its offset and length.
  size_t Piece(size_t i, size_t* len) const {
    const size_t begin = (i % per_set_) * kChunk;
    *len = std::min(kChunk, length_ - begin);
    return (i / per_set_) * length_ + begin;
  }
  Moments PieceMoments(size_t i, float scale) const {
    size_t len;
    const size_t at = Piece(i, &len);
    return k_.span_moments(job_.x + at, len, scale, job_.x,
                           job_.x + job_.n * job_.c * job_.spatial);
  }
  // Set s's moments from its pieces' moment(i) (i over the tensor's pieces).
  template <class MomentOf>
  Moments MergePieces(size_t s, const MomentOf& moment) const {
    return MergePairwise(s * per_set_, (s + 1) * per_set_, moment);
  }

  // Set s's statistics from its fast-path moments (the slow path measures again).
  SetStats Stats(size_t s, const Moments& first, float eps) const {
    return SetStatistics(
        first, eps,
        [&] {
          float m = 0.0f;
          for (size_t i = s * per_set_; i < (s + 1) * per_set_; ++i) {
            size_t len;
            const size_t at = Piece(i, &len);
            const float a = k_.span_max_abs(job_.x + at, len);
            m = (a > m || std::isnan(a)) ? a : m;
          }
          return m;
        },
        [&](float scale) {
          return MergePieces(s, [&](size_t i) { return PieceMoments(i, scale); });
        });
  }
  SetStats Stats(size_t s, float eps) const {
    return Stats(s, MergePieces(s, [&](size_t i) { return PieceMoments(i, 1.0f); }), eps);
  }

 private:
  const ChannelNormKernelsT<T>& k_;
  const GroupNormJobT<T>& job_;
  const size_t length_;
  const size_t per_set_;  // pieces
};

// NHWC: each sample a [spatial][c] matrix in chunks of rows (ColumnRows), the
// tensor's chunks in sample order.
template <class T>
class SampleChunks {
 public:
  explicit SampleChunks(const GroupNormJobT<T>& job)
      : job_(job), rows_(job.spatial, job.c) {}

  const ColumnRows& rows() const { return rows_; }
  size_t count() const { return job_.n * rows_.chunks(); }
  // Whether each thread takes whole samples, each mapped right after its sums or
  // statistics while it is in cache: samples up to 8 MiB, when they balance the
  // threads.
  bool BySample(int threads) const {
    const size_t t = static_cast<size_t>(threads);
    return job_.spatial * job_.c * sizeof(T) <= (size_t{8} << 20) &&
           (t == 1 || job_.n % t == 0 || job_.n >= 8 * t);
  }
  // The chunks of part t of `parts`, and of a sample: [*i0, *i1).
  void Part(size_t t, size_t parts, size_t* i0, size_t* i1) const {
    *i0 = PartBegin(count(), t, parts);
    *i1 = PartBegin(count(), t + 1, parts);
  }
  void OfSample(size_t sample, size_t* i0, size_t* i1) const {
    *i0 = sample * rows_.chunks();
    *i1 = *i0 + rows_.chunks();
  }
  // Chunk i: its first element and rows.
  size_t Chunk(size_t i, size_t* rows) const {
    const size_t sample = i / rows_.chunks(), ch = i % rows_.chunks();
    *rows = rows_.RowsIn(ch, ch + 1);
    return (sample * job_.spatial + ch * rows_.chunk_rows()) * job_.c;
  }

  // fn(sample, r0, r1) for the rows of part t of `parts` of the tensor's n * spatial
  // rows (ColumnRows::Part), cut at the samples' boundaries.
  template <class Fn>
  void ForEachRowPart(size_t t, size_t parts, const Fn& fn) const {
    const size_t spatial = job_.spatial;
    size_t r0, r1;
    ColumnRows(job_.n * spatial, job_.c).Part(t, parts, &r0, &r1);
    for (size_t r = r0; r < r1;) {
      const size_t sample = r / spatial, begin = sample * spatial;
      const size_t end = std::min(r1, begin + spatial);
      fn(sample, r - begin, end - begin);
      r = end;
    }
  }

 private:
  const GroupNormJobT<T>& job_;
  const ColumnRows rows_;
};

// The NHWC forward's per-column moments and the sets' statistics from them.
template <class T>
class GroupColumns {
 public:
  GroupColumns(const ChannelNormKernelsT<T>& k, const GroupNormJobT<T>& job, int threads,
               bool from_memory)
      : k_(k),
        job_(job),
        chunks_(job),
        threads_(threads),
        from_memory_(from_memory),
        scratch_floats_(ColumnScratchFloats(chunks_.rows().chunk_rows(), job.c)) {}

  const SampleChunks<T>& chunks() const { return chunks_; }

  bool Reserve() {
    const size_t floats = chunks_.count() * job_.c;
    mean_ = mean_ws_.Get(floats);
    m2_ = m2_ws_.Get(floats);
    scratch_ = scratch_ws_.Get(static_cast<size_t>(threads_) * scratch_floats_);
    return mean_ != nullptr && m2_ != nullptr && scratch_ != nullptr;
  }

  // The per-column moments of chunks [i0, i1) (SampleChunks' ranges), on thread t.
  void Measure(size_t i0, size_t i1, size_t t) {
    float* own = scratch_ + t * scratch_floats_;
    for (size_t i = i0; i < i1; ++i) {
      size_t rows;
      const size_t at = chunks_.Chunk(i, &rows);
      k_.column_moments(job_.x + at, rows, job_.c, from_memory_, own, mean_ + i * job_.c,
                        m2_ + i * job_.c);
    }
  }

  // Once every part is measured: set s's statistics. Its columns' chunks merge into
  // the sample's first chunk in a pairwise tree, then its cg columns pairwise.
  SetStats Stats(size_t s, float eps) {
    const size_t c = job_.c, cg = job_.group_channels(), spatial = job_.spatial;
    const size_t sample = s / job_.groups, c0 = (s % job_.groups) * cg;
    const size_t first = sample * chunks_.rows().chunks();
    MergeColumnChunks(k_, chunks_.rows(), cg, c, mean_ + first * c + c0,
                      m2_ + first * c + c0);
    const float* mean = mean_ + first * c + c0;
    const float* m2 = m2_ + first * c + c0;
    const T* x = job_.x + sample * spatial * c + c0;
    return SetStatistics(
        MergePairwise(0, cg,
                      [&](size_t j) {
                        return Moments{static_cast<double>(spatial), mean[j], m2[j]};
                      }),
        eps,
        [&] {
          float m = 0.0f;
          for (size_t j = 0; j < cg; ++j) {
            const float a = k_.strided_max_abs(x + j, c, spatial);
            m = (a > m || std::isnan(a)) ? a : m;
          }
          return m;
        },
        [&](float scale) {
          return MergePairwise(0, cg, [&](size_t j) {
            return k_.strided_moments(x + j, c, spatial, scale);
          });
        });
  }

 private:
  const ChannelNormKernelsT<T>& k_;
  const GroupNormJobT<T>& job_;
  const SampleChunks<T> chunks_;
  const int threads_;
  const bool from_memory_;
  const size_t scratch_floats_;
  Workspace<float, struct GroupColumnMeanTag> mean_ws_;
  Workspace<float, struct GroupColumnM2Tag> m2_ws_;
  Workspace<float, struct GroupColumnScratchTag> scratch_ws_;
  float* mean_ = nullptr;
  float* m2_ = nullptr;
  float* scratch_ = nullptr;
};

}  // namespace nk

#endif  // NK_KERNELS_GROUPSETS_H_
