// SPDX-License-Identifier: Apache-2.0
// batchnorm.h: BatchNorm's op layer: statistics per channel over n x spatial, their
// merge across shards (SyncBatchNorm), the running-statistics update, normalization,
// and the backward (whole, or as the reduce and apply steps of SyncBatchNorm).
#ifndef NK_KERNELS_BATCHNORM_H_
#define NK_KERNELS_BATCHNORM_H_

#include <stdint.h>

#include <cstddef>

#include "include/normkernels.h"

namespace nk {

// One validated call with a non-empty tensor of type T (float, hwy::bfloat16_t,
// hwy::float16_t), as plain data. Optional pointers are nullptr.
template <class T>
struct BatchNormJobT {
  const char* function;  // the C entry point, for errors found after validation
  size_t n, c, spatial;
  bool channels_last;    // NHWC
  const T* x;
  const float* gamma;    // [c]
  const float* beta;     // [c]
  float eps;
  float momentum;
  T* y;
};

// Training: batch statistics, y, save_mean / save_rstd, running stats (both or none).
template <class T>
nk_status BatchNormTraining(const BatchNormJobT<T>& job, float* running_mean,
                            float* running_var, float* save_mean, float* save_rstd);

// Inference: y from given per-channel mean and (biased or running) variance.
template <class T>
nk_status BatchNormInference(const BatchNormJobT<T>& job, const float* mean,
                             const float* var);

// The per-channel moments (mean, M2) of the tensor; job.y is unused.
template <class T>
nk_status BatchNormMoments(const BatchNormJobT<T>& job, float* mean, float* m2);

// One validated backward call with a non-empty tensor of type T, as plain data.
template <class T>
struct BatchNormGradJobT {
  const char* function;  // the C entry point, for errors found after validation
  size_t n, c, spatial;
  bool channels_last;    // NHWC
  const T* x;
  const T* dy;
  const float* mean;     // [c], the forward's saved statistics
  const float* rstd;     // [c]
  const float* gamma;    // [c] or nullptr (ones)
  double total_count;    // values per channel over every shard (n * spatial for one)
  T* dx;                 // unused by BatchNormBackwardReduce
};

// The whole backward: per channel sum_dy and sum_dy_xhat, then dx; dgamma =
// sum_dy_xhat and dbeta = sum_dy where wanted (nullptr: not).
template <class T>
nk_status BatchNormBackward(const BatchNormGradJobT<T>& job, float* dgamma, float* dbeta);

// The shard's two sums per channel.
template <class T>
nk_status BatchNormBackwardReduce(const BatchNormGradJobT<T>& job, float* sum_dy,
                                  float* sum_dy_xhat);

// dx from sums over every shard and job.total_count.
template <class T>
nk_status BatchNormBackwardApply(const BatchNormGradJobT<T>& job, const float* sum_dy,
                                 const float* sum_dy_xhat);

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
