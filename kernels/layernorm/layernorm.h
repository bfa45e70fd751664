// SPDX-License-Identifier: Apache-2.0
// layernorm.h: the op layer of the LayerNorm family (forward: layernorm.cc; backward:
// layernorm_backward.cc), below the C entry points.
#ifndef NK_KERNELS_LAYERNORM_H_
#define NK_KERNELS_LAYERNORM_H_

#include "include/normkernels.h"
#include "kernels/layernorm/rownorm.h"

namespace nk {

// Runs a validated job on the current target with the configured threads.
nk_status RunRowNorm(RowNormJob job);

// Runs a validated backward job; dgamma / dbeta ([cols] each) may be nullptr.
nk_status RunRowNormBackward(RowGradJob job, float* dgamma, float* dbeta);

}  // namespace nk

#endif  // NK_KERNELS_LAYERNORM_H_
