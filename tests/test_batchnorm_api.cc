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

// Buffers of a small valid backward call, every output NaN-filled.
struct BnGrad {
  static constexpr size_t c = 3, elements = 2 * c * 4;  // n 2, spatial 4
  Buffer x{elements}, dy{elements}, dx{elements}, mean{c}, rstd{c}, gamma{c}, dgamma{c},
      dbeta{c}, sum_dy{c}, sum_dy_xhat{c};
  BnGrad() {
    FillNormal(x, 1);
    FillNormal(dy, 2);
    mean.Fill(0.0f);
    rstd.Fill(1.0f);
    gamma.Fill(1.0f);
  }
  // sums: the reduce's outputs are checked too (not where they are apply's inputs).
  bool Untouched(bool sums = true) const {
    for (size_t i = 0; i < elements; ++i) {
      if (!std::isnan(dx[i])) return false;
    }
    for (size_t i = 0; i < c; ++i) {
      if (!std::isnan(dgamma[i]) || !std::isnan(dbeta[i]) ||
          (sums && (!std::isnan(sum_dy[i]) || !std::isnan(sum_dy_xhat[i])))) {
        return false;
      }
    }
    return true;
  }
};

TEST(BatchNormApi, BackwardRules) {
  const char* f = "nk_batchnorm_backward_f32";
  BnGrad b;
  const auto call = [&](size_t n, size_t c, int layout, const float* x, const float* dy,
                        const float* mean, const float* rstd, float* dx, float* dgamma,
                        float* dbeta) {
    return nk_batchnorm_backward_f32(n, c, 4, static_cast<nk_layout>(layout), x, dy, mean,
                                     rstd, b.gamma.data(), dx, dgamma, dbeta);
  };
  float *x = b.x.data(), *dy = b.dy.data(), *mean = b.mean.data(), *rstd = b.rstd.data();
  float *dx = b.dx.data(), *dg = b.dgamma.data(), *db = b.dbeta.data();
  ExpectError(call(2, 3, 2, x, dy, mean, rstd, dx, dg, db), NK_ERR_INVALID_ARGUMENT, f,
              "layout");
  ExpectError(call(kMax, 3, 0, x, dy, mean, rstd, dx, dg, db), NK_ERR_INVALID_SHAPE, f,
              "overflow");
  ExpectError(call(2, 3, 0, nullptr, dy, mean, rstd, dx, dg, db), NK_ERR_NULL_POINTER, f,
              "x is NULL");
  ExpectError(call(2, 3, 0, x, nullptr, mean, rstd, dx, dg, db), NK_ERR_NULL_POINTER, f,
              "dy is NULL");
  ExpectError(call(2, 3, 1, x, dy, nullptr, rstd, dx, dg, db), NK_ERR_NULL_POINTER, f,
              "save_mean is NULL");
  ExpectError(call(2, 3, 1, x, dy, mean, nullptr, dx, dg, db), NK_ERR_NULL_POINTER, f,
              "save_rstd is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, nullptr, dg, db), NK_ERR_NULL_POINTER, f,
              "dx is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, x, dg, db), NK_ERR_OVERLAP, f,
              "dx overlaps x");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, dy + 1, dg, db), NK_ERR_OVERLAP, f,
              "dx overlaps dy partially");
  ExpectError(call(2, 3, 1, x, dy, mean, rstd, dx, dg, dg), NK_ERR_OVERLAP, f,
              "dgamma overlaps dbeta");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, dx, mean, db), NK_ERR_OVERLAP, f,
              "dgamma overlaps save_mean");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, dx, dg, dx + 2), NK_ERR_OVERLAP, f,
              "dx overlaps dbeta");
  EXPECT_TRUE(b.Untouched());
  // Empty tensors are no-ops with any pointers; dx may be dy; the parameters' gradients
  // are optional.
  EXPECT_EQ(call(0, 3, 0, nullptr, nullptr, nullptr, nullptr, nullptr, dg, db), NK_OK);
  EXPECT_EQ(call(2, 0, 1, nullptr, nullptr, nullptr, nullptr, nullptr, dg, db), NK_OK);
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(call(2, 3, 0, x, dy, mean, rstd, dy, nullptr, nullptr), NK_OK)
      << nk_last_error();
}

TEST(BatchNormApi, BackwardReduceRules) {
  const char* f = "nk_batchnorm_backward_reduce_f32";
  BnGrad b;
  const auto call = [&](size_t n, size_t c, int layout, const float* x, const float* dy,
                        const float* mean, const float* rstd, float* sum_dy,
                        float* sum_dy_xhat) {
    return nk_batchnorm_backward_reduce_f32(n, c, 4, static_cast<nk_layout>(layout), x, dy,
                                            mean, rstd, sum_dy, sum_dy_xhat);
  };
  float *x = b.x.data(), *dy = b.dy.data(), *mean = b.mean.data(), *rstd = b.rstd.data();
  float *s = b.sum_dy.data(), *sx = b.sum_dy_xhat.data();
  ExpectError(call(2, 3, 5, x, dy, mean, rstd, s, sx), NK_ERR_INVALID_ARGUMENT, f,
              "layout");
  ExpectError(call(kMax, 3, 0, x, dy, mean, rstd, s, sx), NK_ERR_INVALID_SHAPE, f,
              "overflow");
  ExpectError(call(2, 3, 0, nullptr, dy, mean, rstd, s, sx), NK_ERR_NULL_POINTER, f,
              "x is NULL");
  ExpectError(call(2, 3, 0, x, nullptr, mean, rstd, s, sx), NK_ERR_NULL_POINTER, f,
              "dy is NULL");
  ExpectError(call(2, 3, 0, x, dy, nullptr, rstd, s, sx), NK_ERR_NULL_POINTER, f,
              "mean is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, nullptr, s, sx), NK_ERR_NULL_POINTER, f,
              "rstd is NULL");
  ExpectError(call(0, 3, 0, nullptr, nullptr, mean, rstd, nullptr, sx),
              NK_ERR_NULL_POINTER, f, "sum_dy is NULL");
  ExpectError(call(2, 3, 1, x, dy, mean, rstd, s, nullptr), NK_ERR_NULL_POINTER, f,
              "sum_dy_xhat is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, s, s + 1), NK_ERR_OVERLAP, f,
              "sum_dy overlaps sum_dy_xhat");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, x + 5, sx), NK_ERR_OVERLAP, f,
              "sum_dy overlaps x");
  EXPECT_TRUE(b.Untouched());
  EXPECT_EQ(call(2, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), NK_OK);
  EXPECT_TRUE(b.Untouched());
  // An empty shard writes zeros (its share of the allreduce); x and dy may be NULL.
  ASSERT_EQ(call(0, 3, 0, nullptr, nullptr, mean, rstd, s, sx), NK_OK) << nk_last_error();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(s[i] == 0.0f && sx[i] == 0.0f);
}

TEST(BatchNormApi, BackwardApplyRules) {
  const char* f = "nk_batchnorm_backward_apply_f32";
  BnGrad b;
  b.sum_dy.Fill(0.5f);
  b.sum_dy_xhat.Fill(0.25f);
  const auto call = [&](size_t n, size_t c, int layout, const float* x, const float* dy,
                        const float* mean, const float* rstd, uint64_t total,
                        const float* sum_dy, const float* sum_dy_xhat, float* dx) {
    return nk_batchnorm_backward_apply_f32(n, c, 4, static_cast<nk_layout>(layout), x, dy,
                                           mean, rstd, b.gamma.data(), total, sum_dy,
                                           sum_dy_xhat, dx);
  };
  float *x = b.x.data(), *dy = b.dy.data(), *mean = b.mean.data(), *rstd = b.rstd.data();
  float *s = b.sum_dy.data(), *sx = b.sum_dy_xhat.data(), *dx = b.dx.data();
  ExpectError(call(2, 3, -3, x, dy, mean, rstd, 8, s, sx, dx), NK_ERR_INVALID_ARGUMENT, f,
              "layout");
  ExpectError(call(kMax, 3, 0, x, dy, mean, rstd, 8, s, sx, dx), NK_ERR_INVALID_SHAPE, f,
              "overflow");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, 7, s, sx, dx), NK_ERR_INVALID_SHAPE, f,
              "total_count is 7");
  // Checked with the shapes, before the c == 0 no-op (as training's n * spatial == 1).
  ExpectError(call(2, 0, 0, nullptr, nullptr, nullptr, nullptr, 7, nullptr, nullptr,
                   nullptr),
              NK_ERR_INVALID_SHAPE, f, "total_count is 7");
  ExpectError(call(2, 3, 0, nullptr, dy, mean, rstd, 8, s, sx, dx), NK_ERR_NULL_POINTER, f,
              "x is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, 8, nullptr, sx, dx), NK_ERR_NULL_POINTER, f,
              "sum_dy is NULL");
  ExpectError(call(2, 3, 1, x, dy, mean, rstd, 8, s, nullptr, dx), NK_ERR_NULL_POINTER, f,
              "sum_dy_xhat is NULL");
  ExpectError(call(2, 3, 1, x, dy, mean, rstd, 8, s, sx, nullptr), NK_ERR_NULL_POINTER, f,
              "dx is NULL");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, 8, s, sx, x), NK_ERR_OVERLAP, f,
              "dx overlaps x");
  ExpectError(call(2, 3, 0, x, dy, mean, rstd, 8, dx + 4, sx, dx), NK_ERR_OVERLAP, f,
              "dx overlaps sum_dy");
  EXPECT_TRUE(b.Untouched(false));
  EXPECT_EQ(call(0, 3, 0, nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr,
                 nullptr),
            NK_OK);
  EXPECT_TRUE(b.Untouched(false));
  EXPECT_EQ(call(2, 3, 0, x, dy, mean, rstd, 100, s, sx, dy), NK_OK) << nk_last_error();
}

}  // namespace
}  // namespace nk_test
