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
// ([n * groups] = 4) are shorter than the per-channel tensors ([c] = 6); room for up to
// n * c statistics (groups == c). Outputs are NaN-filled.
struct Gn {
  static constexpr size_t n = 2, c = 6, spatial = 4, groups = 2, sets = n * groups,
                          elements = n * c * spatial;
  Buffer x{elements}, dy{elements}, gamma{c}, beta{c}, saved{2 * n * c};    // inputs
  Buffer y{elements}, stats{2 * n * c}, dx{elements}, dgamma{c}, dbeta{c};  // outputs
  Gn() {
    FillNormal(x, 1);
    FillNormal(dy, 2);
    FillNormal(gamma, 3, 1.0f, 0.25f);
    FillNormal(beta, 4);
    FillNormal(saved, 5, 1.0f, 0.1f);  // mean, then rstd
  }
  float* mean() { return stats.data(); }
  float* rstd() { return stats.data() + n * c; }
  const float* saved_mean() const { return saved.data(); }
  const float* saved_rstd() const { return saved.data() + n * c; }
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

// A change to the valid call that it must refuse: `set` changes one argument; the
// message names `first` and (unless nullptr) `second`.
template <class Call>
struct Refused {
  const char *first, *second;
  void (*set)(Call& call, Gn& g);
};

template <class Call>
void ExpectRefused(nk_status status, std::initializer_list<Refused<Call>> changes) {
  for (const Refused<Call>& r : changes) {
    Gn g;
    Call call(g);
    r.set(call, g);
    SCOPED_TRACE(std::string(r.first) + " " + (r.second ? r.second : ""));
    if (r.second) {
      ExpectFailure(call, g, status, {r.first, r.second});
    } else {
      ExpectFailure(call, g, status, {r.first});
    }
  }
}

TEST(GroupNormApi, ForwardPointers) {
  using R = Refused<Forward>;
  ExpectRefused<Forward>(
      NK_ERR_NULL_POINTER,
      {R{"x is NULL", nullptr, [](Forward& f, Gn&) { f.x = nullptr; }},
       R{"y is NULL", nullptr, [](Forward& f, Gn&) { f.y = nullptr; }}});
  // gamma, beta, mean and rstd are optional.
  Gn g;
  Forward f(g);
  f.gamma = f.beta = nullptr;
  f.mean = f.rstd = nullptr;
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, BackwardPointers) {
  using R = Refused<Backward>;
  ExpectRefused<Backward>(
      NK_ERR_NULL_POINTER,
      {R{"x is NULL", nullptr, [](Backward& b, Gn&) { b.x = nullptr; }},
       R{"dy is NULL", nullptr, [](Backward& b, Gn&) { b.dy = nullptr; }},
       R{"mean is NULL", nullptr, [](Backward& b, Gn&) { b.mean = nullptr; }},
       R{"rstd is NULL", nullptr, [](Backward& b, Gn&) { b.rstd = nullptr; }},
       R{"dx is NULL", nullptr, [](Backward& b, Gn&) { b.dx = nullptr; }}});
  // gamma, dgamma and dbeta are optional.
  Gn g;
  Backward b(g);
  b.gamma = nullptr;
  b.dgamma = b.dbeta = nullptr;
  EXPECT_EQ(b.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, ForwardOverlaps) {
  using O = Refused<Forward>;  // the output first
  ExpectRefused<Forward>(
      NK_ERR_OVERLAP,
      {
          O{"y", "x", [](Forward& f, Gn&) { f.y = const_cast<float*>(f.x) + 1; }},
          O{"y", "beta", [](Forward& f, Gn& g) { f.beta = g.y.data() + 40; }},
          O{"y", "mean", [](Forward& f, Gn& g) { f.mean = g.y.data() + 3; }},
          O{"mean", "rstd", [](Forward& f, Gn&) { f.rstd = f.mean + 3; }},
          O{"mean", "gamma",
            [](Forward& f, Gn&) { f.mean = const_cast<float*>(f.gamma); }},
          O{"rstd", "x", [](Forward& f, Gn&) { f.rstd = const_cast<float*>(f.x) + 7; }},
      });
  // Allowed: y == x; mean and rstd back to back ([n * groups] each, not [c]).
  Gn g;
  Forward f(g);
  f.y = g.x.data();
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
  f.rstd = f.mean + Gn::sets;
  EXPECT_EQ(f.Run(), NK_OK) << nk_last_error();
}

TEST(GroupNormApi, BackwardOverlaps) {
  using O = Refused<Backward>;
  ExpectRefused<Backward>(
      NK_ERR_OVERLAP,
      {
          O{"dx", "x", [](Backward& b, Gn&) { b.dx = const_cast<float*>(b.x); }},
          O{"dx", "dy", [](Backward& b, Gn&) { b.dx = const_cast<float*>(b.dy) + 1; }},
          O{"dx", "rstd", [](Backward& b, Gn& g) { b.rstd = g.dx.data() + 4; }},
          O{"dgamma", "dbeta", [](Backward& b, Gn&) { b.dbeta = b.dgamma; }},
          O{"dgamma", "mean",
            [](Backward& b, Gn&) { b.dgamma = const_cast<float*>(b.mean) + 3; }},
          O{"dgamma", "gamma",
            [](Backward& b, Gn&) { b.dgamma = const_cast<float*>(b.gamma); }},
          O{"dx", "dbeta", [](Backward& b, Gn& g) { b.dbeta = g.dx.data() + 2; }},
      });
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
