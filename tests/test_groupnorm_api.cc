// SPDX-License-Identifier: Apache-2.0
// test_groupnorm_api.cc: every validation rule of the GroupNorm entry points: status, a
// message naming the function, the argument and its value, the order of checks (scalars,
// shapes with groups, NULL pointers, overlaps), and nothing written on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

#include "test_util.h"

namespace nk_test {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();

// Buffers of a small valid call: n 2, c 6, spatial 4, groups 2, so the statistics
// ([n * groups] = 4) are shorter than the per-channel tensors ([c] = 6). Outputs are
// NaN-filled.
struct Gn {
  static constexpr size_t n = 2, c = 6, spatial = 4, groups = 2, sets = n * groups,
                          elements = n * c * spatial;
  Buffer x{elements}, dy{elements}, gamma{c}, beta{c}, saved{2 * sets};    // inputs
  Buffer y{elements}, stats{2 * sets}, dx{elements}, dgamma{c}, dbeta{c};  // outputs
  Gn() {
    FillNormal(x, 1);
    FillNormal(dy, 2);
    FillNormal(gamma, 3, 1.0f, 0.25f);
    FillNormal(beta, 4);
    FillNormal(saved, 5, 1.0f, 0.1f);  // mean, then rstd
  }
  float* mean() { return stats.data(); }
  float* rstd() { return stats.data() + sets; }
  const float* saved_mean() const { return saved.data(); }
  const float* saved_rstd() const { return saved.data() + sets; }
  bool Untouched() const {
    for (const Buffer* b : {&y, &stats, &dx, &dgamma, &dbeta}) {
      for (size_t i = 0; i < b->size(); ++i) {
        if (!std::isnan((*b)[i])) return false;
      }
    }
    return true;
  }
};

// One forward call's arguments, a valid one until a test changes them.
struct Forward {
  size_t n = Gn::n, c = Gn::c, spatial = Gn::spatial, groups = Gn::groups;
  int layout = NK_LAYOUT_NCHW;
  const float *x, *gamma, *beta;
  float eps = 1e-5f;
  float *y, *mean, *rstd;
  explicit Forward(Gn& g)
      : x(g.x.data()),
        gamma(g.gamma.data()),
        beta(g.beta.data()),
        y(g.y.data()),
        mean(g.mean()),
        rstd(g.rstd()) {}
  nk_status Run() const {
    return nk_groupnorm_forward_f32(n, c, spatial, groups, static_cast<nk_layout>(layout),
                                    x, gamma, beta, eps, y, mean, rstd);
  }
};

struct Backward {
  size_t n = Gn::n, c = Gn::c, spatial = Gn::spatial, groups = Gn::groups;
  int layout = NK_LAYOUT_NHWC;
  const float *x, *dy, *mean, *rstd, *gamma;
  float *dx, *dgamma, *dbeta;
  explicit Backward(Gn& g)
      : x(g.x.data()),
        dy(g.dy.data()),
        mean(g.saved_mean()),
        rstd(g.saved_rstd()),
        gamma(g.gamma.data()),
        dx(g.dx.data()),
        dgamma(g.dgamma.data()),
        dbeta(g.dbeta.data()) {}
  nk_status Run() const {
    return nk_groupnorm_backward_f32(n, c, spatial, groups,
                                     static_cast<nk_layout>(layout), x, dy, mean, rstd,
                                     gamma, dx, dgamma, dbeta);
  }
};

constexpr const char* kForward = "nk_groupnorm_forward_f32";
constexpr const char* kBackward = "nk_groupnorm_backward_f32";

// Expects `status` with a message that starts with the function's name and holds
// `words`, and nothing written.
template <class Call>
void ExpectFailure(const Call& call, const Gn& g, nk_status status,
                   std::initializer_list<const char*> words) {
  const char* function = std::is_same<Call, Forward>::value ? kForward : kBackward;
  EXPECT_EQ(call.Run(), status) << nk_last_error();
  const std::string message = nk_last_error();
  EXPECT_EQ(message.rfind(std::string(function) + ": ", 0), 0u) << message;
  for (const char* w : words) {
    EXPECT_NE(message.find(w), std::string::npos) << message << " (want " << w << ")";
  }
  EXPECT_TRUE(g.Untouched());
}

TEST(GroupNormApi, ForwardScalars) {
  for (int layout : {2, -1}) {
    Gn g;
    Forward f(g);
    f.layout = layout;
    ExpectFailure(f, g, NK_ERR_INVALID_ARGUMENT,
                  {"layout", std::to_string(layout).c_str()});
  }
  for (float eps : {-1e-5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Gn g;
    Forward f(g);
    f.eps = eps;
    ExpectFailure(f, g, NK_ERR_INVALID_ARGUMENT, {"eps"});
  }
  Gn g;
  Forward f(g);
  f.eps = 0.0f;
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
}

// groups == 0 and groups not dividing c: a shape error naming both numbers, checked
// after the scalars and before pointers, also for an otherwise empty tensor.
template <class Call>
void ExpectGroupRules() {
  {
    Gn g;
    Call call(g);
    call.groups = 0;
    ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 0", "c is 6"});
    call.groups = 4;
    ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 4", "c = 6"});
    call.groups = 12;  // more groups than channels
    ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 12", "c = 6"});
    call.layout = 3;  // a bad scalar first
    ExpectFailure(call, g, NK_ERR_INVALID_ARGUMENT, {"layout"});
    call.layout = NK_LAYOUT_NCHW;
    call.x = nullptr;  // the shape before the pointer
    ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 12"});
  }
  for (size_t n : {0, 2}) {  // before the empty no-op; c == 0 too
    for (size_t c : {0, 6}) {
      Gn g;
      Call call(g);
      call.n = n, call.c = c, call.groups = 0;
      ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 0"});
    }
  }
  Gn g;
  Call call(g);
  call.n = 0, call.groups = 4;
  ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"groups is 4", "c = 6"});
  for (size_t groups : {1, 2, 3, 6}) {  // every divisor is valid
    call.n = Gn::n, call.groups = groups;
    EXPECT_EQ(call.Run(), NK_OK) << groups << ": " << nk_last_error();
  }
}

TEST(GroupNormApi, ForwardGroups) {
  ExpectGroupRules<Forward>();
  Gn g;
  Forward f(g);
  f.groups = 0;
  f.eps = -1.0f;  // eps before groups
  ExpectFailure(f, g, NK_ERR_INVALID_ARGUMENT, {"eps"});
}

TEST(GroupNormApi, BackwardGroups) { ExpectGroupRules<Backward>(); }

template <class Call>
void ExpectOverflowRules() {
  Gn g;
  Call call(g);
  call.n = kMax;
  ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"overflow"});
  call.n = kMax / 32;  // elements fit, bytes do not
  call.c = 6, call.spatial = 4;
  ExpectFailure(call, g, NK_ERR_INVALID_SHAPE, {"overflow"});
}

TEST(GroupNormApi, ForwardShapes) { ExpectOverflowRules<Forward>(); }
TEST(GroupNormApi, BackwardShapes) { ExpectOverflowRules<Backward>(); }

TEST(GroupNormApi, ForwardPointers) {
  {
    Gn g;
    Forward f(g);
    f.x = nullptr;
    ExpectFailure(f, g, NK_ERR_NULL_POINTER, {"x is NULL"});
  }
  {
    Gn g;
    Forward f(g);
    f.y = nullptr;
    ExpectFailure(f, g, NK_ERR_NULL_POINTER, {"y is NULL"});
  }
  // gamma, beta, mean and rstd are optional.
  Gn g;
  Forward f(g);
  f.gamma = f.beta = nullptr;
  f.mean = f.rstd = nullptr;
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, BackwardPointers) {
  struct Required {
    const char* message;
    void (*clear)(Backward&);
  };
  for (Required r : {Required{"x is NULL", [](Backward& b) { b.x = nullptr; }},
                     Required{"dy is NULL", [](Backward& b) { b.dy = nullptr; }},
                     Required{"mean is NULL", [](Backward& b) { b.mean = nullptr; }},
                     Required{"rstd is NULL", [](Backward& b) { b.rstd = nullptr; }},
                     Required{"dx is NULL", [](Backward& b) { b.dx = nullptr; }}}) {
    Gn g;
    Backward b(g);
    r.clear(b);
    ExpectFailure(b, g, NK_ERR_NULL_POINTER, {r.message});
  }
  Gn g;
  Backward b(g);
  b.gamma = nullptr;
  b.dgamma = b.dbeta = nullptr;
  EXPECT_EQ(b.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, ForwardOverlaps) {
  struct Bad {
    const char *out, *other;
    void (*set)(Forward&, Gn&);
  };
  for (Bad bad : {
           Bad{"y", "x", [](Forward&f, Gn&) { f.y = const_cast<float*>(f.x) + 1; }},
           Bad{"y", "beta", [](Forward&f, Gn&g) { f.beta = g.y.data() + 40; }},
           Bad{"y", "mean", [](Forward&f, Gn&g) { f.mean = g.y.data() + 3; }},
           Bad{"mean", "rstd", [](Forward&f, Gn&) { f.rstd = f.mean + 3; }},
           Bad{"mean", "gamma",
               [](Forward&f, Gn&) { f.mean = const_cast<float*>(f.gamma); }},
           Bad{"rstd", "x", [](Forward&f, Gn&) { f.rstd = const_cast<float*>(f.x) + 7; }},
       }) {
    Gn g;
    Forward f(g);
    bad.set(f, g);
    SCOPED_TRACE(std::string(bad.out) + " vs " + bad.other);
    ExpectFailure(f, g, NK_ERR_OVERLAP, {bad.out, bad.other, "overlaps"});
  }
  // Allowed: y == x (mean and rstd lie back to back in every call: [n * groups] each).
  Gn g;
  Forward f(g);
  f.y = g.x.data();
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, BackwardOverlaps) {
  struct Bad {
    const char *out, *other;
    void (*set)(Backward&, Gn&);
  };
  for (Bad bad : {
           Bad{"dx", "x", [](Backward&b, Gn&) { b.dx = const_cast<float*>(b.x); }},
           Bad{"dx", "dy", [](Backward&b, Gn&) { b.dx = const_cast<float*>(b.dy) + 1; }},
           Bad{"dx", "rstd", [](Backward&b, Gn&g) { b.rstd = g.dx.data() + 4; }},
           Bad{"dgamma", "dbeta", [](Backward&b, Gn&) { b.dbeta = b.dgamma; }},
           Bad{"dgamma", "mean",
               [](Backward&b, Gn&) { b.dgamma = const_cast<float*>(b.mean) + 3; }},
           Bad{"dgamma", "gamma",
               [](Backward&b, Gn&) { b.dgamma = const_cast<float*>(b.gamma); }},
           Bad{"dx", "dbeta", [](Backward&b, Gn&g) { b.dbeta = g.dx.data() + 2; }},
       }) {
    Gn g;
    Backward b(g);
    bad.set(b, g);
    SCOPED_TRACE(std::string(bad.out) + " vs " + bad.other);
    ExpectFailure(b, g, NK_ERR_OVERLAP, {bad.out, bad.other, "overlaps"});
  }
  // Allowed: dx == dy; dgamma right after mean's [n * groups].
  Gn g;
  Backward b(g);
  b.dx = g.dy.data();
  EXPECT_EQ(b.Run(), NK_OK) << nk_last_error();
  Buffer after(Gn::sets + Gn::c);
  std::copy(b.mean, b.mean + Gn::sets, after.data());
  b.mean = after.data();
  b.dgamma = after.data() + Gn::sets;
  EXPECT_EQ(b.Run(), NK_OK) << nk_last_error();
}

// Scalars, then shapes, then NULL pointers, then overlaps.
TEST(GroupNormApi, OrderOfChecks) {
  Gn g;
  Forward f(g);
  f.eps = NAN;
  f.n = kMax;
  f.x = nullptr;
  f.mean = g.y.data();
  ExpectFailure(f, g, NK_ERR_INVALID_ARGUMENT, {"eps"});
  f.eps = 1e-5f;
  ExpectFailure(f, g, NK_ERR_INVALID_SHAPE, {"overflow"});
  f.n = Gn::n;
  ExpectFailure(f, g, NK_ERR_NULL_POINTER, {"x is NULL"});
  f.x = g.x.data();
  ExpectFailure(f, g, NK_ERR_OVERLAP, {"y", "mean"});
  Backward b(g);
  b.layout = 9;
  b.groups = 5;
  b.dy = nullptr;
  b.dgamma = g.dx.data();
  ExpectFailure(b, g, NK_ERR_INVALID_ARGUMENT, {"layout"});
  b.layout = NK_LAYOUT_NCHW;
  ExpectFailure(b, g, NK_ERR_INVALID_SHAPE, {"groups is 5", "c = 6"});
  b.groups = 3;
  ExpectFailure(b, g, NK_ERR_NULL_POINTER, {"dy is NULL"});
  b.dy = g.dy.data();
  ExpectFailure(b, g, NK_ERR_OVERLAP, {"dx", "dgamma"});
}

}  // namespace
}  // namespace nk_test
