// SPDX-License-Identifier: Apache-2.0
// batchnorm_case.h: runs one BatchNorm training or inference call (either layout, any
// optional argument, alignment and aliasing) and checks every output against the
// long-double reference of each channel within the design.md bound.
#ifndef NK_TESTS_BATCHNORM_CASE_H_
#define NK_TESTS_BATCHNORM_CASE_H_

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"
#include "test_util.h"

namespace nk_test {

struct BnCase {
  size_t n = 2, c = 3, spatial = 5;
  nk_layout layout = NK_LAYOUT_NCHW;
  bool training = true;
  bool gamma = true, beta = true;
  bool running = true;  // running_mean / running_var given (training)
  bool save = true;     // save_mean / save_rstd wanted (training)
  bool in_place = false;
  size_t misalign = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;
  // Fills x [n][c][spatial] or [n][spatial][c]; default N(0, 1) per channel shifted
  // by the channel index.
  std::function<void(Buffer& x)> fill;

  size_t count() const { return n * spatial; }
  size_t elements() const { return n * c * spatial; }
  // Element j (0 <= j < count) of channel ci.
  size_t Index(size_t ci, size_t j) const {
    const size_t ni = j / spatial, s = j % spatial;
    return layout == NK_LAYOUT_NCHW ? (ni * c + ci) * spatial + s
                                    : (ni * spatial + s) * c + ci;
  }
  std::string Describe() const {
    std::ostringstream os;
    os << (training ? "training" : "inference") << " n=" << n << " c=" << c
       << " spatial=" << spatial << (layout == NK_LAYOUT_NCHW ? " NCHW" : " NHWC")
       << " gamma=" << gamma << " beta=" << beta << " running=" << running
       << " save=" << save << " in_place=" << in_place << " misalign=" << misalign
       << " eps=" << eps << " isa=" << nk_get_isa()
       << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

// Inputs and outputs of one call, as the caller sees them afterwards.
struct BnRun {
  std::vector<float> x, gamma, beta;
  std::vector<float> mean_in, var_in;           // inference statistics
  std::vector<float> running_mean0, running_var0;
  std::vector<float> y, save_mean, save_rstd, running_mean, running_var;
  nk_status status = NK_OK;
};

inline std::vector<float> Copy(const Buffer& b) {
  return std::vector<float>(b.data(), b.data() + b.size());
}

inline BnRun RunBn(const BnCase& k) {
  const size_t m = k.misalign;
  Buffer x(k.elements(), m), y(k.elements(), m), gamma(k.c, m), beta(k.c, m);
  Buffer mean(k.c, m), var(k.c, m), rm(k.c, m), rv(k.c, m), sm(k.c, m), sr(k.c, m);
  const uint32_t seed = Seed(k.n * 7919 + k.c * 104729 + k.spatial);
  FillNormal(x, seed);
  for (size_t ci = 0; ci < k.c; ++ci) {
    for (size_t j = 0; j < k.count(); ++j) x[k.Index(ci, j)] += static_cast<float>(ci % 5);
  }
  if (k.fill) k.fill(x);
  FillNormal(gamma, seed + 1, 1.0f, 0.25f);
  FillNormal(beta, seed + 2, 0.0f, 0.5f);
  FillNormal(mean, seed + 3, 0.5f, 1.0f);
  FillNormal(var, seed + 4, 0.0f, 1.0f);
  for (size_t ci = 0; ci < k.c; ++ci) var[ci] = 0.5f + var[ci] * var[ci];
  FillNormal(rm, seed + 5);
  FillNormal(rv, seed + 6, 1.0f, 0.1f);
  BnRun r;
  r.x = Copy(x);
  r.gamma = Copy(gamma);
  r.beta = Copy(beta);
  r.mean_in = Copy(mean);
  r.var_in = Copy(var);
  r.running_mean0 = Copy(rm);
  r.running_var0 = Copy(rv);
  float* out = k.in_place ? x.data() : y.data();
  const float* g = k.gamma ? gamma.data() : nullptr;
  const float* b = k.beta ? beta.data() : nullptr;
  if (k.training) {
    r.status = nk_batchnorm_forward_training_f32(
        k.n, k.c, k.spatial, k.layout, x.data(), g, b, k.eps, k.momentum,
        k.running ? rm.data() : nullptr, k.running ? rv.data() : nullptr, out,
        k.save ? sm.data() : nullptr, k.save ? sr.data() : nullptr);
  } else {
    r.status = nk_batchnorm_forward_inference_f32(k.n, k.c, k.spatial, k.layout,
                                                  x.data(), mean.data(), var.data(), g,
                                                  b, k.eps, out);
  }
  r.y.assign(out, out + k.elements());
  r.save_mean = Copy(sm);
  r.save_rstd = Copy(sr);
  r.running_mean = Copy(rm);
  r.running_var = Copy(rv);
  return r;
}

// The reference of channel ci: its values gathered, normalized in long double
// (training: batch statistics; inference: the given mean and var).
inline RowRef ChannelRef(const BnCase& k, const BnRun& r, size_t ci) {
  std::vector<float> values(k.count()), g(k.count()), b(k.count());
  for (size_t j = 0; j < k.count(); ++j) {
    values[j] = r.x[k.Index(ci, j)];
    g[j] = k.gamma ? r.gamma[ci] : 1.0f;
    b[j] = k.beta ? r.beta[ci] : 0.0f;
  }
  RowRef ref = ReferenceRow(true, k.count(), values.data(), nullptr, g.data(), b.data(),
                            k.eps);
  if (!k.training) {  // normalize with the given statistics instead
    ref.mean = r.mean_in[ci];
    ref.max_abs = std::fmax(ref.max_abs, std::fabs(ref.mean));  // b = beta - mean * a
    ref.rstd = 1.0L / std::sqrt(static_cast<long double>(r.var_in[ci]) + k.eps);
    for (size_t j = 0; j < k.count(); ++j) {
      ref.xhat[j] = (values[j] - ref.mean) * ref.rstd;
      ref.y[j] = ref.xhat[j] * g[j] + b[j];
    }
  }
  return ref;
}

// [count][c] -> [c][count], in blocks of positions so that both sides stay in cache.
inline std::vector<float> ToChannelMajor(const std::vector<float>& v, size_t count,
                                         size_t c) {
  std::vector<float> t(v.size());
  constexpr size_t kBlock = 64;
  for (size_t j0 = 0; j0 < count; j0 += kBlock) {
    const size_t j1 = std::min(count, j0 + kBlock);
    for (size_t ci = 0; ci < c; ++ci) {
      for (size_t j = j0; j < j1; ++j) t[ci * count + j] = v[j * c + ci];
    }
  }
  return t;
}

// The checks of CheckBn on a case whose channels are NCHW planes.
inline int CheckBnChannels(const BnCase& k, const BnRun& r) {
  int failures = 0;
  const size_t m = k.count();
  for (size_t ci = 0; ci < k.c && failures < 5; ++ci) {
    const RowRef ref = ChannelRef(k, r, ci);
    const long double unbiased = (1 / (ref.rstd * ref.rstd) - k.eps) * m / (m - 1.0L);
    const auto check = [&](const char* what, float got, long double want,
                           long double bound, bool stat) {
      // A variance beyond the fp32 range is Inf (c-abi.md allows it for variances).
      const long double max = std::numeric_limits<float>::max();
      if (std::fabs(want) + bound > max && std::isinf(got) && (got > 0) == (want > 0)) return;
      if (stat ? MeetsStat(got, want, bound) : Meets(got, want, bound)) return;
      ADD_FAILURE() << what << " channel " << ci << ": got " << got << " want "
                    << static_cast<double>(want) << " bound "
                    << static_cast<double>(bound);
      ++failures;
    };
    if (k.training && k.save) {
      check("save_mean", r.save_mean[ci], ref.mean, BoundMean(m, ref), true);
      check("save_rstd", r.save_rstd[ci], ref.rstd, BoundRstd(m, ref), true);
    } else {  // not written
      if (!std::isnan(r.save_mean[ci]) || !std::isnan(r.save_rstd[ci])) {
        ADD_FAILURE() << "save_* written for channel " << ci;
        ++failures;
      }
    }
    if (k.training && k.running) {
      const long double mom = k.momentum;
      const long double want_mean = (1 - mom) * r.running_mean0[ci] + mom * ref.mean;
      const long double want_var = (1 - mom) * r.running_var0[ci] + mom * unbiased;
      check("running_mean", r.running_mean[ci], want_mean,
            mom * BoundMean(m, ref) + 2 * kU * std::fabs(want_mean), true);
      check("running_var", r.running_var[ci], want_var,
            mom * BoundVar(m, ref) * m / (m - 1.0L) + 2 * kU * std::fabs(want_var), true);
    } else if (!SameBits(r.running_mean[ci], r.running_mean0[ci]) ||
               !SameBits(r.running_var[ci], r.running_var0[ci])) {
      ADD_FAILURE() << "running stats changed for channel " << ci;
      ++failures;
    }
    const float g = k.gamma ? r.gamma[ci] : 1.0f;
    const float b = k.beta ? r.beta[ci] : 0.0f;
    for (size_t j = 0; j < m; ++j) {
      const long double bound = BoundY(m, ref, j, g, b);
      const float got = r.y[k.Index(ci, j)];
      if (Meets(got, ref.y[j], bound)) continue;
      ADD_FAILURE() << "y channel " << ci << " element " << j << ": got " << got
                    << " want " << static_cast<double>(ref.y[j]) << " bound "
                    << static_cast<double>(bound);
      if (++failures >= 5) break;
    }
  }
  return failures;
}

// Checks every output of the case; returns the number of failures.
inline int CheckBn(const BnCase& k, const BnRun& r) {
  SCOPED_TRACE(k.Describe());
  EXPECT_EQ(r.status, NK_OK) << nk_last_error();
  if (r.status != NK_OK) return 1;
  if (k.layout == NK_LAYOUT_NCHW || k.c == 1) return CheckBnChannels(k, r);
  // An NHWC channel's elements lie c floats apart, and gathering them channel by
  // channel missed the cache on every element of a 32 MiB tensor: the checks read a
  // channel-major copy, the same elements as one NCHW sample of n * spatial.
  BnCase planes = k;
  planes.layout = NK_LAYOUT_NCHW;
  planes.n = 1;
  planes.spatial = k.count();
  BnRun t = r;
  t.x = ToChannelMajor(r.x, k.count(), k.c);
  t.y = ToChannelMajor(r.y, k.count(), k.c);
  return CheckBnChannels(planes, t);
}

inline int RunAndCheckBn(const BnCase& k) { return CheckBn(k, RunBn(k)); }

}  // namespace nk_test

#endif  // NK_TESTS_BATCHNORM_CASE_H_
