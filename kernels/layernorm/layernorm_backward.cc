// SPDX-License-Identifier: Apache-2.0
// layernorm_backward.cc: the LayerNorm family's backward op layer. Rows go in parts of
// a size fixed by the shape alone; each part sums its rows' dy * x_hat and dy in row
// order, and the parts' sums are added in a fixed pairwise tree, so dgamma and dbeta
// have the same bits for any thread count. Rows longer than kChunk go in chunks.
#include <algorithm>

#include "kernels/common/cache_sets.h"
#include "kernels/common/cpu_targets.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/errors.h"
#include "kernels/common/moments.h"
#include "kernels/common/parallel.h"
#include "kernels/common/workspace.h"
#include "kernels/layernorm/layernorm.h"

namespace nk {
namespace {

// Rows per part. A part's chain of adds (at most PartRows - 1 roundings) and the
// tree over parts (ceil(log2 parts)) stay within design.md's 4 u lgR on dbeta for
// every count R of rows (32 rows: 31 + lgR - 5 <= 4 lgR from 512 rows on); smaller
// parts where few rows would leave threads idle. Each part writes its sums, and the
// tree reads them: 2 KiB for every 16 rows of 256 columns (MergeParts was 5-8% of
// LayerNorm backward's time at 65536x256 with parts of 16).
size_t PartRows(size_t rows) { return rows >= 512 ? 32 : rows >= 64 ? 16 : 4; }

// partial[p * cols + j] over parts p, added pairwise in place by the target's
// merge_parts, into out[j]; nothing where out is nullptr (not wanted: RMSNorm's dbeta).
// Columns split among threads. (The last addition in place, then copied to out: AVX3,
// 1 thread, both libraries in one process, 8x4096 5-10% slower, 16x3000 4-7%, 4 MiB
// within 1%.)
template <class Kernels>
void MergeParts(const Kernels& k, int threads, float* partial, size_t parts, size_t cols,
                float* out) {
  if (out == nullptr) return;
  constexpr size_t kColumns = 1024;
  const size_t blocks = (cols + kColumns - 1) / kColumns;
  ParallelFor(static_cast<int>(std::min<size_t>(threads, blocks)), blocks, [&](size_t b) {
    const size_t j0 = b * kColumns, j1 = std::min(cols, j0 + kColumns);
    if (parts == 1) {
      std::copy(partial + j0, partial + j1, out + j0);
    } else {
      k.merge_parts(partial, parts, cols, j0, j1, out);
    }
  });
}

template <class Job>
nk_status OutOfMemory(const Job& job, size_t rows) {
  return SetError(NK_ERR_OUT_OF_MEMORY,
                  "%s: out of memory for the partial sums of %zu rows", job.function,
                  rows);
}

}  // namespace

template <class T>
nk_status RunRowNormBackward(RowGradJobT<T> job, float* dgamma, float* dbeta) {
  const RowGradKernelsT<T>& k = RowGradKernelsFor<T>(CurrentTarget());
  const size_t rows = job.rows, cols = job.cols;
  const size_t elements = rows * cols;
  const size_t tensors = 3 + (job.dsum != nullptr);  // x, dy, dx (+ dsum)
  job.stream = tensors * elements * sizeof(T) >= StreamBytes();
  // Rows in groups, but where a group's rows of a tensor share L1 sets: rows of 1024
  // floats at one page offset put the group's four rows of x, dy and dx and gamma,
  // dgamma and dbeta, 15 lines, in each set of an 8-way L1 (Zen 3 / 4), and each line
  // was read again from L2 or memory. AVX2 / SSE4, 1 thread, Zen 3, fastest of 5,
  // groups -> rows one at a time: 1024x1024 770-790 -> 470-486 us / 1.5-1.7 -> 0.94-1.03
  // ms (oneDNN 530-570 us / 3.4-3.6 ms); 16384x1024 44.6 -> 16.0-16.8 ms / 148-167 ->
  // 25-29 ms (oneDNN 60-65 ms at SSE4). Rows that do not share sets (768 columns) keep
  // the groups: SSE4 21845x768 20-21 ms in groups, 24-27 one at a time. AVX-512's
  // line-wide vectors keep the groups anyway (GradRowsT).
  const auto shares = [&](const T* p, size_t ld) {
    return p != nullptr && RowsShareSets(ld * sizeof(T), kGradGroupRows);
  };
  job.group_rows = !shares(job.x, job.ldx) && !shares(job.dy, job.lddy) &&
                   !shares(job.dsum, job.ldds) && !shares(job.dx, job.lddx);
  // AVX-512's groups take fp32 rows of up to 2048 columns on AMD's cores, where longer
  // rows went faster one at a time (GradRowsT), and up to 8192 on Intel's, where they
  // did not: Sapphire Rapids class, AVX3, time in groups / one at a time, both in one
  // process, 1 and 2 threads: 8x4096 0.73-0.76, 256x4096 0.88-0.91, 4096x4096
  // 0.76-0.83, 2048x8192 0.78-0.84 (docs/performance.md). CPUID read once: it costs
  // microseconds in a virtual machine.
  static const bool amd = CpuIsAmd();
  job.group_cols = amd ? kAmdGroupedGradCols : kGroupedGradCols;
  const size_t part_rows = PartRows(rows);
  const size_t parts = (rows + part_rows - 1) / part_rows;
  const size_t chunks = NumChunks(cols);
  const bool params = dgamma != nullptr || dbeta != nullptr;
  // Where one part holds every row and both are wanted, its sums are the results.
  const bool direct = parts == 1 && dgamma != nullptr && dbeta != nullptr;
  // Buffers kept by the calling thread between calls (workspace.h), as the other ops
  // keep theirs: no allocation per call. Where an allocator hands out fresh pages
  // (glibc did for the first two calls of a loop), the partial sums of a 64 MiB tensor
  // (4 MiB) cost 1024 page faults, 11 ms on a VM at 11 us each.
  Workspace<float, struct RowGradOnesTag> ones_ws;
  Workspace<float, struct RowGradPartialTag> partial_ws;
  Workspace<GradSums, struct RowGradChunkSumsTag> chunk_sums_ws;
  Workspace<GradSums, struct RowGradSumsTag> sums_ws;
  float* partial = nullptr;  // every element is written before it is read
  GradSums* chunk_sums = nullptr;
  GradSums* sums = nullptr;
  if (job.gamma == nullptr) {
    float* ones = ones_ws.Get(cols);
    if (ones == nullptr) return OutOfMemory(job, rows);
    std::fill(ones, ones + cols, 1.0f);
    job.gamma = ones;
  }
  // The part sums lie as far past a line as dx does (in elements), so that the dx
  // pass's loads and stores of them are aligned where its stores of dx are: at +16
  // bytes each column's four went across two lines. (AVX3, 1 thread, +16 bytes, calls
  // of both builds alternating: 1024x1024 and 16384x1024 1-6% faster.)
  constexpr size_t kLineFloats = kSetLine / sizeof(float);
  const uintptr_t dx_addr = reinterpret_cast<uintptr_t>(job.dx);
  const size_t shift = dx_addr % sizeof(T) == 0 ? dx_addr / sizeof(T) % kLineFloats : 0;
  const size_t stride = (parts * cols + kLineFloats - 1) / kLineFloats * kLineFloats;
  if (params && !direct) {
    partial = partial_ws.Get(2 * stride + kLineFloats);
    if (partial == nullptr) return OutOfMemory(job, rows);
    partial += shift;
  }
  if (chunks > 1) {
    chunk_sums = chunk_sums_ws.Get(rows * chunks);
    sums = sums_ws.Get(rows);
    if (chunk_sums == nullptr || sums == nullptr) return OutOfMemory(job, rows);
  }
  float* part_dgamma = direct ? dgamma : params ? partial : nullptr;
  float* part_dbeta = direct ? dbeta : params ? partial + stride : nullptr;
  // A second thread pays from twice the forwards' work: the backward enters two
  // parallel regions (rows, then the parts' sums). (8x8192, AVX3: 23 GB/s on 1 thread,
  // 17 on 2 from the forwards' threshold.)
  const int threads = ThreadsFor(elements / 2);
  const auto chunk = [&](size_t c, size_t* c0, size_t* n) {
    *c0 = c * kChunk;
    *n = std::min(kChunk, cols - *c0);
  };
  if (chunks > 1) {
    ParallelFor(threads, rows * chunks, [&](size_t item) {
      size_t c0, n;
      chunk(item % chunks, &c0, &n);
      chunk_sums[item] = k.grad_sums(job, item / chunks, c0, n);
    });
    for (size_t r = 0; r < rows; ++r) {
      sums[r] = AddPairwise(0, chunks, [&](size_t i) { return chunk_sums[r * chunks + i]; });
    }
  }
  const size_t items = parts * chunks;
  ParallelFor(static_cast<int>(std::min<size_t>(threads, items)), items, [&](size_t item) {
    const size_t part = item / chunks;
    size_t c0, n;
    chunk(item % chunks, &c0, &n);
    const size_t r0 = part * part_rows, r1 = std::min(rows, r0 + part_rows);
    const size_t at = part * cols + c0;
    k.grad_rows(job, r0, r1, c0, n, sums,
                part_dgamma != nullptr ? part_dgamma + at : nullptr,
                part_dbeta != nullptr ? part_dbeta + at : nullptr);
  });
  if (params && !direct) {
    MergeParts(k, threads, part_dgamma, parts, cols, dgamma);
    MergeParts(k, threads, part_dbeta, parts, cols, dbeta);
  }
  return NK_OK;
}

template nk_status RunRowNormBackward(RowGradJobT<float> job, float* dgamma,
                                      float* dbeta);
template nk_status RunRowNormBackward(RowGradJobT<hwy::bfloat16_t> job, float* dgamma,
                                      float* dbeta);
template nk_status RunRowNormBackward(RowGradJobT<hwy::float16_t> job, float* dgamma,
                                      float* dbeta);

}  // namespace nk
