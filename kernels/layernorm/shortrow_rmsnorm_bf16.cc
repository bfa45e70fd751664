// SPDX-License-Identifier: Apache-2.0
// shortrow_rmsnorm_bf16.cc: the register path for short rows (shortrow-inl.h) of
// RMSNorm and add + RMSNorm on bfloat16 tensors, compiled once per Highway target (split
// from rownorm_bf16.cc like the fp32 ones, so that they build in parallel).
#include "kernels/layernorm/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm/shortrow_rmsnorm_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/layernorm/shortrow-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

template bool NormalizeShortRows<false, hwy::bfloat16_t>(
    const RowNormJobT<hwy::bfloat16_t>& job, size_t r0, size_t r1);

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();
