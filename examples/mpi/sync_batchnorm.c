/* SPDX-License-Identifier: Apache-2.0 */
/* sync_batchnorm.c: SyncBatchNorm's forward and backward over MPI, from the steps of
   include/normkernels.h. Forward: the shard's moments -> MPI_Allreduce merging them
   (Chan) -> running statistics -> normalize with the merged ones. Backward: the shard's
   sums -> MPI_Allreduce adding them -> dx. */
#include "sync_batchnorm.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One rank's contribution to the forward's allreduce: the moments of its shard. */
typedef struct {
  uint64_t count; /* values per channel */
  float stats[];  /* mean[c], then m2[c] = sum((x - mean)^2) */
} moments;

static void fail(MPI_Comm comm, const char* why) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  fprintf(stderr, "sync_batchnorm: rank %d: %s\n", rank, why);
  MPI_Abort(comm, 1);
}

static void check(MPI_Comm comm, nk_status s) {
  if (s != NK_OK) fail(comm, nk_last_error());
}

static void* allocate(MPI_Comm comm, size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) fail(comm, "out of memory");
  return p;
}

/* The forward's reduction, an MPI_User_function: inout = in merged with inout, where
   in holds lower ranks. Chan's merge of (a, b) need not give the bits of (b, a), and
   another bracketing gives other bits: declared non-commutative, the operation is
   applied to the ranks' records in rank order, with a bracketing fixed by the number of
   ranks and the message size, so a given rank count gives the same bits every run. */
static void merge_moments(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const size_t c = ((size_t)bytes - sizeof(moments)) / (2 * sizeof(float));
  /* The merge may write over its first operand only; this one is in, not ours. */
  float* merged = allocate(MPI_COMM_WORLD, 2 * c * sizeof(float));
  for (int i = 0; i < *len; ++i) {
    const moments* a = (const moments*)((const char*)in + (size_t)i * bytes);
    moments* b = (moments*)((char*)inout + (size_t)i * bytes);
    check(MPI_COMM_WORLD,
          nk_moments_merge_f32(c, a->count, a->stats, a->stats + c, b->count, b->stats,
                               b->stats + c, merged, merged + c));
    memcpy(b->stats, merged, 2 * c * sizeof(float));
    b->count += a->count;
  }
  free(merged);
}

/* The backward's reduction: inout = in + inout, in rank order as above. */
static void add_sums(void* in, void* inout, int* len, MPI_Datatype* type) {
  const double* a = in;
  double* b = inout;
  (void)type;
  for (int i = 0; i < *len; ++i) b[i] = a[i] + b[i];
}

void sync_batchnorm_forward(MPI_Comm comm, size_t n, size_t c, size_t spatial,
                            nk_layout layout, const float* x, const float* gamma,
                            const float* beta, float eps, float momentum,
                            float* running_mean, float* running_var, float* y,
                            float* save_mean, float* save_rstd, uint64_t* count) {
  if (c > (INT_MAX - sizeof(moments)) / (2 * sizeof(float))) {
    fail(comm, "sync_batchnorm_forward: c is beyond one MPI message");
  }
  const size_t bytes = sizeof(moments) + 2 * c * sizeof(float);
  moments* m = allocate(comm, bytes);
  float* mean = m->stats;
  float* m2 = m->stats + c;
  m->count = (uint64_t)n * spatial;
  check(comm, nk_batchnorm_moments_f32(n, c, spatial, layout, x, mean, m2));

  /* One record per rank, as one element of a datatype: MPI may cut a long message
     into pieces for its algorithms, but never an element. */
  MPI_Datatype record;
  MPI_Op merge;
  MPI_Type_contiguous((int)bytes, MPI_BYTE, &record);
  MPI_Type_commit(&record);
  MPI_Op_create(merge_moments, /* commute = */ 0, &merge);
  MPI_Allreduce(MPI_IN_PLACE, m, 1, record, merge, comm);
  MPI_Op_free(&merge);
  MPI_Type_free(&record);

  if (m->count == 1) { /* as the training forward (and PyTorch) */
    fail(comm,
         "sync_batchnorm_forward: the batch has 1 value per channel; training "
         "needs more than 1");
  }
  *count = m->count;
  if (m->count == 0) { /* an empty batch: nothing to do */
    free(m);
    return;
  }
  if (running_mean || running_var) {
    check(comm, nk_batchnorm_update_running_f32(c, m->count, mean, m2, momentum,
                                                running_mean, running_var));
  }
  float* var = m2; /* m2 / count, in place */
  for (size_t ci = 0; ci < c; ++ci) {
    var[ci] = (float)(m2[ci] / (double)m->count);
    save_mean[ci] = mean[ci];
    save_rstd[ci] = 1.0f / sqrtf(var[ci] + eps);
  }
  check(comm, nk_batchnorm_forward_inference_f32(n, c, spatial, layout, x, mean, var,
                                                 gamma, beta, eps, y));
  free(m);
}

void sync_batchnorm_backward(MPI_Comm comm, size_t n, size_t c, size_t spatial,
                             nk_layout layout, const float* x, const float* dy,
                             const float* save_mean, const float* save_rstd,
                             const float* gamma, uint64_t count, float* dx, float* dgamma,
                             float* dbeta) {
  if (c > INT_MAX / 2) fail(comm, "sync_batchnorm_backward: c is beyond one MPI message");
  float* sums = allocate(comm, 2 * c * sizeof(float)); /* sum dy, sum dy * x_hat */
  double* total = allocate(comm, 2 * c * sizeof(double));
  check(comm, nk_batchnorm_backward_reduce_f32(n, c, spatial, layout, x, dy, save_mean,
                                               save_rstd, sums, sums + c));
  /* Added in double and rounded to fp32 once, whatever the number of ranks. */
  for (size_t i = 0; i < 2 * c; ++i) total[i] = sums[i];
  MPI_Op add;
  MPI_Op_create(add_sums, /* commute = */ 0, &add);
  MPI_Allreduce(MPI_IN_PLACE, total, (int)(2 * c), MPI_DOUBLE, add, comm);
  MPI_Op_free(&add);
  for (size_t i = 0; i < 2 * c; ++i) sums[i] = (float)total[i];

  check(comm,
        nk_batchnorm_backward_apply_f32(n, c, spatial, layout, x, dy, save_mean,
                                        save_rstd, gamma, count, sums, sums + c, dx));
  if (dbeta) memcpy(dbeta, sums, c * sizeof(float));
  if (dgamma) memcpy(dgamma, sums + c, c * sizeof(float));
  free(total);
  free(sums);
}
