// SPDX-License-Identifier: Apache-2.0
// test_batchnorm_api.cc: every validation rule of the BatchNorm entry points and the
// SyncBatchNorm pieces: status, a message naming the function and argument, the order
// of checks, and nothing written on failure.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "test_util.h"

namespace nk_test {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();

// Buffers of a small valid call, every output NaN-filled.
struct Bn {
  static constexpr size_t c = 3, elements = 2 * c * 4;  // n 2, spatial 4
  Buffer x{elements}, y{elements}, gamma{c}, beta{c}, rm{c}, rv{c}, sm{c}, sr{c}, mean{c},
      var{c}, m2{c};
  Bn() {
    FillNormal(x, 1);
    gamma.Fill(1.0f);
    beta.Fill(0.0f);
    rm.Fill(0.0f);
    rv.Fill(1.0f);
    mean.Fill(0.0f);
    var.Fill(1.0f);
  }
  // Outputs still as they were (NaN, or the running stats' starting values).
  bool Untouched() const {
    for (size_t i = 0; i < elements; ++i) {
      if (!std::isnan(y[i])) return false;
    }
    for (size_t i = 0; i < c; ++i) {
      if (!std::isnan(sm[i]) || !std::isnan(sr[i]) || !std::isnan(m2[i])) return false;
      if (rm[i] != 0.0f || rv[i] != 1.0f) return false;
    }
    return true;
  }
};

// The failure's status, and that the message names the function and `argument`.
void ExpectError(nk_status got, nk_status want, const char* function,
                 const std::string& argument) {
  EXPECT_EQ(got, want) << nk_last_error();
  const std::string msg = nk_last_error();
  EXPECT_EQ(msg.rfind(function, 0), 0u) << msg;
  EXPECT_NE(msg.find(argument), std::string::npos) << msg << " (want " << argument << ")";
}

nk_status Training(Bn& b, size_t n, size_t c, size_t spatial, int layout, const float* x,
                   float eps, float momentum, float* rm, float* rv, float* y) {
  return nk_batchnorm_forward_training_f32(n, c, spatial, static_cast<nk_layout>(layout), x,
                                           b.gamma.data(), b.beta.data(), eps, momentum, rm,
                                           rv, y, b.sm.data(), b.sr.data());
}

TEST(BatchNormApi, TrainingRules) {
  const char* f = "nk_batchnorm_forward_training_f32";
  Bn b;
  const auto call = [&](size_t n, size_t c, size_t spatial, int layout, float eps,
                        float momentum) {
    return Training(b, n, c, spatial, layout, b.x.data(), eps, momentum, b.rm.data(),
                    b.rv.data(), b.y.data());
  };
  ExpectError(call(2, 3, 4, 2, 1e-5f, 0.1f), NK_ERR_INVALID_ARGUMENT, f, "layout");
  ExpectError(call(2, 3, 4, -1, 1e-5f, 0.1f), NK_ERR_INVALID_ARGUMENT, f, "layout");
  ExpectError(call(2, 3, 4, 0, -1.0f, 0.1f), NK_ERR_INVALID_ARGUMENT, f, "eps");
  ExpectError(call(2, 3, 4, 0, NAN, 0.1f), NK_ERR_INVALID_ARGUMENT, f, "eps");
  ExpectError(call(2, 3, 4, 0, 1e-5f, -0.1f), NK_ERR_INVALID_ARGUMENT, f, "momentum");
  ExpectError(call(2, 3, 4, 0, 1e-5f, 1.5f), NK_ERR_INVALID_ARGUMENT, f, "momentum");
  ExpectError(call(2, 3, 4, 0, 1e-5f, INFINITY), NK_ERR_INVALID_ARGUMENT, f, "momentum");
  // Scalars before shapes: a bad layout wins over a bad shape.
  ExpectError(call(1, 3, 1, 7, 1e-5f, 0.1f), NK_ERR_INVALID_ARGUMENT, f, "layout");
  ExpectError(call(1, 3, 1, 0, 1e-5f, 0.1f), NK_ERR_INVALID_SHAPE, f, "n * spatial is 1");
  ExpectError(call(1, 0, 1, 1, 1e-5f, 0.1f), NK_ERR_INVALID_SHAPE, f, "n * spatial is 1");
  ExpectError(call(kMax, 3, 2, 0, 1e-5f, 0.1f), NK_ERR_INVALID_SHAPE, f, "overflow");
  ExpectError(call(kMax / 8, 3, 4, 0, 1e-5f, 0.1f), NK_ERR_INVALID_SHAPE, f, "overflow");
  EXPECT_TRUE(b.Untouched());
  // Shapes before pointers.
  ExpectError(Training(b, 1, 3, 1, 0, nullptr, 1e-5f, 0.1f, nullptr, nullptr, nullptr),
              NK_ERR_INVALID_SHAPE, f, "n * spatial");
  ExpectError(Training(b, 2, 3, 4, 0, nullptr, 1e-5f, 0.1f, b.rm.data(), b.rv.data(),
                       b.y.data()),
              NK_ERR_NULL_POINTER, f, "x is NULL");
  ExpectError(Training(b, 2, 3, 4, 0, b.x.data(), 1e-5f, 0.1f, b.rm.data(), b.rv.data(),
                       nullptr),
              NK_ERR_NULL_POINTER, f, "y is NULL");
  ExpectError(Training(b, 2, 3, 4, 0, b.x.data(), 1e-5f, 0.1f, b.rm.data(), nullptr,
                       b.y.data()),
              NK_ERR_NULL_POINTER, f, "running_var is NULL");
  ExpectError(Training(b, 2, 3, 4, 1, b.x.data(), 1e-5f, 0.1f, nullptr, b.rv.data(),
                       b.y.data()),
              NK_ERR_NULL_POINTER, f, "running_mean is NULL");
  EXPECT_TRUE(b.Untouched());
  // Overlaps: y partially over x; statistics over anything.
  ExpectError(Training(b, 2, 3, 4, 0, b.x.data(), 1e-5f, 0.1f, b.rm.data(), b.rv.data(),
                       b.x.data() + 1),
              NK_ERR_OVERLAP, f, "y overlaps x partially");
  ExpectError(Training(b, 2, 3, 4, 0, b.x.data(), 1e-5f, 0.1f, b.rm.data(), b.rm.data(),
                       b.y.data()),
              NK_ERR_OVERLAP, f, "running_mean overlaps running_var");
  ExpectError(nk_batchnorm_forward_training_f32(2, 3, 4, NK_LAYOUT_NCHW, b.x.data(),
                                                b.gamma.data(), b.beta.data(), 1e-5f, 0.1f,
                                                nullptr, nullptr, b.y.data(), b.y.data() + 3,
                                                nullptr),
              NK_ERR_OVERLAP, f, "y overlaps save_mean");
  ExpectError(nk_batchnorm_forward_training_f32(2, 3, 4, NK_LAYOUT_NHWC, b.x.data(),
                                                b.gamma.data(), b.beta.data(), 1e-5f, 0.1f,
                                                b.gamma.data(), b.rv.data(), b.y.data(),
                                                nullptr, nullptr),
              NK_ERR_OVERLAP, f, "running_mean overlaps gamma");
  EXPECT_TRUE(b.Untouched());
  // Valid: y may be x; momentum 0 and 1 are in range.
  EXPECT_EQ(call(2, 3, 4, 1, 0.0f, 1.0f), NK_OK) << nk_last_error();
  EXPECT_EQ(Training(b, 2, 3, 4, 0, b.x.data(), 1e-5f, 0.0f, nullptr, nullptr, b.x.data()),
            NK_OK);
}

TEST(BatchNormApi, InferenceRules) {
  const char* f = "nk_batchnorm_forward_inference_f32";
  Bn b;
  const auto call = [&](int layout, const float* x, const float* mean, const float* var,
                        float eps, float* y) {
    return nk_batchnorm_forward_inference_f32(2, 3, 4, static_cast<nk_layout>(layout), x,
                                              mean, var, nullptr, nullptr, eps, y);
  };
  ExpectError(call(5, b.x.data(), b.mean.data(), b.var.data(), 1e-5f, b.y.data()),
              NK_ERR_INVALID_ARGUMENT, f, "layout");
  ExpectError(call(0, b.x.data(), b.mean.data(), b.var.data(), -INFINITY, b.y.data()),
              NK_ERR_INVALID_ARGUMENT, f, "eps");
  ExpectError(nk_batchnorm_forward_inference_f32(kMax, 2, 3, NK_LAYOUT_NCHW, nullptr,
                                                 nullptr, nullptr, nullptr, nullptr, 1e-5f,
                                                 nullptr),
              NK_ERR_INVALID_SHAPE, f, "overflow");
  ExpectError(call(0, nullptr, b.mean.data(), b.var.data(), 1e-5f, b.y.data()),
              NK_ERR_NULL_POINTER, f, "x is NULL");
  ExpectError(call(0, b.x.data(), nullptr, b.var.data(), 1e-5f, b.y.data()),
              NK_ERR_NULL_POINTER, f, "mean is NULL");
  ExpectError(call(0, b.x.data(), b.mean.data(), nullptr, 1e-5f, b.y.data()),
              NK_ERR_NULL_POINTER, f, "var is NULL");
  ExpectError(call(0, b.x.data(), b.mean.data(), b.var.data(), 1e-5f, nullptr),
              NK_ERR_NULL_POINTER, f, "y is NULL");
  ExpectError(call(1, b.x.data(), b.y.data(), b.var.data(), 1e-5f, b.y.data()),
              NK_ERR_OVERLAP, f, "y overlaps mean");
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(call(1, b.x.data(), b.mean.data(), b.var.data(), 1e-5f, b.x.data()), NK_OK);
}

TEST(BatchNormApi, MomentsRules) {
  const char* f = "nk_batchnorm_moments_f32";
  Bn b;
  ExpectError(nk_batchnorm_moments_f32(2, 3, 4, static_cast<nk_layout>(2), b.x.data(),
                                       b.sm.data(), b.m2.data()),
              NK_ERR_INVALID_ARGUMENT, f, "layout");
  ExpectError(nk_batchnorm_moments_f32(kMax, 3, 4, NK_LAYOUT_NCHW, b.x.data(), b.sm.data(),
                                       b.m2.data()),
              NK_ERR_INVALID_SHAPE, f, "overflow");
  ExpectError(nk_batchnorm_moments_f32(2, 3, 4, NK_LAYOUT_NCHW, nullptr, b.sm.data(),
                                       b.m2.data()),
              NK_ERR_NULL_POINTER, f, "x is NULL");
  ExpectError(nk_batchnorm_moments_f32(0, 3, 4, NK_LAYOUT_NCHW, nullptr, b.sm.data(),
                                       nullptr),
              NK_ERR_NULL_POINTER, f, "m2 is NULL");
  ExpectError(nk_batchnorm_moments_f32(2, 3, 4, NK_LAYOUT_NCHW, b.x.data(), b.sm.data(),
                                       b.sm.data()),
              NK_ERR_OVERLAP, f, "mean overlaps m2");
  ExpectError(nk_batchnorm_moments_f32(2, 3, 4, NK_LAYOUT_NCHW, b.x.data(), b.x.data() + 2,
                                       b.m2.data()),
              NK_ERR_OVERLAP, f, "mean overlaps x");
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(nk_batchnorm_moments_f32(2, 0, 4, NK_LAYOUT_NCHW, nullptr, nullptr, nullptr),
            NK_OK);
  // An empty shard: mean 0 and m2 0 written; x may be NULL.
  EXPECT_EQ(nk_batchnorm_moments_f32(0, 3, 4, NK_LAYOUT_NHWC, nullptr, b.sm.data(),
                                     b.m2.data()),
            NK_OK);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(b.sm[i] == 0.0f && b.m2[i] == 0.0f);
}

TEST(BatchNormApi, MergeRules) {
  const char* f = "nk_moments_merge_f32";
  Bn b;
  float* out_mean = b.sm.data();
  float* out_m2 = b.m2.data();
  const float* a = b.mean.data();
  const float* q = b.var.data();
  ExpectError(nk_moments_merge_f32(kMax, 1, a, q, 1, a, q, out_mean, out_m2),
              NK_ERR_INVALID_SHAPE, f, "c is");
  ExpectError(nk_moments_merge_f32(3, std::numeric_limits<uint64_t>::max(), a, q, 1, a, q,
                                   out_mean, out_m2),
              NK_ERR_INVALID_SHAPE, f, "count_a + count_b");
  ExpectError(nk_moments_merge_f32(3, 1, nullptr, q, 1, a, q, out_mean, out_m2),
              NK_ERR_NULL_POINTER, f, "mean_a is NULL");
  ExpectError(nk_moments_merge_f32(3, 1, a, q, 1, a, nullptr, out_mean, out_m2),
              NK_ERR_NULL_POINTER, f, "m2_b is NULL");
  ExpectError(nk_moments_merge_f32(3, 1, a, q, 1, a, q, out_mean, nullptr),
              NK_ERR_NULL_POINTER, f, "m2_out is NULL");
  ExpectError(nk_moments_merge_f32(3, 1, a, q, 1, a, q, out_mean, out_mean),
              NK_ERR_OVERLAP, f, "mean_out overlaps m2_out");
  ExpectError(nk_moments_merge_f32(3, 1, a, q, 1, out_mean, q, out_mean, out_m2),
              NK_ERR_OVERLAP, f, "mean_out overlaps mean_b");
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(nk_moments_merge_f32(0, 1, nullptr, nullptr, 1, nullptr, nullptr, nullptr,
                                 nullptr),
            NK_OK);
  // In place on the a side; both counts 0 give zeros.
  EXPECT_EQ(nk_moments_merge_f32(3, 0, b.mean.data(), b.var.data(), 0, a, q, b.mean.data(),
                                 b.var.data()),
            NK_ERR_OVERLAP);  // mean_a is also mean_b, an input the output may not be
  EXPECT_EQ(nk_moments_merge_f32(3, 0, a, q, 0, b.gamma.data(), b.beta.data(), out_mean,
                                 out_m2),
            NK_OK);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(out_mean[i] == 0.0f && out_m2[i] == 0.0f);
}

TEST(BatchNormApi, UpdateRunningRules) {
  const char* f = "nk_batchnorm_update_running_f32";
  Bn b;
  const float* mean = b.mean.data();
  const float* m2 = b.var.data();
  ExpectError(nk_batchnorm_update_running_f32(3, 10, mean, m2, 2.0f, b.rm.data(),
                                              b.rv.data()),
              NK_ERR_INVALID_ARGUMENT, f, "momentum");
  ExpectError(nk_batchnorm_update_running_f32(3, 1, mean, m2, 0.1f, b.rm.data(),
                                              b.rv.data()),
              NK_ERR_INVALID_SHAPE, f, "count is 1");
  ExpectError(nk_batchnorm_update_running_f32(0, 0, nullptr, nullptr, 0.1f, nullptr,
                                              nullptr),
              NK_ERR_INVALID_SHAPE, f, "count is 0");
  ExpectError(nk_batchnorm_update_running_f32(3, 10, nullptr, m2, 0.1f, b.rm.data(),
                                              b.rv.data()),
              NK_ERR_NULL_POINTER, f, "mean is NULL");
  ExpectError(nk_batchnorm_update_running_f32(3, 10, mean, m2, 0.1f, b.rm.data(), nullptr),
              NK_ERR_NULL_POINTER, f, "running_var is NULL");
  ExpectError(nk_batchnorm_update_running_f32(3, 10, mean, m2, 0.1f, b.rm.data(),
                                              b.rm.data()),
              NK_ERR_OVERLAP, f, "running_mean overlaps running_var");
  ExpectError(nk_batchnorm_update_running_f32(3, 10, b.rm.data(), m2, 0.1f, b.rm.data(),
                                              b.rv.data()),
              NK_ERR_OVERLAP, f, "running_mean overlaps mean");
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(nk_batchnorm_update_running_f32(0, 2, nullptr, nullptr, 0.1f, nullptr, nullptr),
            NK_OK);
}

}  // namespace
}  // namespace nk_test
