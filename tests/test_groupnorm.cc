// SPDX-License-Identifier: Apache-2.0
// test_groupnorm.cc: GroupNorm and InstanceNorm (groups == c), forward and backward,
// under every ISA: y, mean, rstd, dx, dgamma and dbeta within design.md's bound of the
// long-double reference of each (sample, group) set, in both layouts; groups == 1 as
// LayerNorm of each sample; the layouts agreeing; odd set sizes, misaligned, in place;
// NaN / Inf staying in their set; ill-conditioned, huge and constant sets; the same bits
// for 1, 2 and 3 threads; finite differences of the forward; empty tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "groupnorm_case.h"
#include "reference.h"
#include "test_util.h"

namespace nk_test {
namespace {

class GroupNormTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(GroupNormTest);

constexpr nk_layout kLayouts[] = {NK_LAYOUT_NCHW, NK_LAYOUT_NHWC};

GnCase Shape(size_t n, size_t c, size_t spatial, size_t groups, nk_layout layout) {
  GnCase k;
  k.n = n, k.c = c, k.spatial = spatial, k.groups = groups, k.layout = layout;
  return k;
}

// The forward and the backward of k, each against the reference.
void CheckBoth(const GnCase& k) {
  CheckGnCase(k);
  CheckGnGradCase(k);
}

// Groups 1 (LayerNorm of a sample), a middle value and c (InstanceNorm); groups of 3
// channels (c = 6 in 2, c = 96 in 32) fill no whole vector; planes shorter than a
// vector, 7x7 and odd.
TEST_P(GroupNormTest, ShapeGrid) {
  struct Grouping {
    size_t c, groups;
  };
  for (nk_layout layout : kLayouts) {
    for (size_t n : {1, 3}) {
      for (Grouping g : {Grouping{1, 1}, Grouping{6, 1}, Grouping{6, 2}, Grouping{6, 6},
                         Grouping{32, 1}, Grouping{32, 8}, Grouping{32, 32},
                         Grouping{96, 1}, Grouping{96, 32}, Grouping{96, 96}}) {
        for (size_t spatial : {1, 7, 49, 67}) {
          CheckBoth(Shape(n, g.c, spatial, g.groups, layout));
        }
      }
    }
  }
}

// Sets of every size 1..67 made three ways: one channel of v positions (InstanceNorm),
// v channels of one position (spatial == 1, groups < c), 3 channels of v positions.
TEST_P(GroupNormTest, EverySetSizeUpTo67) {
  for (nk_layout layout : kLayouts) {
    for (size_t v = 1; v <= 67; ++v) {
      CheckBoth(Shape(2, 3, v, 3, layout));
      CheckBoth(Shape(2, 2 * v, 1, 2, layout));
      CheckBoth(Shape(1, 6, v, 2, layout));
    }
  }
}

// Prime set sizes: 4099 positions of one channel, 4099 channels of one position, and
// 5 x 4099 = 20495 values, longer than a 16384-element chunk.
TEST_P(GroupNormTest, PrimeAndLongSets) {
  for (nk_layout layout : kLayouts) {
    CheckBoth(Shape(2, 3, 4099, 3, layout));
    CheckBoth(Shape(1, 2 * 4099, 1, 2, layout));
    CheckBoth(Shape(1, 10, 4099, 2, layout));
  }
}

TEST_P(GroupNormTest, OptionalArguments) {
  for (nk_layout layout : kLayouts) {
    for (int mask = 0; mask < 8; ++mask) {
      GnCase k = Shape(3, 12, 23, 4, layout);
      k.gamma = mask & 1;
      k.beta = mask & 2;
      k.stats = mask & 4;
      k.dgamma = mask & 2;
      k.dbeta = mask & 4;
      CheckBoth(k);
    }
  }
}

TEST_P(GroupNormTest, MisalignedAndInPlace) {
  for (nk_layout layout : kLayouts) {
    for (size_t misalign = 0; misalign <= 3; ++misalign) {
      for (bool in_place : {false, true}) {
        for (GnCase k : {Shape(2, 96, 13, 32, layout), Shape(3, 6, 41, 2, layout)}) {
          k.misalign = misalign;
          k.in_place = in_place;
          CheckBoth(k);
        }
      }
    }
  }
}

// Whether every value of set s of tensor t is finite (all: true) or none is (false).
bool SetIs(const GnCase& k, const std::vector<float>& t, size_t s, bool finite) {
  for (size_t j = 0; j < k.set_size(); ++j) {
    if (static_cast<bool>(std::isfinite(t[k.Index(s, j)])) != finite) return false;
  }
  return true;
}

// A NaN or Inf in one element of sample 1, group 2: that set's outputs are NaN / Inf,
// every other set's are finite and within the bound; dgamma turns non-finite in the
// channels of that group (x_hat of the whole set is), dbeta nowhere (it sums dy only);
// from dy, both only in the element's channel.
TEST_P(GroupNormTest, NonFiniteValuesStayInTheirSet) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity()};
  for (nk_layout layout : kLayouts) {
    for (float v : bad) {
      for (bool in_dy : {false, true}) {
        GnCase k = Shape(3, 12, 29, 4, layout);
        const size_t s_bad = 1 * k.groups + 2, j_bad = 40;  // channel 7
        const size_t ch_bad = k.Channel(s_bad, j_bad);
        const auto poison = [&](Buffer& t) { t[k.Index(s_bad, j_bad)] = v; };
        (in_dy ? k.fill_dy : k.fill) = poison;
        SCOPED_TRACE(k.Describe() + " value " + std::to_string(v) + " in_dy " +
                     std::to_string(in_dy));
        if (!in_dy) {
          const GnRun r = CheckGnCase(k);
          for (size_t s = 0; s < k.sets(); ++s) {
            EXPECT_TRUE(SetIs(k, r.y, s, s != s_bad)) << "y of set " << s;
            EXPECT_EQ(std::isfinite(r.mean[s] + r.rstd[s]), s != s_bad) << s;
          }
        }
        const GnRun r = CheckGnGradCase(k);
        for (size_t s = 0; s < k.sets(); ++s) {
          EXPECT_TRUE(SetIs(k, r.dx, s, s != s_bad)) << "dx of set " << s;
        }
        for (size_t ch = 0; ch < k.c; ++ch) {
          const bool in_group = ch / (k.c / k.groups) == s_bad % k.groups;
          EXPECT_EQ(std::isfinite(r.dgamma[ch]), in_dy ? ch != ch_bad : !in_group)
              << "dgamma channel " << ch;
          EXPECT_EQ(std::isfinite(r.dbeta[ch]), !in_dy || ch != ch_bad)
              << "dbeta channel " << ch;
        }
      }
    }
  }
}

// 1e4 + N(0, 1) in sets of 4096 (design.md: y's bound is about 0.03 there), and two
// sorted ramps of 100003 values, 1e4 + linspace(-1.7, 1.7) scaled per channel.
TEST_P(GroupNormTest, IllConditionedAndSortedRamp) {
  for (nk_layout layout : kLayouts) {
    GnCase k = Shape(2, 16, 1024, 4, layout);
    k.fill = [](Buffer& x) {
      std::mt19937 rng(5);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = 1e4f + dist(rng);
    };
    CheckBoth(k);
    GnCase ramp = Shape(1, 2, 100003, 2, layout);
    ramp.fill = [&](Buffer& x) {
      for (size_t s = 0; s < ramp.sets(); ++s) {
        for (size_t j = 0; j < ramp.set_size(); ++j) {
          x[ramp.Index(s, j)] = static_cast<float>(
              1e4L + (-1.7L + 3.4L * j / (ramp.set_size() - 1)) * (s + 1));
        }
      }
    };
    ramp.fill_dy = [](Buffer& dy) {
      for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f + i / 100002.0f;
    };
    CheckBoth(ramp);
  }
}

// |x| ~ 1e19 and 1e30, in every set or in one set among ordinary ones: squared
// deviations overflow fp32; the rescaled path keeps y, mean and rstd finite and within
// the bound.
TEST_P(GroupNormTest, HugeValues) {
  for (nk_layout layout : kLayouts) {
    for (float scale : {1e19f, 1e30f}) {
      for (bool one_set : {false, true}) {
        GnCase k = Shape(2, 6, 53, 2, layout);
        k.fill = [&](Buffer& x) {
          for (size_t s = one_set ? 3 : 0; s < (one_set ? 4 : k.sets()); ++s) {
            for (size_t j = 0; j < k.set_size(); ++j) x[k.Index(s, j)] *= scale;
          }
        };
        const GnRun r = RunGn(k);
        ASSERT_EQ(CheckGn(k, r), 0);
        for (size_t s = 0; s < k.sets(); ++s) {
          EXPECT_TRUE(std::isfinite(r.mean[s]) && std::isfinite(r.rstd[s])) << s;
          EXPECT_TRUE(SetIs(k, r.y, s, true)) << s;
        }
      }
    }
  }
}

// The backward with |x| ~ 1e25 (rstd ~ 1e-25) and |x| ~ 1e-25 with eps 0 (rstd ~ 1e25),
// where a folded rstd^2 factor under- or overflows fp32.
TEST_P(GroupNormTest, BackwardOfHugeAndTinyValues) {
  for (nk_layout layout : kLayouts) {
    for (float scale : {1e25f, 1e-25f}) {
      GnCase k = Shape(3, 6, 37, 3, layout);
      k.eps = scale < 1.0f ? 0.0f : 1e-5f;
      k.fill = [scale](Buffer& x) {
        for (size_t i = 0; i < x.size(); ++i) x[i] *= scale;
      };
      CheckGnGradCase(k);
    }
  }
}

// A constant set (also one whose sum overflows: the rescaled path) has mean == the
// constant, rstd == 1 / sqrt(eps) and y == beta exactly; so has every set of one value
// (InstanceNorm of a 1x1 plane, as F.group_norm allows), beta absent giving 0.
TEST_P(GroupNormTest, ConstantSetsGiveBetaExactly) {
  for (nk_layout layout : kLayouts) {
    for (float v : {3.25f, -2.6e38f}) {
      GnCase k = Shape(3, 8, 29, 4, layout);
      const size_t s_const = 5;  // sample 1, group 1
      k.fill = [&](Buffer& x) {
        for (size_t j = 0; j < k.set_size(); ++j) x[k.Index(s_const, j)] = v;
      };
      const GnRun r = CheckGnCase(k);
      for (size_t j = 0; j < k.set_size(); ++j) {
        ASSERT_EQ(r.y[k.Index(s_const, j)], r.beta[k.Channel(s_const, j)]) << j;
      }
      EXPECT_EQ(r.mean[s_const], v);
      EXPECT_EQ(r.rstd[s_const], 1.0f / std::sqrt(k.eps));
      CheckGnGradCase(k);
    }
    for (bool beta : {true, false}) {
      GnCase k = Shape(4, 5, 1, 5, layout);
      k.beta = beta;
      const GnRun r = CheckGnCase(k);
      for (size_t s = 0; s < k.sets(); ++s) {
        EXPECT_EQ(r.y[k.Index(s, 0)], beta ? r.beta[k.Channel(s, 0)] : 0.0f) << s;
        EXPECT_EQ(r.mean[s], r.x[k.Index(s, 0)]) << s;
        EXPECT_EQ(r.rstd[s], 1.0f / std::sqrt(k.eps)) << s;
      }
      CheckGnGradCase(k);
    }
  }
}

// The same values in NCHW and in NHWC give the same outputs within twice the bound
// (each is within the bound of the reference; the layouts' bits need not agree).
TEST_P(GroupNormTest, LayoutsAgree) {
  const GnCase nchw = Shape(3, 12, 49, 3, NK_LAYOUT_NCHW);
  const GnRun a = RunGn(nchw), ga = RunGnGrad(nchw);
  GnCase nhwc = nchw;
  nhwc.layout = NK_LAYOUT_NHWC;
  const auto transpose = [&](const std::vector<float>& from) {
    return [&, from](Buffer& to) {
      for (size_t s = 0; s < nchw.sets(); ++s) {
        for (size_t j = 0; j < nchw.set_size(); ++j) {
          to[nhwc.Index(s, j)] = from[nchw.Index(s, j)];
        }
      }
    };
  };
  nhwc.fill = transpose(a.x);
  nhwc.fill_dy = transpose(ga.dy);
  const GnRun b = RunGn(nhwc), gb = RunGnGrad(nhwc);
  ASSERT_EQ(CheckGn(nchw, a) + CheckGn(nhwc, b), 0);
  ASSERT_EQ(CheckGnGrad(nchw, ga) + CheckGnGrad(nhwc, gb), 0);
  const size_t m = nchw.set_size();
  std::vector<long double> abs_dg(nchw.c), abs_db(nchw.c);
  for (size_t s = 0; s < nchw.sets(); ++s) {
    const RowRef ref = SetRef(nchw, a, s);
    EXPECT_LE(std::fabs(a.mean[s] - b.mean[s]), 2 * BoundMean(m, ref)) << s;
    EXPECT_LE(std::fabs(a.rstd[s] - b.rstd[s]), 2 * BoundRstd(m, ref)) << s;
    const RowGradRef gref = SetGradRef(nchw, ga, s);
    for (size_t j = 0; j < m; ++j) {
      const size_t ch = nchw.Channel(s, j), p = nchw.Index(s, j), q = nhwc.Index(s, j);
      ASSERT_LE(std::fabs(a.y[p] - b.y[q]),
                2 * BoundY(m, ref, j, a.gamma[ch], a.beta[ch]))
          << s << " " << j;
      ASSERT_LE(std::fabs(ga.dx[p] - gb.dx[q]), 2 * gref.dx_bound[j]) << s << " " << j;
      abs_dg[ch] += std::fabs(gref.dgamma_term[j]);
      abs_db[ch] += std::fabs(ga.dy[p]);
    }
  }
  const size_t per_channel = nchw.n * nchw.spatial;
  for (size_t ch = 0; ch < nchw.c; ++ch) {
    EXPECT_LE(std::fabs(ga.dgamma[ch] - gb.dgamma[ch]),
              2 * BoundDgamma(per_channel, abs_dg[ch]))
        << ch;
    EXPECT_LE(std::fabs(ga.dbeta[ch] - gb.dbeta[ch]),
              2 * BoundDbeta(per_channel, abs_db[ch]))
        << ch;
  }
}

// groups == 1 is LayerNorm of each sample's c * spatial values with gamma and beta
// repeated over each channel's positions: checked against that row's reference (the
// sample in NCHW order, gathered here independently of the set gathering), and in
// NCHW against nk_layernorm_forward_f32 with the expanded gamma and beta, within the
// sum of both bounds.
TEST_P(GroupNormTest, OneGroupIsLayerNormOfEachSample) {
  for (nk_layout layout : kLayouts) {
    for (GnCase k : {Shape(3, 6, 49, 1, layout), Shape(2, 64, 7, 1, layout)}) {
      SCOPED_TRACE(k.Describe());
      const GnRun r = RunGn(k);
      ASSERT_EQ(r.status, NK_OK) << nk_last_error();
      const size_t cols = k.c * k.spatial;
      std::vector<float> gamma(cols), beta(cols);
      for (size_t i = 0; i < cols; ++i) {
        gamma[i] = r.gamma[i / k.spatial];
        beta[i] = r.beta[i / k.spatial];
      }
      std::vector<float> ln_y(r.y.size(), NAN), ln_mean(k.n, NAN), ln_rstd(k.n, NAN);
      const bool nchw = layout == NK_LAYOUT_NCHW;
      if (nchw) {
        ASSERT_EQ(
            nk_layernorm_forward_f32(k.n, cols, r.x.data(), gamma.data(), beta.data(),
                                     k.eps, ln_y.data(), ln_mean.data(), ln_rstd.data()),
            NK_OK);
      }
      for (size_t ni = 0; ni < k.n; ++ni) {
        std::vector<float> row(cols);
        for (size_t ch = 0; ch < k.c; ++ch) {
          for (size_t p = 0; p < k.spatial; ++p) {
            row[ch * k.spatial + p] = nchw ? r.x[(ni * k.c + ch) * k.spatial + p]
                                           : r.x[(ni * k.spatial + p) * k.c + ch];
          }
        }
        const RowRef ref = ReferenceRow(true, cols, row.data(), nullptr, gamma.data(),
                                        beta.data(), k.eps);
        const long double bm = BoundMean(cols, ref), br = BoundRstd(cols, ref);
        EXPECT_TRUE(MeetsStat(r.mean[ni], ref.mean, bm)) << ni;
        EXPECT_TRUE(MeetsStat(r.rstd[ni], ref.rstd, br)) << ni;
        if (nchw) {
          EXPECT_LE(std::fabs(r.mean[ni] - ln_mean[ni]), 2 * bm) << ni;
          EXPECT_LE(std::fabs(r.rstd[ni] - ln_rstd[ni]), 2 * br) << ni;
        }
        for (size_t i = 0; i < cols; ++i) {
          const size_t at = nchw ? ni * cols + i
                                 : (ni * k.spatial + i % k.spatial) * k.c + i / k.spatial;
          const long double bound = BoundY(cols, ref, i, gamma[i], beta[i]);
          ASSERT_TRUE(Meets(r.y[at], ref.y[i], bound))
              << "sample " << ni << " element " << i << ": " << r.y[at] << " vs "
              << static_cast<double>(ref.y[i]);
          if (nchw) {
            ASSERT_LE(std::fabs(r.y[at] - ln_y[at]), 2 * bound) << ni << " " << i;
          }
        }
      }
    }
  }
}

// Runs the forward and the backward of k with 1, 2 and 3 threads: the first run within
// the bound, the others the same bits in every output.
void ExpectSameBitsForThreadCounts(const GnCase& k) {
  std::vector<GnRun> fwd, bwd;
  for (int threads : {1, 2, 3}) {
    ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
    fwd.push_back(RunGn(k));
    bwd.push_back(RunGnGrad(k));
  }
  ASSERT_EQ(CheckGn(k, fwd[0]), 0);
  ASSERT_EQ(CheckGnGrad(k, bwd[0]), 0);
  for (size_t t = 1; t < fwd.size(); ++t) {
    SCOPED_TRACE(k.Describe() + " threads " + std::to_string(t + 1));
    EXPECT_TRUE(SameBits(fwd[t].y, fwd[0].y));
    EXPECT_TRUE(SameBits(fwd[t].mean, fwd[0].mean));
    EXPECT_TRUE(SameBits(fwd[t].rstd, fwd[0].rstd));
    EXPECT_TRUE(SameBits(bwd[t].dx, bwd[0].dx));
    EXPECT_TRUE(SameBits(bwd[t].dgamma, bwd[0].dgamma));
    EXPECT_TRUE(SameBits(bwd[t].dbeta, bwd[0].dbeta));
  }
}

// Each shape is large enough for 3 threads (32768 elements each). Few large sets that
// must be split across threads (batch 1, 32 groups of a 64x64 plane; one set of 100052
// values, measured in pieces in parallel), many tiny ones (InstanceNorm of 8x512x7x7),
// groups of 3 channels, and NHWC samples fewer than the threads or not a multiple of
// them (5: measured by row chunks, then mapped across samples).
TEST_P(GroupNormTest, ThreadCountDoesNotChangeBits) {
  for (nk_layout layout : kLayouts) {
    for (const GnCase& k :
         {Shape(1, 64, 64 * 64, 32, layout), Shape(1, 4, 25013, 1, layout),
          Shape(8, 512, 49, 512, layout), Shape(5, 96, 15 * 15, 32, layout)}) {
      ExpectSameBitsForThreadCounts(k);
    }
  }
}

// Tensors past 32 MiB together (x and y; x, dy and dx: each at the smallest such
// shape) take the streaming stores; outputs one float past a line boundary in NHWC.
TEST_P(GroupNormTest, LargeTensorsStream) {
  for (nk_layout layout : kLayouts) {
    GnCase k = Shape(4, 64, 128 * 128, 32, layout);
    k.misalign = layout == NK_LAYOUT_NHWC ? 1 : 0;
    CheckGnCase(k);
    k.n = 3, k.spatial = 121 * 121;
    CheckGnGradCase(k);
  }
}

// The loss sum(dy * y) of a forward written here (long double), differentiated
// numerically in x, gamma and beta: a wrong formula that the kernel and the reference
// share shows here.
TEST_P(GroupNormTest, FiniteDifferencesOfTheForward) {
  for (nk_layout layout : kLayouts) {
    for (size_t spatial : {2, 3, 5}) {
      GnCase k = Shape(2, 4, spatial, 2, layout);
      k.fill = [](Buffer& x) { FillNormal(x, 11); };  // |mean| small: see the bound
      SCOPED_TRACE(k.Describe());
      const GnRun r = RunGnGrad(k);
      ASSERT_EQ(r.status, NK_OK) << nk_last_error();
      std::vector<long double> x(r.x.begin(), r.x.end());
      std::vector<long double> gamma(r.gamma.begin(), r.gamma.end()), beta(k.c, 0.25L);
      const size_t m = k.set_size();
      const auto loss = [&](const std::vector<long double>& xv,
                            const std::vector<long double>& g,
                            const std::vector<long double>& b) {
        long double l = 0;
        std::vector<long double> xs(m), gs(m), bs(m);
        for (size_t s = 0; s < k.sets(); ++s) {
          for (size_t j = 0; j < m; ++j) {
            xs[j] = xv[k.Index(s, j)];
            gs[j] = g[k.Channel(s, j)];
            bs[j] = b[k.Channel(s, j)];
          }
          const std::vector<long double> y =
              ForwardLd(true, m, xs.data(), gs.data(), bs.data(), k.eps);
          for (size_t j = 0; j < m; ++j) l += r.dy[k.Index(s, j)] * y[j];
        }
        return l;
      };
      const long double h = 1e-6L;
      const auto derivative = [&](std::vector<long double>& v, size_t i) {
        const long double v0 = v[i];
        v[i] = v0 + h;
        const long double up = loss(x, gamma, beta);
        v[i] = v0 - h;
        const long double down = loss(x, gamma, beta);
        v[i] = v0;
        return (up - down) / (2 * h);
      };
      std::vector<long double> abs_dg(k.c), abs_db(k.c);
      for (size_t s = 0; s < k.sets(); ++s) {
        const RowGradRef ref = SetGradRef(k, r, s);
        for (size_t j = 0; j < m; ++j) {
          const size_t at = k.Index(s, j);
          abs_dg[k.Channel(s, j)] += std::fabs(ref.dgamma_term[j]);
          abs_db[k.Channel(s, j)] += std::fabs(r.dy[at]);
          const long double fd = derivative(x, at);
          EXPECT_LE(std::fabs(r.dx[at] - fd), 2 * ref.dx_bound[j])
              << Where(k, "dx", s, j) << ": " << r.dx[at] << " finite difference "
              << static_cast<double>(fd);
        }
      }
      const size_t per_channel = k.n * k.spatial;
      for (size_t ch = 0; ch < k.c; ++ch) {
        EXPECT_LE(std::fabs(r.dgamma[ch] - derivative(gamma, ch)),
                  2 * BoundDgamma(per_channel, abs_dg[ch]) + 1e-12L)
            << "dgamma channel " << ch;
        EXPECT_LE(std::fabs(r.dbeta[ch] - derivative(beta, ch)),
                  2 * BoundDbeta(per_channel, abs_db[ch]) + 1e-12L)
            << "dbeta channel " << ch;
      }
    }
  }
}

// c == 0, n == 0 or spatial == 0: no-ops that write nothing, with or without pointers.
TEST_P(GroupNormTest, EmptyIsANoOp) {
  struct Empty {
    size_t n, c, spatial, groups;
  };
  Buffer x(8), dy(8), y(8), dx(8), stats(4), dgamma(4), dbeta(4);
  x.Fill(1.0f);
  dy.Fill(1.0f);
  for (nk_layout layout : kLayouts) {
    for (Empty e : {Empty{0, 4, 5, 2}, Empty{3, 0, 5, 2}, Empty{2, 4, 0, 4}}) {
      SCOPED_TRACE(std::to_string(e.n) + " " + std::to_string(e.c) + " " +
                   std::to_string(e.spatial));
      EXPECT_EQ(nk_groupnorm_forward_f32(e.n, e.c, e.spatial, e.groups, layout, x.data(),
                                         x.data(), x.data(), 1e-5f, y.data(),
                                         stats.data(), dgamma.data()),
                NK_OK);
      EXPECT_EQ(
          nk_groupnorm_forward_f32(e.n, e.c, e.spatial, e.groups, layout, nullptr,
                                   nullptr, nullptr, 1e-5f, nullptr, nullptr, nullptr),
          NK_OK);
      EXPECT_EQ(nk_groupnorm_backward_f32(e.n, e.c, e.spatial, e.groups, layout, x.data(),
                                          dy.data(), x.data(), x.data(), x.data(),
                                          dx.data(), dgamma.data(), dbeta.data()),
                NK_OK);
      EXPECT_EQ(nk_groupnorm_backward_f32(e.n, e.c, e.spatial, e.groups, layout, nullptr,
                                          nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr),
                NK_OK);
    }
  }
  for (const Buffer* b : {&y, &dx, &stats, &dgamma, &dbeta}) {
    for (size_t i = 0; i < b->size(); ++i) EXPECT_TRUE(std::isnan((*b)[i])) << i;
  }
}

}  // namespace
}  // namespace nk_test
