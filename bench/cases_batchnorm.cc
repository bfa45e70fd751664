// SPDX-License-Identifier: Apache-2.0
// cases_batchnorm.cc: BatchNorm's benchmark cases: the CNN shapes of the BatchNorm
// issue in both layouts, training, inference and the SyncBatchNorm moments, and a
// batch-size sweep for the plot.
#include <string>
#include <vector>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

enum class Op { kTraining, kInference, kMoments };
const char* const kOpNames[] = {"batchnorm_training", "batchnorm_inference",
                                "batchnorm_moments"};

struct Shape {
  size_t n, c, h, w;
};

void RegisterBatchNorm(Op op, const std::string& isa, Shape s, bool nhwc, int threads,
                       const std::string& group = "") {
  const size_t spatial = s.h * s.w;
  const size_t elements = s.n * s.c * spatial;
  const nk_layout layout = nhwc ? NK_LAYOUT_NHWC : NK_LAYOUT_NCHW;
  Case c;
  c.kernel = kOpNames[static_cast<int>(op)];
  c.shape = std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) +
            "x" + std::to_string(s.w) + (nhwc ? " NHWC" : " NCHW");
  c.isa = isa;
  c.threads = threads;
  c.elements = static_cast<double>(elements);
  // x and y; the moments read x only (counted once: the copy moves half of it).
  c.bytes = (op == Op::kMoments ? 1.0 : 2.0) * elements * sizeof(float);
  c.copy = CopyFor(c.bytes, threads);
  if (op != Op::kMoments) {
    c.onednn = OneDnnBatchNorm(s.n, s.c, s.h, s.w, nhwc, op == Op::kTraining, threads);
  }
  c.group = group;
  const float* x = Tensor(0, elements);
  float* y = Tensor(3, elements);
  const float* g = Gamma(s.c);
  const float* b = Beta(s.c);
  float* mean = Tensor(4, s.c);
  float* var = Tensor(5, s.c);
  float* running_mean = Tensor(6, s.c);
  float* running_var = Tensor(7, s.c);
  if (op != Op::kMoments) {
    c.out = y;
    c.out_n = elements;
  }
  const std::string name = c.kernel + "/" + isa + "/" + c.shape + "/threads:" +
                           std::to_string(threads);
  const size_t n = s.n, ch = s.c;
  Register(
      name, c,
      [=] {
        for (size_t i = 0; i < ch; ++i) var[i] = 1.0f + 0.01f * static_cast<float>(i % 9);
        return nk_set_isa(isa.c_str()) == NK_OK && nk_set_num_threads(threads) == NK_OK;
      },
      [=] {
        switch (op) {
          case Op::kTraining:
            nk_batchnorm_forward_training_f32(n, ch, spatial, layout, x, g, b, 1e-5f, 0.1f,
                                              running_mean, running_var, y, mean, var);
            break;
          case Op::kInference:
            nk_batchnorm_forward_inference_f32(n, ch, spatial, layout, x, running_mean,
                                               var, g, b, 1e-5f, y);
            break;
          case Op::kMoments:
            nk_batchnorm_moments_f32(n, ch, spatial, layout, x, mean, var);
            break;
        }
      });
}

constexpr Shape kShapes[] = {{32, 64, 56, 56}, {256, 256, 14, 14}, {8, 512, 7, 7},
                             {8, 2048, 7, 7},  {1, 64, 112, 112}};

// The SyncBatchNorm steps between processes: merge and running update over c channels
// (per-channel vectors counted once each: 4 in and 2 out, or 2 in and 2 updated).
void RegisterChannelSteps(const std::string& isa, size_t c) {
  for (bool merge : {true, false}) {
    Case k;
    k.kernel = merge ? "moments_merge" : "batchnorm_update_running";
    k.shape = std::to_string(c);
    k.isa = isa;
    k.threads = 1;
    k.elements = static_cast<double>(c);
    k.bytes = (merge ? 6.0 : 4.0) * c * sizeof(float);
    k.copy = CopyFor(k.bytes, 1);
    const float* a = Tensor(0, c);
    const float* b = Tensor(1, c);
    float* out_mean = Tensor(3, c);
    float* out_m2 = Tensor(2, c);
    if (merge) {  // (an update keeps a NaN-filled running mean NaN: not verifiable so)
      k.out = out_mean;
      k.out_n = c;
    }
    Register(
        k.kernel + "/" + isa + "/" + k.shape + "/threads:1", k,
        [=] { return nk_set_isa(isa.c_str()) == NK_OK && nk_set_num_threads(1) == NK_OK; },
        [=] {
          if (merge) {
            nk_moments_merge_f32(c, 1000, a, b, 3000, b, a, out_mean, out_m2);
          } else {
            nk_batchnorm_update_running_f32(c, 4000, a, b, 0.1f, out_mean, out_m2);
          }
        });
  }
}

}  // namespace

void RegisterBatchNormCases(const Selection& s) {
  RegisterChannelSteps(s.isas.front(), 4096);
  const std::string& best = s.isas.front();
  for (const std::string& isa : s.isas) {
    for (int op = 0; op < 3; ++op) {
      for (int threads : s.threads) {
        for (const Shape& shape : kShapes) {
          for (bool nhwc : {false, true}) {
            // Quick: everything on the best ISA; training of the first shape elsewhere.
            if (!s.full && isa != best && (op != 0 || shape.n != 32)) continue;
            RegisterBatchNorm(static_cast<Op>(op), isa, shape, nhwc, threads);
          }
        }
      }
    }
  }
  // The plot's sweep: training, NCHW, 64 channels of 56x56, 1 thread, every ISA.
  for (const std::string& isa : s.isas) {
    for (size_t n : {1, 4, 16, 32, 64}) {
      RegisterBatchNorm(Op::kTraining, isa, {n, 64, 56, 56}, false, 1,
                        "batchnorm_training Nx64x56x56 NCHW, 1 thread");
    }
  }
}

}  // namespace nk_bench
