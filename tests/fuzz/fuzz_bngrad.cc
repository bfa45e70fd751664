// SPDX-License-Identifier: Apache-2.0
// fuzz_bngrad.cc: libFuzzer target over BatchNorm's backward C ABI: the whole backward
// and SyncBatchNorm's two steps, backward_reduce and backward_apply. The fuzz bytes
// choose the function, a small n x c x spatial shape (0 allowed; now and then NCHW
// planes of more than one chunk or piece, or a size that overflows), the layout (valid
// or not), ISA, threads, the optional arguments (gamma, dgamma, dbeta), a NULL
// required pointer, pointer offsets and aliasing (any argument moved onto another, by
// 0, 1, its length or any number of elements), apply's total_count (the shard's count
// or more, or fewer: refused), the saved statistics (fuzzed, or a forward's), apply's
// sums (fuzzed, or the shard's own) and the values (NaN, Inf, huge, tiny included).
// Checks: the status is the one c-abi.md's rules give, in their order, and a refusal's
// message names the function and what the rule names; a refused or empty call writes
// nothing (but reduce on an empty shard writes zero sums); an accepted call writes
// nothing but its outputs, a NaN reaches every output the formula takes it into, and
// channels where fp32 neither overflows nor underflows meet the design.md bound.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../reference.h"
#include "fuzz_util.h"
#include "normkernels.h"

namespace {

[[noreturn]] void Fail(const char* what) { nk_fuzz::Fail("fuzz_bngrad", what); }

using nk_fuzz::Filler;
using nk_fuzz::Value;

enum Op { kBackward, kReduce, kApply };
const char* const kOpName[] = {"nk_batchnorm_backward_f32",
                               "nk_batchnorm_backward_reduce_f32",
                               "nk_batchnorm_backward_apply_f32"};

// The arguments: tensors of n x c x spatial elements, then vectors of [c].
enum Arg {
  kX, kDy, kDx, kMean, kRstd, kGamma, kSumDy, kSumDyXhat, kDgamma, kDbeta, kArgs
};
const char* const kArgName[kArgs] = {"x",      "dy",          "dx",     "mean",
                                     "rstd",   "gamma",       "sum_dy", "sum_dy_xhat",
                                     "dgamma", "dbeta"};
bool Tensor(int a) { return a <= kDx; }
bool Optional(int a) { return a == kGamma || a == kDgamma || a == kDbeta; }

// Which arguments each function takes, and which of them it writes.
bool Takes(Op op, int a) {
  switch (op) {
    case kBackward: return a != kSumDy && a != kSumDyXhat;
    case kReduce: return a != kDx && a != kGamma && a != kDgamma && a != kDbeta;
    default: return a != kDgamma && a != kDbeta;
  }
}
bool Output(Op op, int a) {
  if (op == kReduce) return a == kSumDy || a == kSumDyXhat;
  return a == kDx || a == kDgamma || a == kDbeta;
}

// One call: which function, its shape, and where each argument lies in the arena.
struct Call {
  Op op = kBackward;
  size_t n = 0, c = 0, spatial = 0;
  int layout = 0;
  uint64_t total = 0;      // apply's total_count
  size_t at[kArgs] = {};   // arena index of each argument
  bool given[kArgs] = {};  // passed (else NULL)

  unsigned __int128 PerChannel() const {
    return static_cast<unsigned __int128>(n) * spatial;
  }
  // The sizes the C ABI accepts: n * spatial, the tensors' and c's bytes within size_t.
  bool Fits() const {
    const unsigned __int128 max = std::numeric_limits<size_t>::max();
    return PerChannel() <= max && PerChannel() * c <= max / sizeof(float) &&
           c <= max / sizeof(float);
  }
  size_t Count() const { return Fits() ? n * spatial : 0; }  // per channel
  size_t Len(int a) const {  // elements of an argument (none where sizes overflow)
    if (!Fits()) return 0;
    return Tensor(a) ? n * c * spatial : c;
  }
  bool Empty() const { return op == kReduce ? c == 0 : Len(kX) == 0; }
  size_t Index(size_t ci, size_t j) const {  // element j of channel ci
    const size_t ni = j / spatial, s = j - ni * spatial;
    return layout == NK_LAYOUT_NHWC ? (ni * spatial + s) * c + ci
                                    : (ni * c + ci) * spatial + s;
  }
  std::string Name() const { return kOpName[op]; }
  std::string ArgName(int a) const {  // as the function's parameter is named
    const bool saved = op == kBackward && (a == kMean || a == kRstd);
    return (saved ? "save_" : "") + std::string(kArgName[a]);
  }
  // Whether a and b share memory that they may not: an output overlaps the other
  // argument, and they are not dx and dy exactly.
  bool Clash(int a, int b) const {
    if (!given[a] || !given[b] || Len(a) == 0 || Len(b) == 0) return false;
    if (!Output(op, a) && !Output(op, b)) return false;
    if (at[a] >= at[b] + Len(b) || at[b] >= at[a] + Len(a)) return false;
    const bool pair = op != kReduce && std::min(a, b) == kDy && std::max(a, b) == kDx;
    return !pair || at[a] != at[b];
  }
};

// What c-abi.md's rules give, in their order: the layout; the sizes (n * spatial, the
// elements' and c's bytes within size_t; apply's total_count at least n * spatial);
// empty (reduce: c == 0, an empty shard writes zero sums); NULL required pointers
// (reduce: x and dy only for a non-empty shard); an output sharing memory (only dx and
// dy exactly may).
nk_status Expected(const Call& c) {
  if (c.layout != NK_LAYOUT_NCHW && c.layout != NK_LAYOUT_NHWC) {
    return NK_ERR_INVALID_ARGUMENT;
  }
  if (!c.Fits() || (c.op == kApply && c.total < c.PerChannel())) {
    return NK_ERR_INVALID_SHAPE;
  }
  if (c.Empty()) return NK_OK;
  for (int a = 0; a < kArgs; ++a) {
    const bool needed = c.op != kReduce || !Tensor(a) || c.Count() != 0;
    if (Takes(c.op, a) && !Optional(a) && !c.given[a] && needed) {
      return NK_ERR_NULL_POINTER;
    }
  }
  for (int a = 0; a < kArgs; ++a) {
    for (int b = a + 1; b < kArgs; ++b) {
      if (c.Clash(a, b)) return NK_ERR_OVERLAP;
    }
  }
  return NK_OK;
}

// A refusal's message: "function: " and then what the rule names (the layout, the
// total_count or an overflow, the NULL argument, an output and what it overlaps).
void CheckMessage(const Call& c, nk_status got) {
  const std::string msg = nk_last_error(), fn = c.Name() + ": ";
  if (msg.compare(0, fn.size(), fn) != 0) {
    std::fprintf(stderr, "%s refused with: %s\n", fn.c_str(), msg.c_str());
    Fail("the error message does not name the function");
  }
  const std::string rest = msg.substr(fn.size());
  const auto starts = [&](const std::string& s) {
    return rest.compare(0, s.size(), s) == 0;
  };
  bool ok = false;
  if (got == NK_ERR_INVALID_ARGUMENT) {
    ok = starts("layout is " + std::to_string(c.layout));
  } else if (got == NK_ERR_INVALID_SHAPE) {
    ok = c.Fits() ? starts("total_count is " + std::to_string(c.total))
                  : rest.find("overflow") != std::string::npos;
  } else if (got == NK_ERR_NULL_POINTER) {
    for (int a = 0; a < kArgs; ++a) {
      if (Takes(c.op, a) && !c.given[a]) ok |= rest == c.ArgName(a) + " is NULL";
    }
  } else if (got == NK_ERR_OVERLAP) {  // "<output> overlaps <other>[;| partially]..."
    const size_t verb = rest.find(" overlaps ");
    const size_t end = rest.find_first_of(" ;", verb + 10);
    for (int a = 0; a < kArgs && verb != std::string::npos; ++a) {
      for (int b = 0; b < kArgs; ++b) {
        ok |= Takes(c.op, a) && Takes(c.op, b) && Output(c.op, a) && c.Clash(a, b) &&
              rest.substr(0, verb) == c.ArgName(a) &&
              rest.substr(verb + 10, end - verb - 10) == c.ArgName(b);
      }
    }
  }
  if (!ok) {
    std::fprintf(stderr, "%s status %d: %s\n", fn.c_str(), got, msg.c_str());
    Fail("the error message does not name what the rule names");
  }
}

nk_status Invoke(const Call& c, float* arena) {
  const auto in = [&](int a) -> const float* {
    return c.given[a] ? arena + c.at[a] : nullptr;
  };
  const auto out = [&](int a) { return c.given[a] ? arena + c.at[a] : nullptr; };
  const nk_layout layout = static_cast<nk_layout>(c.layout);
  switch (c.op) {
    case kBackward:
      return nk_batchnorm_backward_f32(c.n, c.c, c.spatial, layout, in(kX), in(kDy),
                                       in(kMean), in(kRstd), in(kGamma), out(kDx),
                                       out(kDgamma), out(kDbeta));
    case kReduce:
      return nk_batchnorm_backward_reduce_f32(c.n, c.c, c.spatial, layout, in(kX),
                                              in(kDy), in(kMean), in(kRstd), out(kSumDy),
                                              out(kSumDyXhat));
    default:
      return nk_batchnorm_backward_apply_f32(c.n, c.c, c.spatial, layout, in(kX),
                                             in(kDy), in(kMean), in(kRstd), in(kGamma),
                                             c.total, in(kSumDy), in(kSumDyXhat),
                                             out(kDx));
  }
}

// One channel as the call sees it: its values, statistics and gamma, and apply's sums
// over every shard and total_count (the others: the channel's own sums and count).
struct Channel {
  size_t index = 0;
  std::vector<float> x, dy;
  float mean = 0, rstd = 0, gamma = 1, sum_dy = 0, sum_dy_xhat = 0;
  long double total = 0;
};

// The channels as the call sees them in the arena (an argument not given reads as
// zeros, gamma as ones: the call is refused, or does not read it).
std::vector<Channel> Gather(const Call& c, const std::vector<float>& arena) {
  const auto read = [&](int a, size_t i, float none) {
    return c.given[a] ? arena[c.at[a] + i] : none;
  };
  const size_t count = c.Count();
  std::vector<Channel> channels(c.Len(kMean));
  for (size_t ci = 0; ci < channels.size(); ++ci) {
    Channel& ch = channels[ci];
    ch.index = ci;
    ch.x.resize(count);
    ch.dy.resize(count);
    for (size_t j = 0; j < count; ++j) {
      const size_t e = c.Index(ci, j);
      ch.x[j] = read(kX, e, 0.0f);
      ch.dy[j] = read(kDy, e, 0.0f);
    }
    ch.mean = read(kMean, ci, 0.0f);
    ch.rstd = read(kRstd, ci, 0.0f);
    ch.gamma = read(kGamma, ci, 1.0f);
    if (c.op == kApply) {
      ch.sum_dy = read(kSumDy, ci, 0.0f);
      ch.sum_dy_xhat = read(kSumDyXhat, ci, 0.0f);
    }
    ch.total = c.op == kApply ? static_cast<long double>(c.total) : count;
  }
  return channels;
}

// Whether the bound is meaningful on a channel: it counts roundings, not overflow and
// underflow. The kernels form x_hat = (x - mean) * rstd, sum dy and dy * x_hat, and map
// dx = k * (dy - mean_dy - x_hat * mean_dy_xhat) with k = gamma * rstd and the means
// the sums / total, each rounded once (channelnorm_backward-inl.h, GradMap). Every
// value formed stays below FLT_MAX / 16 (with room for its sums: an x_hat past fp32,
// as rstd ~ 1e38 gives from |x - mean| > 2, is Inf in the kernel and finite in the
// reference), and every rounded one whose error later scales (x_hat, the terms
// dy * x_hat, mean_dy_xhat, k) is 0 or at least 2^-122: a subnormal's absolute error
// (2^-150) times rstd, dy or x_hat would exceed the bound's relative terms and its
// 1e-30. The one value dx rounds in between, dy - mean_dy - x_hat * mean_dy_xhat, may
// be subnormal where its terms are 0 or together at least 2^-122, as its error is then
// within their relative terms. Such channels are left out here, as in the forward.
bool ChannelInRange(Op op, const Channel& ch) {
  const long double lo = 0x1p-122L, hi = FLT_MAX / 16.0L;
  const auto small = [&](long double v) { return std::fabs(v) <= hi; };
  const auto sized = [&](long double v) {
    return v == 0 || (std::fabs(v) >= lo && std::fabs(v) <= hi);
  };
  const size_t m = ch.x.size();
  const long double r = ch.rstd, g = ch.gamma;
  if (!std::isfinite(ch.mean) || !std::isfinite(ch.rstd) || !std::isfinite(ch.gamma) ||
      !std::isfinite(ch.sum_dy) || !std::isfinite(ch.sum_dy_xhat)) {
    return false;
  }
  std::vector<long double> xhat(m);
  long double sum_dy = 0, sum_dy_xhat = 0, abs_dy = 0, abs_dy_xhat = 0;
  for (size_t j = 0; j < m; ++j) {
    if (!std::isfinite(ch.x[j]) || !std::isfinite(ch.dy[j])) return false;
    const long double xc = static_cast<long double>(ch.x[j]) - ch.mean, dy = ch.dy[j];
    xhat[j] = xc * r;
    if (!small(xc) || !sized(xhat[j]) || (op != kApply && !sized(dy * xhat[j]))) {
      return false;
    }
    sum_dy += dy;
    sum_dy_xhat += dy * xhat[j];
    abs_dy += std::fabs(dy);
    abs_dy_xhat += std::fabs(dy * xhat[j]);
  }
  // The sums the kernels form (apply is given them).
  if (op != kApply && (!small(abs_dy) || !small(abs_dy_xhat))) return false;
  if (op == kReduce) return true;
  if (op == kApply) {  // the sums as given
    sum_dy = ch.sum_dy;
    sum_dy_xhat = ch.sum_dy_xhat;
  }
  const long double k = g * r, mean_dy = sum_dy / ch.total,
                    mean_dy_xhat = sum_dy_xhat / ch.total;
  if (!sized(k) || !small(mean_dy) || !sized(mean_dy_xhat)) return false;
  for (size_t j = 0; j < m; ++j) {
    const long double terms = std::fabs(static_cast<long double>(ch.dy[j])) +
                              std::fabs(mean_dy) + std::fabs(xhat[j] * mean_dy_xhat);
    if (!sized(terms) || !small(k * terms)) return false;
  }
  return true;
}

// apply's dx from the given sums (taken as exact, as the statistics are): the
// design.md bound with mean|a| and mean|a * x_hat| replaced by the sums' own sizes,
// |gamma * sum_dy| / total and |gamma * sum_dy_xhat| / total.
nk_test::RowGradRef ReferenceApply(const Channel& ch) {
  nk_test::RowGradRef ref;
  const size_t m = ch.x.size();
  const long double r = ch.rstd, g = ch.gamma;
  const long double mean_a = g * ch.sum_dy / ch.total;
  const long double mean_axh = g * ch.sum_dy_xhat / ch.total;
  for (size_t j = 0; j < m; ++j) {
    const long double xhat = (ch.x[j] - static_cast<long double>(ch.mean)) * r;
    const long double a = g * ch.dy[j];
    ref.dx.push_back(r * (a - mean_a - xhat * mean_axh));
    ref.dx_bound.push_back(8 * nk_test::kU * nk_test::Lg(m) * std::fabs(r) *
                               (std::fabs(a) + std::fabs(mean_a) +
                                std::fabs(xhat) * std::fabs(mean_axh)) +
                           1e-30L);
  }
  return ref;
}

[[noreturn]] void FailChannel(const Call& c, const Channel& ch, const char* what) {
  std::fprintf(stderr,
               "%s n %zu c %zu spatial %zu layout %d, isa %s: channel %zu, mean %.9g "
               "rstd %.9g gamma %.9g, sum_dy %.9g sum_dy_xhat %.9g total %.0Lf\n"
               "  (x, dy):\n",
               c.Name().c_str(), c.n, c.c, c.spatial, c.layout, nk_get_isa(), ch.index,
               ch.mean, ch.rstd, ch.gamma, ch.sum_dy, ch.sum_dy_xhat, ch.total);
  for (size_t j = 0; j < ch.x.size() && j < 64; ++j) {
    std::fprintf(stderr, "  %.9g %.9g\n", ch.x[j], ch.dy[j]);
  }
  Fail(what);
}

// An output element against its reference and bound.
void CheckValue(const Call& c, const Channel& ch, const char* name, size_t j, float got,
                long double want, long double bound) {
  if (nk_test::Meets(got, want, bound)) return;
  std::fprintf(stderr, "%s element %zu: %.9g, reference %.12Lg, bound %.3Lg\n", name, j,
               got, want, bound);
  FailChannel(c, ch, "an output outside the bound");
}

// A NaN reaches every output the formula takes it into (c-abi.md: non-finite data is
// not an error; its channel's outputs are NaN or Inf as the formula gives). Whole
// backward and reduce: a NaN in dy reaches both sums, one in x, mean or rstd the sum
// of dy * x_hat, any of these or gamma every dx. Apply: one in x or dy reaches that
// dx, one in mean, rstd, gamma or the sums every dx.
void CheckNaN(const Call& c, const Channel& ch, const std::vector<float>& arena) {
  const auto expect = [&](bool nan, int a, size_t i) {
    if (nan && c.given[a] && !std::isnan(arena[c.at[a] + i])) {
      std::fprintf(stderr, "%s[%zu] is %.9g\n", kArgName[a], i, arena[c.at[a] + i]);
      FailChannel(c, ch, "a NaN did not reach an output that the formula takes it into");
    }
  };
  const size_t count = c.Count();
  const bool stats = std::isnan(ch.mean) || std::isnan(ch.rstd) || std::isnan(ch.gamma);
  if (c.op == kApply) {
    const bool all = stats || std::isnan(ch.sum_dy) || std::isnan(ch.sum_dy_xhat);
    for (size_t j = 0; j < count; ++j) {
      const bool own = std::isnan(ch.x[j]) || std::isnan(ch.dy[j]);
      expect(all || own, kDx, c.Index(ch.index, j));
    }
    return;
  }
  const auto any = [](const std::vector<float>& v) {
    return std::any_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
  };
  const bool in_dy = any(ch.dy);
  const bool in_xhat = any(ch.x) || std::isnan(ch.mean) || std::isnan(ch.rstd);
  expect(in_dy, c.op == kReduce ? kSumDy : kDbeta, ch.index);
  expect(in_dy || in_xhat, c.op == kReduce ? kSumDyXhat : kDgamma, ch.index);
  for (size_t j = 0; j < count && c.op == kBackward; ++j) {
    expect(in_dy || in_xhat || stats, kDx, c.Index(ch.index, j));
  }
}

// An accepted call's outputs of one channel: within the bound where it is in range.
void CheckChannel(const Call& c, const Channel& ch, const std::vector<float>& arena) {
  CheckNaN(c, ch, arena);
  if (!ChannelInRange(c.op, ch)) return;
  const size_t count = c.Count();
  const auto output = [&](int a, size_t i) { return arena[c.at[a] + i]; };
  if (c.op == kApply) {
    const nk_test::RowGradRef ref = ReferenceApply(ch);
    for (size_t j = 0; j < count; ++j) {
      CheckValue(c, ch, "dx", j, output(kDx, c.Index(ch.index, j)), ref.dx[j],
                 ref.dx_bound[j]);
    }
    return;
  }
  const std::vector<float> gamma(count, ch.gamma);
  const nk_test::RowGradRef ref = nk_test::ReferenceRowGrad(
      true, count, ch.x.data(), ch.dy.data(), nullptr, ch.mean, ch.rstd, gamma.data());
  long double dgamma = 0, dbeta = 0, abs_dgamma = 0, abs_dbeta = 0;
  for (size_t j = 0; j < count; ++j) {
    dgamma += ref.dgamma_term[j];
    abs_dgamma += std::fabs(ref.dgamma_term[j]);
    dbeta += ch.dy[j];
    abs_dbeta += std::fabs(ch.dy[j]);
    if (c.op == kBackward) {
      CheckValue(c, ch, "dx", j, output(kDx, c.Index(ch.index, j)), ref.dx[j],
                 ref.dx_bound[j]);
    }
  }
  const int sum_xhat = c.op == kReduce ? kSumDyXhat : kDgamma;
  const int sum = c.op == kReduce ? kSumDy : kDbeta;
  if (c.given[sum_xhat]) {
    CheckValue(c, ch, kArgName[sum_xhat], ch.index, output(sum_xhat, ch.index), dgamma,
               nk_test::BoundDgamma(count, abs_dgamma));
  }
  if (c.given[sum]) {
    CheckValue(c, ch, kArgName[sum], ch.index, output(sum, ch.index), dbeta,
               nk_test::BoundDbeta(count, abs_dbeta));
  }
}

// The shape: small (0 included) mostly; now and then the least that takes an NCHW path
// of its own (a plane of two chunks, planes in two pieces), or one dimension so large
// that the sizes overflow. (More threads and NHWC chunks take 64 Ki elements, too slow
// here: test_batchnorm_backward has them.)
void ChooseShape(FuzzedDataProvider& p, Call& c) {
  switch (p.ConsumeIntegralInRange<int>(0, 63)) {
    case 0:
      c.n = 1;
      c.c = 1;
      c.spatial = p.ConsumeIntegralInRange<size_t>(16385, 16400);
      break;
    case 1:
      c.n = p.ConsumeIntegralInRange<size_t>(432, 440);
      c.c = 1;
      c.spatial = 38;
      break;
    case 2: {
      const size_t max = std::numeric_limits<size_t>::max();
      const size_t huge[] = {max, max / 2 + 1, max / 4 + 1};
      c.n = p.ConsumeIntegralInRange<size_t>(0, 4);
      c.c = p.ConsumeIntegralInRange<size_t>(0, 4);
      c.spatial = p.ConsumeIntegralInRange<size_t>(0, 4);
      size_t* dims[] = {&c.n, &c.c, &c.spatial};
      *dims[p.ConsumeIntegralInRange<int>(0, 2)] = p.PickValueInArray(huge);
      break;
    }
    default:
      c.n = p.ConsumeIntegralInRange<size_t>(0, 4);
      c.c = p.ConsumeIntegralInRange<size_t>(0, 24);
      c.spatial = p.ConsumeIntegralInRange<size_t>(0, 40);
      break;
  }
}

// Which optional arguments are given, one required pointer NULL now and then, and
// apply's total_count: this shard's count (one shard), more (other shards), far more,
// or fewer (refused).
void ChooseArguments(FuzzedDataProvider& p, Call& c) {
  int required[kArgs], nrequired = 0;
  for (int a = 0; a < kArgs; ++a) {
    c.given[a] = Takes(c.op, a) && (!Optional(a) || p.ConsumeBool());
    if (Takes(c.op, a) && !Optional(a)) required[nrequired++] = a;
  }
  const int null_arg = p.ConsumeIntegralInRange<int>(0, 10 * nrequired - 1);  // 1 in 10
  if (null_arg < nrequired) c.given[required[null_arg]] = false;
  const uint64_t count = c.PerChannel() > UINT64_MAX
                             ? UINT64_MAX
                             : static_cast<uint64_t>(c.PerChannel());
  const uint64_t more =
      p.ConsumeIntegralInRange<uint64_t>(1, 3 * std::min<uint64_t>(count, 1u << 30) + 3);
  switch (p.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: c.total = count == 0 ? 0 : p.ConsumeIntegralInRange<uint64_t>(0, count - 1);
      break;
    case 1: c.total = p.ConsumeIntegralInRange<uint64_t>(count, UINT64_MAX); break;
    case 2: c.total = count > UINT64_MAX - more ? UINT64_MAX : count + more; break;
    default: c.total = count; break;
  }
}

// A move of argument `to` onto argument `onto`, `delta` elements from its start.
struct Move {
  int to, onto;
  long delta;
};

// Up to two moves (from the pairs worth trying first, or any), by 0, 1, just past
// either end, one element into either, or any amount.
std::vector<Move> ChooseMoves(FuzzedDataProvider& p, const Call& c) {
  std::vector<Move> moves(p.ConsumeIntegralInRange<int>(0, 2));
  for (Move& m : moves) {
    const bool first = p.ConsumeBool();  // of the two vector outputs
    const int out_a = c.op == kReduce ? kSumDy : kDgamma;
    const int out_b = c.op == kReduce ? kSumDyXhat : kDbeta;
    const int vector_out = first ? out_a : out_b, other_out = first ? out_b : out_a;
    const int vector = p.ConsumeIntegralInRange<int>(kMean, kSumDyXhat);
    switch (p.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: m = {kDx, kDy, 0}; break;  // in place
      case 1: m = {kDx, kX, 0}; break;
      case 2: m = {vector_out, p.ConsumeIntegralInRange<int>(kX, kDx), 0}; break;
      case 3: m = {vector_out, other_out, 0}; break;
      case 4: m = {vector_out, vector, 0}; break;
      case 5: m = {vector, kDx, 0}; break;  // statistics or sums inside dx
      default:
        m.to = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
        m.onto = p.ConsumeIntegralInRange<int>(0, kArgs - 1);
        break;
    }
    const long to = static_cast<long>(c.Len(m.to));
    const long onto = static_cast<long>(c.Len(m.onto));
    switch (p.ConsumeIntegralInRange<int>(0, 9)) {
      case 0: m.delta = 1; break;
      case 1: m.delta = -1; break;
      case 2: m.delta = onto; break;  // just after
      case 3: m.delta = -to; break;   // just before
      case 4: m.delta = onto - 1; break;
      case 5: m.delta = 1 - to; break;
      case 6: m.delta = p.ConsumeIntegralInRange<long>(-to - onto, to + onto); break;
      default: m.delta = 0; break;
    }
  }
  return moves;
}

// One arena: the arguments one after another, each at a small offset, then moved, with
// room before the first and after the last for two moves. NaN-filled (all bits set; by
// memset: cheaper than a loop under libFuzzer's instrumentation): an output left
// unwritten fails the bound.
void Place(FuzzedDataProvider& p, Call& c, const std::vector<Move>& moves,
           std::vector<float>& arena) {
  size_t longest = 0, max_delta = 0;
  for (int a = 0; a < kArgs; ++a) longest = std::max(longest, c.Len(a));
  for (const Move& m : moves) max_delta = std::max<size_t>(max_delta, std::labs(m.delta));
  const size_t room = 2 * max_delta + longest + 8;
  size_t end = room;
  for (int a = 0; a < kArgs; ++a) {
    c.at[a] = end + p.ConsumeIntegralInRange<size_t>(0, 3);
    end = c.at[a] + c.Len(a) + 4;
  }
  for (const Move& m : moves) {
    if (m.to != m.onto) c.at[m.to] = static_cast<size_t>(c.at[m.onto] + m.delta);
  }
  arena.resize(end + room);
  std::memset(arena.data(), 0xff, arena.size() * sizeof(float));
}

// The inputs' values, written in order (where inputs share memory, the later wins).
// Statistics: fuzzed, or the forward's (eps 1e-5) of the channel as written; apply's
// sums: fuzzed, or the channel's own.
void FillInputs(FuzzedDataProvider& p, const Call& c, std::vector<float>& arena) {
  for (int a : {kX, kDy, kGamma, kSumDy, kSumDyXhat}) {
    if (Output(c.op, a) || !c.given[a]) continue;
    Filler filler(p);
    for (size_t e = c.at[a]; e < c.at[a] + c.Len(a); ++e) arena[e] = filler.Next();
  }
  const auto put = [&](int a, size_t ci, long double v) {
    if (c.given[a]) arena[c.at[a] + ci] = static_cast<float>(v);
  };
  const size_t count = c.Count();
  const bool forward_stats = p.ConsumeBool() && count > 0;
  const std::vector<Channel> filled =
      forward_stats ? Gather(c, arena) : std::vector<Channel>();
  for (size_t ci = 0; ci < c.Len(kMean); ++ci) {
    float mean = Value(p), rstd = Value(p);
    if (forward_stats) {
      const nk_test::RowRef ref = nk_test::ReferenceRow(
          true, count, filled[ci].x.data(), nullptr, nullptr, nullptr, 1e-5f);
      mean = static_cast<float>(ref.mean);
      rstd = static_cast<float>(ref.rstd);
    }
    put(kMean, ci, mean);
    put(kRstd, ci, rstd);
  }
  if (c.op != kApply || count == 0 || !p.ConsumeBool()) return;
  for (const Channel& ch : Gather(c, arena)) {
    long double sum_dy = 0, sum_dy_xhat = 0;
    for (size_t j = 0; j < count; ++j) {
      sum_dy += ch.dy[j];
      sum_dy_xhat += ch.dy[j] * (ch.x[j] - static_cast<long double>(ch.mean)) * ch.rstd;
    }
    put(kSumDy, ch.index, sum_dy);
    put(kSumDyXhat, ch.index, sum_dy_xhat);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Call c;
  c.op = static_cast<Op>(p.ConsumeIntegralInRange<int>(0, 2));
  ChooseShape(p, c);
  const int bad_layouts[] = {2, -1, 100, INT_MIN, INT_MAX};
  c.layout = p.ConsumeIntegralInRange<int>(0, 15) == 0
                 ? p.PickValueInArray(bad_layouts)
                 : p.ConsumeIntegralInRange<int>(0, 1);
  nk_fuzz::SelectIsaAndThreads(p, "fuzz_bngrad");
  ChooseArguments(p, c);
  const std::vector<Move> moves = ChooseMoves(p, c);
  static std::vector<float> arena, before, rest;  // kept: fresh pages cost more
  Place(p, c, moves, arena);
  FillInputs(p, c, arena);

  const nk_status want = Expected(c);
  before = arena;
  const nk_status got = Invoke(c, arena.data());
  const std::string name = c.Name();
  if (got != want) {
    std::fprintf(stderr, "%s n %zu c %zu spatial %zu layout %d total %llu, moves %zu: "
                 "status %d, expected %d: %s\n", name.c_str(), c.n, c.c, c.spatial,
                 c.layout, static_cast<unsigned long long>(c.total), moves.size(), got,
                 want, got == NK_OK ? "" : nk_last_error());
    for (int a = 0; a < kArgs; ++a) {
      if (!Takes(c.op, a)) continue;
      std::fprintf(stderr, "  %s %s at %zu, %zu elements\n", c.ArgName(a).c_str(),
                   c.given[a] ? "given" : "NULL", c.at[a], c.Len(a));
    }
    Fail("status differs from the c-abi.md rules");
  }
  if (got != NK_OK) CheckMessage(c, got);
  if (got != NK_OK || c.Empty()) {
    if (std::memcmp(before.data(), arena.data(), arena.size() * sizeof(float)) != 0) {
      Fail("a refused or empty call wrote memory");
    }
    return 0;
  }
  // Accepted: nothing written but the outputs.
  rest = arena;  // the arena with the outputs' elements as before
  for (int a = 0; a < kArgs; ++a) {
    if (!Output(c.op, a) || !c.given[a]) continue;
    std::copy(before.begin() + c.at[a], before.begin() + c.at[a] + c.Len(a),
              rest.begin() + c.at[a]);
  }
  if (std::memcmp(before.data(), rest.data(), rest.size() * sizeof(float)) != 0) {
    size_t e = 0;
    while (std::memcmp(&before[e], &rest[e], sizeof(float)) == 0) ++e;
    std::fprintf(stderr, "%s n %zu c %zu spatial %zu: arena[%zu] written\n", name.c_str(),
                 c.n, c.c, c.spatial, e);
    Fail("an accepted call wrote outside its outputs");
  }
  if (c.Count() == 0) {  // reduce on an empty shard: sums of nothing
    for (size_t ci = 0; ci < c.c; ++ci) {
      if (arena[c.at[kSumDy] + ci] != 0.0f || arena[c.at[kSumDyXhat] + ci] != 0.0f) {
        Fail("reduce on an empty shard did not write zeros");
      }
    }
    return 0;
  }
  // Channels in range meet the bound; a NaN reaches what the formula takes it into.
  for (const Channel& ch : Gather(c, before)) CheckChannel(c, ch, arena);
  return 0;
}
