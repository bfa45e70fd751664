// SPDX-License-Identifier: Apache-2.0
// fuzz_groupnorm.cc: libFuzzer target over GroupNorm's C ABI (forward and backward;
// InstanceNorm is groups == c). The fuzz bytes choose the function, a small n x c x
// spatial shape (0 allowed; now and then one whose size overflows), the group count
// (mostly a divisor of c; also 0 or one that does not divide it), the layout (valid or
// not), eps, ISA, threads, the optional arguments, a NULL required pointer, aliasing
// (an argument moved onto another, by 0, 1 or any number of elements), the saved
// statistics of the backward (a forward's, or fuzzed) and the values (NaN, Inf, huge,
// tiny included). Checks: the status is the one c-abi.md's rules give, in their order,
// and a refusal's message names the function and, for a NULL, the argument; a refused
// or empty call writes nothing; an accepted call writes nothing but its outputs, and
// sets (channels, for dgamma / dbeta) of finite data in fp32's range meet the design.md
// bound.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_groupnorm", what); }

using nk_fuzz::Filler;
using nk_fuzz::Value;

enum Op { kForward, kBackward };
const char* const kOpName[] = {"nk_groupnorm_forward_f32", "nk_groupnorm_backward_f32"};

// The arguments: tensors of n x c x spatial elements, [c] parameters, [n * groups]
// statistics. kOut is the forward's y and the backward's dx.
enum Arg { kX, kDy, kOut, kGamma, kBeta, kMean, kRstd, kDgamma, kDbeta, kArgs };
const char* const kArgName[2][kArgs] = {
    {"x", "dy", "y", "gamma", "beta", "mean", "rstd", "dgamma", "dbeta"},
    {"x", "dy", "dx", "gamma", "beta", "mean", "rstd", "dgamma", "dbeta"}};

bool Takes(Op op, int a) {
  if (op == kForward) return a != kDy && a != kDgamma && a != kDbeta;
  return a != kBeta;
}
bool Output(Op op, int a) {
  if (op == kForward) return a == kOut || a == kMean || a == kRstd;
  return a == kOut || a == kDgamma || a == kDbeta;
}
bool Optional(Op op, int a) {
  if (op == kForward) return a == kGamma || a == kBeta || a == kMean || a == kRstd;
  return a == kGamma || a == kDgamma || a == kDbeta;
}

struct Call {
  Op op = kForward;
  size_t n = 0, c = 0, spatial = 0, groups = 0;
  int layout = 0;
  float eps = 1e-5f;
  size_t at[kArgs] = {};   // arena index of each argument
  bool given[kArgs] = {};  // passed (else NULL)

  bool Fits() const {
    const unsigned __int128 max = std::numeric_limits<size_t>::max();
    const unsigned __int128 per_channel = static_cast<unsigned __int128>(n) * spatial;
    return per_channel <= max && per_channel * c <= max / sizeof(float);
  }
  bool GroupsValid() const { return groups != 0 && c % groups == 0; }
  size_t Elements() const { return Fits() ? n * c * spatial : 0; }
  size_t Sets() const { return GroupsValid() && Elements() != 0 ? n * groups : 0; }
  size_t SetSize() const { return c / groups * spatial; }
  size_t Len(int a) const {
    if (a <= kOut) return Elements();
    if (a == kMean || a == kRstd) return Sets();
    return Elements() != 0 ? c : 0;
  }
  // Element j (channel by channel) of set s = sample * groups + group.
  size_t Index(size_t s, size_t j) const {
    const size_t ni = s / groups, ch = s % groups * (c / groups) + j / spatial;
    const size_t p = j % spatial;
    return layout == NK_LAYOUT_NHWC ? (ni * spatial + p) * c + ch
                                    : (ni * c + ch) * spatial + p;
  }
  size_t ChannelOf(size_t s, size_t j) const {
    return s % groups * (c / groups) + j / spatial;
  }
  // An output sharing memory with another argument, other than the aliasing pair
  // (y == x, dx == dy) exactly.
  bool Clash(int a, int b) const {
    if (!Takes(op, a) || !Takes(op, b) || !given[a] || !given[b]) return false;
    if (Len(a) == 0 || Len(b) == 0 || (!Output(op, a) && !Output(op, b))) return false;
    if (at[a] >= at[b] + Len(b) || at[b] >= at[a] + Len(a)) return false;
    const int pair = op == kForward ? kX : kDy;
    const bool allowed = std::min(a, b) == std::min(pair, +kOut) &&
                         std::max(a, b) == std::max(pair, +kOut);
    return !allowed || at[a] != at[b];
  }
};

// c-abi.md's order: the layout and eps (forward) -> the shape (size, then groups) ->
// empty -> NULL required pointers -> overlaps.
nk_status Expected(const Call& c) {
  if (c.layout != NK_LAYOUT_NCHW && c.layout != NK_LAYOUT_NHWC) {
    return NK_ERR_INVALID_ARGUMENT;
  }
  if (c.op == kForward && (!std::isfinite(c.eps) || c.eps < 0)) {
    return NK_ERR_INVALID_ARGUMENT;
  }
  if (!c.Fits() || !c.GroupsValid()) return NK_ERR_INVALID_SHAPE;
  if (c.Elements() == 0) return NK_OK;
  for (int a = 0; a < kArgs; ++a) {
    if (Takes(c.op, a) && !Optional(c.op, a) && !c.given[a]) return NK_ERR_NULL_POINTER;
  }
  for (int a = 0; a < kArgs; ++a) {
    for (int b = a + 1; b < kArgs; ++b) {
      if (c.Clash(a, b)) return NK_ERR_OVERLAP;
    }
  }
  return NK_OK;
}

void CheckMessage(const Call& c, nk_status got) {
  const std::string msg = nk_last_error(), fn = std::string(kOpName[c.op]) + ": ";
  if (msg.compare(0, fn.size(), fn) != 0) {
    std::fprintf(stderr, "%s refused with: %s\n", fn.c_str(), msg.c_str());
    Fail("the error message does not name the function");
  }
  if (got != NK_ERR_NULL_POINTER) return;
  bool named = false;
  for (int a = 0; a < kArgs; ++a) {
    named |= Takes(c.op, a) && !c.given[a] &&
             msg.substr(fn.size()) == std::string(kArgName[c.op][a]) + " is NULL";
  }
  if (!named) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    Fail("a NULL refusal does not name the argument");
  }
}

nk_status Invoke(const Call& c, float* arena) {
  const auto p = [&](int a) { return c.given[a] ? arena + c.at[a] : nullptr; };
  const nk_layout layout = static_cast<nk_layout>(c.layout);
  if (c.op == kForward) {
    return nk_groupnorm_forward_f32(c.n, c.c, c.spatial, c.groups, layout, p(kX),
                                    p(kGamma), p(kBeta), c.eps, p(kOut), p(kMean),
                                    p(kRstd));
  }
  return nk_groupnorm_backward_f32(c.n, c.c, c.spatial, c.groups, layout, p(kX), p(kDy),
                                   p(kMean), p(kRstd), p(kGamma), p(kOut), p(kDgamma),
                                   p(kDbeta));
}

bool Finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
}

[[noreturn]] void FailSet(const Call& c, size_t s, const char* what, size_t j, float got,
                          long double want, long double bound) {
  std::fprintf(stderr,
               "%s n %zu c %zu spatial %zu groups %zu layout %d eps %g, isa %s: set %zu "
               "element %zu: %.9g, reference %.12Lg, bound %.3Lg\n",
               kOpName[c.op], c.n, c.c, c.spatial, c.groups, c.layout, c.eps,
               nk_get_isa(), s, j, got, want, bound);
  Fail(what);
}

// The forward's outputs of every set of finite data whose results stay inside fp32.
void CheckForward(const Call& c, const std::vector<float>& in,
                  const std::vector<float>& arena) {
  if (c.eps == 0.0f) return;  // a constant set is then Inf / NaN, as the formula gives
  const size_t m = c.SetSize();
  const long double edge = FLT_MAX;
  for (size_t s = 0; s < c.Sets(); ++s) {
    std::vector<float> v(m), g(m, 1.0f), b(m, 0.0f);
    for (size_t j = 0; j < m; ++j) {
      const size_t ch = c.ChannelOf(s, j);
      v[j] = in[c.at[kX] + c.Index(s, j)];
      if (c.given[kGamma]) g[j] = in[c.at[kGamma] + ch];
      if (c.given[kBeta]) b[j] = in[c.at[kBeta] + ch];
    }
    if (!Finite(v) || !Finite(g) || !Finite(b)) continue;
    const nk_test::RowRef ref =
        nk_test::ReferenceRow(true, m, v.data(), nullptr, g.data(), b.data(), c.eps);
    if (c.given[kMean] && c.given[kRstd]) {
      const float mean = arena[c.at[kMean] + s], rstd = arena[c.at[kRstd] + s];
      const long double bm = nk_test::BoundMean(m, ref), br = nk_test::BoundRstd(m, ref);
      if (!nk_test::MeetsStat(mean, ref.mean, bm)) {
        FailSet(c, s, "mean outside the bound", 0, mean, ref.mean, bm);
      }
      if (!nk_test::MeetsStat(rstd, ref.rstd, br)) {
        FailSet(c, s, "rstd outside the bound", 0, rstd, ref.rstd, br);
      }
    }
    for (size_t j = 0; j < m; ++j) {
      const long double bound = nk_test::BoundY(m, ref, j, g[j], b[j]);
      // Results at the edge of fp32 may round to an infinity, and so may the
      // per-channel factor rstd * gamma the header documents.
      if (std::fabs(ref.y[j]) + bound >= edge ||
          std::fabs(ref.xhat[j] * g[j]) + bound >= edge ||
          std::fabs(g[j]) * ref.rstd + std::fabs(b[j]) >= edge) {
        continue;
      }
      const float y = arena[c.at[kOut] + c.Index(s, j)];
      if (!nk_test::Meets(y, ref.y[j], bound)) {
        FailSet(c, s, "y outside the bound", j, y, ref.y[j], bound);
      }
    }
  }
}

// Whether the bound is meaningful for set s of the backward: it counts roundings, not
// overflow or underflow (as fuzz_bngrad's ChannelInRange): every value the kernel
// forms below FLT_MAX / 16 (its channels' sums of dy and dy * x_hat too, formed before
// gamma weights them), and those whose error later scales (x_hat, dy * x_hat, the
// means, gamma * rstd) 0 or at least 2^-122.
bool SetInRange(const std::vector<float>& x, const std::vector<float>& dy,
                const std::vector<float>& g, float mean, float rstd) {
  const long double lo = 0x1p-122L, hi = FLT_MAX / 16.0L;
  const auto small = [&](long double v) { return std::fabs(v) <= hi; };
  const auto sized = [&](long double v) {
    return v == 0 || (std::fabs(v) >= lo && std::fabs(v) <= hi);
  };
  if (!std::isfinite(mean) || !std::isfinite(rstd) || !Finite(x) || !Finite(dy) ||
      !Finite(g)) {
    return false;
  }
  const size_t m = x.size();
  std::vector<long double> xhat(m);
  long double sum_a = 0, sum_axh = 0, abs_a = 0, abs_axh = 0, abs_dy = 0, abs_dyxh = 0;
  for (size_t j = 0; j < m; ++j) {
    const long double xc = static_cast<long double>(x[j]) - mean;
    xhat[j] = xc * rstd;
    const long double a = static_cast<long double>(g[j]) * dy[j];
    if (!small(xc) || !sized(xhat[j]) || !sized(a) || !sized(a * xhat[j]) ||
        !sized(dy[j] * xhat[j]) || !sized(g[j] * static_cast<long double>(rstd))) {
      return false;
    }
    sum_a += a;
    sum_axh += a * xhat[j];
    abs_a += std::fabs(a);
    abs_axh += std::fabs(a * xhat[j]);
    abs_dy += std::fabs(static_cast<long double>(dy[j]));
    abs_dyxh += std::fabs(dy[j] * xhat[j]);
  }
  if (!small(abs_a) || !small(abs_axh) || !small(abs_dy) || !small(abs_dyxh) ||
      !sized(sum_a / m) || !sized(sum_axh / m)) {
    return false;
  }
  for (size_t j = 0; j < m; ++j) {
    const long double terms = std::fabs(static_cast<long double>(g[j]) * dy[j]) +
                              std::fabs(sum_a / m) + std::fabs(xhat[j] * sum_axh / m);
    if (!sized(terms) || !small(rstd * terms)) return false;
  }
  return true;
}

// The backward's dx of every set in range, and dgamma / dbeta of every channel whose
// sets all are.
void CheckBackward(const Call& c, const std::vector<float>& in,
                   const std::vector<float>& arena) {
  const size_t m = c.SetSize();
  std::vector<char> channel_ok(c.c, 1);
  std::vector<long double> dgamma(c.c), dbeta(c.c), abs_dgamma(c.c), abs_dbeta(c.c);
  for (size_t s = 0; s < c.Sets(); ++s) {
    std::vector<float> x(m), dy(m), g(m, 1.0f);
    for (size_t j = 0; j < m; ++j) {
      x[j] = in[c.at[kX] + c.Index(s, j)];
      dy[j] = in[c.at[kDy] + c.Index(s, j)];
      if (c.given[kGamma]) g[j] = in[c.at[kGamma] + c.ChannelOf(s, j)];
    }
    const float mean = in[c.at[kMean] + s], rstd = in[c.at[kRstd] + s];
    if (!SetInRange(x, dy, g, mean, rstd)) {
      for (size_t j = 0; j < m; j += c.spatial) channel_ok[c.ChannelOf(s, j)] = 0;
      continue;
    }
    const nk_test::RowGradRef ref = nk_test::ReferenceRowGrad(
        true, m, x.data(), dy.data(), nullptr, mean, rstd, g.data());
    for (size_t j = 0; j < m; ++j) {
      const size_t ch = c.ChannelOf(s, j);
      dgamma[ch] += ref.dgamma_term[j];
      abs_dgamma[ch] += std::fabs(ref.dgamma_term[j]);
      dbeta[ch] += dy[j];
      abs_dbeta[ch] += std::fabs(dy[j]);
      const float dx = arena[c.at[kOut] + c.Index(s, j)];
      if (!nk_test::Meets(dx, ref.dx[j], ref.dx_bound[j])) {
        FailSet(c, s, "dx outside the bound", j, dx, ref.dx[j], ref.dx_bound[j]);
      }
    }
  }
  const size_t count = c.n * c.spatial;  // terms per channel
  for (size_t ch = 0; ch < c.c; ++ch) {
    if (!channel_ok[ch] || abs_dgamma[ch] > FLT_MAX / 16 ||
        abs_dbeta[ch] > FLT_MAX / 16) {
      continue;
    }
    const auto check = [&](int arg, const char* what, long double want,
                           long double bound) {
      if (!c.given[arg]) return;
      const float got = arena[c.at[arg] + ch];
      if (!nk_test::Meets(got, want, bound)) FailSet(c, ch, what, 0, got, want, bound);
    };
    check(kDgamma, "dgamma outside the bound (set = channel)", dgamma[ch],
          nk_test::BoundDgamma(count, abs_dgamma[ch]));
    check(kDbeta, "dbeta outside the bound (set = channel)", dbeta[ch],
          nk_test::BoundDbeta(count, abs_dbeta[ch]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Call c;
  c.op = p.ConsumeBool() ? kBackward : kForward;
  c.n = p.ConsumeIntegralInRange<size_t>(0, 4);
  c.c = p.ConsumeIntegralInRange<size_t>(0, 24);
  c.spatial = p.ConsumeIntegralInRange<size_t>(0, 40);
  if (p.ConsumeIntegralInRange<int>(0, 31) == 0) {  // a size that overflows
    c.n = std::numeric_limits<size_t>::max() / 3;
    c.spatial = p.ConsumeIntegralInRange<size_t>(1, 5);
  }
  switch (p.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      c.groups = 0;
      break;
    case 1:
      c.groups = p.ConsumeIntegralInRange<size_t>(1, 30);
      break;  // any
    case 2:
      c.groups = c.c;
      break;    // InstanceNorm
    default: {  // a divisor of c
      std::vector<size_t> divisors;
      for (size_t d = 1; d <= c.c; ++d) {
        if (c.c % d == 0) divisors.push_back(d);
      }
      c.groups = divisors.empty()
                     ? 1
                     : divisors[p.ConsumeIntegralInRange<size_t>(0, divisors.size() - 1)];
    }
  }
  c.layout =
      p.ConsumeIntegralInRange<int>(0, 15) == 0 ? 2 : p.ConsumeIntegralInRange<int>(0, 1);
  switch (p.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      c.eps = 0.0f;
      break;
    case 1:
      c.eps = NAN;
      break;
    case 2:
      c.eps = -1e-3f;
      break;
    case 3:
      c.eps = INFINITY;
      break;
    default:
      c.eps = 1e-5f;
  }
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_groupnorm");

  // Each argument in its own slot of the arena, at a fuzzed offset; optional ones given
  // or not; now and then a required one NULL, or one moved onto another.
  const size_t elements = c.Elements(), sets = c.Sets();
  const size_t slot = std::max({elements, c.Len(kGamma), sets}) + 8;
  std::vector<float> arena(kArgs * slot + 8, 12345.0f);
  for (int a = 0; a < kArgs; ++a) {
    c.at[a] = a * slot + p.ConsumeIntegralInRange<size_t>(0, 3);
    c.given[a] = Takes(c.op, a) && (!Optional(c.op, a) || p.ConsumeBool());
  }
  if (p.ConsumeIntegralInRange<int>(0, 15) == 0) {
    const int a = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
    if (!Optional(c.op, a)) c.given[a] = false;
  }
  if (p.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const int a = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
    const int b = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
    const size_t shift = p.ConsumeIntegralInRange<int>(0, 2) == 0
                             ? p.ConsumeIntegralInRange<size_t>(0, slot)
                             : p.ConsumeIntegralInRange<size_t>(0, 1);
    if (a != b) c.at[a] = std::min(c.at[b] + shift, arena.size() - slot);
  }

  // Values: x and dy from the filler, parameters fuzzed; the backward's statistics a
  // forward's (each set's long-double mean and rstd, rounded), or fuzzed.
  Filler fill(p);
  const bool from_forward = p.ConsumeIntegralInRange<int>(0, 3) != 0;
  for (size_t i = 0; i < elements; ++i) {
    arena[c.at[kX] + i] = fill.Next();
    arena[c.at[kDy] + i] = fill.Next();
  }
  for (size_t i = 0; i < c.Len(kGamma); ++i) {
    arena[c.at[kGamma] + i] = Value(p);
    arena[c.at[kBeta] + i] = Value(p);
  }
  if (c.op == kBackward) {
    for (size_t s = 0; s < sets; ++s) {
      float mean = Value(p), rstd = std::fabs(Value(p));
      if (from_forward && elements != 0) {
        std::vector<float> v(c.SetSize());
        for (size_t j = 0; j < v.size(); ++j) v[j] = arena[c.at[kX] + c.Index(s, j)];
        const nk_test::RowRef ref = nk_test::ReferenceRow(
            true, v.size(), v.data(), nullptr, nullptr, nullptr, 1e-5f);
        mean = static_cast<float>(ref.mean);
        rstd = static_cast<float>(ref.rstd);
      }
      arena[c.at[kMean] + s] = mean;
      arena[c.at[kRstd] + s] = rstd;
    }
  }

  const nk_status want = Expected(c);
  const std::vector<float> before(arena);
  const nk_status got = Invoke(c, arena.data());
  if (got != want) {
    std::fprintf(stderr,
                 "%s n %zu c %zu spatial %zu groups %zu layout %d eps %g: status %d, "
                 "expected %d (%s)\n",
                 kOpName[c.op], c.n, c.c, c.spatial, c.groups, c.layout, c.eps, got, want,
                 nk_last_error());
    Fail("status differs from the c-abi.md rules");
  }
  if (got != NK_OK) CheckMessage(c, got);
  // Nothing written but the outputs, and nothing at all by a refused or empty call.
  std::vector<char> written(arena.size(), 0);
  if (got == NK_OK && elements != 0) {
    for (int a = 0; a < kArgs; ++a) {
      if (!Output(c.op, a) || !c.given[a]) continue;
      std::fill(written.begin() + c.at[a], written.begin() + c.at[a] + c.Len(a), 1);
    }
  }
  for (size_t i = 0; i < arena.size(); ++i) {
    if (!written[i] && std::memcmp(&arena[i], &before[i], sizeof(float)) != 0) {
      std::fprintf(stderr, "%s: arena[%zu] changed\n", kOpName[c.op], i);
      Fail("a call wrote memory that is not its output");
    }
  }
  if (got != NK_OK || elements == 0) return 0;
  if (c.op == kForward) {
    CheckForward(c, before, arena);
  } else {
    CheckBackward(c, before, arena);
  }
  return 0;
}
