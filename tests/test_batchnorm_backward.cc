// SPDX-License-Identifier: Apache-2.0
// test_batchnorm_backward.cc: BatchNorm's backward under every ISA, whole and through
// the SyncBatchNorm steps (reduce, sum over shards, apply): dx, dgamma and dbeta within
// design.md's bound of the long-double reference and of a finite difference of the
// forward, in both layouts, at every alignment, in place, with non-finite channels,
// and the same bits for any thread count.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "bngrad_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

class BatchNormBackwardTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(BatchNormBackwardTest);

constexpr nk_layout kLayouts[] = {NK_LAYOUT_NCHW, NK_LAYOUT_NHWC};

TEST_P(BatchNormBackwardTest, ShapeGrid) {
  // c = 1, spatial = 1, n = 1 with spatial > 1, planes shorter than a vector.
  for (nk_layout layout : kLayouts) {
    for (size_t n : {1, 2, 5}) {
      for (size_t c : {1, 3, 16, 17}) {
        for (size_t spatial : {1, 2, 7, 49, 67}) {
          BnGradCase k;
          k.n = n;
          k.c = c;
          k.spatial = spatial;
          k.layout = layout;
          CheckBnGradCase(k);
        }
      }
    }
  }
}

TEST_P(BatchNormBackwardTest, EveryChannelCountAndSpatialUpTo67) {
  for (size_t v = 1; v <= 67; ++v) {
    BnGradCase planes;  // NCHW planes of every length
    planes.n = 3;
    planes.spatial = v;
    CheckBnGradCase(planes);
    BnGradCase columns;  // NHWC rows of every width (narrow ones widened)
    columns.layout = NK_LAYOUT_NHWC;
    columns.n = 3;
    columns.c = v;
    columns.spatial = 7;
    CheckBnGradCase(columns);
  }
}

TEST_P(BatchNormBackwardTest, LongPlanesAndChannels) {
  // 4099-element planes; planes longer than a piece (16384), cut into chunks; NHWC
  // channels of many chunks of rows.
  struct Shape {
    size_t n, c, spatial;
  };
  for (nk_layout layout : kLayouts) {
    for (Shape s : {Shape{3, 2, 4099}, Shape{2, 2, 16385}, Shape{1, 1, 100003},
                    Shape{40, 5, 3001}}) {
      BnGradCase k;
      k.n = s.n;
      k.c = s.c;
      k.spatial = s.spatial;
      k.layout = layout;
      CheckBnGradCase(k);
    }
  }
}

TEST_P(BatchNormBackwardTest, OptionalArguments) {
  for (nk_layout layout : kLayouts) {
    for (int mask = 0; mask < 8; ++mask) {
      BnGradCase k;
      k.layout = layout;
      k.n = 4;
      k.c = 19;
      k.spatial = 23;
      k.gamma = mask & 1;
      k.dgamma = mask & 2;
      k.dbeta = mask & 4;
      CheckBnGradCase(k);
    }
  }
}

TEST_P(BatchNormBackwardTest, MisalignedAndInPlace) {
  for (nk_layout layout : kLayouts) {
    for (size_t misalign = 0; misalign < 16; misalign += 3) {
      for (bool in_place : {false, true}) {
        BnGradCase k;
        k.layout = layout;
        k.n = 3;
        k.c = 32;
        k.spatial = 41;
        k.misalign = misalign;
        k.in_place = in_place;
        CheckBnGradCase(k);
      }
    }
  }
}

TEST_P(BatchNormBackwardTest, NonFiniteValuesStayInTheirChannel) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity()};
  for (nk_layout layout : kLayouts) {
    for (float v : bad) {
      for (bool in_dy : {false, true}) {
        BnGradCase k;
        k.layout = layout;
        k.n = 3;
        k.c = 7;
        k.spatial = 45;
        k.fill = [&](Buffer& x, Buffer& dy) { (in_dy ? dy : x)[k.Index(4, 77)] = v; };
        const BnGradRun r = CheckBnGradCase(k);
        size_t finite = 0;  // no finite dx in channel 4; the others checked above
        for (size_t j = 0; j < k.count(); ++j)
          finite += std::isfinite(r.dx[k.Index(4, j)]);
        EXPECT_EQ(finite, 0u) << k.Describe() << " value " << v << " in_dy " << in_dy;
      }
    }
  }
}

TEST_P(BatchNormBackwardTest, IllConditionedAndSortedRamp) {
  for (nk_layout layout : kLayouts) {
    BnGradCase k;  // 1e4 + N(0, 1)
    k.layout = layout;
    k.n = 8;
    k.c = 6;
    k.spatial = 500;
    k.fill = [](Buffer& x, Buffer&) {
      std::mt19937 rng(5);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = 1e4f + dist(rng);
    };
    CheckBnGradCase(k);
    BnGradCase ramp;  // design.md: a sorted ramp of 100003 values in one channel
    ramp.layout = layout;
    ramp.n = 1;
    ramp.c = 1;
    ramp.spatial = 100003;
    ramp.fill = [](Buffer& x, Buffer& dy) {
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = 1e4f + (-1.7f + 3.4f * static_cast<float>(i) / 100002.0f);
        dy[i] = 1.0f + static_cast<float>(i) / 100002.0f;
      }
    };
    CheckBnGradCase(ramp);
  }
}

TEST_P(BatchNormBackwardTest, HugeAndTinyValues) {
  // |x| ~ 1e25 (rstd ~ 1e-25) and ~ 1e-25 with eps 0 (rstd ~ 1e25): x_hat is formed
  // per element; a folded rstd^2 factor under- or overflows fp32 there.
  for (nk_layout layout : kLayouts) {
    for (float scale : {1e25f, 1e-25f}) {
      BnGradCase k;
      k.layout = layout;
      k.n = 3;
      k.c = 5;
      k.spatial = 37;
      k.eps = scale < 1.0f ? 0.0f : 1e-5f;
      k.fill = [scale](Buffer& x, Buffer&) {
        for (size_t i = 0; i < x.size(); ++i) x[i] *= scale;
      };
      CheckBnGradCase(k);
    }
  }
}

TEST_P(BatchNormBackwardTest, LargeTensorsStream) {
  // x, dy and dx past 32 MiB together: lines asked for ahead, dx streamed, at a
  // line's offset and NumPy's 16 bytes past it.
  for (nk_layout layout : kLayouts) {
    for (size_t misalign : {0, 4}) {
      BnGradCase k;
      k.layout = layout;
      k.n = 32;
      k.c = 64;
      k.spatial = 56 * 56;
      k.misalign = misalign;
      CheckBnGradCase(k);
    }
  }
}

TEST_P(BatchNormBackwardTest, ShardsThroughReduceAndApply) {
  // SyncBatchNorm: 1, 2, 3 shards (one of them empty for n = 2) within the bound of
  // the whole batch; one shard gives the whole backward's bits.
  struct Shape {
    size_t n, c, spatial;
  };
  for (nk_layout layout : kLayouts) {
    for (Shape s : {Shape{2, 5, 49}, Shape{6, 3, 300}, Shape{7, 64, 9}}) {
      for (size_t shards : {1, 2, 3}) {
        BnGradCase k;
        k.layout = layout;
        k.n = s.n;
        k.c = s.c;
        k.spatial = s.spatial;
        k.shards = shards;
        k.misalign = shards;
        const BnGradRun sharded = CheckBnGradCase(k);
        if (shards != 1) continue;
        k.shards = 0;
        const BnGradRun whole = RunBnGrad(k);
        EXPECT_TRUE(SameBits(whole.dx, sharded.dx)) << k.Describe();
        EXPECT_TRUE(SameBits(whole.dgamma, sharded.dgamma)) << k.Describe();
        EXPECT_TRUE(SameBits(whole.dbeta, sharded.dbeta)) << k.Describe();
      }
    }
  }
}

TEST_P(BatchNormBackwardTest, BitwiseEqualAcrossThreadCounts) {
  struct Shape {
    size_t n, c, spatial;
  };
  // Whole channels per thread (c = 64), every piece summed in parallel (c = 2, 3),
  // long planes in chunks, NHWC chunks of rows, and a streamed tensor; streamed
  // (NK_STREAM_BYTES), one thread sums short planes in memory order (200x3x200: pieces
  // of 81, 81 and 38 samples).
  for (nk_layout layout : kLayouts) {
    for (Shape s : {Shape{32, 64, 49}, Shape{64, 2, 300}, Shape{3, 3, 40000},
                    Shape{16, 17, 1000}, Shape{16, 64, 56 * 56}, Shape{200, 3, 200}}) {
      BnGradCase k;
      k.layout = layout;
      k.n = s.n;
      k.c = s.c;
      k.spatial = s.spatial;
      k.misalign = 1;
      const BnGradInputs in(k);
      for (size_t shards : {0, 2}) {
        k.shards = shards;
        nk_set_num_threads(1);
        const BnGradRun one = RunBnGrad(k, in);
        ASSERT_EQ(one.status, NK_OK) << nk_last_error();
        for (int threads : {2, 3}) {
          ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
          const BnGradRun more = RunBnGrad(k, in);
          EXPECT_TRUE(SameBits(one.dx, more.dx)) << k.Describe();
          EXPECT_TRUE(SameBits(one.dgamma, more.dgamma)) << k.Describe();
          EXPECT_TRUE(SameBits(one.dbeta, more.dbeta)) << k.Describe();
        }
      }
    }
  }
}

TEST_P(BatchNormBackwardTest, FiniteDifferencesOfTheForward) {
  // The loss sum(dy * y) of a forward written here, differentiated numerically in long
  // double: a wrong formula shared by the kernel and the reference shows here.
  for (nk_layout layout : kLayouts) {
    for (size_t spatial : {1, 3, 17}) {
      BnGradCase k;
      k.layout = layout;
      k.n = 3;
      k.c = 2;
      k.spatial = spatial;
      SCOPED_TRACE(k.Describe());
      const BnGradRun r = RunBnGrad(k);
      ASSERT_EQ(r.status, NK_OK) << nk_last_error();
      const size_t m = k.count();
      for (size_t ci = 0; ci < k.c; ++ci) {
        std::vector<long double> x(m), dy(m);
        std::vector<float> xs(m), dys(m), gs(m, r.gamma[ci]);
        for (size_t j = 0; j < m; ++j) {
          x[j] = xs[j] = r.x[k.Index(ci, j)];
          dy[j] = dys[j] = r.dy[k.Index(ci, j)];
        }
        const long double gamma = r.gamma[ci], beta = 0.25L;
        const auto loss = [&](const std::vector<long double>& xv, long double g,
                              long double b) {
          const std::vector<long double> gv(m, g), bv(m, b);
          const std::vector<long double> y =
              ForwardLd(true, m, xv.data(), gv.data(), bv.data(), k.eps);
          long double l = 0;
          for (size_t j = 0; j < m; ++j) l += dy[j] * y[j];
          return l;
        };
        const RowGradRef ref = ReferenceRowGrad(true, m, xs.data(), dys.data(), nullptr,
                                                r.mean[ci], r.rstd[ci], gs.data());
        const long double h = 1e-6L;
        long double abs_dg = 0, abs_db = 0;
        for (size_t j = 0; j < m; ++j) {
          abs_dg += std::fabs(ref.dgamma_term[j]);
          abs_db += std::fabs(dy[j]);
          std::vector<long double> xp = x, xm = x;
          xp[j] += h;
          xm[j] -= h;
          const long double fd =
              (loss(xp, gamma, beta) - loss(xm, gamma, beta)) / (2 * h);
          EXPECT_LE(std::fabs(r.dx[k.Index(ci, j)] - fd), 2 * ref.dx_bound[j])
              << "dx channel " << ci << " element " << j;
        }
        const long double fd_gamma =
            (loss(x, gamma + h, beta) - loss(x, gamma - h, beta)) / (2 * h);
        const long double fd_beta =
            (loss(x, gamma, beta + h) - loss(x, gamma, beta - h)) / (2 * h);
        EXPECT_LE(std::fabs(r.dgamma[ci] - fd_gamma), 2 * BoundDgamma(m, abs_dg) + 1e-12L)
            << "dgamma channel " << ci;
        EXPECT_LE(std::fabs(r.dbeta[ci] - fd_beta), 2 * BoundDbeta(m, abs_db) + 1e-12L)
            << "dbeta channel " << ci;
      }
    }
  }
}

}  // namespace
}  // namespace nk_test
