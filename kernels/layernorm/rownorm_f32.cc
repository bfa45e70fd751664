// SPDX-License-Identifier: Apache-2.0
// rownorm_f32.cc: the fp32 LayerNorm-family kernels, forward and backward, compiled once
// per Highway target. Rows of a few whole vectors take the register path
// (shortrow-inl.h).
#include "kernels/layernorm/rownorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm/rownorm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/common/dispatch.h"
#include "kernels/layernorm/rownorm-inl.h"
#include "kernels/layernorm/rownorm_backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {

float RowMaxAbs(const RowNormJob& job, size_t row, size_t c0, size_t n) {
  float m = 0.0f;
  WithRowSource(job, row, [&](const auto& src) HWY_ATTR {
    m = SpanMaxAbs(hn::ScalableTag<float>(), src, c0, n);
  });
  return m;
}

Moments RowChunkMoments(const RowNormJob& job, size_t row, size_t c0, size_t n,
                        float scale, bool first_pass) {
  return job.center ? ChunkMomentsT<true>(job, row, c0, n, scale, first_pass)
                    : ChunkMomentsT<false>(job, row, c0, n, scale, first_pass);
}

void RowApply(const RowNormJob& job, size_t row, size_t c0, size_t n,
              const SetStats& st) {
  VisitVariant(job, [&](auto center, auto gamma, auto beta) HWY_ATTR {
    ApplyT<decltype(center)::value, decltype(gamma)::value, decltype(beta)::value>(
        job, row, c0, n, st);
  });
  if (job.stream) hwy::FlushStream();
}

void Rows(const RowNormJob& job, size_t r0, size_t r1) {
  const bool short_rows = job.center ? NormalizeShortRows<true>(job, r0, r1)
                                     : NormalizeShortRows<false>(job, r0, r1);
  if (!short_rows) {
    VisitVariant(job, [&](auto center, auto gamma, auto beta) HWY_ATTR {
      WithRowSource(job, 0, [&](const auto& src) HWY_ATTR {
        RowsT<decltype(center)::value, decltype(gamma)::value, decltype(beta)::value>(
            job, src, r0, r1);
      });
    });
  }
  if (job.stream) hwy::FlushStream();
}

GradSums RowGradChunkSums(const RowGradJob& job, size_t row, size_t c0, size_t n) {
  const size_t ahead = job.stream ? kReadAheadBytes : kCacheAheadBytes;
  return job.center ? RowGradSums<true>(GradRowOf<true>(job, row), c0, n, ahead)
                    : RowGradSums<false>(GradRowOf<false>(job, row), c0, n, ahead);
}

void GradRows(const RowGradJob& job, size_t r0, size_t r1, size_t c0, size_t n,
              const GradSums* sums, float* dgamma, float* dbeta) {
  VisitGradVariant(job, dgamma != nullptr, [&](auto center, auto params, auto dsum)
                                               HWY_ATTR {
    GradRowsT<decltype(center)::value, decltype(params)::value, decltype(dsum)::value>(
        job, r0, r1, c0, n, sums, dgamma, dbeta);
  });
  if (job.stream) hwy::FlushStream();
}

extern const RowNormKernels kRowNormKernels = {
    &Rows, &RowChunkMoments, &RowMaxAbs, &RowApply, &RowGradChunkSums, &GradRows,
    hn::MaxLanes(hn::ScalableTag<float>()) * sizeof(float)};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nk {

const RowNormKernels& RowNormKernelsFor(long long target) {
  NK_SELECT_TARGET(target, kRowNormKernels);
  return HWY_STATIC_DISPATCH(kRowNormKernels);
}

}  // namespace nk
#endif  // HWY_ONCE
