// SPDX-License-Identifier: Apache-2.0
// cases_groupnorm.cc: GroupNorm's benchmark cases (oneDNN 2.6 has no GroupNorm: the
// copy is the baseline): the cells of a diffusion U-Net's GroupNorm, 32 groups of
// (8, 256, 64, 64) in both layouts, forward and backward; with --full, the shapes of
// the GroupNorm issue and InstanceNorm.
#include <string>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

struct Shape {
  size_t n, c, h, w, groups;
};

// Registers the forward (or backward) on `s` with the placement of `c`.
void RegisterGroupNorm(bool backward, Shape s, bool nhwc, Case c) {
  const size_t spatial = s.h * s.w;
  const size_t elements = s.n * s.c * spatial, off = c.offset;
  const nk_layout layout = nhwc ? NK_LAYOUT_NHWC : NK_LAYOUT_NCHW;
  const std::string isa = c.isa;
  const int threads = c.threads;
  const bool instance = s.groups == s.c;
  c.kernel = std::string(instance ? "instancenorm" : "groupnorm") +
             (backward ? "_backward" : "");
  c.shape = std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) +
            "x" + std::to_string(s.w) + (instance ? "" : " G" + std::to_string(s.groups)) +
            (nhwc ? " NHWC" : " NCHW");
  c.elements = static_cast<double>(elements);
  c.bytes = (backward ? 3.0 : 2.0) * elements * sizeof(float);  // x, (dy,) y or dx
  c.copy = CopyFor(c.bytes, threads, off);
  const float* x = Tensor(0, elements, off);
  const float* dy = Tensor(1, elements, off);
  float* y = Tensor(3, elements, off);  // dx of the backward
  const float* g = Gamma(s.c, off);
  const float* b = Beta(s.c, off);
  const size_t sets = s.n * s.groups;
  float* mean = Tensor(4, sets, off);
  float* rstd = Tensor(5, sets, off);
  float* dgamma = Tensor(6, s.c, off);
  float* dbeta = Tensor(7, s.c, off);
  c.out = y;
  c.out_n = elements;
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
          nk_groupnorm_backward_f32(n, ch, spatial, groups, layout, x, dy, mean, rstd, g,
                                    y, dgamma, dbeta);
        } else {
          nk_groupnorm_forward_f32(n, ch, spatial, groups, layout, x, g, b, 1e-5f, y,
                                   mean, rstd);
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
      for (bool nhwc : {false, true}) RegisterGroupNorm(backward, kShapes[0], nhwc, c);
    }
  }
  if (!s.full) return;
  for (bool backward : {false, true}) {
    for (const Case& c : Placements(s.isas, s.threads)) {
      for (const Shape& shape : kShapes) {
        if (&shape == &kShapes[0]) continue;  // registered above
        for (bool nhwc : {false, true}) RegisterGroupNorm(backward, shape, nhwc, c);
      }
    }
  }
}

}  // namespace nk_bench
