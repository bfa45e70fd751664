// SPDX-License-Identifier: Apache-2.0
// fuzz_batchnorm.cc: libFuzzer target over the BatchNorm C ABI (training, inference,
// moments). The fuzz bytes choose the function, a small n x c x spatial shape, the
// layout (valid or not), ISA, threads, eps, momentum, optional arguments, offsets,
// aliasing and values (NaN, Inf, huge, tiny). Checks: the status is the one c-abi.md's
// rules give, in their order; a refused or empty call writes nothing; an accepted call
// meets the design.md bound on every channel of finite data.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "../reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_batchnorm", what); }

using nk_fuzz::Value;

float Special(FuzzedDataProvider& p, float normal) {
  switch (p.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return 0.0f;
    case 1: return -1e-3f;
    case 2: return NAN;
    case 3: return INFINITY;
    case 4: return 1.0f;
    case 5: return 1.5f;
    default: return normal;
  }
}

enum Aliasing { kNone, kYIsX, kYPartial, kSaveInY, kRunningShared, kCount };

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  const int op = p.ConsumeIntegralInRange<int>(0, 2);  // training, inference, moments
  const size_t n = p.ConsumeIntegralInRange<size_t>(0, 4);
  const size_t c = p.ConsumeIntegralInRange<size_t>(0, 40);
  const size_t spatial = p.ConsumeIntegralInRange<size_t>(0, 40);
  const int layout = p.ConsumeIntegralInRange<int>(0, 8) == 0 ? 2 : p.ConsumeIntegralInRange<int>(0, 1);
  const size_t count = n * spatial, elements = count * c;
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_batchnorm");
  const float eps = Special(p, 1e-5f);
  const float momentum = Special(p, 0.1f);
  const bool has_gamma = p.ConsumeBool(), has_beta = p.ConsumeBool(), save = p.ConsumeBool();
  const int running = p.ConsumeIntegralInRange<int>(0, 3);  // both, none, mean only, var only
  const bool null_x = p.ConsumeIntegralInRange<int>(0, 15) == 0;
  const Aliasing alias = static_cast<Aliasing>(p.ConsumeIntegralInRange<int>(0, kCount - 1));
  const size_t off = p.ConsumeIntegralInRange<size_t>(0, 3);

  // One arena holds every tensor at its offset, so that aliasing can be arranged.
  const size_t stride = elements + c + 8;
  std::vector<float> arena(10 * stride + 16, 12345.0f);
  float* x = arena.data() + off;
  float* y = x + stride;
  float* gamma = y + stride;
  float* beta = gamma + stride;
  float* mean = beta + stride;  // inference input, or moments output
  float* var = mean + stride;   // inference input, or moments' m2 output
  float* rm = var + stride;
  float* rv = rm + stride;
  float* sm = rv + stride;
  float* sr = sm + stride;
  for (size_t i = 0; i < elements; ++i) x[i] = Value(p);
  for (size_t i = 0; i < c; ++i) {
    gamma[i] = Value(p), beta[i] = Value(p), rm[i] = Value(p);
    mean[i] = p.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
    var[i] = p.ConsumeFloatingPointInRange<float>(0.0f, 4.0f);
    rv[i] = std::fabs(Value(p));
  }
  const std::vector<float> x0(x, x + elements);

  float* y_arg = y;
  float* sm_arg = save ? sm : nullptr;
  float* rm_arg = running == 0 || running == 2 ? rm : nullptr;
  float* rv_arg = running == 0 || running == 3 ? rv : nullptr;
  float* mean_out = mean;  // moments
  bool overlap = false;
  switch (alias) {
    case kYIsX: y_arg = x; break;
    case kYPartial: y_arg = x + 1; overlap = elements > 1; break;
    case kSaveInY:
      if (op == 0) { sm_arg = y; overlap = true; }
      if (op == 2) { mean_out = x; overlap = count > 0; }
      break;
    case kRunningShared:
      if (op == 0 && rm_arg && rv_arg) { rv_arg = rm; overlap = true; }
      break;
    default: break;
  }
  const float* x_arg = null_x ? nullptr : x;
  const float* g = has_gamma ? gamma : nullptr;
  const float* b = has_beta ? beta : nullptr;
  const nk_layout lay = static_cast<nk_layout>(layout);

  // What c-abi.md says, in its order: scalars, shapes, empty, NULLs, overlaps.
  const bool bad_eps = !std::isfinite(eps) || eps < 0;
  const bool bad_momentum = !std::isfinite(momentum) || momentum < 0 || momentum > 1;
  nk_status want = NK_OK;
  nk_status got;
  const std::vector<float> before(arena);
  if (op == 0) {
    if (layout > 1 || bad_eps || bad_momentum) want = NK_ERR_INVALID_ARGUMENT;
    else if (count == 1) want = NK_ERR_INVALID_SHAPE;
    else if (elements == 0) want = NK_OK;
    else if (null_x || (rm_arg == nullptr) != (rv_arg == nullptr)) want = NK_ERR_NULL_POINTER;
    else if (overlap) want = NK_ERR_OVERLAP;
    got = nk_batchnorm_forward_training_f32(n, c, spatial, lay, x_arg, g, b, eps, momentum,
                                            rm_arg, rv_arg, y_arg, sm_arg,
                                            save ? sr : nullptr);
  } else if (op == 1) {
    if (layout > 1 || bad_eps) want = NK_ERR_INVALID_ARGUMENT;
    else if (elements == 0) want = NK_OK;
    else if (null_x) want = NK_ERR_NULL_POINTER;
    else if (overlap && alias == kYPartial) want = NK_ERR_OVERLAP;
    got = nk_batchnorm_forward_inference_f32(n, c, spatial, lay, x_arg, mean, var, g, b,
                                             eps, y_arg);
  } else {
    if (layout > 1) want = NK_ERR_INVALID_ARGUMENT;
    else if (c == 0) want = NK_OK;
    else if (null_x && count > 0) want = NK_ERR_NULL_POINTER;
    else if (overlap && alias == kSaveInY) want = NK_ERR_OVERLAP;
    got = nk_batchnorm_moments_f32(n, c, spatial, lay, x_arg, mean_out, var);
  }
  if (got != want) {
    std::fprintf(stderr, "op %d n %zu c %zu spatial %zu layout %d alias %d: status %d, "
                 "expected %d\n", op, n, c, spatial, layout, alias, got, want);
    Fail("status differs from the c-abi.md rules");
  }
  const bool writes = got == NK_OK && (elements != 0 || (op == 2 && c != 0));
  if (!writes) {
    if (std::memcmp(before.data(), arena.data(), arena.size() * sizeof(float)) != 0) {
      Fail("a refused or empty call wrote memory");
    }
    return 0;
  }
  if (op == 2 || eps == 0.0f) return 0;
  // Accepted: every channel of finite data meets the bound (y, and save_* in training).
  for (size_t ci = 0; ci < c; ++ci) {
    std::vector<float> v(count), gv(count, g ? g[ci] : 1.0f), bv(count, b ? b[ci] : 0.0f);
    bool finite = std::isfinite(gv[0]) && std::isfinite(bv[0]);
    for (size_t j = 0; j < count; ++j) {
      const size_t ni = j / spatial, s = j % spatial;
      const size_t idx = layout == 0 ? (ni * c + ci) * spatial + s : (ni * spatial + s) * c + ci;
      v[j] = x0[idx];
      finite &= std::isfinite(v[j]);
    }
    if (!finite) continue;
    nk_test::RowRef ref = nk_test::ReferenceRow(true, count, v.data(), nullptr, gv.data(),
                                                bv.data(), eps);
    if (op == 1) {
      ref.mean = mean[ci];
      ref.max_abs = std::fmax(ref.max_abs, std::fabs(ref.mean));
      ref.rstd = 1.0L / std::sqrt(static_cast<long double>(var[ci]) + eps);
      for (size_t j = 0; j < count; ++j) {
        ref.xhat[j] = (v[j] - ref.mean) * ref.rstd;
        ref.y[j] = ref.xhat[j] * gv[j] + bv[j];
      }
    } else if (save) {
      if (!nk_test::MeetsStat(sm[ci], ref.mean, nk_test::BoundMean(count, ref)) ||
          !nk_test::MeetsStat(sr[ci], ref.rstd, nk_test::BoundRstd(count, ref))) {
        std::fprintf(stderr, "channel %zu: mean %g rstd %g, reference %Lg %Lg\n", ci, sm[ci],
                     sr[ci], ref.mean, ref.rstd);
        Fail("save_mean / save_rstd outside the bound");
      }
    }
    for (size_t j = 0; j < count; ++j) {
      const size_t ni = j / spatial, s = j % spatial;
      const size_t idx = layout == 0 ? (ni * c + ci) * spatial + s : (ni * spatial + s) * c + ci;
      const long double bound = nk_test::BoundY(count, ref, j, gv[j], bv[j]);
      const long double edge = std::numeric_limits<float>::max();
      // Results at the edge of the fp32 range may round to an infinity, and so may
      // the per-channel factor rstd * gamma (inference: x * a and mean * a) that the
      // header documents.
      if (std::fabs(ref.y[j]) + bound >= edge || std::fabs(ref.xhat[j] * gv[j]) + bound >= edge ||
          std::fabs(gv[j]) * ref.rstd * (op == 1 ? ref.max_abs : 1) + std::fabs(bv[j]) >= edge) {
        continue;
      }
      if (!nk_test::Meets(y_arg[idx], ref.y[j], bound)) {
        std::fprintf(stderr, "op %d channel %zu element %zu: y %g, reference %Lg, isa %s\n",
                     op, ci, j, y_arg[idx], ref.y[j], nk_get_isa());
        std::fprintf(stderr, "gamma %.9g beta %.9g eps %g, reference mean %Lg rstd %Lg; "
                     "channel's values:\n", gv[0], bv[0], eps, ref.mean, ref.rstd);
        for (size_t k = 0; k < count; ++k) std::fprintf(stderr, "  %.9g\n", v[k]);
        Fail("y outside the bound");
      }
    }
  }
  return 0;
}
