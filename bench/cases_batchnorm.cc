// SPDX-License-Identifier: Apache-2.0
// cases_batchnorm.cc: BatchNorm's benchmark cases: the cells the documentation
// compares and a batch-size sweep for the plot; with --full, the CNN shapes of the
// BatchNorm issue in both layouts, training, inference, backward and the SyncBatchNorm
// moments and steps.
#include <string>
#include <vector>

#include "normkernels.h"
#include "suite.h"

namespace nk_bench {
namespace {

enum class Op { kTraining, kInference, kMoments, kBackward };
const char* const kOpNames[] = {"batchnorm_training", "batchnorm_inference",
                                "batchnorm_moments", "batchnorm_backward"};

struct Shape {
  size_t n, c, h, w;
};

// Registers `op` on `s` with the ISA, threads, offset, group and main of `c`.
void RegisterBatchNorm(Op op, Shape s, bool nhwc, Case c) {
  const size_t spatial = s.h * s.w;
  const size_t elements = s.n * s.c * spatial, off = c.offset;
  const nk_layout layout = nhwc ? NK_LAYOUT_NHWC : NK_LAYOUT_NCHW;
  const std::string isa = c.isa;
  const int threads = c.threads;
  c.kernel = kOpNames[static_cast<int>(op)];
  c.shape = std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) +
            "x" + std::to_string(s.w) + (nhwc ? " NHWC" : " NCHW");
  c.elements = static_cast<double>(elements);
  // x and y; the moments read x only (counted once: the copy moves half of it); the
  // backward x, dy and dx.
  const double tensors = op == Op::kMoments ? 1.0 : op == Op::kBackward ? 3.0 : 2.0;
  c.bytes = tensors * elements * sizeof(float);
  c.copy = CopyFor(c.bytes, threads, off);
  if (op == Op::kBackward) {
    c.onednn = OneDnnBatchNormBackward(s.n, s.c, s.h, s.w, nhwc, threads, off);
  } else if (op != Op::kMoments) {
    c.onednn =
        OneDnnBatchNorm(s.n, s.c, s.h, s.w, nhwc, op == Op::kTraining, threads, off);
  }
  const float* x = Tensor(0, elements, off);
  const float* dy = Tensor(1, elements, off);
  float* y = Tensor(3, elements, off);  // dx of the backward
  const float* g = Gamma(s.c, off);
  const float* b = Beta(s.c, off);
  float* mean = Tensor(4, s.c, off);
  float* var = Tensor(5, s.c, off);
  float* running_mean = Tensor(6, s.c, off);
  float* running_var = Tensor(7, s.c, off);
  if (op != Op::kMoments) {
    c.out = y;
    c.out_n = elements;
  }
  const std::string name = c.kernel + "/" + isa + "/" + c.shape + Placement(off, threads);
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
          case Op::kBackward:  // var as save_rstd; running_* as dgamma, dbeta
            nk_batchnorm_backward_f32(n, ch, spatial, layout, x, dy, mean, var, g, y,
                                      running_mean, running_var);
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
    k.copy = CopyFor(k.bytes, 1, 0);
    const float* a = Tensor(0, c);
    const float* b = Tensor(1, c);
    float* out_mean = Tensor(3, c);
    float* out_m2 = Tensor(2, c);
    if (merge) {  // (an update keeps a NaN-filled running mean NaN: not verifiable so)
      k.out = out_mean;
      k.out_n = c;
    }
    Register(
        k.kernel + "/" + isa + "/" + k.shape + Placement(0, 1), k,
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
  // The cells: channels-last training and inference of ResNet's first stage.
  const Shape first = {32, 64, 56, 56};
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (Op op : {Op::kTraining, Op::kInference}) RegisterBatchNorm(op, first, true, c);
  }
  // The backward's cells: ResNet's first stage and a later one, both layouts.
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (const Shape& shape : {first, Shape{256, 256, 14, 14}}) {
      for (bool nhwc : {false, true}) RegisterBatchNorm(Op::kBackward, shape, nhwc, c);
    }
  }
  // The plot's sweep: training, NHWC, 64 channels of 56x56, 1 thread.
  for (const Case& c :
       Placements(s.isas, {1}, "batchnorm_training Nx64x56x56 NHWC, 1 thread")) {
    for (size_t n : {1, 4, 16, 32, 64}) {
      RegisterBatchNorm(Op::kTraining, {n, 64, 56, 56}, true, c);
    }
  }
  if (!s.full) return;
  RegisterChannelSteps(s.isas.front(), 4096);
  for (Op op : {Op::kTraining, Op::kInference, Op::kMoments, Op::kBackward}) {
    for (const Case& c : Placements(s.isas, s.threads)) {
      for (const Shape& shape : kShapes) {
        for (bool nhwc : {false, true}) RegisterBatchNorm(op, shape, nhwc, c);
      }
    }
  }
}

}  // namespace nk_bench
