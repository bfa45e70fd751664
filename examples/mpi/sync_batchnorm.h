/* SPDX-License-Identifier: Apache-2.0 */
/* sync_batchnorm.h: SyncBatchNorm over MPI with libnormkernels. Each rank of a
   communicator holds a shard of an (N, C, H, W) batch (some of its images, possibly
   none), and normalizes it with the statistics of the whole batch; the backward gives
   the gradients of the whole batch. Both are collective: every rank of comm calls
   them, with the same c, spatial, layout, eps, momentum and parameters.

   A step that fails on one rank cannot return there alone (the other ranks would wait
   for it in the next collective forever): it prints the library's reason with the
   rank and aborts the job (MPI_Abort). */
#ifndef SYNC_BATCHNORM_H_
#define SYNC_BATCHNORM_H_

#include <mpi.h>
#include <normkernels.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* As nk_batchnorm_forward_training_f32 on the whole batch: x, y are this rank's shard
   of n images ([n][c][spatial] or [n][spatial][c]; y may be x). gamma, beta: [c] or
   NULL. running_mean, running_var: [c], or both NULL (not updated); every rank updates
   its own copy the same way. Writes save_mean and save_rstd [c], and *count, the values
   per channel over every rank: what sync_batchnorm_backward takes. A batch of one value
   per channel aborts, as the training forward refuses it; an empty one writes only
   *count = 0. */
void sync_batchnorm_forward(MPI_Comm comm, size_t n, size_t c, size_t spatial,
                            nk_layout layout, const float* x, const float* gamma,
                            const float* beta, float eps, float momentum,
                            float* running_mean, float* running_var, float* y,
                            float* save_mean, float* save_rstd, uint64_t* count);

/* As nk_batchnorm_backward_f32 on the whole batch, from what the forward saved: dx [the
   shard] (may be dy), and dgamma, dbeta [c] of the whole batch on every rank (or NULL:
   not wanted). */
void sync_batchnorm_backward(MPI_Comm comm, size_t n, size_t c, size_t spatial,
                             nk_layout layout, const float* x, const float* dy,
                             const float* save_mean, const float* save_rstd,
                             const float* gamma, uint64_t count, float* dx, float* dgamma,
                             float* dbeta);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SYNC_BATCHNORM_H_ */
