// SPDX-License-Identifier: Apache-2.0
// layernorm.h: the op layer of the LayerNorm family (forward: layernorm.cc; backward:
// layernorm_backward.cc), below the C entry points.
#ifndef NK_KERNELS_LAYERNORM_H_
#define NK_KERNELS_LAYERNORM_H_

#include "hwy/base.h"
#include "include/normkernels.h"
#include "kernels/layernorm/rownorm.h"

namespace nk {

// Runs a validated job on the current target with the configured threads (T: float,
// hwy::bfloat16_t, hwy::float16_t).
template <class T>
nk_status RunRowNorm(RowNormJobT<T> job);

// Runs a validated backward job; dgamma / dbeta ([cols] each) may be nullptr.
template <class T>
nk_status RunRowNormBackward(RowGradJobT<T> job, float* dgamma, float* dbeta);

}  // namespace nk

#endif  // NK_KERNELS_LAYERNORM_H_
