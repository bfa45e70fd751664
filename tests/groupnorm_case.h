// SPDX-License-Identifier: Apache-2.0
// groupnorm_case.h: runs one GroupNorm forward or backward call (either layout, any
// group count, optional argument, alignment and aliasing) and checks every output
// against the long-double reference of each (sample, group) set within the design.md
// bound; dgamma and dbeta against per-channel sums over the n * spatial values.
#ifndef NK_TESTS_GROUPNORM_CASE_H_
#define NK_TESTS_GROUPNORM_CASE_H_

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"
#include "test_util.h"

namespace nk_test {

struct GnCase {
  size_t n = 2, c = 6, spatial = 5, groups = 2;
  nk_layout layout = NK_LAYOUT_NCHW;
  bool gamma = true, beta = true;    // given (backward: gamma only)
  bool stats = true;                 // forward: mean / rstd wanted
  bool dgamma = true, dbeta = true;  // backward: wanted
  bool in_place = false;             // y == x, dx == dy
  size_t misalign = 0;
  float eps = 1e-5f;
  // Change x and (backward) dy after the default fill: x N(0, 1) shifted by the
  // channel index mod 5, dy N(0, 1).
  std::function<void(Buffer& x)> fill;
  std::function<void(Buffer& dy)> fill_dy;

  size_t set_size() const { return c / groups * spatial; }  // m
  size_t sets() const { return n * groups; }                // sample-major
  size_t elements() const { return n * c * spatial; }
  // Element j (channel by channel, 0 <= j < set_size) of set s = sample * groups + group.
  size_t Channel(size_t s, size_t j) const {
    return s % groups * (c / groups) + j / spatial;
  }
  size_t Index(size_t s, size_t j) const {
    const size_t ni = s / groups, ch = Channel(s, j), p = j % spatial;
    return layout == NK_LAYOUT_NCHW ? (ni * c + ch) * spatial + p
                                    : (ni * spatial + p) * c + ch;
  }
  // fn(j, channel, index) for every element of set s, in order, without the divisions
  // of Index (which bound the checks of the 32 MiB tests).
  template <class Fn>
  void ForEach(size_t s, const Fn& fn) const {
    const size_t ni = s / groups, cg = c / groups, ch0 = s % groups * cg;
    const bool nchw = layout == NK_LAYOUT_NCHW;
    for (size_t ch = ch0, j = 0; ch < ch0 + cg; ++ch) {
      for (size_t p = 0; p < spatial; ++p, ++j) {
        fn(j, ch, nchw ? (ni * c + ch) * spatial + p : (ni * spatial + p) * c + ch);
      }
    }
  }
  std::string Describe() const {
    std::ostringstream os;
    os << "n=" << n << " c=" << c << " spatial=" << spatial << " groups=" << groups
       << (layout == NK_LAYOUT_NCHW ? " NCHW" : " NHWC") << " gamma=" << gamma
       << " beta=" << beta << " stats=" << stats << " dgamma=" << dgamma
       << " dbeta=" << dbeta << " in_place=" << in_place << " misalign=" << misalign
       << " eps=" << eps << " isa=" << nk_get_isa()
       << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

// One call's inputs and what the caller sees after it (NaN where nothing was written).
struct GnRun {
  std::vector<float> x, dy, gamma, beta;  // inputs (dy: backward)
  std::vector<float> mean, rstd;  // forward: outputs; backward: the saved statistics
  std::vector<float> y;           // forward
  std::vector<float> dx, dgamma, dbeta;  // backward
  nk_status status = NK_OK;
};

// Values of set s of a tensor, in the order of GnCase::Index.
inline std::vector<float> SetValues(const GnCase& k, const std::vector<float>& t,
                                    size_t s) {
  std::vector<float> v(k.set_size());
  k.ForEach(s, [&](size_t j, size_t, size_t at) { v[j] = t[at]; });
  return v;
}

// A per-channel parameter over set s's elements (`given` false: `absent` everywhere).
inline std::vector<float> SetParams(const GnCase& k, bool given,
                                    const std::vector<float>& p, float absent, size_t s) {
  std::vector<float> v(k.set_size(), absent);
  if (given) k.ForEach(s, [&](size_t j, size_t ch, size_t) { v[j] = p[ch]; });
  return v;
}

// The inputs both directions share: x, gamma, beta and (backward) dy, seeded by shape.
inline void FillInputs(const GnCase& k, Buffer& x, Buffer& gamma, Buffer& beta,
                       Buffer* dy) {
  const uint32_t seed = Seed(k.n * 7919 + k.c * 104729 + k.spatial + k.groups * 31);
  FillNormal(x, seed);
  for (size_t s = 0; s < k.sets(); ++s) {
    k.ForEach(s,
              [&](size_t, size_t ch, size_t at) { x[at] += static_cast<float>(ch % 5); });
  }
  FillNormal(gamma, seed + 1, 1.0f, 0.5f);
  FillNormal(beta, seed + 2, 0.0f, 0.5f);
  if (k.fill) k.fill(x);
  if (dy) {
    FillNormal(*dy, seed + 3);
    if (k.fill_dy) k.fill_dy(*dy);
  }
}

inline std::vector<float> Values(const Buffer& b) {
  return std::vector<float>(b.data(), b.data() + b.size());
}

inline GnRun RunGn(const GnCase& k) {
  const size_t a = k.misalign, e = k.elements();
  Buffer x(e, a), y(e, a), gamma(k.c, a), beta(k.c, a), mean(k.sets(), a),
      rstd(k.sets(), a);
  FillInputs(k, x, gamma, beta, nullptr);
  GnRun r;
  r.x = Values(x);
  r.gamma = Values(gamma);
  r.beta = Values(beta);
  float* out = k.in_place ? x.data() : y.data();
  r.status = nk_groupnorm_forward_f32(
      k.n, k.c, k.spatial, k.groups, k.layout, x.data(), k.gamma ? gamma.data() : nullptr,
      k.beta ? beta.data() : nullptr, k.eps, out, k.stats ? mean.data() : nullptr,
      k.stats ? rstd.data() : nullptr);
  r.y.assign(out, out + e);
  r.mean = Values(mean);
  r.rstd = Values(rstd);
  return r;
}

// The backward runs from the statistics a forward saves: each set's long-double mean
// and rstd rounded once (the backward takes them as exact).
inline GnRun RunGnGrad(const GnCase& k) {
  const size_t a = k.misalign, e = k.elements();
  Buffer x(e, a), dy(e, a), dx(e, a), gamma(k.c, a), beta(k.c, a), mean(k.sets(), a),
      rstd(k.sets(), a), dgamma(k.c, a), dbeta(k.c, a);
  FillInputs(k, x, gamma, beta, &dy);
  GnRun r;
  r.x = Values(x);
  r.dy = Values(dy);
  r.gamma = Values(gamma);
  for (size_t s = 0; s < k.sets(); ++s) {
    const std::vector<float> v = SetValues(k, r.x, s);
    const RowRef ref =
        ReferenceRow(true, v.size(), v.data(), nullptr, nullptr, nullptr, k.eps);
    mean[s] = static_cast<float>(ref.mean);
    rstd[s] = static_cast<float>(ref.rstd);
  }
  r.mean = Values(mean);
  r.rstd = Values(rstd);
  float* out = k.in_place ? dy.data() : dx.data();
  r.status = nk_groupnorm_backward_f32(
      k.n, k.c, k.spatial, k.groups, k.layout, x.data(), dy.data(), mean.data(),
      rstd.data(), k.gamma ? gamma.data() : nullptr, out,
      k.dgamma ? dgamma.data() : nullptr, k.dbeta ? dbeta.data() : nullptr);
  r.dx.assign(out, out + e);
  r.dgamma = Values(dgamma);
  r.dbeta = Values(dbeta);
  return r;
}

// The reference of set s of a forward run: its values normalized in long double.
inline RowRef SetRef(const GnCase& k, const GnRun& r, size_t s) {
  const std::vector<float> v = SetValues(k, r.x, s);
  const std::vector<float> g = SetParams(k, k.gamma, r.gamma, 1.0f, s);
  const std::vector<float> b = SetParams(k, k.beta, r.beta, 0.0f, s);
  return ReferenceRow(true, v.size(), v.data(), nullptr, g.data(), b.data(), k.eps);
}

// The reference of set s of a backward run.
inline RowGradRef SetGradRef(const GnCase& k, const GnRun& r, size_t s) {
  const std::vector<float> v = SetValues(k, r.x, s), dy = SetValues(k, r.dy, s);
  const std::vector<float> g = SetParams(k, k.gamma, r.gamma, 1.0f, s);
  return ReferenceRowGrad(true, v.size(), v.data(), dy.data(), nullptr, r.mean[s],
                          r.rstd[s], g.data());
}

// Counts the outputs outside their bound, reporting the first few.
class Failures {
 public:
  void Add(const std::string& what, float got, long double want, long double bound) {
    if (count_++ < 5) {
      ADD_FAILURE() << what << ": got " << got << " want " << static_cast<double>(want)
                    << " bound " << static_cast<double>(bound);
    }
  }
  int count() const { return count_; }

 private:
  int count_ = 0;
};

constexpr size_t kWholeSet = static_cast<size_t>(-1);

// "what sample 1 group 2 [channel 5 position 3]" for element j of set s.
inline std::string Where(const GnCase& k, const char* what, size_t s, size_t j) {
  std::ostringstream os;
  os << what << " sample " << s / k.groups << " group " << s % k.groups;
  if (j != kWholeSet)
    os << " channel " << k.Channel(s, j) << " position " << j % k.spatial;
  return os.str();
}

// Checks y, mean and rstd of a forward run; returns the number of failures.
inline int CheckGn(const GnCase& k, const GnRun& r) {
  SCOPED_TRACE(k.Describe());
  EXPECT_EQ(r.status, NK_OK) << nk_last_error();
  if (r.status != NK_OK) return 1;
  Failures f;
  const size_t m = k.set_size();
  for (size_t s = 0; s < k.sets() && f.count() < 5; ++s) {
    const RowRef ref = SetRef(k, r, s);
    if (!k.stats) {  // not written
      if (!std::isnan(r.mean[s])) {
        f.Add(Where(k, "mean (not wanted)", s, kWholeSet), r.mean[s], NAN, 0);
      }
      if (!std::isnan(r.rstd[s])) {
        f.Add(Where(k, "rstd (not wanted)", s, kWholeSet), r.rstd[s], NAN, 0);
      }
    } else {
      const long double bm = BoundMean(m, ref), br = BoundRstd(m, ref);
      if (!MeetsStat(r.mean[s], ref.mean, bm)) {
        f.Add(Where(k, "mean", s, kWholeSet), r.mean[s], ref.mean, bm);
      }
      if (!MeetsStat(r.rstd[s], ref.rstd, br)) {
        f.Add(Where(k, "rstd", s, kWholeSet), r.rstd[s], ref.rstd, br);
      }
    }
    bool reported = false;  // one y per set
    k.ForEach(s, [&](size_t j, size_t ch, size_t at) {
      const long double bound =
          BoundY(m, ref, j, k.gamma ? r.gamma[ch] : 1.0f, k.beta ? r.beta[ch] : 0.0f);
      if (reported || Meets(r.y[at], ref.y[j], bound)) return;
      f.Add(Where(k, "y", s, j), r.y[at], ref.y[j], bound);
      reported = true;
    });
  }
  return f.count();
}

// Checks dx, dgamma and dbeta of a backward run; returns the number of failures.
inline int CheckGnGrad(const GnCase& k, const GnRun& r) {
  SCOPED_TRACE(k.Describe());
  EXPECT_EQ(r.status, NK_OK) << nk_last_error();
  if (r.status != NK_OK) return 1;
  Failures f;
  std::vector<long double> dgamma(k.c), dbeta(k.c), abs_dg(k.c), abs_db(k.c);
  for (size_t s = 0; s < k.sets(); ++s) {
    const RowGradRef ref = SetGradRef(k, r, s);
    k.ForEach(s, [&](size_t j, size_t ch, size_t at) {
      dgamma[ch] += ref.dgamma_term[j];
      abs_dg[ch] += std::fabs(ref.dgamma_term[j]);
      dbeta[ch] += r.dy[at];
      abs_db[ch] += std::fabs(r.dy[at]);
      if (f.count() < 5 && !Meets(r.dx[at], ref.dx[j], ref.dx_bound[j])) {
        f.Add(Where(k, "dx", s, j), r.dx[at], ref.dx[j], ref.dx_bound[j]);
      }
    });
  }
  const size_t per_channel = k.n * k.spatial;  // R of the bound
  const auto param = [&](const char* what, bool wanted, float got, long double want,
                         long double bound, size_t ch) {
    if (wanted ? Meets(got, want, bound) : std::isnan(got)) return;
    f.Add(std::string(what) + " channel " + std::to_string(ch) +
              (wanted ? "" : " (not wanted)"),
          got, want, bound);
  };
  for (size_t ch = 0; ch < k.c && f.count() < 5; ++ch) {
    param("dgamma", k.dgamma, r.dgamma[ch], dgamma[ch],
          BoundDgamma(per_channel, abs_dg[ch]), ch);
    param("dbeta", k.dbeta, r.dbeta[ch], dbeta[ch], BoundDbeta(per_channel, abs_db[ch]),
          ch);
  }
  return f.count();
}

inline GnRun CheckGnCase(const GnCase& k) {
  GnRun r = RunGn(k);
  CheckGn(k, r);
  return r;
}

inline GnRun CheckGnGradCase(const GnCase& k) {
  GnRun r = RunGnGrad(k);
  CheckGnGrad(k, r);
  return r;
}

}  // namespace nk_test

#endif  // NK_TESTS_GROUPNORM_CASE_H_
