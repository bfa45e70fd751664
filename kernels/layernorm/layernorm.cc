// SPDX-License-Identifier: Apache-2.0
// layernorm.cc: the LayerNorm family's op layer: a fixed work partition over rows, or
// over chunks of long rows, run with OpenMP on the selected target's kernels.
#include "kernels/layernorm/layernorm.h"

#include <stdint.h>

#include <algorithm>
#include <new>
#include <vector>

#include "kernels/common/cache_sets.h"
#include "kernels/common/cpu_targets.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"

namespace nk {
namespace {

// Few rows, each long: all threads take chunks of every row; per-row merges in the
// fixed pairwise order of moments.h give the same bits as the one-row loop.
template <class T>
nk_status RunChunked(const RowNormKernelsT<T>& k, const RowNormJobT<T>& job,
                     int threads) {
  const size_t nchunks = NumChunks(job.cols);
  const size_t items = job.rows * nchunks;
  std::vector<Moments> moments;
  std::vector<SetStats> stats;
  try {
    moments.resize(items);
    stats.resize(job.rows);
  } catch (const std::bad_alloc&) {
    return SetError(NK_ERR_OUT_OF_MEMORY, "%s: out of memory for the statistics of %zu row chunks",
                    job.function, items);
  }
  const auto chunk = [&](size_t item, size_t* row, size_t* c0, size_t* n) {
    *row = item / nchunks;
    *c0 = (item % nchunks) * kChunk;
    *n = std::min(kChunk, job.cols - *c0);
  };
  ParallelFor(threads, items, [&](size_t item) {
    size_t row, c0, n;
    chunk(item, &row, &c0, &n);
    moments[item] = k.moments(job, row, c0, n, 1.0f, true);
  });
  for (size_t row = 0; row < job.rows; ++row) {
    const Moments first = MergePairwise(
        0, nchunks, [&](size_t c) { return moments[row * nchunks + c]; });
    stats[row] = RowStatistics(
        job.cols, job.eps, first,
        [&](size_t c0, size_t n, float scale, bool first_pass) {
          return k.moments(job, row, c0, n, scale, first_pass);
        },
        [&](size_t c0, size_t n) { return k.max_abs(job, row, c0, n); });
    if (job.mean != nullptr) job.mean[row] = stats[row].mean_out;
    if (job.rstd != nullptr) job.rstd[row] = stats[row].rstd_out;
  }
  ParallelFor(threads, items, [&](size_t item) {
    size_t row, c0, n;
    chunk(item, &row, &c0, &n);
    k.apply(job, row, c0, n, stats[row]);
  });
  return NK_OK;
}

// gamma and beta are loaded again for every row (or group of rows), at the columns of
// the rows' x and y. Where they do not lie at the offset from a cache line that makes
// those loads aligned (y's, where y is stored from its first vector boundary on; else
// a line's start), each vector load of them spans two lines (malloc and NumPy give 16
// bytes): LayerNorm of 4 MiB, 256 columns, 1 thread, A/B in one process: 0.63x of a
// copy instead of 0.77x; 64 MiB, 1024 columns: 14% slower. Calls with enough rows to
// repay the copy (rows of up to kChunk columns) normalize with copies at that offset,
// kept by the calling thread.
constexpr size_t kLine = 64;
constexpr size_t kCopyParamsMinRows = 16;
// Rows up to this long may take the register path (shortrow-inl.h), which loads
// gamma / beta from their first column on.
constexpr size_t kShortRowCols = 256;

uintptr_t LineOffset(const void* p) { return reinterpret_cast<uintptr_t>(p) % kLine; }

// Whether y is stored from its first vector boundary on (the target's vectors of
// `bytes`): where that splits no load that was whole, that is, where each tensor the
// normalization reads lies at y's offset from a vector boundary (NumPy's large arrays
// all lie at 16 bytes from a line) or off a boundary anyway. With x aligned and y not,
// peeling split the loads instead: 0-5% slower, so y is left as it is there. (x and y
// at 16 and 32 bytes from a line, AVX-512, 1 thread, A/B in one process: LayerNorm
// 1024x1024 224 -> 213 us, 16x4096 9.2 -> 8.1 us, 64x1024 12.3 -> 11.7 us, 1365x768
// 200 -> 195 us.)
// Rows at another stride than y's keep their offset from y only where the strides'
// difference is whole vectors.
template <class T>
bool AlignY(const RowNormJobT<T>& job, size_t bytes) {
  const uintptr_t y = reinterpret_cast<uintptr_t>(job.y);
  const auto keeps_whole = [&](const T* p, size_t ld) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return p == nullptr || a % bytes != 0 ||
           ((a - y) % bytes == 0 && (ld - job.ldy) * sizeof(T) % bytes == 0);
  };
  return keeps_whole(job.x, job.ldx) && keeps_whole(job.residual, job.ldr) &&
         keeps_whole(job.sum, job.lds);
}

// The offset from a cache line that gamma and beta should have: y's, where every row
// of y has it and the rows are stored from y's first vector boundary on; else none.
// (For half tensors, gamma and beta, fp32, take twice y's offset: the columns of a
// vector of y span twice its bytes in them.)
template <class T>
uintptr_t ParamOffset(const RowNormJobT<T>& job) {
  const uintptr_t y = LineOffset(job.y);
  const bool same = job.align_y && job.cols % (kLine / sizeof(T)) == 0 &&
                    job.ldy % (kLine / sizeof(T)) == 0 && y % sizeof(T) == 0;
  return same && job.cols > kShortRowCols ? y * sizeof(float) / sizeof(T) % kLine : 0;
}

bool Misplaced(const float* p, uintptr_t offset) {
  return p != nullptr && LineOffset(p) != offset;
}

// Rows whose stride is a multiple of kSetStride share an L1 set at each column. Where x
// and y lie at one page offset (rows of 1024 floats from malloc, NumPy or PyTorch), a
// group's four rows of x and four of y fill the eight ways of Zen 3 / 4's L1 at each
// column; gamma and beta there too make ten lines for eight ways, and the group's x is
// evicted before its next vector is read. Normalized in the cache, gamma / beta are
// copied to the page offset farthest from the rows'. LayerNorm 1024x1024, AVX2, 1
// thread, Zen 3, the benchmark in two alternating rounds: +0 304-305 -> 266-274 us, +16
// 328-331 -> 297-301 us (oneDNN 247-257 and 290-301).
//
// Nearer to a tensor's offset than this, gamma / beta are taken to share its sets (its
// lines and those asked for ahead of them).
constexpr uintptr_t kNearBytes = 512;

// The page offsets of the tensors whose rows all share sets as gamma's columns do (fp32
// rows: a vector of them spans the bytes of a vector of gamma).
template <class T>
size_t RowSets(const RowNormJobT<T>& job, uintptr_t (&offsets)[4]) {
  size_t n = 0;
  const auto add = [&](const T* p, size_t ld) {
    if (sizeof(T) == sizeof(float) && p != nullptr && ld * sizeof(T) % kSetStride == 0) {
      offsets[n++] = PageOffset(p);
    }
  };
  add(job.x, job.ldx);
  add(job.residual, job.ldr);
  add(job.sum, job.lds);
  add(job.y, job.ldy);
  return n;
}

// How far gamma at page offset g and beta `beta_bytes` after it lie from those rows.
uintptr_t SetDistance(const uintptr_t* offsets, size_t n, uintptr_t g,
                      uintptr_t beta_bytes) {
  uintptr_t d = kSetStride;
  for (size_t k = 0; k < n; ++k) {
    d = std::min(
        {d, PageDistance(g, offsets[k]), PageDistance(g + beta_bytes, offsets[k])});
  }
  return d;
}

// Copies gamma / beta where they lie off `ParamOffset` or in the rows' L1 sets: to that
// line offset, at the page offset farthest from those rows.
template <class T>
void AlignParams(RowNormJobT<T>& job) {
  if (job.rows < kCopyParamsMinRows || job.cols > kChunk) return;
  const uintptr_t offset = ParamOffset(job);
  uintptr_t rows[4];
  // Streamed y takes no L1 lines: moving gamma / beta there measured 3-5% slower, not
  // faster (16384x1024 and 4096x4096, AVX2, 1 thread).
  const size_t n = job.stream ? 0 : RowSets(job, rows);
  const auto crowded = [&](const float* p) {
    return p != nullptr && SetDistance(rows, n, PageOffset(p), 0) < kNearBytes;
  };
  if (!Misplaced(job.gamma, offset) && !Misplaced(job.beta, offset) &&
      !crowded(job.gamma) && !crowded(job.beta)) {
    return;
  }
  constexpr size_t kPad = kLine / sizeof(float);
  const size_t stride = (job.cols + kPad - 1) / kPad * kPad;
  const uintptr_t beta_bytes = stride * sizeof(float);
  uintptr_t page = offset;
  for (uintptr_t g = offset; g < kSetStride; g += kLine) {
    if (SetDistance(rows, n, g, beta_bytes) > SetDistance(rows, n, page, beta_bytes)) {
      page = g;
    }
  }
  thread_local std::vector<float> buffer;
  constexpr size_t kSlack = kSetStride / sizeof(float);
  try {
    if (buffer.size() < 2 * stride + kSlack) buffer.resize(2 * stride + kSlack);
  } catch (const std::bad_alloc&) {
    return;  // only slower
  }
  const uintptr_t base = PageOffset(buffer.data());
  float* params = buffer.data() + (kSetStride + page - base) % kSetStride / sizeof(float);
  if (job.gamma != nullptr) {
    std::copy(job.gamma, job.gamma + job.cols, params);
    job.gamma = params;
  }
  if (job.beta != nullptr) {
    std::copy(job.beta, job.beta + job.cols, params + stride);
    job.beta = params + stride;
  }
}

// Stand-ins for an absent gamma (ones) and LayerNorm's absent beta (-0.0): the kernels
// always apply both, an exact multiply by 1 and an add of -0.0 that keeps every value,
// -0 included, so one compiled path serves LayerNorm with or without them, and one
// RMSNorm. The six variants compiled before made the row path's units the build's
// longest (rownorm_f32 163 -> 93 s, rownorm_bf16 202 -> 112 s); a call without
// parameters now runs at the speed of one with them (LayerNorm 256x1152, AVX2, 1
// thread: 64 -> 73 us). Kept by the calling thread, line-aligned, filled as they grow.
const float* StandIn(std::vector<float>& buffer, float value, size_t n) {
  constexpr size_t kPad = kLine / sizeof(float);
  if (buffer.size() < n + kPad) buffer.resize(n + kPad, value);
  const float* p = buffer.data();
  return p + (kLine - LineOffset(p)) % kLine / sizeof(float);
}

template <class T>
nk_status SetStandIns(RowNormJobT<T>& job) {
  thread_local std::vector<float> ones, negative_zeros;
  try {
    if (job.gamma == nullptr) job.gamma = StandIn(ones, 1.0f, job.cols);
    if (job.center && job.beta == nullptr) {
      job.beta = StandIn(negative_zeros, -0.0f, job.cols);
    }
  } catch (const std::bad_alloc&) {
    return SetError(NK_ERR_OUT_OF_MEMORY,
                    "%s: out of memory for stand-ins of %zu gamma / beta", job.function,
                    job.cols);
  }
  return NK_OK;
}

}  // namespace

template <class T>
nk_status RunRowNorm(RowNormJobT<T> job) {
  const RowNormKernelsT<T>& k = RowNormKernelsFor<T>(CurrentTarget());
  job.align_y = AlignY(job, k.vector_bytes);
  const size_t elements = job.rows * job.cols;
  // The tensors the call reads and writes (x, y; residual and sum in the fused forms),
  // as in BatchNorm: LayerNorm of 4096x1024 (16 MiB x), 1 thread, streamed once its x
  // and y reached StreamBytes() instead of once y alone did: 1250 -> 630 us.
  const size_t tensors = 2 + (job.residual != nullptr) + (job.sum != nullptr);
  job.stream = tensors * elements * sizeof(T) >= StreamBytes();
  // Cores that run AVX-512 keep a group's lines at any target (StreamGroups). Read
  // once: CPUID costs microseconds in a virtual machine.
  static const bool avx512_core = (CpuTargets() & HWY_AVX3) != 0;
  job.stream_groups = avx512_core;
  if (const nk_status status = SetStandIns(job); status != NK_OK) return status;
  AlignParams(job);
  const int threads = ThreadsFor(elements);
  if (threads > 1 && job.cols > kChunk && job.rows < 4 * static_cast<size_t>(threads)) {
    return RunChunked(k, job, threads);
  }
  ForEachPart(threads, [&](size_t t, size_t parts) {
    k.rows(job, PartBegin(job.rows, t, parts), PartBegin(job.rows, t + 1, parts));
  });
  return NK_OK;
}

template nk_status RunRowNorm(RowNormJobT<float> job);
template nk_status RunRowNorm(RowNormJobT<hwy::bfloat16_t> job);
template nk_status RunRowNorm(RowNormJobT<hwy::float16_t> job);

}  // namespace nk
