// SPDX-License-Identifier: Apache-2.0
// test_api.cc: library queries (version, status strings, ISA and thread control) and
// every validation rule of the LayerNorm-family entry points: status, message, order
// of checks, and nothing written on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "cpu_features.h"
#include "rownorm_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

TEST(Library, Version) {
  EXPECT_STREQ(nk_version(), "0.1.0");
  EXPECT_EQ(NK_VERSION_MAJOR, 0);
  EXPECT_EQ(NK_VERSION_MINOR, 1);
  EXPECT_EQ(NK_VERSION_PATCH, 0);
}

TEST(Library, StatusStrings) {
  EXPECT_EQ(NK_OK, 0);
  EXPECT_EQ(NK_ERR_NULL_POINTER, 1);
  EXPECT_EQ(NK_ERR_INVALID_SHAPE, 2);
  EXPECT_EQ(NK_ERR_INVALID_ARGUMENT, 3);
  EXPECT_EQ(NK_ERR_OVERLAP, 4);
  EXPECT_EQ(NK_ERR_UNSUPPORTED, 5);
  EXPECT_EQ(NK_ERR_OUT_OF_MEMORY, 6);
  for (int s = -3; s < 12; ++s) {
    const char* text = nk_status_string(static_cast<nk_status>(s));
    ASSERT_NE(text, nullptr);
    EXPECT_GT(std::strlen(text), 0u);
  }
  EXPECT_NE(std::string(nk_status_string(NK_ERR_OVERLAP)).find("OVERLAP"),
            std::string::npos);
}

TEST(Library, LastErrorIsPerThread) {
  ASSERT_EQ(nk_set_num_threads(-1), NK_ERR_INVALID_ARGUMENT);
  const std::string mine = nk_last_error();
  EXPECT_NE(mine.find("nk_set_num_threads"), std::string::npos);
  std::string other = "unset";
  std::thread([&] { other = nk_last_error(); }).join();
  EXPECT_EQ(other, "");
}

TEST(Isa, ListIsBestFirstAndSettable) {
  const std::vector<std::string> isas = Isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(nk_get_isa(), isas[0]);
  const char* one = nullptr;
  EXPECT_EQ(nk_list_isas(&one, 1), isas.size());  // writes at most capacity
  EXPECT_EQ(one, isas[0]);
  for (const std::string& isa : isas) {
    std::string lower = isa;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(ch));
    ASSERT_EQ(nk_set_isa(lower.c_str()), NK_OK) << nk_last_error();
    EXPECT_EQ(nk_get_isa(), isa);
  }
  EXPECT_EQ(nk_set_isa("auto"), NK_OK);
  EXPECT_EQ(nk_get_isa(), isas[0]);
  ASSERT_EQ(nk_set_isa(isas.back().c_str()), NK_OK);
  EXPECT_EQ(nk_set_isa(nullptr), NK_OK);
  EXPECT_EQ(nk_get_isa(), isas[0]);
}

// The ISAs listed are exactly the x86 targets this CPU runs, as its own feature flags
// say (libgcc's cpuid, not Highway's): none missing, none it cannot run. Every kernel
// test runs under each listed ISA, so on a CPU without AVX-512 the AVX3 kernels are
// built but not run; the test prints that, for the CI log.
TEST(Isa, ListsEveryX86TargetThisCpuRuns) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx3 = CpuRunsAvx3();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool sse4 = __builtin_cpu_supports("sse4.2") &&
                    __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("aes");
  const std::vector<std::string> isas = Isas();
  const auto listed = [&](const char* isa) {
    return std::find(isas.begin(), isas.end(), isa) != isas.end();
  };
  EXPECT_EQ(listed("AVX3"), avx3);
  EXPECT_EQ(listed("AVX2"), avx2);
  EXPECT_EQ(listed("SSE4"), sse4);
  EXPECT_TRUE(listed("SSSE3"));
  EXPECT_TRUE(isas.back() == "SCALAR" || isas.back() == "EMU128") << isas.back();
  if (!avx3) {
    std::printf("NOTE: this CPU has no AVX-512: the AVX3 kernels are built, not run\n");
  }
#endif
}

// Under emulation (the Arm leg runs each qemu CPU model with NK_TEST_EXPECT_ISAS set):
// the ISAs this CPU runs are exactly those named, best first, and the best is selected.
TEST(Isa, TheEmulatedCpuRunsTheExpectedIsas) {
  const char* expected = std::getenv("NK_TEST_EXPECT_ISAS");
  if (expected == nullptr) GTEST_SKIP() << "NK_TEST_EXPECT_ISAS is not set";
  std::string listed;
  for (const std::string& isa : Isas()) listed += (listed.empty() ? "" : ",") + isa;
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(nk_set_isa(nullptr), NK_OK);
  EXPECT_EQ(nk_get_isa(), Isas().front());
}

TEST(Isa, UnknownAndUnsupportedNames) {
  const std::string before = nk_get_isa();
  EXPECT_EQ(nk_set_isa("NOT_AN_ISA"), NK_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nk_last_error()).find("nk_set_isa"), std::string::npos);
  EXPECT_NE(std::string(nk_last_error()).find("NOT_AN_ISA"), std::string::npos);
  EXPECT_EQ(nk_set_isa(""), NK_ERR_INVALID_ARGUMENT);
  // Highway target names that this build does not contain (or this CPU lacks).
  EXPECT_EQ(nk_set_isa("AVX3_ZEN4"), NK_ERR_UNSUPPORTED);
#if defined(__x86_64__)
  EXPECT_EQ(nk_set_isa("neon"), NK_ERR_UNSUPPORTED);
#else
  EXPECT_EQ(nk_set_isa("avx2"), NK_ERR_UNSUPPORTED);
#endif
  EXPECT_EQ(nk_get_isa(), before);
}

// The names users type: AVX-512 for Highway's AVX3, white space around a name.
TEST(Isa, AliasesAndSurroundingSpaces) {
  const std::vector<std::string> isas = Isas();
  const bool avx3 = std::find(isas.begin(), isas.end(), "AVX3") != isas.end();
  for (const char* name : {"AVX512", "avx-512", " AVX3\n", "\tavx512 "}) {
    SCOPED_TRACE(name);
    if (!avx3) {
      EXPECT_EQ(nk_set_isa(name), NK_ERR_UNSUPPORTED);
      continue;
    }
    ASSERT_EQ(nk_set_isa("auto"), NK_OK);
    ASSERT_EQ(nk_set_isa(isas.back().c_str()), NK_OK);
    ASSERT_EQ(nk_set_isa(name), NK_OK) << nk_last_error();
    EXPECT_STREQ(nk_get_isa(), "AVX3");
  }
  ASSERT_EQ(nk_set_isa(" auto "), NK_OK);
  EXPECT_EQ(nk_get_isa(), isas[0]);
}

// A refused name's message lists the names this CPU runs.
TEST(Isa, RefusalListsWhatThisCpuRuns) {
  for (const char* name : {"AVX9", "AVX3_ZEN4"}) {
    ASSERT_NE(nk_set_isa(name), NK_OK);
    const std::string m = nk_last_error();
    for (const std::string& isa : Isas()) {
      EXPECT_NE(m.find(isa), std::string::npos) << m;
    }
    EXPECT_NE(m.find("auto"), std::string::npos) << m;
  }
}

TEST(Threads, SetAndGet) {
  EXPECT_GE(nk_get_num_threads(), 1);
  ASSERT_EQ(nk_set_num_threads(3), NK_OK);
  EXPECT_EQ(nk_get_num_threads(), 3);
  EXPECT_EQ(nk_set_num_threads(-2), NK_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nk_get_num_threads(), 3);
  ASSERT_EQ(nk_set_num_threads(0), NK_OK);
  EXPECT_GE(nk_get_num_threads(), 1);
}

// ---------------------------------------------------------------- validation

constexpr size_t kRows = 4, kCols = 8, kN = kRows * kCols;

// Buffers for a call, with every output filled with a sentinel; Untouched() says
// whether a failed call kept its hands off them.
struct Args {
  Buffer x{kN}, res{kN}, gamma{kCols}, beta{kCols}, sum{kN}, y{kN}, mean{kRows},
      rstd{kRows};
  static constexpr float kSentinel = 12345.0f;
  Args() {
    FillNormal(x, 1);
    FillNormal(res, 2);
    FillNormal(gamma, 3);
    FillNormal(beta, 4);
    for (Buffer* b : {&sum, &y, &mean, &rstd}) b->Fill(kSentinel);
  }
  bool Untouched() const {
    for (const Buffer* b : {&sum, &y, &mean, &rstd}) {
      for (size_t i = 0; i < b->size(); ++i) {
        if ((*b)[i] != kSentinel) return false;
      }
    }
    return true;
  }
};

// One call of `op` with arguments the test may change.
struct Call {
  Op op;
  size_t rows = kRows, cols = kCols;
  const float* x;
  const float* res;
  const float* gamma;
  const float* beta;
  float eps = 1e-5f;
  float* sum;
  float* y;
  float* mean;
  float* rstd;
  Call(Op o, Args& a)
      : op(o), x(a.x.data()), res(a.res.data()), gamma(a.gamma.data()),
        beta(a.beta.data()), sum(a.sum.data()), y(a.y.data()), mean(a.mean.data()),
        rstd(a.rstd.data()) {}
  nk_status Run() const {
    return CallOp(op, rows, cols, x, res, gamma, beta, eps, sum, y, mean, rstd);
  }
};

std::string Name(Op op) { return std::string("nk_") + OpName(op) + "_forward_f32"; }

// Expects `status`, a message naming the function and `words`, and no write.
void ExpectFailure(const Call& call, Args& args, nk_status status,
                   std::initializer_list<const char*> words) {
  SCOPED_TRACE(Name(call.op));
  ASSERT_EQ(call.Run(), status) << nk_last_error();
  const std::string message = nk_last_error();
  EXPECT_EQ(message.rfind(Name(call.op) + ": ", 0), 0u) << message;
  for (const char* w : words) EXPECT_NE(message.find(w), std::string::npos) << message;
  EXPECT_TRUE(args.Untouched());
}

class Validation : public ::testing::TestWithParam<Op> {};
INSTANTIATE_TEST_SUITE_P(Op, Validation, ::testing::ValuesIn(kAllOps),
                         [](const auto& info) { return std::string(OpName(info.param)); });

TEST_P(Validation, Eps) {
  for (float eps : {-1e-5f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    Args a;
    Call c(GetParam(), a);
    c.eps = eps;
    ExpectFailure(c, a, NK_ERR_INVALID_ARGUMENT, {"eps"});
  }
  Args a;
  Call c(GetParam(), a);
  c.eps = 0.0f;
  EXPECT_EQ(c.Run(), NK_OK);
}

TEST_P(Validation, Shapes) {
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

TEST_P(Validation, EmptyIsANoOpEvenWithNullPointers) {
  Args a;
  Call c(GetParam(), a);
  c.rows = 0;
  c.x = c.res = c.gamma = c.beta = nullptr;
  c.sum = c.y = c.mean = c.rstd = nullptr;
  EXPECT_EQ(c.Run(), NK_OK);
  // Scalars are still checked, and cols == 0 is still a bad shape.
  c.eps = -1.0f;
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_ARGUMENT);
  c.eps = 1e-5f;
  c.cols = 0;
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_SHAPE);
}

TEST_P(Validation, NullPointers) {
  const Op op = GetParam();
  std::vector<std::pair<const char*, std::function<void(Call&)>>> required = {
      {"x", [](Call& c) { c.x = nullptr; }}, {"y", [](Call& c) { c.y = nullptr; }}};
  if (Fused(op)) required.push_back({"residual", [](Call& c) { c.res = nullptr; }});
  for (auto& [name, clear] : required) {
    Args a;
    Call c(op, a);
    clear(c);
    ExpectFailure(c, a, NK_ERR_NULL_POINTER, {name, "NULL"});
  }
  // Optional: gamma, beta, sum, statistics.
  Args a;
  Call c(op, a);
  c.gamma = c.beta = nullptr;
  c.sum = c.mean = c.rstd = nullptr;
  EXPECT_EQ(c.Run(), NK_OK) << nk_last_error();
}

TEST_P(Validation, Overlaps) {
  const Op op = GetParam();
  const char* rstd = Centered(op) ? "rstd" : "rrms";
  struct Bad {
    const char* words[2];
    std::function<void(Call&, Args&)> set;
  };
  std::vector<Bad> bad = {
      {{"y", "x"}, [](Call& c, Args& a) { c.x = a.y.data() + 1; }},       // partial
      {{rstd, "y"}, [](Call& c, Args& a) { c.rstd = a.y.data() + 2; }},   // stats in y
      {{rstd, "x"}, [](Call& c, Args&) { c.rstd = const_cast<float*>(c.x); }},
      {{"y", "gamma"}, [](Call& c, Args& a) { c.gamma = a.y.data(); }},
  };
  if (Centered(op)) {
    bad.push_back({{"mean", rstd}, [](Call& c, Args& a) { c.mean = a.rstd.data(); }});
    bad.push_back({{"y", "beta"}, [](Call& c, Args& a) { c.beta = a.y.data() + 3; }});
  }
  if (Fused(op)) {
    bad.push_back({{"sum", "y"}, [](Call& c, Args& a) { c.sum = a.y.data(); }});
    bad.push_back({{"sum", "x"}, [](Call& c, Args& a) { c.sum = a.x.data() + 1; }});
    bad.push_back({{"y", "residual"}, [](Call& c, Args& a) { c.res = a.y.data() + 4; }});
  }
  for (Bad& b : bad) {
    Args a;
    Call c(op, a);
    b.set(c, a);
    // x or residual moved into an output buffer makes that output's sentinel an
    // input value: only the status and message are checked then.
    SCOPED_TRACE(std::string(b.words[0]) + " vs " + b.words[1]);
    ASSERT_EQ(c.Run(), NK_ERR_OVERLAP) << nk_last_error();
    const std::string m = nk_last_error();
    EXPECT_EQ(m.rfind(Name(op) + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(b.words[0]), std::string::npos) << m;
    EXPECT_NE(m.find(b.words[1]), std::string::npos) << m;
  }
  // Only outputs are guarded: they were the sentinel before, so they still are.
  {
    Args a;
    Call c(op, a);
    c.rstd = a.y.data() + 2;
    ExpectFailure(c, a, NK_ERR_OVERLAP, {rstd, "y"});
  }
}

TEST_P(Validation, OrderOfChecks) {
  const Op op = GetParam();
  Args a;
  Call c(op, a);
  // Scalar before shape before NULL before overlap.
  c.eps = NAN;
  c.cols = 0;
  c.x = nullptr;
  c.rstd = a.y.data();
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_ARGUMENT);
  c.eps = 1e-5f;
  EXPECT_EQ(c.Run(), NK_ERR_INVALID_SHAPE);
  c.cols = kCols;
  EXPECT_EQ(c.Run(), NK_ERR_NULL_POINTER);
  c.x = a.x.data();
  EXPECT_EQ(c.Run(), NK_ERR_OVERLAP);
  EXPECT_TRUE(a.Untouched());
}

}  // namespace
}  // namespace nk_test
