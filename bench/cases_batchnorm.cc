// SPDX-License-Identifier: Apache-2.0
// cases_batchnorm.cc: BatchNorm's benchmark cases: the cells the documentation
// compares and a batch-size sweep for the plot; with --full, the CNN shapes of the
// BatchNorm issue in both layouts, training, inference, backward and the SyncBatchNorm
// moments and steps, in fp32, bf16 and fp16.
#include <cstdint>
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

// The kernels of one tensor type E (float, or uint16_t for both half formats).
template <class E>
struct BatchNormApi {
  nk_status (*training)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                        const float*, float, float, float*, float*, E*, float*, float*);
  nk_status (*inference)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                         const float*, const float*, const float*, float, E*);
  nk_status (*moments)(size_t, size_t, size_t, nk_layout, const E*, float*, float*);
  nk_status (*backward)(size_t, size_t, size_t, nk_layout, const E*, const E*,
                        const float*, const float*, const float*, E*, float*, float*);
};
#define NK_BATCHNORM_API(S)                                                  \
  {                                                                          \
    &nk_batchnorm_forward_training_##S, &nk_batchnorm_forward_inference_##S, \
        &nk_batchnorm_moments_##S, &nk_batchnorm_backward_##S                \
  }
constexpr BatchNormApi<float> kF32Api = NK_BATCHNORM_API(f32);
constexpr BatchNormApi<uint16_t> kBf16Api = NK_BATCHNORM_API(bf16);
constexpr BatchNormApi<uint16_t> kF16Api = NK_BATCHNORM_API(f16);
#undef NK_BATCHNORM_API

// Registers `op` on `s` with the ISA, threads, offset, group and main of `c`, on
// tensors of E through `api` (bytes at sizeof(E) an element, beside the copy of those
// bytes and oneDNN's forward on the same type where it has one).
template <class E>
void RegisterBatchNorm(const BatchNormApi<E>& api, Elem elem, Op op, Shape s, bool nhwc,
                       Case c) {
  const size_t spatial = s.h * s.w;
  const size_t elements = s.n * s.c * spatial, off = c.offset;
  const nk_layout layout = nhwc ? NK_LAYOUT_NHWC : NK_LAYOUT_NCHW;
  const std::string isa = c.isa;
  const int threads = c.threads;
  c.kernel = std::string(kOpNames[static_cast<int>(op)]) + ElemSuffix(elem);
  c.shape = std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) +
            "x" + std::to_string(s.w) + (nhwc ? " NHWC" : " NCHW");
  c.elements = static_cast<double>(elements);
  // x and y; the moments read x only (counted once: the copy moves half of it); the
  // backward x, dy and dx.
  const double tensors = op == Op::kMoments ? 1.0 : op == Op::kBackward ? 3.0 : 2.0;
  c.bytes = tensors * elements * sizeof(E);
  c.copy = CopyFor(c.bytes, threads, off);
  if (op == Op::kBackward && elem == Elem::kF32) {
    c.onednn = OneDnnBatchNormBackward(s.n, s.c, s.h, s.w, nhwc, threads, off);
  } else if ((op == Op::kTraining || op == Op::kInference) && elem != Elem::kF16) {
    c.onednn = OneDnnBatchNorm(s.n, s.c, s.h, s.w, nhwc, op == Op::kTraining, threads,
                               off, elem == Elem::kBf16);
  }
  const E* x = Elements<E>(0, elements, off, elem);
  const E* dy = Elements<E>(1, elements, off, elem);
  E* y = Elements<E>(3, elements, off, elem);  // dx of the backward
  const float* g = Gamma(s.c, off);
  const float* b = Beta(s.c, off);
  float* mean = Tensor(4, s.c, off);
  float* var = Tensor(5, s.c, off);
  float* running_mean = Tensor(6, s.c, off);
  float* running_var = Tensor(7, s.c, off);
  if (op != Op::kMoments) {
    c.out = y;
    c.out_n = elements;
    c.out_bytes = sizeof(E);
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
            api.training(n, ch, spatial, layout, x, g, b, 1e-5f, 0.1f, running_mean,
                         running_var, y, mean, var);
            break;
          case Op::kInference:
            api.inference(n, ch, spatial, layout, x, running_mean, var, g, b, 1e-5f, y);
            break;
          case Op::kMoments:
            api.moments(n, ch, spatial, layout, x, mean, var);
            break;
          case Op::kBackward:  // var as save_rstd; running_* as dgamma, dbeta
            api.backward(n, ch, spatial, layout, x, dy, mean, var, g, y, running_mean,
                         running_var);
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
    for (Op op : {Op::kTraining, Op::kInference})
      RegisterBatchNorm(kF32Api, Elem::kF32, op, first, true, c);
  }
  // Half tensors: training of the same shape, both layouts.
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (bool nhwc : {false, true}) {
      RegisterBatchNorm(kBf16Api, Elem::kBf16, Op::kTraining, first, nhwc, c);
      RegisterBatchNorm(kF16Api, Elem::kF16, Op::kTraining, first, nhwc, c);
    }
  }
  // The backward's cells: ResNet's first stage and a later one, both layouts.
  for (Case c : Placements(s.isas, s.threads)) {
    c.main = true;
    for (const Shape& shape : {first, Shape{256, 256, 14, 14}}) {
      for (bool nhwc : {false, true}) {
        RegisterBatchNorm(kF32Api, Elem::kF32, Op::kBackward, shape, nhwc, c);
      }
    }
  }
  // The plot's sweep: training, NHWC, 64 channels of 56x56, 1 thread.
  for (const Case& c :
       Placements(s.isas, {1}, "batchnorm_training Nx64x56x56 NHWC, 1 thread")) {
    for (size_t n : {1, 4, 16, 32, 64}) {
      RegisterBatchNorm(kF32Api, Elem::kF32, Op::kTraining, {n, 64, 56, 56}, true, c);
    }
  }
  if (!s.full) return;
  RegisterChannelSteps(s.isas.front(), 4096);
  for (Op op : {Op::kTraining, Op::kInference, Op::kMoments, Op::kBackward}) {
    for (const Case& c : Placements(s.isas, s.threads)) {
      for (const Shape& shape : kShapes) {
        for (bool nhwc : {false, true}) {
          RegisterBatchNorm(kF32Api, Elem::kF32, op, shape, nhwc, c);
          RegisterBatchNorm(kBf16Api, Elem::kBf16, op, shape, nhwc, c);
          RegisterBatchNorm(kF16Api, Elem::kF16, op, shape, nhwc, c);
        }
      }
    }
  }
}

}  // namespace nk_bench
