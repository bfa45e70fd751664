// SPDX-License-Identifier: Apache-2.0
// fuzz_half.cc: libFuzzer target over every bf16 / fp16 kernel of the C ABI (the
// LayerNorm family's forwards and backwards, BatchNorm's six tensor kernels,
// GroupNorm's two), against the f32 kernel on the widened tensors. The fuzz bytes
// choose the kernel, the format, a small shape (0 allowed), the layout, the group
// count, eps, ISA, threads, the optional arguments, a NULL tensor, in-place calls,
// misaligned tensors (by 1..7 elements) and the values (any pattern a fuzzed fp32 value
// rounds to: NaN, Inf, huge, subnormal, 1e4 + small included). Checks (c-abi.md, half
// precision): the half call's status is the f32 call's; accepted, every tensor output
// is the f32 output rounded once to nearest even (NaN: a quiet NaN) and every float
// output has its bits; nothing is written past any output, and a refused or empty call
// writes nothing.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../half_reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_half", what); }

using nk_test::HalfFormat;

// Every kernel of one tensor type E (float, or uint16_t for both half formats).
template <class E>
struct Api {
  nk_status (*layernorm)(size_t, size_t, const E*, const float*, const float*, float, E*,
                         float*, float*);
  nk_status (*rmsnorm)(size_t, size_t, const E*, const float*, float, E*, float*);
  nk_status (*add_layernorm)(size_t, size_t, const E*, const E*, const float*,
                             const float*, float, E*, E*, float*, float*);
  nk_status (*add_rmsnorm)(size_t, size_t, const E*, const E*, const float*, float, E*,
                           E*, float*);
  nk_status (*layernorm_backward)(size_t, size_t, const E*, const E*, const float*,
                                  const float*, const float*, E*, float*, float*);
  nk_status (*rmsnorm_backward)(size_t, size_t, const E*, const E*, const float*,
                                const float*, E*, float*);
  nk_status (*add_layernorm_backward)(size_t, size_t, const E*, const E*, const E*,
                                      const float*, const float*, const float*, E*,
                                      float*, float*);
  nk_status (*add_rmsnorm_backward)(size_t, size_t, const E*, const E*, const E*,
                                    const float*, const float*, E*, float*);
  nk_status (*bn_training)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                           const float*, float, float, float*, float*, E*, float*,
                           float*);
  nk_status (*bn_inference)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                            const float*, const float*, const float*, float, E*);
  nk_status (*bn_moments)(size_t, size_t, size_t, nk_layout, const E*, float*, float*);
  nk_status (*bn_backward)(size_t, size_t, size_t, nk_layout, const E*, const E*,
                           const float*, const float*, const float*, E*, float*, float*);
  nk_status (*bn_reduce)(size_t, size_t, size_t, nk_layout, const E*, const E*,
                         const float*, const float*, float*, float*);
  nk_status (*bn_apply)(size_t, size_t, size_t, nk_layout, const E*, const E*,
                        const float*, const float*, const float*, uint64_t, const float*,
                        const float*, E*);
  nk_status (*gn_forward)(size_t, size_t, size_t, size_t, nk_layout, const E*,
                          const float*, const float*, float, E*, float*, float*);
  nk_status (*gn_backward)(size_t, size_t, size_t, size_t, nk_layout, const E*, const E*,
                           const float*, const float*, const float*, E*, float*, float*);
};
#define NK_KERNELS_OF(S)                                                               \
  {                                                                                    \
    &nk_layernorm_forward_##S, &nk_rmsnorm_forward_##S, &nk_add_layernorm_forward_##S, \
        &nk_add_rmsnorm_forward_##S, &nk_layernorm_backward_##S,                       \
        &nk_rmsnorm_backward_##S, &nk_add_layernorm_backward_##S,                      \
        &nk_add_rmsnorm_backward_##S, &nk_batchnorm_forward_training_##S,              \
        &nk_batchnorm_forward_inference_##S, &nk_batchnorm_moments_##S,                \
        &nk_batchnorm_backward_##S, &nk_batchnorm_backward_reduce_##S,                 \
        &nk_batchnorm_backward_apply_##S, &nk_groupnorm_forward_##S,                   \
        &nk_groupnorm_backward_##S                                                     \
  }
const Api<float> kF32 = NK_KERNELS_OF(f32);
const Api<uint16_t> kBf16 = NK_KERNELS_OF(bf16);
const Api<uint16_t> kF16 = NK_KERNELS_OF(f16);
#undef NK_KERNELS_OF

constexpr int kKernels = 16;
const char* const kNames[kKernels] = {"layernorm",
                                      "rmsnorm",
                                      "add_layernorm",
                                      "add_rmsnorm",
                                      "layernorm_backward",
                                      "rmsnorm_backward",
                                      "add_layernorm_backward",
                                      "add_rmsnorm_backward",
                                      "bn_training",
                                      "bn_inference",
                                      "bn_moments",
                                      "bn_backward",
                                      "bn_reduce",
                                      "bn_apply",
                                      "gn_forward",
                                      "gn_backward"};

// Tensors and float arrays with a guard after them, at a fuzzed misalignment.
constexpr size_t kGuard = 16;
template <class T>
struct Guarded {
  std::vector<T> v;
  size_t off = 0, n = 0;
  Guarded(size_t count, size_t offset, T fill)
      : v(offset + count + kGuard, fill), off(offset), n(count) {}
  T* data() { return v.data() + off; }
};

// One call's arguments: tensors a (x or sum), b (residual or dy), d (dsum), the
// outputs o (y, dx) and s (sum); floats: gamma, beta, given statistics p, q, sums u, w,
// and up to four float outputs.
struct Args {
  int kernel;
  size_t n, c, spatial, groups;
  nk_layout layout;
  float eps;
  bool gamma, beta, stats, dsum, sum_out;  // optional arguments given
  int null_tensor;                         // 0: none; 1: a; 2: b
  int in_place;                            // 0: no; 1: o == a or o == b as allowed
};

// The call through `api` with tensors of E in the given buffers; `f` the float inputs
// (gamma, beta, p, q, u, w), `out` four float outputs.
template <class E>
nk_status Invoke(const Api<E>& api, const Args& a, E* ta, E* tb, E* td, E* to, E* ts,
                 const std::vector<float*>& f, float* const (&out)[4]) {
  const size_t rows = a.n, cols = a.c * a.spatial;
  const E* x = a.null_tensor == 1 ? nullptr : ta;
  const E* y2 = a.null_tensor == 2 ? nullptr : tb;
  E* o = a.in_place == 0 ? to
         : a.kernel >= 4 && a.kernel != 8 && a.kernel != 9 && a.kernel != 10 &&
                 a.kernel != 14
             ? tb
             : ta;
  const float* g = a.gamma ? f[0] : nullptr;
  const float* b = a.beta ? f[1] : nullptr;
  float* s0 = a.stats ? out[0] : nullptr;
  float* s1 = a.stats ? out[1] : nullptr;
  const E* dsum = a.dsum ? td : nullptr;
  E* sum = a.sum_out ? ts : nullptr;
  switch (a.kernel) {
    case 0:
      return api.layernorm(rows, cols, x, g, b, a.eps, o, s0, s1);
    case 1:
      return api.rmsnorm(rows, cols, x, g, a.eps, o, s1);
    case 2:
      return api.add_layernorm(rows, cols, x, y2, g, b, a.eps, sum, o, s0, s1);
    case 3:
      return api.add_rmsnorm(rows, cols, x, y2, g, a.eps, sum, o, s1);
    case 4:
      return api.layernorm_backward(rows, cols, x, y2, f[2], f[3], g, o, s0, s1);
    case 5:
      return api.rmsnorm_backward(rows, cols, x, y2, f[3], g, o, s0);
    case 6:
      return api.add_layernorm_backward(rows, cols, x, y2, dsum, f[2], f[3], g, o, s0,
                                        s1);
    case 7:
      return api.add_rmsnorm_backward(rows, cols, x, y2, dsum, f[3], g, o, s0);
    case 8:
      return api.bn_training(a.n, a.c, a.spatial, a.layout, x, g, b, a.eps, 0.1f,
                             a.stats ? out[2] : nullptr, a.stats ? out[3] : nullptr, o,
                             out[0], out[1]);
    case 9:
      return api.bn_inference(a.n, a.c, a.spatial, a.layout, x, f[2], f[3], g, b, a.eps,
                              o);
    case 10:
      return api.bn_moments(a.n, a.c, a.spatial, a.layout, x, out[0], out[1]);
    case 11:
      return api.bn_backward(a.n, a.c, a.spatial, a.layout, x, y2, f[2], f[3], g, o, s0,
                             s1);
    case 12:
      return api.bn_reduce(a.n, a.c, a.spatial, a.layout, x, y2, f[2], f[3], out[0],
                           out[1]);
    case 13:
      return api.bn_apply(a.n, a.c, a.spatial, a.layout, x, y2, f[2], f[3], g,
                          3 * a.n * a.spatial, f[4], f[5], o);
    case 14:
      return api.gn_forward(a.n, a.c, a.spatial, a.groups, a.layout, x, g, b, a.eps, o,
                            s0, s1);
    default:
      return api.gn_backward(a.n, a.c, a.spatial, a.groups, a.layout, x, y2, f[2], f[3],
                             g, o, s0, s1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Args a{};
  a.kernel = p.ConsumeIntegralInRange<int>(0, kKernels - 1);
  const HalfFormat& fmt = p.ConsumeBool() ? nk_test::kBf16 : nk_test::kF16;
  const Api<uint16_t>& api = &fmt == &nk_test::kBf16 ? kBf16 : kF16;
  a.n = p.ConsumeIntegralInRange<size_t>(0, 5);
  a.c = p.ConsumeIntegralInRange<size_t>(0, 40);
  a.spatial = p.ConsumeIntegralInRange<size_t>(0, 40);
  a.groups = p.ConsumeIntegralInRange<size_t>(0, a.c);
  if (p.ConsumeIntegralInRange<int>(0, 7) != 0) {  // mostly a divisor of c
    while (a.groups > 1 && a.c % a.groups != 0) --a.groups;
  }
  a.layout = p.ConsumeBool() ? NK_LAYOUT_NCHW : NK_LAYOUT_NHWC;
  a.eps = p.ConsumeIntegralInRange<int>(0, 7) == 0 ? 0.0f : 1e-5f;
  a.gamma = p.ConsumeBool();
  a.beta = p.ConsumeBool();
  a.stats = p.ConsumeBool();
  a.dsum = p.ConsumeBool();
  a.sum_out = p.ConsumeBool();
  a.null_tensor =
      p.ConsumeIntegralInRange<int>(0, 15) == 0 ? p.ConsumeIntegralInRange<int>(1, 2) : 0;
  a.in_place = p.ConsumeIntegralInRange<int>(0, 3) == 0;
  const size_t off = p.ConsumeIntegralInRange<size_t>(0, 7);
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_half");

  const size_t elems = a.n * a.c * a.spatial;
  const size_t floats = std::max(a.c * a.spatial, std::max(a.c, a.n * a.c)) + 1;
  // Inputs: half patterns of fuzzed fp32 values (rounded as the format does), floats.
  nk_fuzz::Filler fill(p);
  std::vector<uint16_t> in[3];
  for (auto& t : in) {
    for (size_t i = 0; i < elems; ++i) t.push_back(nk_test::Round(fmt, fill.Next()));
  }
  std::vector<float> fin[6];
  for (auto& t : fin) {
    for (size_t i = 0; i < floats; ++i) t.push_back(fill.Next());
  }

  // The half call, in guarded buffers.
  // A signaling NaN, which no output is (results' NaNs are quiet).
  const uint16_t kUnwritten = &fmt == &nk_test::kBf16 ? 0x7F81 : 0x7C01;
  std::vector<Guarded<uint16_t>> h;
  for (int k = 0; k < 5; ++k) h.emplace_back(elems, off, kUnwritten);
  for (int k = 0; k < 3; ++k) std::copy(in[k].begin(), in[k].end(), h[k].data());
  std::vector<Guarded<float>> hf, hout;
  for (int k = 0; k < 6; ++k) {
    hf.emplace_back(floats, off, 0.0f);
    std::copy(fin[k].begin(), fin[k].end(), hf[k].data());
  }
  for (int k = 0; k < 4; ++k) hout.emplace_back(floats, off, -7.0f);
  // Running statistics (training updates them in place): the same start in both calls.
  for (int k = 2; k < 4; ++k) std::copy(fin[k].begin(), fin[k].end(), hout[k].data());
  const std::vector<Guarded<uint16_t>> h_before = h;
  const std::vector<Guarded<float>> hout_before = hout;
  std::vector<float*> hfp;
  for (auto& g : hf) hfp.push_back(g.data());
  float* const hop[4] = {hout[0].data(), hout[1].data(), hout[2].data(), hout[3].data()};
  const nk_status got = Invoke(api, a, h[0].data(), h[1].data(), h[2].data(), h[3].data(),
                               h[4].data(), hfp, hop);

  // The f32 call on the widened tensors.
  std::vector<Guarded<float>> w;
  for (int k = 0; k < 5; ++k) w.emplace_back(elems, 0, NAN);
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < elems; ++i) w[k].data()[i] = nk_test::Widen(fmt, in[k][i]);
  }
  if (a.kernel == 2 || a.kernel == 3) {
    // The fused forwards normalize s = x + residual rounded to half once: the f32 call
    // gets that s as x and -0 as residual (s + -0 is s, signed zeros included). (The
    // fp32 sum rounded to half is the exact sum rounded once: fp32 has more than twice
    // the format's precision plus two bits.)
    for (size_t i = 0; i < elems; ++i) {
      w[0].data()[i] =
          nk_test::Widen(fmt, nk_test::Round(fmt, w[0].data()[i] + w[1].data()[i]));
      w[1].data()[i] = -0.0f;
    }
  }
  std::vector<Guarded<float>> wout;
  for (int k = 0; k < 4; ++k) wout.emplace_back(floats, 0, -7.0f);
  for (int k = 2; k < 4; ++k) std::copy(fin[k].begin(), fin[k].end(), wout[k].data());
  float* const wop[4] = {wout[0].data(), wout[1].data(), wout[2].data(), wout[3].data()};
  std::vector<float*> wfp;
  std::vector<std::vector<float>> fcopy(fin, fin + 6);
  for (auto& t : fcopy) wfp.push_back(t.data());
  const nk_status want = Invoke(kF32, a, w[0].data(), w[1].data(), w[2].data(),
                                w[3].data(), w[4].data(), wfp, wop);

  if (got != want) {
    std::fprintf(stderr, "%s_%s %zux%zux%zu groups %zu: status %d, f32 %d\n",
                 kNames[a.kernel], fmt.name, a.n, a.c, a.spatial, a.groups, got, want);
    Fail("the half call's status is not the f32 call's");
  }
  // Guards and, for a refused or empty call, everything untouched.
  for (int k = 0; k < 5; ++k) {
    for (size_t i = 0; i < kGuard; ++i) {
      if (h[k].v[off + elems + i] != kUnwritten) Fail("written past a tensor");
    }
  }
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < kGuard; ++i) {
      if (hout[k].v[off + floats + i] != -7.0f) Fail("written past a float output");
    }
  }
  if (got != NK_OK || elems == 0) {
    for (int k = 0; k < 5; ++k) {
      if (h[k].v != h_before[k].v) Fail("a refused or empty call wrote a tensor");
    }
    // (An empty shard's moments and backward sums are written, as zeros: compared with
    // the f32 call's below.)
    for (int k = 0; k < 4 && got != NK_OK; ++k) {
      if (std::memcmp(hout[k].v.data(), hout_before[k].v.data(),
                      hout[k].v.size() * sizeof(float)) != 0) {
        Fail("a refused call wrote a float output");
      }
    }
  }
  // Accepted: each tensor the f32 one rounded, each float output its bits (the fused
  // forwards' inputs differ from the f32 call's: not compared, unless y is x).
  const bool fused_forward = a.kernel == 2 || a.kernel == 3;
  for (int k = 0; k < 5; ++k) {
    if (got != NK_OK || (fused_forward && (k == 1 || (k == 0 && a.in_place == 0)))) {
      continue;
    }
    for (size_t i = 0; i < elems; ++i) {
      const uint16_t hv = h[k].data()[i];
      const float fv = w[k].data()[i];
      if (std::isnan(fv)) {
        // Untouched in both (an input's pattern, or kUnwritten), or a NaN result.
        if (!nk_test::IsNaN(fmt, hv)) Fail("a NaN of the f32 call is not NaN in half");
        const uint16_t untouched = k < 3 ? in[k][i] : kUnwritten;
        if (hv != untouched && !nk_test::IsQuiet(fmt, hv)) {
          Fail("a NaN result is not quiet");
        }
      } else if (hv != nk_test::Round(fmt, fv)) {
        std::fprintf(stderr,
                     "%s_%s %zux%zux%zu groups %zu tensor %d [%zu]: %g, f32 %.9g\n",
                     kNames[a.kernel], fmt.name, a.n, a.c, a.spatial, a.groups, k, i,
                     nk_test::Widen(fmt, hv), fv);
        Fail("a tensor output is not the f32 output rounded once");
      }
    }
  }
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < floats; ++i) {
      // Bitwise, a NaN for a NaN (the fused forwards' s of a NaN is rounded by the
      // reference here, which keeps no payload).
      const float hv = hout[k].data()[i], fv = wout[k].data()[i];
      if (std::isnan(hv) && std::isnan(fv)) continue;
      if (std::memcmp(&hv, &fv, sizeof(float)) != 0) {
        std::fprintf(stderr,
                     "%s_%s %zux%zux%zu groups %zu %s, isa %s: float output %d "
                     "[%zu]: %.9g, f32 %.9g\n",
                     kNames[a.kernel], fmt.name, a.n, a.c, a.spatial, a.groups,
                     a.layout == NK_LAYOUT_NHWC ? "NHWC" : "NCHW", nk_get_isa(), k, i, hv,
                     fv);
        Fail("a float output differs from the f32 call's");
      }
    }
  }
  return 0;
}
