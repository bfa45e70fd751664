// SPDX-License-Identifier: Apache-2.0
// test_strided.cc: the LayerNorm family's row-strided forms, under every ISA. Each call
// must give the bits of the contiguous form on the same rows (which test_layernorm
// checks against the reference), write nothing between rows, and judge overlap over
// the elements it touches.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "rownorm_case.h"
#include "strided_tensor.h"
#include "test_util.h"

namespace nk_test {
namespace {

class StridedTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(StridedTest);

nk_status CallStrided(Op op, size_t rows, size_t cols, const float* x, size_t ldx,
                      const float* res, size_t ldr, const float* gamma, const float* beta,
                      float eps, float* sum, size_t lds, float* y, size_t ldy,
                      float* mean, float* rstd) {
  switch (op) {
    case Op::kLayerNorm:
      return nk_layernorm_forward_strided_f32(rows, cols, x, ldx, gamma, beta, eps, y,
                                              ldy, mean, rstd);
    case Op::kRmsNorm:
      return nk_rmsnorm_forward_strided_f32(rows, cols, x, ldx, gamma, eps, y, ldy, rstd);
    case Op::kAddLayerNorm:
      return nk_add_layernorm_forward_strided_f32(rows, cols, x, ldx, res, ldr, gamma,
                                                  beta, eps, sum, lds, y, ldy, mean, rstd);
    case Op::kAddRmsNorm:
      return nk_add_rmsnorm_forward_strided_f32(rows, cols, x, ldx, res, ldr, gamma, eps,
                                                sum, lds, y, ldy, rstd);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

// The row strides of one call: cols plus these pads.
struct Pads {
  size_t x, res, sum, y;
};

// Runs op on rows x cols both contiguously and at the strides `pads` give (tensors at
// `misalign` floats from a line; in place: y at x's place and stride, sum at the
// residual's), and expects the same bits in every output and untouched gaps.
void ExpectContiguousBits(Op op, size_t rows, size_t cols, Pads pads, size_t misalign,
                          bool in_place) {
  SCOPED_TRACE(std::string(OpName(op)) + " rows=" + std::to_string(rows) +
               " cols=" + std::to_string(cols) + " pads=" + std::to_string(pads.x) + "," +
               std::to_string(pads.res) + "," + std::to_string(pads.sum) + "," +
               std::to_string(pads.y) + " misalign=" + std::to_string(misalign) +
               " in_place=" + std::to_string(in_place) + " isa=" + nk_get_isa() +
               " threads=" + std::to_string(nk_get_num_threads()));
  const bool fused = Fused(op);
  const size_t n = rows * cols;
  Buffer x(n), res(n), gamma(cols), beta(cols);
  FillNormal(x, Seed(rows * 7919 + cols), 3.0f, 2.0f);
  FillNormal(res, Seed(cols + 1), 0.0f, 0.5f);
  FillNormal(gamma, Seed(cols + 2), 1.0f, 0.25f);
  FillNormal(beta, Seed(cols + 3), 0.0f, 0.5f);
  Buffer y(n), sum(n), mean(rows), rstd(rows);
  ASSERT_EQ(CallOp(op, rows, cols, x.data(), fused ? res.data() : nullptr, gamma.data(),
                   beta.data(), 1e-5f, fused ? sum.data() : nullptr, y.data(),
                   mean.data(), rstd.data()),
            NK_OK)
      << nk_last_error();

  // Gaps of NaN in the inputs: a kernel that used one would give NaN.
  constexpr float kGap = -7.25f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Strided sx(rows, cols, cols + pads.x, misalign, nan);
  Strided sr(rows, cols, cols + pads.res, (misalign + 3) % 16, nan);
  Strided ss(rows, cols, cols + (in_place ? pads.res : pads.sum), misalign, kGap);
  Strided sy(rows, cols, cols + (in_place ? pads.x : pads.y), (misalign + 5) % 16, kGap);
  sx.Set(std::vector<float>(x.data(), x.data() + n));
  sr.Set(std::vector<float>(res.data(), res.data() + n));
  Buffer smean(rows), srstd(rows);
  Strided& out_y = in_place ? sx : sy;
  Strided& out_sum = in_place ? sr : ss;
  ASSERT_EQ(CallStrided(op, rows, cols, sx.data(), sx.ld, fused ? sr.data() : nullptr,
                        sr.ld, gamma.data(), beta.data(), 1e-5f,
                        fused ? out_sum.data() : nullptr, out_sum.ld, out_y.data(),
                        out_y.ld, smean.data(), srstd.data()),
            NK_OK)
      << nk_last_error();
  ASSERT_TRUE(SameBits(out_y.Dense(), std::vector<float>(y.data(), y.data() + n)));
  if (fused) {
    ASSERT_TRUE(SameBits(out_sum.Dense(), std::vector<float>(sum.data(), sum.data() + n)));
  }
  ASSERT_EQ(std::memcmp(rstd.data(), srstd.data(), rows * sizeof(float)), 0);
  if (Centered(op)) {
    ASSERT_EQ(std::memcmp(mean.data(), smean.data(), rows * sizeof(float)), 0);
  }
  ASSERT_TRUE(out_y.GapsHold(in_place ? nan : kGap)) << "y written between rows";
  if (fused) {
    ASSERT_TRUE(out_sum.GapsHold(in_place ? nan : kGap)) << "sum written between rows";
  }
}

TEST_P(StridedTest, SameBitsAsContiguous) {
  const Pads pads[] = {{1, 3, 5, 2}, {16, 16, 16, 16}, {61, 1, 0, 7}, {0, 0, 0, 33}};
  for (Op op : kAllOps) {
    for (const auto& shape : std::vector<std::pair<size_t, size_t>>{
             {1, 1}, {3, 7}, {33, 16}, {17, 67}, {9, 256}, {40, 1024}, {5, 4099},
             {2, 20000}}) {
      for (const Pads& p : pads) {
        for (size_t misalign : {0, 4, 7}) {
          ExpectContiguousBits(op, shape.first, shape.second, p, misalign, false);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(StridedTest, InPlace) {
  for (Op op : kAllOps) {
    for (size_t cols : {5, 64, 100, 1024}) {
      ExpectContiguousBits(op, 37, cols, {cols, 3, 0, 0}, 4, true);
      if (HasFatalFailure()) return;
    }
  }
}

// Strided calls with 1, 2 and 3 threads give the bits of contiguous ones with as many,
// and those the bits of one thread (a group of rows, and chunks of long rows).
TEST_P(StridedTest, SameBitsForAnyThreadCount) {
  for (Op op : kAllOps) {
    const std::vector<std::pair<size_t, size_t>> shapes = {{301, 768}, {3, 40000}};
    for (const auto& shape : shapes) {
      const size_t rows = shape.first, cols = shape.second, n = rows * cols;
      const bool fused = Fused(op);
      Buffer x(n), res(n), gamma(cols), beta(cols);
      FillOperands(x, res, gamma, beta, rows);
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
        ExpectContiguousBits(op, rows, cols, {3 * cols, 5, 9, 1}, 4, false);
        Buffer y(n), sum(n), rstd(rows);
        ASSERT_EQ(CallOp(op, rows, cols, x.data(), fused ? res.data() : nullptr,
                         gamma.data(), beta.data(), 1e-5f, fused ? sum.data() : nullptr,
                         y.data(), nullptr, rstd.data()),
                  NK_OK);
        std::vector<float> out(y.data(), y.data() + n);
        out.insert(out.end(), rstd.data(), rstd.data() + rows);
        if (threads == 1) first = out;
        ASSERT_TRUE(SameBits(out, first)) << OpName(op) << " threads " << threads;
      }
    }
  }
  nk_set_num_threads(0);
}

// Tensors that take the streaming paths (whole cache lines streamed: strides of whole
// lines group rows, others go one row at a time).
TEST_P(StridedTest, LargeTensorsStream) {
  for (Op op : {Op::kLayerNorm, Op::kAddRmsNorm}) {
    ExpectContiguousBits(op, 1024, 4096, {4, 16, 4, 4}, 0, false);
    ExpectContiguousBits(op, 1024, 4096, {16, 16, 32, 64}, 4, false);
    ExpectContiguousBits(op, 16384, 256, {256, 1, 1, 1}, 0, false);
    if (HasFatalFailure()) return;
  }
}

// q, k and v of a fused QKV projection, [tokens][3 * dim]: q and k normalized where
// they lie (windows of one buffer at one stride do not overlap), v untouched.
TEST_P(StridedTest, QkvWindowsInPlace) {
  const size_t tokens = 45, dim = 128, ld = 3 * dim;
  Buffer qkv(tokens * ld), gamma(dim);
  FillNormal(qkv, Seed(1), 0.5f, 2.0f);
  FillNormal(gamma, Seed(2), 1.0f, 0.25f);
  const std::vector<float> before(qkv.data(), qkv.data() + tokens * ld);
  for (size_t part : {0, 1}) {
    float* p = qkv.data() + part * dim;
    ASSERT_EQ(nk_rmsnorm_forward_strided_f32(tokens, dim, p, ld, gamma.data(), 1e-6f, p,
                                             ld, nullptr),
              NK_OK)
        << nk_last_error();
  }
  for (size_t part : {0, 1}) {  // each window as a contiguous call gives
    std::vector<float> dense(tokens * dim), y(tokens * dim);
    for (size_t t = 0; t < tokens; ++t) {
      std::memcpy(&dense[t * dim], &before[t * ld + part * dim], dim * sizeof(float));
    }
    ASSERT_EQ(nk_rmsnorm_forward_f32(tokens, dim, dense.data(), gamma.data(), 1e-6f,
                                     y.data(), nullptr),
              NK_OK);
    for (size_t t = 0; t < tokens; ++t) {
      ASSERT_EQ(std::memcmp(&y[t * dim], qkv.data() + t * ld + part * dim,
                            dim * sizeof(float)),
                0)
          << "part " << part << " token " << t;
    }
  }
  for (size_t t = 0; t < tokens; ++t) {
    ASSERT_EQ(std::memcmp(qkv.data() + t * ld + 2 * dim, &before[t * ld + 2 * dim],
                          dim * sizeof(float)),
              0)
        << "v written, token " << t;
  }
}

// ---------------------------------------------------------------- validation

// Expects `status` and a message from `function` naming every one of `words`.
void ExpectStatus(nk_status got, nk_status want, const char* function,
                  std::initializer_list<const char*> words) {
  ASSERT_EQ(got, want) << nk_last_error();
  if (want == NK_OK) return;
  const std::string m = nk_last_error();
  EXPECT_EQ(m.rfind(std::string(function) + ": ", 0), 0u) << m;
  for (const char* w : words) EXPECT_NE(m.find(w), std::string::npos) << m;
}

TEST(StridedValidation, StridesBelowColsOrOverflowing) {
  constexpr size_t rows = 4, cols = 8, ld = 10;
  Buffer x(rows * ld), res(rows * ld), sum(rows * ld), y(rows * ld);
  FillNormal(x, 1);
  FillNormal(res, 2);
  const auto call = [&](size_t ldx, size_t ldr, size_t lds, size_t ldy, float* s) {
    sum.Fill(5.0f);
    y.Fill(5.0f);
    const nk_status st = nk_add_layernorm_forward_strided_f32(
        rows, cols, x.data(), ldx, res.data(), ldr, nullptr, nullptr, 1e-5f, s, lds,
        y.data(), ldy, nullptr, nullptr);
    for (size_t i = 0; st != NK_OK && i < y.size(); ++i) {
      EXPECT_EQ(y[i], 5.0f);
      EXPECT_EQ(sum[i], 5.0f);
    }
    return st;
  };
  const char* f = "nk_add_layernorm_forward_strided_f32";
  ExpectStatus(call(7, ld, ld, ld, sum.data()), NK_ERR_INVALID_SHAPE, f, {"ldx is 7", ">= cols"});
  ExpectStatus(call(ld, 0, ld, ld, sum.data()), NK_ERR_INVALID_SHAPE, f, {"ldr is 0"});
  ExpectStatus(call(ld, ld, 3, ld, sum.data()), NK_ERR_INVALID_SHAPE, f, {"lds is 3"});
  ExpectStatus(call(ld, ld, ld, 1, sum.data()), NK_ERR_INVALID_SHAPE, f, {"ldy is 1"});
  ExpectStatus(call(ld, ld, 0, ld, nullptr), NK_OK, f, {});  // lds unused without sum
  ExpectStatus(call(cols, cols, cols, cols, sum.data()), NK_OK, f, {});  // dense rows
  // (rows - 1) * ld + cols elements beyond size_t, though rows * cols fits.
  const size_t huge = std::numeric_limits<size_t>::max() / 8;
  ExpectStatus(nk_layernorm_forward_strided_f32(3, 8, x.data(), huge, nullptr, nullptr,
                                                1e-5f, y.data(), 8, nullptr, nullptr),
               NK_ERR_INVALID_SHAPE, "nk_layernorm_forward_strided_f32",
               {"ldx", "overflow"});
  // Order: eps, then shapes (strides), then NULL pointers; rows == 0 is a no-op.
  ExpectStatus(nk_rmsnorm_forward_strided_f32(4, 8, nullptr, 2, nullptr, -1.0f, nullptr,
                                              8, nullptr),
               NK_ERR_INVALID_ARGUMENT, "nk_rmsnorm_forward_strided_f32", {"eps"});
  ExpectStatus(nk_rmsnorm_forward_strided_f32(4, 8, nullptr, 2, nullptr, 1e-5f, nullptr,
                                              8, nullptr),
               NK_ERR_INVALID_SHAPE, "nk_rmsnorm_forward_strided_f32", {"ldx is 2"});
  ExpectStatus(nk_rmsnorm_forward_strided_f32(4, 8, nullptr, 8, nullptr, 1e-5f, nullptr,
                                              8, nullptr),
               NK_ERR_NULL_POINTER, "nk_rmsnorm_forward_strided_f32", {"x"});
  ExpectStatus(nk_rmsnorm_forward_strided_f32(0, 8, nullptr, 8, nullptr, 1e-5f, nullptr,
                                              8, nullptr),
               NK_OK, "", {});
}

// Overlap is judged over the elements a call touches, not over address ranges.
TEST(StridedValidation, OverlapOfTouchedElementsOnly) {
  constexpr size_t rows = 5, cols = 8;
  const char* f = "nk_layernorm_forward_strided_f32";
  Buffer buf(64 * cols), stats(rows);
  const auto run = [&](size_t x_at, size_t ldx, size_t y_at, size_t ldy, float* mean) {
    FillNormal(buf, 3);
    return nk_layernorm_forward_strided_f32(rows, cols, buf.data() + x_at, ldx, nullptr,
                                            nullptr, 1e-5f, buf.data() + y_at, ldy, mean,
                                            stats.data());
  };
  // Column windows of one buffer at one stride: disjoint, or one column shared.
  ExpectStatus(run(0, 2 * cols, cols, 2 * cols, nullptr), NK_OK, f, {});
  ExpectStatus(run(0, 2 * cols, cols - 1, 2 * cols, nullptr), NK_ERR_OVERLAP, f,
               {"y overlaps x"});
  // The windows the other way round.
  ExpectStatus(run(cols, 2 * cols, 0, 2 * cols, nullptr), NK_OK, f, {});
  // In place takes the same stride too.
  ExpectStatus(run(0, 2 * cols, 0, 3 * cols, nullptr), NK_ERR_OVERLAP, f,
               {"y overlaps x partially", "stride"});
  ExpectStatus(run(0, 2 * cols, 0, 2 * cols, nullptr), NK_OK, f, {});
  // Rows at other strides that interleave without sharing an element: x's rows at
  // 0, 4, 8, 12, 16 (in units of cols), y's at 1, 3, 5, 7, 9; then y's at 2, 4, ...
  ExpectStatus(run(0, 4 * cols, cols, 2 * cols, nullptr), NK_OK, f, {});
  ExpectStatus(run(0, 4 * cols, 2 * cols, 2 * cols, nullptr), NK_ERR_OVERLAP, f,
               {"y overlaps x"});
  // Statistics in the gaps between rows are not in the tensor; on a row they are.
  {
    FillNormal(buf, 3);
    const std::vector<float> before(buf.data(), buf.data() + buf.size());
    Buffer y(rows * cols);
    ExpectStatus(nk_layernorm_forward_strided_f32(rows, cols, buf.data(), 2 * cols,
                                                  nullptr, nullptr, 1e-5f, y.data(), cols,
                                                  buf.data() + cols, stats.data()),
                 NK_OK, f, {});
    for (size_t r = 0; r < rows; ++r) {
      ASSERT_EQ(std::memcmp(buf.data() + 2 * r * cols, &before[2 * r * cols],
                            cols * sizeof(float)),
                0);
    }
  }
  ExpectStatus(run(0, 2 * cols, 32 * cols, cols, buf.data() + 2 * cols + 3),
               NK_ERR_OVERLAP, f, {"mean overlaps x"});
  ExpectStatus(run(0, 2 * cols, 32 * cols, 2 * cols, buf.data() + 33 * cols),
               NK_OK, f, {});  // in a gap of y
}

}  // namespace
}  // namespace nk_test
