// SPDX-License-Identifier: Apache-2.0
// test_backward_api.cc: every validation rule of the LayerNorm-family backward entry
// points: status, message naming function and argument, order of checks, and nothing
// written on failure.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "rowgrad_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

constexpr size_t kRows = 4, kCols = 8, kN = kRows * kCols;
constexpr float kSentinel = 12345.0f;

// Buffers for a call, every output filled with a sentinel.
struct Args {
  Buffer x{kN}, dy{kN}, dsum{kN}, mean{kRows}, rstd{kRows}, gamma{kCols}, dx{kN},
      dgamma{kCols}, dbeta{kCols};
  Args() {
    FillNormal(x, 1);
    FillNormal(dy, 2);
    FillNormal(dsum, 3);
    FillNormal(mean, 4);
    FillNormal(rstd, 5, 1.0f, 0.1f);
    FillNormal(gamma, 6);
    for (Buffer* b : {&dx, &dgamma, &dbeta}) b->Fill(kSentinel);
  }
  bool Untouched() const {
    for (const Buffer* b : {&dx, &dgamma, &dbeta}) {
      for (size_t i = 0; i < b->size(); ++i) {
        if ((*b)[i] != kSentinel) return false;
      }
    }
    return true;
  }
};

struct Call {
  Op op;
  size_t rows = kRows, cols = kCols;
  const float *x, *dy, *dsum, *mean, *rstd, *gamma;
  float *dx, *dgamma, *dbeta;
  Call(Op o, Args& a)
      : op(o), x(a.x.data()), dy(a.dy.data()), dsum(a.dsum.data()), mean(a.mean.data()),
        rstd(a.rstd.data()), gamma(a.gamma.data()), dx(a.dx.data()),
        dgamma(a.dgamma.data()), dbeta(a.dbeta.data()) {}
  nk_status Run() const {
    return CallGrad(op, rows, cols, x, dy, dsum, mean, rstd, gamma, dx, dgamma, dbeta);
  }
};

std::string Name(Op op) { return std::string("nk_") + OpName(op) + "_backward_f32"; }

void ExpectFailure(const Call& call, Args& args, nk_status status,
                   std::initializer_list<const char*> words) {
  SCOPED_TRACE(Name(call.op));
  ASSERT_EQ(call.Run(), status) << nk_last_error();
  const std::string message = nk_last_error();
  EXPECT_EQ(message.rfind(Name(call.op) + ": ", 0), 0u) << message;
  for (const char* w : words) EXPECT_NE(message.find(w), std::string::npos) << message;
  EXPECT_TRUE(args.Untouched());
}

class BackwardValidation : public ::testing::TestWithParam<Op> {};
INSTANTIATE_TEST_SUITE_P(Op, BackwardValidation, ::testing::ValuesIn(kAllOps),
                         [](const auto& info) { return std::string(OpName(info.param)); });

TEST_P(BackwardValidation, Shapes) {
  {
    Args a;
    Call c(GetParam(), a);
    c.cols = 0;
    ExpectFailure(c, a, NK_ERR_INVALID_SHAPE, {"cols is 0"});
  }
  {
    Args a;
    Call c(GetParam(), a);
    c.rows = std::numeric_limits<size_t>::max() / 2;
    c.cols = 3;
    ExpectFailure(c, a, NK_ERR_INVALID_SHAPE, {"rows", "cols", "overflow"});
  }
  {
    Args a;
    Call c(GetParam(), a);
    c.rows = std::numeric_limits<size_t>::max() / 16;  // elements fit, bytes do not
    c.cols = 8;
    ExpectFailure(c, a, NK_ERR_INVALID_SHAPE, {"overflow"});
  }
}

TEST_P(BackwardValidation, EmptyIsANoOpEvenWithNullPointers) {
  Args a;
  Call c(GetParam(), a);
  c.rows = 0;
  c.x = c.dy = c.dsum = c.mean = c.rstd = c.gamma = nullptr;
  c.dx = c.dgamma = c.dbeta = nullptr;
  EXPECT_EQ(c.Run(), NK_OK);
  c.cols = 0;
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_SHAPE);
}

TEST_P(BackwardValidation, NullPointers) {
  const Op op = GetParam();
  const char* x = Fused(op) ? "sum" : "x";
  const char* rstd = Centered(op) ? "rstd" : "rrms";
  std::vector<std::pair<const char*, std::function<void(Call&)>>> required = {
      {x, [](Call& c) { c.x = nullptr; }},
      {"dy", [](Call& c) { c.dy = nullptr; }},
      {rstd, [](Call& c) { c.rstd = nullptr; }},
      {"dx", [](Call& c) { c.dx = nullptr; }}};
  if (Centered(op)) required.push_back({"mean", [](Call& c) { c.mean = nullptr; }});
  for (auto& [name, clear] : required) {
    Args a;
    Call c(op, a);
    clear(c);
    ExpectFailure(c, a, NK_ERR_NULL_POINTER, {name, "NULL"});
  }
  // Optional: gamma, dsum, dgamma, dbeta.
  Args a;
  Call c(op, a);
  c.gamma = c.dsum = nullptr;
  c.dgamma = c.dbeta = nullptr;
  EXPECT_EQ(c.Run(), NK_OK) << nk_last_error();
}

TEST_P(BackwardValidation, Overlaps) {
  const Op op = GetParam();
  const char* x = Fused(op) ? "sum" : "x";
  const char* rstd = Centered(op) ? "rstd" : "rrms";
  struct Bad {
    const char* words[2];
    std::function<void(Call&, Args&)> set;
  };
  std::vector<Bad> bad = {
      {{"dx", "dy"}, [](Call& c, Args& a) { c.dy = a.dx.data() + 1; }},  // not exact
      {{"dx", x}, [x](Call& c, Args& a) { c.x = a.dx.data(); }},         // not allowed
      {{"dgamma", "dx"}, [](Call& c, Args& a) { c.dgamma = a.dx.data() + 8; }},
      {{"dgamma", "gamma"}, [](Call& c, Args& a) { c.gamma = a.dgamma.data(); }},
      {{"dgamma", "dy"}, [](Call& c, Args&) { c.dgamma = const_cast<float*>(c.dy); }},
      {{"dx", rstd}, [](Call& c, Args& a) { c.rstd = a.dx.data() + 2; }},
  };
  if (Centered(op)) {
    bad.push_back({{"dbeta", "dgamma"}, [](Call& c, Args& a) { c.dbeta = a.dgamma.data(); }});
    bad.push_back({{"dx", "mean"}, [](Call& c, Args& a) { c.mean = a.dx.data(); }});
  }
  if (Fused(op)) {
    bad.push_back({{"dx", "dsum"}, [](Call& c, Args& a) { c.dsum = a.dx.data() + 3; }});
  }
  for (Bad& b : bad) {
    Args a;
    Call c(op, a);
    b.set(c, a);
    SCOPED_TRACE(std::string(b.words[0]) + " vs " + b.words[1]);
    ASSERT_EQ(c.Run(), NK_ERR_OVERLAP) << nk_last_error();
    const std::string m = nk_last_error();
    EXPECT_EQ(m.rfind(Name(op) + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(b.words[0]), std::string::npos) << m;
    EXPECT_NE(m.find(b.words[1]), std::string::npos) << m;
  }
  // Nothing written: outputs overlapping only one another keep their sentinels.
  {
    Args a;
    Call c(op, a);
    c.dgamma = a.dx.data() + 8;
    ExpectFailure(c, a, NK_ERR_OVERLAP, {"dgamma", "dx"});
  }
  // The allowed aliases: dx == dy, and dx == dsum in the fused forms.
  {
    Args a;
    Call c(op, a);
    c.dx = a.dy.data();
    EXPECT_EQ(c.Run(), NK_OK) << nk_last_error();
    if (Fused(op)) {
      c.dx = a.dsum.data();
      EXPECT_EQ(c.Run(), NK_OK) << nk_last_error();
    }
  }
}

TEST_P(BackwardValidation, OrderOfChecks) {
  const Op op = GetParam();
  Args a;
  Call c(op, a);
  // Shape before NULL before overlap.
  c.cols = 0;
  c.dy = nullptr;
  c.dgamma = a.dx.data();
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_SHAPE);
  c.cols = kCols;
  EXPECT_EQ(c.Run(), NK_ERR_NULL_POINTER);
  c.dy = a.dy.data();
  EXPECT_EQ(c.Run(), NK_ERR_OVERLAP);
  EXPECT_TRUE(a.Untouched());
}

TEST(BackwardValidationStrided, StridesBelowCols) {
  Args a;
  const nk_status s = nk_layernorm_backward_strided_f32(
      kRows, kCols, a.x.data(), kCols, a.dy.data(), kCols - 1, a.mean.data(),
      a.rstd.data(), nullptr, a.dx.data(), kCols, a.dgamma.data(), a.dbeta.data());
  EXPECT_EQ(s, NK_ERR_INVALID_SHAPE);
  EXPECT_NE(std::string(nk_last_error()).find("lddy"), std::string::npos) << nk_last_error();
  EXPECT_TRUE(a.Untouched());
  // Rows of dx between dy's rows (same stride, disjoint column windows): no overlap.
  Buffer wide(kRows * 2 * kCols);
  FillNormal(wide, 9);
  EXPECT_EQ(nk_layernorm_backward_strided_f32(kRows, kCols, a.x.data(), kCols, wide.data(),
                                              2 * kCols, a.mean.data(), a.rstd.data(),
                                              nullptr, wide.data() + kCols, 2 * kCols,
                                              nullptr, nullptr),
            NK_OK)
      << nk_last_error();
}

}  // namespace
}  // namespace nk_test
