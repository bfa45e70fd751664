// SPDX-License-Identifier: Apache-2.0
// test_layernorm_backward.cc: the LayerNorm family's backward under every ISA: dx,
// dgamma and dbeta within design.md's bound of the long-double reference, against a
// finite difference of the forward, at every alignment and aliasing, with non-finite
// rows, and the same bits for any thread count; every bad argument refused with
// nothing written.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rowgrad_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

class LayerNormBackwardTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(LayerNormBackwardTest);

TEST_P(LayerNormBackwardTest, EveryLengthUpTo67) {
  for (Op op : kAllOps) {
    for (size_t cols = 1; cols <= 67; ++cols) {
      GradCase c;
      c.op = op;
      c.rows = 5;
      c.cols = cols;
      CheckGradCase(c);
    }
  }
}

TEST_P(LayerNormBackwardTest, PrimesAndLongRows) {
  // 100003 columns: longer than a chunk (16384), whose sums are merged across chunks.
  for (Op op : kAllOps) {
    for (size_t cols : {97, 251, 1021, 4099, 100003}) {
      GradCase c;
      c.op = op;
      c.rows = cols > 10000 ? 2 : 7;
      c.cols = cols;
      CheckGradCase(c);
    }
  }
}

TEST_P(LayerNormBackwardTest, ManyRowsOfParts) {
  // Rows in parts of 4 (fewer than 64 rows), 16 or 32 (from 512), whose sums the
  // tree adds.
  for (Op op : kAllOps) {
    for (size_t rows : {1, 3, 4, 63, 64, 65, 257, 511, 512, 1000}) {
      GradCase c;
      c.op = op;
      c.rows = rows;
      c.cols = 48;
      CheckGradCase(c);
    }
  }
}

TEST_P(LayerNormBackwardTest, OptionalArguments) {
  for (Op op : kAllOps) {
    for (int mask = 0; mask < 16; ++mask) {
      GradCase c;
      c.op = op;
      c.rows = 9;
      c.cols = 37;
      c.gamma = mask & 1;
      c.dgamma = mask & 2;
      c.dbeta = mask & 4;
      c.dsum = mask & 8;
      CheckGradCase(c);
    }
  }
}

TEST_P(LayerNormBackwardTest, Misaligned) {
  // 67 rows of 304: parts of 16, whose later groups of rows add to dgamma and dbeta
  // where the first stored them, and rows at one offset from a vector boundary on
  // every target (their head and tail vectors overlap the aligned ones).
  for (Op op : kAllOps) {
    for (size_t misalign = 1; misalign < 16; misalign += 3) {
      for (size_t rows : {21, 67}) {
        GradCase c;
        c.op = op;
        c.rows = rows;
        c.cols = rows == 21 ? 301 : 304;
        c.misalign = misalign;
        CheckGradCase(c);
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, InPlace) {
  for (Op op : kAllOps) {
    for (GradAlias alias : {GradAlias::kDxIsDy, GradAlias::kDxIsDsum}) {
      if (alias == GradAlias::kDxIsDsum && !Fused(op)) continue;
      for (size_t cols : {5, 64, 1000}) {
        GradCase c;
        c.op = op;
        c.rows = cols == 1000 ? 67 : 13;
        c.cols = cols;
        c.alias = alias;
        c.misalign = cols % 3;
        CheckGradCase(c);
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, NonFiniteValuesStayInTheirRow) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity()};
  for (Op op : kAllOps) {
    for (float v : bad) {
      for (bool in_dy : {false, true}) {
        GradCase c;
        c.op = op;
        c.rows = 9;
        c.cols = 133;
        c.fill = [&](Buffer& x, Buffer& dy) { (in_dy ? dy : x)[4 * 133 + 17] = v; };
        const GradRun run = CheckGradCase(c, {4});
        // The row holding it: no finite dx where the formula gives none (an Inf in x
        // makes its rstd 0 and mean Inf; every x_hat is then NaN).
        size_t finite = 0;
        for (size_t i = 0; i < 133; ++i) finite += std::isfinite(run.dx[4 * 133 + i]);
        EXPECT_EQ(finite, 0u) << OpName(op) << " value " << v << " in_dy " << in_dy;
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, IllConditionedRows) {
  for (Op op : kAllOps) {
    GradCase c;
    c.op = op;
    c.rows = 6;
    c.cols = 4096;
    c.fill = [](Buffer& x, Buffer&) {
      std::mt19937 rng(11);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = 1e4f + dist(rng);
    };
    CheckGradCase(c);
  }
}

TEST_P(LayerNormBackwardTest, SortedRampOfALongRow) {
  // design.md: a sorted ramp over 100003 values breaks a sequential sum's bound.
  for (Op op : kAllOps) {
    GradCase c;
    c.op = op;
    c.rows = 1;
    c.cols = 100003;
    c.fill = [](Buffer& x, Buffer& dy) {
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = 1e4f + (-1.7f + 3.4f * static_cast<float>(i) / 100002.0f);
        dy[i] = 1.0f + static_cast<float>(i) / 100002.0f;
      }
    };
    CheckGradCase(c);
  }
}

TEST_P(LayerNormBackwardTest, LargeTensorsStream) {
  // x, dy and dx past 32 MiB together: dx takes non-temporal stores, at a line's
  // offset and NumPy's 16 bytes past it (where rows share lines), and in place there.
  for (Op op : {Op::kLayerNorm, Op::kAddRmsNorm}) {
    const GradAlias in_place = Fused(op) ? GradAlias::kDxIsDsum : GradAlias::kDxIsDy;
    for (size_t misalign : {0, 4}) {
      for (GradAlias alias : {GradAlias::kNone, in_place}) {
        if (misalign == 0 && alias != GradAlias::kNone) continue;
        GradCase c;
        c.op = op;
        c.rows = 1024;
        c.cols = 3072;
        c.misalign = misalign;
        c.alias = alias;
        CheckGradCase(c);
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, BitwiseEqualAcrossThreadCounts) {
  struct Shape {
    size_t rows, cols;
  };
  // Parts of 16 rows, parts of 4, chunked long rows, streamed tensors: each large
  // enough for 2 and 3 threads (the backward takes a thread per 65536 elements).
  for (Shape s : {Shape{200, 1000}, Shape{60, 2500}, Shape{3, 50000}, Shape{9, 16001},
                  Shape{1024, 3072}}) {
    for (Op op : kAllOps) {
      GradCase c;
      c.op = op;
      c.rows = s.rows;
      c.cols = s.cols;
      c.misalign = 1;
      const GradInputs in(c);
      nk_set_num_threads(1);
      const GradRun one = RunGradCase(c, in);
      for (int threads : {2, 3}) {
        ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
        const GradRun more = RunGradCase(c, in);
        EXPECT_TRUE(SameBits(one.dx, more.dx)) << c.Describe();
        EXPECT_TRUE(SameBits(one.dgamma, more.dgamma)) << c.Describe();
        EXPECT_TRUE(SameBits(one.dbeta, more.dbeta)) << c.Describe();
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, FiniteDifferencesOfTheForward) {
  // The loss sum(dy * y) of a forward written here, differentiated numerically in long
  // double: a wrong formula shared by the kernel and the reference shows here.
  for (Op op : kAllOps) {
    const bool center = Centered(op);
    for (size_t cols : {2, 3, 7, 16, 17}) {
      const size_t rows = 3;
      GradCase c;
      c.op = op;
      c.rows = rows;
      c.cols = cols;
      c.dsum = false;
      SCOPED_TRACE(c.Describe());
      const GradRun run = RunGradCase(c);
      const long double eps = 1e-5L;
      std::vector<long double> gamma(cols), beta(cols, 0.25L);
      for (size_t i = 0; i < cols; ++i) gamma[i] = run.gamma[i];
      std::vector<long double> fd_gamma(cols, 0), fd_beta(cols, 0), abs_dg(cols, 0),
          abs_db(cols, 0);
      for (size_t r = 0; r < rows; ++r) {
        std::vector<long double> x(cols);
        for (size_t i = 0; i < cols; ++i) x[i] = run.x[r * cols + i];
        std::vector<long double> dy(cols);
        for (size_t i = 0; i < cols; ++i) dy[i] = run.dy[r * cols + i];
        const auto loss = [&](const std::vector<long double>& xs,
                              const std::vector<long double>& g,
                              const std::vector<long double>& b) {
          const std::vector<long double> y =
              ForwardLd(center, cols, xs.data(), g.data(), b.data(), eps);
          long double l = 0;
          for (size_t i = 0; i < cols; ++i) l += dy[i] * y[i];
          return l;
        };
        const long double h = 1e-6L;
        const RowGradRef ref = ReferenceRowGrad(
            center, cols, run.x.data() + r * cols, run.dy.data() + r * cols, nullptr,
            run.mean[r], run.rstd[r], run.gamma.data());
        for (size_t i = 0; i < cols; ++i) {
          abs_dg[i] += std::fabs(ref.dgamma_term[i]);
          abs_db[i] += std::fabs(dy[i]);
          std::vector<long double> xp = x, xm = x;
          xp[i] += h;
          xm[i] -= h;
          const long double fd = (loss(xp, gamma, beta) - loss(xm, gamma, beta)) / (2 * h);
          EXPECT_LE(std::fabs(run.dx[r * cols + i] - fd), 2 * ref.dx_bound[i])
              << "dx row " << r << " col " << i << ": " << run.dx[r * cols + i]
              << " finite difference " << static_cast<double>(fd);
          std::vector<long double> gp = gamma, gm = gamma, bp = beta, bm = beta;
          gp[i] += h;
          gm[i] -= h;
          bp[i] += h;
          bm[i] -= h;
          fd_gamma[i] += (loss(x, gp, beta) - loss(x, gm, beta)) / (2 * h);
          fd_beta[i] += (loss(x, gamma, bp) - loss(x, gamma, bm)) / (2 * h);
        }
      }
      for (size_t i = 0; i < cols; ++i) {
        EXPECT_LE(std::fabs(run.dgamma[i] - fd_gamma[i]),
                  2 * BoundDgamma(rows, abs_dg[i]))
            << "dgamma col " << i;
        if (center) {
          EXPECT_LE(std::fabs(run.dbeta[i] - fd_beta[i]), 2 * BoundDbeta(rows, abs_db[i]))
              << "dbeta col " << i;
        }
      }
    }
  }
}

TEST_P(LayerNormBackwardTest, StridedFormsGiveTheContiguousBits) {
  const size_t rows = 37, cols = 300, ld = 333;
  Buffer x(rows * ld), dy(rows * ld), dsum(rows * ld), gamma(cols), mean(rows),
      rstd(rows);
  FillNormal(x, 1);
  FillNormal(dy, 2);
  FillNormal(dsum, 3);
  FillNormal(gamma, 4, 1.0f, 0.25f);
  FillNormal(mean, 5, 0.0f, 0.1f);
  FillNormal(rstd, 6, 1.0f, 0.1f);
  const auto pack = [&](const Buffer& b) {
    std::vector<float> v(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(&v[r * cols], b.data() + r * ld, cols * sizeof(float));
    }
    return v;
  };
  const std::vector<float> xc = pack(x), dyc = pack(dy), dsc = pack(dsum);
  for (Op op : kAllOps) {
    SCOPED_TRACE(OpName(op));
    std::vector<float> dx1(rows * cols), dg1(cols), db1(cols), dg2(cols), db2(cols);
    Buffer dx2(rows * ld);
    nk_status s1 = NK_OK, s2 = NK_OK;
    switch (op) {
      case Op::kLayerNorm:
        s1 = nk_layernorm_backward_f32(rows, cols, xc.data(), dyc.data(), mean.data(),
                                       rstd.data(), gamma.data(), dx1.data(), dg1.data(),
                                       db1.data());
        s2 = nk_layernorm_backward_strided_f32(rows, cols, x.data(), ld, dy.data(), ld,
                                               mean.data(), rstd.data(), gamma.data(),
                                               dx2.data(), ld, dg2.data(), db2.data());
        break;
      case Op::kRmsNorm:
        s1 = nk_rmsnorm_backward_f32(rows, cols, xc.data(), dyc.data(), rstd.data(),
                                     gamma.data(), dx1.data(), dg1.data());
        s2 = nk_rmsnorm_backward_strided_f32(rows, cols, x.data(), ld, dy.data(), ld,
                                             rstd.data(), gamma.data(), dx2.data(), ld,
                                             dg2.data());
        break;
      case Op::kAddLayerNorm:
        s1 = nk_add_layernorm_backward_f32(rows, cols, xc.data(), dyc.data(), dsc.data(),
                                           mean.data(), rstd.data(), gamma.data(),
                                           dx1.data(), dg1.data(), db1.data());
        s2 = nk_add_layernorm_backward_strided_f32(
            rows, cols, x.data(), ld, dy.data(), ld, dsum.data(), ld, mean.data(),
            rstd.data(), gamma.data(), dx2.data(), ld, dg2.data(), db2.data());
        break;
      case Op::kAddRmsNorm:
        s1 = nk_add_rmsnorm_backward_f32(rows, cols, xc.data(), dyc.data(), dsc.data(),
                                         rstd.data(), gamma.data(), dx1.data(),
                                         dg1.data());
        s2 = nk_add_rmsnorm_backward_strided_f32(rows, cols, x.data(), ld, dy.data(), ld,
                                                 dsum.data(), ld, rstd.data(),
                                                 gamma.data(), dx2.data(), ld, dg2.data());
        break;
    }
    ASSERT_EQ(s1, NK_OK) << nk_last_error();
    ASSERT_EQ(s2, NK_OK) << nk_last_error();
    EXPECT_TRUE(SameBits(dx1, pack(dx2)));
    EXPECT_TRUE(SameBits(dg1, dg2));
    if (Centered(op)) {
      EXPECT_TRUE(SameBits(db1, db2));
    }
    for (size_t r = 0; r < rows; ++r) {  // between rows: untouched
      for (size_t i = cols; i < ld && r + 1 < rows; ++i) {
        EXPECT_TRUE(std::isnan(dx2[r * ld + i])) << "row " << r << " col " << i;
      }
    }
  }
}

}  // namespace
}  // namespace nk_test
