// SPDX-License-Identifier: Apache-2.0
// test_layernorm.cc: the four LayerNorm-family forwards against the long-double
// reference, under every ISA: tails, alignment, optional arguments, in place, non-finite
// and ill-conditioned rows, thread-count independence, and the seed document's example.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "reference.h"
#include "rownorm_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

class LayerNormTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(LayerNormTest);

// Runs c with 1, 2 and 3 threads and expects the same bits in every output.
void ExpectSameBitsForThreadCounts(const Case& c) {
  const Inputs in(c);
  Result first;
  for (int threads : {1, 2, 3}) {
    ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
    SCOPED_TRACE(c.Describe());
    const Result r = RunCase(c, in);
    if (threads == 1) {
      first = r;
      continue;
    }
    ASSERT_TRUE(SameBits(r.y, first.y));
    ASSERT_TRUE(SameBits(r.sum, first.sum));
    ASSERT_TRUE(SameBits(r.rstd, first.rstd));
    ASSERT_TRUE(SameBits(r.mean, first.mean));
  }
}

TEST_P(LayerNormTest, EveryLengthUpTo67) {
  for (Op op : kAllOps) {
    for (size_t cols = 1; cols <= 67; ++cols) {
      Case c;
      c.op = op;
      c.rows = 3;
      c.cols = cols;
      c.misalign = cols % 4;
      ASSERT_GE(CheckCase(c), 0);
    }
  }
}

TEST_P(LayerNormTest, PrimesAndLongRows) {
  for (Op op : kAllOps) {
    for (size_t cols : {97, 127, 251, 257, 509, 1021, 4093, 4096, 16411, 100003}) {
      Case c;
      c.op = op;
      c.rows = cols > 20000 ? 2 : 5;
      c.cols = cols;
      c.misalign = 1;
      ASSERT_GE(CheckCase(c), 0);
    }
  }
}

TEST_P(LayerNormTest, OptionalGammaBetaAndStatistics) {
  for (Op op : kAllOps) {
    for (size_t cols : {5, 64, 300}) {
      for (int mask = 0; mask < 8; ++mask) {
        Case c;
        c.op = op;
        c.rows = 4;
        c.cols = cols;
        c.gamma = mask & 1;
        c.beta = mask & 2;
        c.stats = mask & 4;
        ASSERT_GE(CheckCase(c), 0);
      }
    }
  }
}

// An absent gamma is ones and an absent beta adds nothing: the same bits as passing
// ones and -0.0, signed zeros included (a constant row's x_hat is +0, and with no beta
// y takes gamma's sign, as x_hat * weight does in PyTorch). Short rows, groups, long
// rows.
TEST_P(LayerNormTest, AbsentGammaBetaAreOnesAndNegativeZero) {
  for (Op op : kAllOps) {
    for (size_t cols : {5, 64, 256, 300, 1024, 20000}) {
      const size_t rows = 6, n = rows * cols;
      Buffer x(n), res(n), gamma(cols), beta(cols), ones(cols), zeros(cols);
      FillNormal(x, Seed(cols));
      FillNormal(res, Seed(cols + 1));
      FillNormal(gamma, Seed(cols + 2));
      FillNormal(beta, Seed(cols + 3));
      ones.Fill(1.0f);
      zeros.Fill(-0.0f);
      for (size_t i = 0; i < cols; ++i) {
        x[i] = 2.5f;  // row 0 constant: x_hat is +0
        res[i] = 0.0f;
        x[cols + i] = i % 3 == 0 ? 0.0f : x[cols + i];  // row 1: zeros for RMSNorm
        res[cols + i] = 0.0f;
      }
      const auto run = [&](const float* g, const float* b) {
        Buffer y(n), sum(n), mean(rows), rstd(rows);
        EXPECT_EQ(CallOp(op, rows, cols, x.data(), Fused(op) ? res.data() : nullptr, g, b,
                         1e-5f, Fused(op) ? sum.data() : nullptr, y.data(), mean.data(),
                         rstd.data()),
                  NK_OK);
        return std::vector<float>(y.data(), y.data() + n);
      };
      SCOPED_TRACE(std::string(OpName(op)) + " cols " + std::to_string(cols));
      const bool center = Centered(op);
      const std::vector<float> with_gamma = run(gamma.data(), nullptr);
      EXPECT_TRUE(SameBits(run(nullptr, nullptr),
                           run(ones.data(), center ? zeros.data() : nullptr)));
      EXPECT_TRUE(
          SameBits(with_gamma, run(gamma.data(), center ? zeros.data() : nullptr)));
      if (center) {
        EXPECT_TRUE(SameBits(run(nullptr, beta.data()), run(ones.data(), beta.data())));
      }
      for (size_t i = 0; i < cols; ++i) {  // the zeros of x_hat: row 0, or row 1's
        const size_t at = center ? i : cols + i;
        if (!center && i % 3 != 0) continue;
        ASSERT_EQ(with_gamma[at], 0.0f) << "col " << i;
        ASSERT_EQ(std::signbit(with_gamma[at]), std::signbit(gamma[i])) << "col " << i;
      }
    }
  }
}

TEST_P(LayerNormTest, Misaligned) {
  for (Op op : kAllOps) {
    for (size_t misalign : {0, 1, 2, 3, 5, 7, 15}) {
      Case c;
      c.op = op;
      c.rows = 3;
      c.cols = 129;
      c.misalign = misalign;
      ASSERT_GE(CheckCase(c), 0);
    }
  }
}

TEST_P(LayerNormTest, InPlace) {
  for (Op op : kAllOps) {
    for (size_t cols : {3, 64, 1000, 20000}) {
      std::vector<Alias> aliases = {Alias::kYIsX};
      if (Fused(op)) aliases = {Alias::kYIsX, Alias::kSumXYRes, Alias::kSumResYX,
                                Alias::kNoSum};
      for (Alias a : aliases) {
        Case c;
        c.op = op;
        c.rows = 3;
        c.cols = cols;
        c.alias = a;
        ASSERT_GE(CheckCase(c), 0);
      }
    }
  }
}

TEST_P(LayerNormTest, NonFiniteValuesStayInTheirRow) {
  for (Op op : kAllOps) {
    for (size_t cols : {1, 7, 64, 333}) {
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        Case c;
        c.op = op;
        c.rows = 4;
        c.cols = cols;
        // Row 1 has one bad value, row 2 is bad throughout; rows 0 and 3 are clean.
        c.fill = [&](Buffer& x, Buffer&) {
          x[1 * cols + cols / 2] = bad;
          for (size_t i = 0; i < cols; ++i) x[2 * cols + i] = bad;
        };
        ASSERT_GE(CheckCase(c), 0);
      }
    }
  }
}

// A constant row has mean == the constant exactly and y == beta exactly.
TEST_P(LayerNormTest, ConstantRowsGiveExactlyBeta) {
  for (Op op : {Op::kLayerNorm, Op::kAddLayerNorm}) {
    for (size_t cols : {1, 2, 3, 16, 17, 64, 128, 255, 256, 4096, 100003}) {
      // Sums of the last two overflow: the rescaled path, where eps * scale^2 underflows.
      for (float v : {0.0f, 0.1f, -7.25f, 3.3e5f, 1e30f, 1e-30f, -2.6e38f, 3.4e38f}) {
        Case c;
        c.op = op;
        c.rows = cols <= 256 ? 5 : 2;  // short rows: a group of four and one alone
        c.cols = cols;
        c.fill = [&](Buffer& x, Buffer& r) {
          x.Fill(v);
          r.Fill(0.0f);
        };
        const Inputs in(c);
        const Result r = RunCase(c, in);
        SCOPED_TRACE(c.Describe());
        for (size_t row = 0; row < c.rows; ++row) {
          ASSERT_TRUE(SameBits(r.mean[row], v)) << r.mean[row] << " vs " << v;
          ASSERT_EQ(r.rstd[row], 1.0f / std::sqrt(1e-5f));
          for (size_t i = 0; i < cols; ++i) {
            ASSERT_EQ(r.y[row * cols + i], in.beta[i]) << "col " << i;
          }
        }
      }
    }
  }
}

TEST_P(LayerNormTest, IllConditionedRows) {
  for (Op op : kAllOps) {
    for (size_t cols : {64, 4096, 100003}) {
      Case c;
      c.op = op;
      c.rows = 2;
      c.cols = cols;
      c.fill = [&](Buffer& x, Buffer& r) {
        FillNormal(x, Seed(cols), 1e4f, 1.0f);
        r.Fill(0.0f);
      };
      ASSERT_GE(CheckCase(c), 0);
    }
  }
}

// One Welford chain per lane over a long sorted ramp drifts beyond the bound; the
// pairwise tree does not.
TEST_P(LayerNormTest, SortedRamp) {
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm}) {
    Case c;
    c.op = op;
    c.rows = 1;
    c.cols = 100003;
    c.fill = [&](Buffer& x, Buffer&) {
      for (size_t i = 0; i < c.cols; ++i) {
        x[i] = static_cast<float>(1e4 + (-1.7 + 3.4 * i / (c.cols - 1)));
      }
    };
    ASSERT_GE(CheckCase(c), 0);
  }
}

// Cached rows are normalized in groups sharing gamma / beta loads: groups and the rows
// left after them, column tails, a misaligned or in-place y, without gamma / beta, and
// a group holding a rescaled (1e30), a NaN, a constant and an ill-conditioned row.
TEST_P(LayerNormTest, RowGroups) {
  for (Op op : kAllOps) {
    for (size_t cols : {1, 5, 16, 17, 67, 333, 1024}) {
      for (size_t rows : {4, 7, 9, 17}) {
        for (int variant = 0; variant < 3; ++variant) {
          Case c;
          c.op = op;
          c.rows = rows;
          c.cols = cols;
          c.misalign = variant == 1 ? 3 : 0;
          c.gamma = c.beta = variant != 2;
          if (variant == 2) c.alias = Alias::kYIsX;
          c.fill = [&](Buffer& x, Buffer& r) {
            FillNormal(x, Seed(cols * 31 + rows), 0.0f, 1.0f);
            for (size_t i = 0; i < cols; ++i) {
              x[1 * cols + i] *= 1e30f;
              x[2 * cols + i] = 2.5f;
              x[3 * cols + i] = 1e4f + x[3 * cols + i];
            }
            if (rows > 5) x[5 * cols + cols / 2] = NAN;
            r.Fill(0.0f);
          };
          ASSERT_GE(CheckCase(c), 0);
        }
      }
    }
  }
}

// gamma / beta not aligned to a cache line are copied to aligned memory for calls with
// many rows: the same bits as with aligned ones, gamma or beta alone, and rows too long
// to be copied.
TEST_P(LayerNormTest, MisalignedParamsGiveTheSameBits) {
  for (Op op : kAllOps) {
    for (size_t cols : {1, 17, 256, 1000, 16384, 16385}) {
      const size_t rows = cols > 1000 ? 16 : 33;
      const size_t n = rows * cols;
      const bool fused = Fused(op);
      Buffer x(n), res(n), gamma(cols), beta(cols), gamma_off(cols, 3), beta_off(cols, 5);
      FillNormal(x, Seed(cols));
      FillNormal(res, Seed(cols + 1), 0.0f, 0.5f);
      FillNormal(gamma, Seed(cols + 2), 1.0f, 0.25f);
      FillNormal(beta, Seed(cols + 3), 0.0f, 0.5f);
      gamma_off.CopyFrom(gamma);
      beta_off.CopyFrom(beta);
      for (int which = 0; which < 3; ++which) {  // both, gamma only, beta only
        const bool has_gamma = which != 2, has_beta = which != 1;
        Buffer y(n), y_off(n), sum(n), sum_off(n), mean(rows), mean_off(rows), rstd(rows),
            rstd_off(rows);
        const auto call = [&](const float* g, const float* b, Buffer& s, Buffer& out,
                              Buffer& m, Buffer& r) {
          return CallOp(op, rows, cols, x.data(), fused ? res.data() : nullptr,
                        has_gamma ? g : nullptr, has_beta ? b : nullptr, 1e-5f,
                        fused ? s.data() : nullptr, out.data(), m.data(), r.data());
        };
        ASSERT_EQ(call(gamma.data(), beta.data(), sum, y, mean, rstd), NK_OK);
        ASSERT_EQ(call(gamma_off.data(), beta_off.data(), sum_off, y_off, mean_off,
                       rstd_off), NK_OK);
        SCOPED_TRACE(std::string(OpName(op)) + " cols=" + std::to_string(cols) +
                     " which=" + std::to_string(which));
        ASSERT_EQ(std::memcmp(y.data(), y_off.data(), n * sizeof(float)), 0);
        ASSERT_EQ(std::memcmp(rstd.data(), rstd_off.data(), rows * sizeof(float)), 0);
      }
    }
  }
}

// gamma / beta at the page offset of rows whose stride is whole pages (so in the L1
// sets of every row) are copied away from them for calls with many rows: the same bits
// as gamma / beta elsewhere, at a line's start and at NumPy's 16 bytes.
TEST_P(LayerNormTest, ParamsInTheRowsCacheSetsGiveTheSameBits) {
  constexpr size_t kPageFloats = 4096 / sizeof(float);
  for (Op op : kAllOps) {
    for (size_t cols : {1024, 2048}) {
      for (size_t off : {0, 4}) {
        const size_t rows = 19, n = rows * cols;
        const bool fused = Fused(op);
        // x, residual, sum, y, gamma, beta one after another from a page (+ off), each
        // a multiple of a page long: every one at the same page offset.
        Buffer arena(4 * n + 2 * cols + 2 * kPageFloats);
        const size_t lead = (kPageFloats - reinterpret_cast<uintptr_t>(arena.data()) %
                                               4096 / sizeof(float)) %
                            kPageFloats;
        float* x = arena.data() + lead + off;
        float* res = x + n;
        float* sum = res + n;
        float* y = sum + n;
        float* gamma = y + n;
        float* beta = gamma + cols;
        Buffer xb(n), resb(n), gb(cols), bb(cols);
        FillNormal(xb, Seed(cols), 3.0f, 2.0f);
        FillNormal(resb, Seed(cols + 1), 0.0f, 0.5f);
        FillNormal(gb, Seed(cols + 2), 1.0f, 0.25f);
        FillNormal(bb, Seed(cols + 3), 0.0f, 0.5f);
        for (int which = 0; which < 3; ++which) {  // both, gamma only, beta only
          const bool has_gamma = which != 2, has_beta = which != 1;
          std::copy(xb.data(), xb.data() + n, x);
          std::copy(resb.data(), resb.data() + n, res);
          std::copy(gb.data(), gb.data() + cols, gamma);
          std::copy(bb.data(), bb.data() + cols, beta);
          Buffer want(n), want_sum(n), want_mean(rows), want_rstd(rows), mean(rows),
              rstd(rows);
          ASSERT_EQ(
              CallOp(op, rows, cols, xb.data(), fused ? resb.data() : nullptr,
                     has_gamma ? gb.data() : nullptr, has_beta ? bb.data() : nullptr,
                     1e-5f, fused ? want_sum.data() : nullptr, want.data(),
                     want_mean.data(), want_rstd.data()),
              NK_OK);
          ASSERT_EQ(CallOp(op, rows, cols, x, fused ? res : nullptr,
                           has_gamma ? gamma : nullptr, has_beta ? beta : nullptr, 1e-5f,
                           fused ? sum : nullptr, y, mean.data(), rstd.data()),
                    NK_OK);
          SCOPED_TRACE(std::string(OpName(op)) + " cols=" + std::to_string(cols) +
                       " off=" + std::to_string(off) + " which=" + std::to_string(which));
          ASSERT_EQ(std::memcmp(want.data(), y, n * sizeof(float)), 0);
          if (fused) {
            ASSERT_EQ(std::memcmp(want_sum.data(), sum, n * sizeof(float)), 0);
          }
          ASSERT_EQ(std::memcmp(want_rstd.data(), rstd.data(), rows * sizeof(float)), 0);
          // gamma / beta are read, not written.
          ASSERT_EQ(std::memcmp(gb.data(), gamma, cols * sizeof(float)), 0);
          ASSERT_EQ(std::memcmp(bb.data(), beta, cols * sizeof(float)), 0);
        }
      }
    }
  }
}

// The bits do not depend on where the tensors lie: every element is assigned to its
// lane and block by its column, whatever the pointers' offsets from a cache line (as
// NumPy's 16 bytes), so a copy of the input at another address gives the same outputs.
TEST_P(LayerNormTest, SameBitsAtAnyAddress) {
  for (Op op : kAllOps) {
    for (size_t cols : {16, 64, 100, 256, 1024, 4096, 4099, 20000}) {
      const size_t rows = cols > 1024 ? 5 : 33;
      const size_t n = rows * cols;
      const bool fused = Fused(op);
      const auto run = [&](size_t off, Buffer& y, Buffer& sum, Buffer& mean,
                           Buffer& rstd) {
        Buffer x(n, off), res(n, off);
        Buffer gamma(cols, (off * 5) % 16), beta(cols, (off * 3) % 16);
        FillOperands(x, res, gamma, beta, cols);
        return CallOp(op, rows, cols, x.data(), fused ? res.data() : nullptr,
                      gamma.data(), beta.data(), 1e-5f, fused ? sum.data() : nullptr,
                      y.data(), mean.data(), rstd.data());
      };
      Buffer y(n), sum(n), mean(rows), rstd(rows);
      ASSERT_EQ(run(0, y, sum, mean, rstd), NK_OK);
      // Outputs at the inputs' offset (stored from their first vector boundary on) and
      // at another one.
      for (size_t off : {1, 4, 7, 15}) {
        for (size_t out : {off, (off + 3) % 16}) {
          Buffer y_off(n, out), sum_off(n, out), mean_off(rows, out), rstd_off(rows, out);
          ASSERT_EQ(run(off, y_off, sum_off, mean_off, rstd_off), NK_OK);
          SCOPED_TRACE(std::string(OpName(op)) + " cols=" + std::to_string(cols) +
                       " offset=" + std::to_string(off) +
                       " outputs=" + std::to_string(out));
          ASSERT_EQ(std::memcmp(y.data(), y_off.data(), n * sizeof(float)), 0);
          if (fused) {
            ASSERT_EQ(std::memcmp(sum.data(), sum_off.data(), n * sizeof(float)), 0);
          }
          ASSERT_EQ(std::memcmp(rstd.data(), rstd_off.data(), rows * sizeof(float)), 0);
          if (Centered(op)) {
            ASSERT_EQ(std::memcmp(mean.data(), mean_off.data(), rows * sizeof(float)), 0);
          }
        }
      }
    }
  }
}

// Rows whose squares overflow fp32 take the rescaled path and stay finite.
TEST_P(LayerNormTest, HugeValues) {
  for (Op op : kAllOps) {
    for (size_t cols : {2, 33, 4096, 100003}) {
      for (float scale : {1e19f, 1e30f, 5e37f}) {  // |N(0,1)| < 6 here: finite
        Case c;
        c.op = op;
        c.rows = 2;
        c.cols = cols;
        c.fill = [&](Buffer& x, Buffer& r) {
          FillNormal(x, Seed(cols + 7), 0.0f, 1.0f);
          for (size_t i = 0; i < x.size(); ++i) x[i] *= scale;
          for (size_t i = 0; i < x.size(); i += 3) x[i] = i % 2 ? 3.4e38f : -3.4e38f;
          r.Fill(0.0f);
        };
        ASSERT_GE(CheckCase(c), 0);
      }
    }
  }
}

// Calls whose tensors (x and y; residual and sum too) reach 32 MiB stream y
// (non-temporal stores where the rows of y are vector-aligned, or, short rows at
// AVX-512 and AVX2, where they follow each other) while the next group of
// rows is fetched: rows of 1027 columns (regular stores, a misaligned y) and of 1024
// (non-temporal), rows that are NaN, constant, huge (the rescaled path inside a group)
// or ill-conditioned, in place, rows held in registers, x of 16 MiB (8 MiB fused: the
// smallest streamed), rows read again from L1 (128 and 256 columns), and the same bits
// for 1, 2, 3 threads.
TEST_P(LayerNormTest, LargeTensorsStream) {
  constexpr size_t kRows = 8200;  // x 1027 or 1024 columns: more than 32 MiB
  // Rows 5-7 and a middle one of a `cols`-wide tensor (bands of several rows when a
  // narrower tensor is filled the same way).
  const auto fill_for = [](size_t cols) {
    return [cols](Buffer& x, Buffer& r) {
      for (size_t i = 0; i < cols; ++i) {
        x[5 * cols + i] = i == 9 ? NAN : x[5 * cols + i];
        x[6 * cols + i] = 2.5f;
        x[7 * cols + i] *= 1e30f;
        x[kRows / 2 * cols + i] += 1e4f;
        r[6 * cols + i] = 0.0f;
      }
    };
  };
  for (Op op : kAllOps) {
    Case c;
    c.op = op;
    c.rows = kRows;
    c.cols = Fused(op) ? 1024 : 1027;
    c.misalign = Centered(op) && !Fused(op) ? 1 : 0;
    c.fill = fill_for(c.cols);
    ASSERT_GE(CheckCase(c), 0);
  }
  for (Op op : {Op::kLayerNorm, Op::kAddRmsNorm}) {  // rows held in registers
    Case c;
    c.op = op;
    c.rows = kRows * 1027 / 64;
    c.cols = 64;
    c.fill = fill_for(1027);
    ASSERT_GE(CheckCase(c), 0);
  }
  for (Op op : {Op::kLayerNorm, Op::kAddLayerNorm}) {  // x of 16 and 8 MiB
    Case c;
    c.op = op;
    c.rows = Fused(op) ? 2048 : 4096;
    c.cols = 1024;
    c.fill = fill_for(256);
    ASSERT_GE(CheckCase(c), 0);
  }
  // Streamed groups with every row of y at NumPy's and malloc's 16 bytes, or one float,
  // past a vector boundary: each row is peeled to it (in place too).
  for (Op op : {Op::kLayerNorm, Op::kAddRmsNorm}) {
    Case c;
    c.op = op;
    c.rows = kRows;
    c.cols = 1024;
    c.misalign = op == Op::kLayerNorm ? 4 : 1;
    c.fill = fill_for(1024);
    ASSERT_GE(CheckCase(c), 0);
  }
  // Streamed groups of short rows, on every ISA (StreamGroups; longer rows go in groups
  // where a vector is a line or the core runs AVX-512), y at a line and at 16 bytes
  // past one.
  for (size_t misalign : {0, 4}) {
    Case c;
    c.op = misalign == 0 ? Op::kLayerNorm : Op::kAddLayerNorm;
    c.cols = 512;
    c.rows = kRows * 1027 / c.cols;
    c.misalign = misalign;
    c.fill = fill_for(1027);
    ASSERT_GE(CheckCase(c), 0);
  }
  // Short rows with y off a line: streamed as one span where a vector is a line
  // (AVX-512, rows held in registers) and at AVX2 for rows read again (256 columns at
  // 16 bytes: a permute of halves; 128 at 4: a rotation), rows whose statistics are not
  // finite (NaN, huge) skipped in it and finished by the general path; in place too, and
  // the same bits for 1, 2, 3 threads.
  for (size_t variant = 0; variant < 4; ++variant) {
    Case c;
    c.op = variant == 1 || variant == 3 ? Op::kAddRmsNorm : Op::kLayerNorm;
    c.cols = variant == 1 ? 64 : variant == 3 ? 128 : 256;
    c.rows = kRows * 1027 / c.cols;
    c.misalign = variant == 1 || variant == 3 ? 1 : 4;
    c.alias = variant == 2 ? Alias::kYIsX : Alias::kNone;
    c.fill = fill_for(1027);
    ASSERT_GE(CheckCase(c), 0);
    if (variant == 0 || variant == 3) ExpectSameBitsForThreadCounts(c);
  }
  // Rows of 128 and 256 columns, read again from L1 at AVX2 / SSE4 (RereadRows; SSE4
  // 256 columns: the general path), y at a line: streamed, the fused forms' sum stored
  // over x or residual as their steps read it back, NaN, constant and huge rows among
  // them; the same bits for 1, 2, 3 threads.
  for (size_t cols : {128, 256}) {
    Case r;
    r.op = cols == 128 ? Op::kAddRmsNorm : Op::kAddLayerNorm;
    r.cols = cols;
    r.rows = kRows * 1027 / cols;
    r.alias = cols == 128 ? Alias::kSumXYRes : Alias::kSumResYX;
    r.fill = fill_for(1027);
    ASSERT_GE(CheckCase(r), 0);
    if (cols == 256) ExpectSameBitsForThreadCounts(r);
  }
  Case c;
  c.rows = 2048;
  c.cols = 4096;
  c.alias = Alias::kYIsX;
  c.misalign = 4;
  c.fill = fill_for(1027);
  ASSERT_GE(CheckCase(c), 0);
  c.alias = Alias::kNone;
  c.misalign = 0;
  c.rows = kRows;
  c.cols = 1024;
  c.fill = fill_for(1024);
  ExpectSameBitsForThreadCounts(c);
}

// Streamed short rows give the same bits with y (and sum) at a line and off one,
// where rows off a line are joined into one span (at 4, 16, 32 and 48 bytes: a
// rotation, halves swapped, none, the span's first line a vector in), AVX-512's rows
// of 256 columns read again for it, not held in registers: the four forwards, x half
// the streaming threshold (16 MiB by default; 64 KiB at least), a NaN row among them.
TEST_P(LayerNormTest, StreamedShortRowsOffALineGiveTheSameBits) {
  for (Op op : kAllOps) {
    for (size_t cols : {128, 256}) {
      const size_t x_bytes = std::max(StreamBytes() / 2, size_t{64} << 10);
      const size_t rows = x_bytes / sizeof(float) / cols, n = rows * cols;
      const bool fused = Fused(op);
      Buffer x(n), res(n), gamma(cols), beta(cols);
      FillOperands(x, res, gamma, beta, cols);
      x[7 * cols + 3] = NAN;
      for (size_t misalign : {1, 4, 8, 12}) {
        Buffer y(n), y_off(n, misalign), sum(n), sum_off(n, misalign), mean(rows),
            mean_off(rows), rstd(rows), rstd_off(rows);
        const auto call = [&](Buffer& s, Buffer& out, Buffer& m, Buffer& r) {
          return CallOp(op, rows, cols, x.data(), fused ? res.data() : nullptr,
                        gamma.data(), beta.data(), 1e-5f, fused ? s.data() : nullptr,
                        out.data(), m.data(), r.data());
        };
        ASSERT_EQ(call(sum, y, mean, rstd), NK_OK);
        ASSERT_EQ(call(sum_off, y_off, mean_off, rstd_off), NK_OK);
        SCOPED_TRACE(std::string(OpName(op)) + " cols=" + std::to_string(cols) +
                     " misalign=" + std::to_string(misalign));
        ASSERT_EQ(std::memcmp(y.data(), y_off.data(), n * sizeof(float)), 0);
        ASSERT_EQ(std::memcmp(rstd.data(), rstd_off.data(), rows * sizeof(float)), 0);
        if (fused) {
          ASSERT_EQ(std::memcmp(sum.data(), sum_off.data(), n * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST_P(LayerNormTest, TinyValues) {
  for (Op op : kAllOps) {
    Case c;
    c.op = op;
    c.rows = 2;
    c.cols = 77;
    c.eps = 0.0f;
    c.fill = [&](Buffer& x, Buffer& r) {
      for (size_t i = 0; i < x.size(); ++i) x[i] *= 1e-18f;
      r.Fill(0.0f);
    };
    ASSERT_GE(CheckCase(c), 0);
  }
}

// The same inputs give the same bits with 1, 2 and 3 threads: row partitions, the
// chunked long-row path, and the rescaled slow path inside it.
TEST_P(LayerNormTest, BitwiseEqualAcrossThreadCounts) {
  struct Shape {
    size_t rows, cols;
    float scale;
  };
  for (Op op : kAllOps) {
    for (Shape s : {Shape{64, 4096, 1}, Shape{1000, 64, 1}, Shape{1, size_t{1} << 20, 1},
                    Shape{3, 100003, 1}, Shape{2, 100003, 1e30f}}) {
      Case c;
      c.op = op;
      c.rows = s.rows;
      c.cols = s.cols;
      c.fill = [&](Buffer& x, Buffer&) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * s.scale + 3.0f;
      };
      ExpectSameBitsForThreadCounts(c);
      if (s.scale == 1 && s.rows * s.cols <= 400000) {
        Case c;
        c.op = op;
        c.rows = s.rows;
        c.cols = s.cols;
        ASSERT_GE(CheckCase(c), 0);
      }
    }
  }
}

// A row gives the same bits alone and in a group of rows (short rows go four at a
// time, leftovers one at a time; which rows are leftovers depends on the threads'
// partition). Ill-conditioned values, so that any change of summation order shows.
TEST_P(LayerNormTest, RowAloneGivesTheBitsOfTheRowInAGroup) {
  for (Op op : kAllOps) {
    for (size_t cols : {1, 3, 4, 8, 16, 32, 64, 128, 256, 384, 768, 1000, 1024}) {
      const size_t rows = 9;
      const auto value = [](size_t i) {
        return 1e4f + static_cast<float>((i * 2654435761u) % 1000) * 1.37e-3f - 0.6f;
      };
      Case group;
      group.op = op;
      group.rows = rows;
      group.cols = cols;
      group.gamma = group.beta = false;  // RunCase draws them per shape
      group.fill = [&](Buffer& x, Buffer& res) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = value(i), res[i] = value(i + 7);
      };
      const Result all = RunCase(group);
      for (size_t r = 0; r < rows; ++r) {
        Case alone = group;
        alone.rows = 1;
        alone.fill = [&](Buffer& x, Buffer& res) {
          for (size_t i = 0; i < cols; ++i) {
            x[i] = value(r * cols + i), res[i] = value(r * cols + i + 7);
          }
        };
        SCOPED_TRACE(alone.Describe() + " row " + std::to_string(r));
        const Result one = RunCase(alone);
        ASSERT_EQ(
            std::memcmp(one.y.data(), all.y.data() + r * cols, cols * sizeof(float)), 0);
        ASSERT_TRUE(SameBits(one.rstd[0], all.rstd[r]));
        if (op == Op::kLayerNorm || op == Op::kAddLayerNorm) {
          ASSERT_TRUE(SameBits(one.mean[0], all.mean[r]));
        }
      }
    }
  }
}

// Seed 000 (Chinese LayerNorm tutorial): nn.LayerNorm(3) over a [2, 4, 3] embedding,
// outputs printed to 4 decimals.
TEST_P(LayerNormTest, SeedDocumentExample) {
  const float x[24] = {1, 1, 2, 2, 0, 0, 0, 0, 1, 0, 1, 0,
                       1, 0, 1, 1, 1, 2, 1, 0, 2, 0, 2, 2};
  const float printed[24] = {
      -0.7071f, -0.7071f, 1.4142f,  1.4142f,  -0.7071f, -0.7071f,
      -0.7071f, -0.7071f, 1.4142f,  -0.7071f, 1.4142f,  -0.7071f,
      0.7071f,  -1.4142f, 0.7071f,  -0.7071f, -0.7071f, 1.4142f,
      0.0000f,  -1.2247f, 1.2247f,  -1.4142f, 0.7071f,  0.7071f};
  float y[24];
  ASSERT_EQ(nk_layernorm_forward_f32(8, 3, x, nullptr, nullptr, 1e-5f, y, nullptr,
                                     nullptr),
            NK_OK);
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(y[i], printed[i], 5e-5) << "element " << i;
  // The tutorial's first sample: means 1.3333, 0.6667, 0.3333, 0.3333 and variances
  // 0.2222, 0.8889, 0.2222, 0.2222.
  float mean[8], rstd[8];
  ASSERT_EQ(nk_layernorm_forward_f32(8, 3, x, nullptr, nullptr, 0.0f, y, mean, rstd),
            NK_OK);
  const float means[4] = {1.3333f, 0.6667f, 0.3333f, 0.3333f};
  const float vars[4] = {0.2222f, 0.8889f, 0.2222f, 0.2222f};
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(mean[r], means[r], 5e-5);
    EXPECT_NEAR(1.0f / (rstd[r] * rstd[r]), vars[r], 5e-5);
  }
}

}  // namespace
}  // namespace nk_test
