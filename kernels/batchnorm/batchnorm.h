// SPDX-License-Identifier: Apache-2.0
// batchnorm.h: BatchNorm's op layer: statistics per channel over n x spatial, their
// merge across shards (SyncBatchNorm), the running-statistics update, normalization.
#ifndef NK_KERNELS_BATCHNORM_H_
#define NK_KERNELS_BATCHNORM_H_

#include <stdint.h>

#include <cstddef>

#include "include/normkernels.h"

namespace nk {

// One validated call with a non-empty tensor, as plain data. Optional pointers are
// nullptr.
struct BatchNormJob {
  const char* function;  // the C entry point, for errors found after validation
  size_t n, c, spatial;
  bool channels_last;    // NHWC
  const float* x;
  const float* gamma;    // [c]
  const float* beta;     // [c]
  float eps;
  float momentum;
  float* y;
};

// Training: batch statistics, y, save_mean / save_rstd, running stats (both or none).
nk_status BatchNormTraining(const BatchNormJob& job, float* running_mean,
                            float* running_var, float* save_mean, float* save_rstd);

// Inference: y from given per-channel mean and (biased or running) variance.
nk_status BatchNormInference(const BatchNormJob& job, const float* mean,
                             const float* var);

// The per-channel moments (mean, M2) of the tensor; job.y is unused.
nk_status BatchNormMoments(const BatchNormJob& job, float* mean, float* m2);

// running = (1 - momentum) * running + momentum * batch, with the unbiased variance
// m2 / (count - 1); in double, as PyTorch's CPU kernel. unbias = 1 / (count - 1),
// count >= 2.
inline void UpdateRunning(double unbias, float mean, double m2, float momentum,
                          float* running_mean, float* running_var) {
  const double m = momentum;
  *running_mean = static_cast<float>((1.0 - m) * *running_mean + m * mean);
  *running_var = static_cast<float>((1.0 - m) * *running_var + m * (m2 * unbias));
}

}  // namespace nk

#endif  // NK_KERNELS_BATCHNORM_H_
