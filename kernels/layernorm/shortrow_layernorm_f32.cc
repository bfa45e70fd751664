// SPDX-License-Identifier: Apache-2.0
// shortrow_layernorm_f32.cc: the register path for short rows (shortrow-inl.h) of
// LayerNorm and add + LayerNorm, compiled once per Highway target. The short-row variants
// are a third of the row path's compile time, so they are split into translation units
// that build in parallel.
#include "kernels/layernorm/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm/shortrow_layernorm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/layernorm/shortrow-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

template bool NormalizeShortRows<true, float>(const RowNormJob& job, size_t r0,
                                              size_t r1);

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();
