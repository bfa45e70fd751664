// SPDX-License-Identifier: Apache-2.0
// bngrad_case.h: runs one BatchNorm backward (whole, or through the SyncBatchNorm
// steps reduce -> sum over shards -> apply, with the batch cut into shards along n)
// in either layout, with any optional argument, alignment and aliasing, and checks
// dx, dgamma and dbeta against the long-double reference of each channel within the
// design.md bound.
#ifndef NK_TESTS_BNGRAD_CASE_H_
#define NK_TESTS_BNGRAD_CASE_H_

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"
#include "test_util.h"

namespace nk_test {

struct BnGradCase {
  size_t n = 2, c = 3, spatial = 5;
  nk_layout layout = NK_LAYOUT_NCHW;
  bool gamma = true, dgamma = true, dbeta = true;
  bool in_place = false;  // dx == dy
  size_t misalign = 0;
  size_t shards = 0;  // 0: nk_batchnorm_backward_f32; else reduce + apply
  float eps = 1e-5f;
  // Fills x and dy ([n][c][spatial] or [n][spatial][c]) after the default: N(0, 1)
  // shifted by the channel index, and N(0, 1).
  std::function<void(Buffer& x, Buffer& dy)> fill;

  size_t count() const { return n * spatial; }
  size_t elements() const { return n * c * spatial; }
  size_t Index(size_t ci, size_t j) const {  // element j of channel ci
    const size_t ni = j / spatial, s = j % spatial;
    return layout == NK_LAYOUT_NCHW ? (ni * c + ci) * spatial + s
                                    : (ni * spatial + s) * c + ci;
  }
  std::string Describe() const {
    std::ostringstream os;
    os << "n=" << n << " c=" << c << " spatial=" << spatial
       << (layout == NK_LAYOUT_NCHW ? " NCHW" : " NHWC") << " gamma=" << gamma
       << " dgamma=" << dgamma << " dbeta=" << dbeta << " in_place=" << in_place
       << " misalign=" << misalign << " shards=" << shards << " isa=" << nk_get_isa()
       << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

struct BnGradRun {
  std::vector<float> x, dy, gamma, mean, rstd;  // inputs
  std::vector<float> dx, dgamma, dbeta;         // outputs (NaN where not written)
  nk_status status = NK_OK;
};

// The saved statistics a training forward would give, from the long-double moments
// of each channel rounded once (the backward takes them as exact).
inline void SavedStats(const BnGradCase& k, const Buffer& x, Buffer& mean, Buffer& rstd) {
  const size_t m = k.count();
  for (size_t ci = 0; ci < k.c; ++ci) {
    long double sum = 0, sq = 0;
    for (size_t j = 0; j < m; ++j) sum += x[k.Index(ci, j)];
    const long double mu = sum / m;
    for (size_t j = 0; j < m; ++j) {
      const long double d = x[k.Index(ci, j)] - mu;
      sq += d * d;
    }
    mean[ci] = static_cast<float>(mu);
    rstd[ci] = static_cast<float>(1 / std::sqrt(sq / m + k.eps));
  }
}

// A backward call's inputs, drawn from the case's seed (then k.fill): drawn once,
// they serve several calls (the thread-count tests).
struct BnGradInputs {
  Buffer x, dy, gamma, mean, rstd;
  explicit BnGradInputs(const BnGradCase& k)
      : x(k.elements()), dy(k.elements()), gamma(k.c), mean(k.c), rstd(k.c) {
    const uint32_t seed = Seed(k.n * 7919 + k.c * 104729 + k.spatial + 17);
    FillNormal(x, seed);
    FillNormal(dy, seed + 1);
    for (size_t ci = 0; ci < k.c; ++ci) {
      for (size_t j = 0; j < k.count(); ++j)
        x[k.Index(ci, j)] += static_cast<float>(ci % 5);
    }
    FillNormal(gamma, seed + 2, 1.0f, 0.5f);
    if (k.fill) k.fill(x, dy);
    SavedStats(k, x, mean, rstd);
  }
};

// Runs the case on copies of `in` at the case's alignment.
inline BnGradRun RunBnGrad(const BnGradCase& k, const BnGradInputs& in) {
  const size_t a = k.misalign;
  const size_t e = k.elements();
  Buffer x(e, a), dy(e, a), dx(e, a), gamma(k.c, a), mean(k.c, a), rstd(k.c, a);
  Buffer dgamma(k.c, a), dbeta(k.c, a);
  x.CopyFrom(in.x);
  dy.CopyFrom(in.dy);
  gamma.CopyFrom(in.gamma);
  mean.CopyFrom(in.mean);
  rstd.CopyFrom(in.rstd);
  BnGradRun r;
  r.x.assign(x.data(), x.data() + e);
  r.dy.assign(dy.data(), dy.data() + e);
  r.gamma.assign(gamma.data(), gamma.data() + k.c);
  r.mean.assign(mean.data(), mean.data() + k.c);
  r.rstd.assign(rstd.data(), rstd.data() + k.c);
  float* out = k.in_place ? dy.data() : dx.data();
  const float* g = k.gamma ? gamma.data() : nullptr;
  if (k.shards == 0) {
    r.status = nk_batchnorm_backward_f32(
        k.n, k.c, k.spatial, k.layout, x.data(), dy.data(), mean.data(), rstd.data(), g,
        out, k.dgamma ? dgamma.data() : nullptr, k.dbeta ? dbeta.data() : nullptr);
  } else {
    // Shard s holds images [n * s / shards, n * (s + 1) / shards): its own tensors.
    const size_t per_image = k.c * k.spatial;
    std::vector<double> sum_dy(k.c, 0.0), sum_dy_xhat(k.c, 0.0);
    for (size_t s = 0; s < k.shards && r.status == NK_OK; ++s) {
      const size_t n0 = k.n * s / k.shards, n1 = k.n * (s + 1) / k.shards;
      Buffer sx((n1 - n0) * per_image, a), sdy((n1 - n0) * per_image, a);
      Buffer part_dy(k.c, a), part_dyxh(k.c, a);
      std::copy(x.data() + n0 * per_image, x.data() + n1 * per_image, sx.data());
      std::copy(dy.data() + n0 * per_image, dy.data() + n1 * per_image, sdy.data());
      r.status = nk_batchnorm_backward_reduce_f32(
          n1 - n0, k.c, k.spatial, k.layout, sx.data(), sdy.data(), mean.data(),
          rstd.data(), part_dy.data(), part_dyxh.data());
      for (size_t ci = 0; ci < k.c; ++ci) {  // the allreduce, in double
        sum_dy[ci] += part_dy[ci];
        sum_dy_xhat[ci] += part_dyxh[ci];
      }
    }
    Buffer total_dy(k.c, a), total_dyxh(k.c, a);
    for (size_t ci = 0; ci < k.c; ++ci) {
      total_dy[ci] = static_cast<float>(sum_dy[ci]);
      total_dyxh[ci] = static_cast<float>(sum_dy_xhat[ci]);
      if (k.dgamma) dgamma[ci] = total_dyxh[ci];
      if (k.dbeta) dbeta[ci] = total_dy[ci];
    }
    for (size_t s = 0; s < k.shards && r.status == NK_OK; ++s) {
      const size_t n0 = k.n * s / k.shards, n1 = k.n * (s + 1) / k.shards;
      const size_t at = n0 * per_image;
      r.status = nk_batchnorm_backward_apply_f32(
          n1 - n0, k.c, k.spatial, k.layout, x.data() + at, dy.data() + at, mean.data(),
          rstd.data(), g, k.count(), total_dy.data(), total_dyxh.data(),
          (k.in_place ? dy.data() : dx.data()) + at);
    }
  }
  r.dx.assign(out, out + e);
  r.dgamma.assign(dgamma.data(), dgamma.data() + k.c);
  r.dbeta.assign(dbeta.data(), dbeta.data() + k.c);
  return r;
}

inline BnGradRun RunBnGrad(const BnGradCase& k) { return RunBnGrad(k, BnGradInputs(k)); }

// Checks every output; returns the number of failures (at most a few reported).
inline int CheckBnGrad(const BnGradCase& k, const BnGradRun& r) {
  SCOPED_TRACE(k.Describe());
  EXPECT_EQ(r.status, NK_OK) << nk_last_error();
  if (r.status != NK_OK) return 1;
  int failures = 0;
  const size_t m = k.count();
  std::vector<float> xs(m), dys(m), gs(m);
  for (size_t ci = 0; ci < k.c && failures < 5; ++ci) {
    for (size_t j = 0; j < m; ++j) {
      xs[j] = r.x[k.Index(ci, j)];
      dys[j] = r.dy[k.Index(ci, j)];
      gs[j] = k.gamma ? r.gamma[ci] : 1.0f;
    }
    const RowGradRef ref = ReferenceRowGrad(true, m, xs.data(), dys.data(), nullptr,
                                            r.mean[ci], r.rstd[ci], gs.data());
    long double dgamma = 0, dbeta = 0, abs_dg = 0, abs_db = 0;
    for (size_t j = 0; j < m; ++j) {
      dgamma += ref.dgamma_term[j];
      abs_dg += std::fabs(ref.dgamma_term[j]);
      dbeta += dys[j];
      abs_db += std::fabs(dys[j]);
      const float got = r.dx[k.Index(ci, j)];
      if (Meets(got, ref.dx[j], ref.dx_bound[j])) continue;
      ADD_FAILURE() << "dx channel " << ci << " element " << j << ": got " << got
                    << " want " << static_cast<double>(ref.dx[j]) << " bound "
                    << static_cast<double>(ref.dx_bound[j]);
      if (++failures >= 5) return failures;
    }
    const auto param = [&](const char* what, bool wanted, float got, long double want,
                           long double bound) {
      if (!wanted ? std::isnan(got) : Meets(got, want, bound)) return;
      ADD_FAILURE() << what << " channel " << ci << ": got " << got << " want "
                    << static_cast<double>(want) << " bound "
                    << static_cast<double>(bound) << (wanted ? "" : " (not wanted)");
      ++failures;
    };
    param("dgamma", k.dgamma, r.dgamma[ci], dgamma, BoundDgamma(m, abs_dg));
    param("dbeta", k.dbeta, r.dbeta[ci], dbeta, BoundDbeta(m, abs_db));
  }
  return failures;
}

inline BnGradRun CheckBnGradCase(const BnGradCase& k) {
  const BnGradRun r = RunBnGrad(k);
  CheckBnGrad(k, r);
  return r;
}

}  // namespace nk_test

#endif  // NK_TESTS_BNGRAD_CASE_H_
