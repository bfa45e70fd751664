// layernorm.cc: the LayerNorm family's op layer: a fixed work partition over rows, or
// over chunks of long rows, run with OpenMP on the selected target's kernels.
#include "kernels/layernorm.h"

#include <omp.h>

#include <algorithm>
#include <new>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/errors.h"
#include "kernels/moments.h"

namespace nk {
namespace {

// Few rows, each long: all threads take chunks of every row; per-row merges in the
// fixed pairwise order of moments.h give the same bits as the one-row loop.
nk_status RunChunked(const RowNormKernels& k, const RowNormJob& job, int threads) {
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
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t item = 0; item < items; ++item) {
    size_t row, c0, n;
    chunk(item, &row, &c0, &n);
    moments[item] = k.moments(job, row, c0, n, 1.0f, true);
  }
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
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t item = 0; item < items; ++item) {
    size_t row, c0, n;
    chunk(item, &row, &c0, &n);
    k.apply(job, row, c0, n, stats[row]);
  }
  return NK_OK;
}

}  // namespace

nk_status RunRowNorm(RowNormJob job) {
  const RowNormKernels& k = RowNormKernelsFor(CurrentTarget());
  const size_t elements = job.rows * job.cols;
  job.stream = elements * sizeof(float) >= kStreamBytes;
  const int threads = ThreadsFor(elements);
  if (threads <= 1) {
    k.rows(job, 0, job.rows);
    return NK_OK;
  }
  if (job.cols > kChunk && job.rows < 4 * static_cast<size_t>(threads)) {
    return RunChunked(k, job, threads);
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    k.rows(job, PartBegin(job.rows, t, parts), PartBegin(job.rows, t + 1, parts));
  }
  return NK_OK;
}

}  // namespace nk
