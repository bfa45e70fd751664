// SPDX-License-Identifier: Apache-2.0
// cases_groupnorm.cc: GroupNorm's benchmark cases (oneDNN 2.6 has no GroupNorm: the
// copy is the baseline): the cells of a diffusion U-Net's GroupNorm, 32 groups of
// (8, 256, 64, 64) in both layouts, forward and backward; with --full, the shapes of
// the GroupNorm issue and InstanceNorm, in fp32, bf16 and fp16.
#include <cstdint>
#include <string>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

struct Shape {
  size_t n, c, h, w, groups;
};

// The forward and backward on tensors of E (float, or uint16_t for both half formats).
template <class E>
struct GroupNormApi {
  nk_status (*forward)(size_t, size_t, size_t, size_t, nk_layout, const E*, const float*,
                       const float*, float, E*, float*, float*);
  nk_status (*backward)(size_t, size_t, size_t, size_t, nk_layout, const E*, const E*,
                        const float*, const float*, const float*, E*, float*, float*);
};
constexpr GroupNormApi<float> kF32Api = {&nk_groupnorm_forward_f32,
                                         &nk_groupnorm_backward_f32};
constexpr GroupNormApi<uint16_t> kBf16Api = {&nk_groupnorm_forward_bf16,
                                             &nk_groupnorm_backward_bf16};
constexpr GroupNormApi<uint16_t> kF16Api = {&nk_groupnorm_forward_f16,
                                            &nk_groupnorm_backward_f16};

// Registers the forward (or backward) on `s` with the placement of `c`, on tensors of
// E through `api` (bytes at sizeof(E) an element).
template <class E>
void RegisterGroupNorm(const GroupNormApi<E>& api, Elem elem, bool backward, Shape s,
                       bool nhwc, Case c) {
  const size_t spatial = s.h * s.w;
  const size_t elements = s.n * s.c * spatial, off = c.offset;
  const nk_layout layout = nhwc ? NK_LAYOUT_NHWC : NK_LAYOUT_NCHW;
  const std::string isa = c.isa;
  const int threads = c.threads;
  const bool instance = s.groups == s.c;
  c.kernel = std::string(instance ? "instancenorm" : "groupnorm") +
             (backward ? "_backward" : "") + ElemSuffix(elem);
  c.shape = std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) +
            "x" + std::to_string(s.w) + (instance ? "" : " G" + std::to_string(s.groups)) +
            (nhwc ? " NHWC" : " NCHW");
  c.elements = static_cast<double>(elements);
  c.bytes = (backward ? 3.0 : 2.0) * elements * sizeof(E);  // x, (dy,) y or dx
  c.copy = CopyFor(c.bytes, threads, off);
  const E* x = Elements<E>(0, elements, off, elem);
  const E* dy = Elements<E>(1, elements, off, elem);
  E* y = Elements<E>(3, elements, off, elem);  // dx of the backward
  const float* g = Gamma(s.c, off);
  const float* b = Beta(s.c, off);
  const size_t sets = s.n * s.groups;
  float* mean = Tensor(4, sets, off);
  float* rstd = Tensor(5, sets, off);
  float* dgamma = Tensor(6, s.c, off);
  float* dbeta = Tensor(7, s.c, off);
  c.out = y;
  c.out_n = elements;
  c.out_bytes = sizeof(E);
  const std::string name = c.kernel + "/" + isa + "/" + c.shape + Placement(off, threads);
  const size_t n = s.n, ch = s.c, groups = s.groups;
  Register(
      name, c,
      [=] {
        for (size_t i = 0; i < sets; ++i) {
          mean[i] = 0.0f;
          rstd[i] = 1.0f + 0.01f * static_cast<float>(i % 9);
        }
        return nk_set_isa(isa.c_str()) == NK_OK && nk_set_num_threads(threads) == NK_OK;
      },
      [=] {
        if (backward) {
          api.backward(n, ch, spatial, groups, layout, x, dy, mean, rstd, g, y, dgamma,
                       dbeta);
        } else {
          api.forward(n, ch, spatial, groups, layout, x, g, b, 1e-5f, y, mean, rstd);
        }
      });
}

constexpr Shape kShapes[] = {{8, 256, 64, 64, 32},
                             {32, 512, 14, 14, 32},
                             {1, 64, 128, 128, 32},
                             {8, 64, 56, 56, 64}};

}  // namespace

void RegisterGroupNormCases(const Selection& s) {
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (bool backward : {false, true}) {
      for (bool nhwc : {false, true}) {
        RegisterGroupNorm(kF32Api, Elem::kF32, backward, kShapes[0], nhwc, c);
      }
    }
  }
  if (!s.full) return;
  for (bool backward : {false, true}) {
    for (const Case& c : Placements(s.isas, s.threads)) {
      for (const Shape& shape : kShapes) {
        for (bool nhwc : {false, true}) {
          if (&shape != &kShapes[0]) {  // registered above
            RegisterGroupNorm(kF32Api, Elem::kF32, backward, shape, nhwc, c);
          }
          RegisterGroupNorm(kBf16Api, Elem::kBf16, backward, shape, nhwc, c);
          RegisterGroupNorm(kF16Api, Elem::kF16, backward, shape, nhwc, c);
        }
      }
    }
  }
}

}  // namespace nk_bench
