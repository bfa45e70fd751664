// SPDX-License-Identifier: Apache-2.0
// test_layernorm_half_backward: the LayerNorm family's bf16 / fp16 backwards under
// every ISA. The half kernels run the f32 kernels' arithmetic on the widened tensors,
// so dx must be the f32 kernel's dx (on the widened x or sum, dy and dsum) rounded once
// to nearest even, and dgamma / dbeta the f32 kernel's bits. With test_layernorm_backward
// holding the f32 kernel to the long-double bound, that is design.md's half rule; the
// rule is also checked directly against the reference (tests/half_reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "half_reference.h"
#include "reference.h"
#include "rowgrad_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

// One backward call of `op` on half tensors of `fmt`; strides of cols; dsum, dgamma,
// dbeta may be nullptr. (The f32 kernel: CallGrad of rowgrad_case.h.)
nk_status HalfGrad(const HalfFormat& fmt, Op op, size_t rows, size_t cols,
                   const uint16_t* x, const uint16_t* dy, const uint16_t* dsum,
                   const float* mean, const float* rstd, const float* gamma, uint16_t* dx,
                   float* dgamma, float* dbeta) {
  const bool bf16 = &fmt == &kBf16;
  switch (op) {
    case Op::kLayerNorm:
      return (bf16 ? nk_layernorm_backward_bf16 : nk_layernorm_backward_f16)(
          rows, cols, x, dy, mean, rstd, gamma, dx, dgamma, dbeta);
    case Op::kRmsNorm:
      return (bf16 ? nk_rmsnorm_backward_bf16 : nk_rmsnorm_backward_f16)(
          rows, cols, x, dy, rstd, gamma, dx, dgamma);
    case Op::kAddLayerNorm:
      return (bf16 ? nk_add_layernorm_backward_bf16 : nk_add_layernorm_backward_f16)(
          rows, cols, x, dy, dsum, mean, rstd, gamma, dx, dgamma, dbeta);
    case Op::kAddRmsNorm:
      return (bf16 ? nk_add_rmsnorm_backward_bf16 : nk_add_rmsnorm_backward_f16)(
          rows, cols, x, dy, dsum, rstd, gamma, dx, dgamma);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

// A backward case's inputs in half (and widened) and what the call gave.
struct GradCase {
  const HalfFormat* fmt = nullptr;
  Op op = Op::kLayerNorm;
  size_t rows = 0, cols = 0;
  std::vector<uint16_t> x, dy, dsum;     // dsum empty: NULL
  std::vector<float> mean, rstd, gamma;  // gamma empty: NULL
  bool params = true;                    // dgamma / dbeta wanted

  std::vector<float> Widened(const std::vector<uint16_t>& h) const {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = Widen(*fmt, h[i]);
    return f;
  }
};

struct GradOut {
  std::vector<uint16_t> dx;
  std::vector<float> dgamma, dbeta;
};

// Random inputs: x ~ N(0.5, 2) and dy, dsum ~ N(0, 1) rounded to the format; mean /
// rstd the rows' own (float); gamma near 1.
GradCase MakeCase(const HalfFormat& fmt, Op op, size_t rows, size_t cols, uint32_t seed,
                  bool gamma = true, bool dsum = true, float x_mean = 0.5f) {
  GradCase c;
  c.fmt = &fmt;
  c.op = op;
  c.rows = rows;
  c.cols = cols;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto half = [&](float v) { return Round(fmt, v); };
  const size_t n = rows * cols;
  for (size_t i = 0; i < n; ++i) c.x.push_back(half(x_mean + 2 * normal(rng)));
  for (size_t i = 0; i < n; ++i) c.dy.push_back(half(normal(rng)));
  if (Fused(op) && dsum) {
    for (size_t i = 0; i < n; ++i) c.dsum.push_back(half(normal(rng)));
  }
  if (gamma) {
    for (size_t j = 0; j < cols; ++j) c.gamma.push_back(1 + 0.25f * normal(rng));
  }
  const std::vector<float> x = c.Widened(c.x);
  for (size_t r = 0; r < rows; ++r) {
    long double s = 0, q = 0;
    for (size_t j = 0; j < cols; ++j) s += x[r * cols + j];
    const long double m = s / cols;
    for (size_t j = 0; j < cols; ++j) {
      const long double v = x[r * cols + j] - (Centered(op) ? m : 0.0L);
      q += v * v;
    }
    c.mean.push_back(static_cast<float>(m));
    c.rstd.push_back(static_cast<float>(1 / std::sqrt(q / cols + 1e-5L)));
  }
  return c;
}

// The half call, at `misalign` elements past a line, dx given the aliasing asked for.
enum class Place { kSeparate, kDxIsDy, kDxIsDsum };
GradOut RunHalf(const GradCase& c, size_t misalign = 0, Place place = Place::kSeparate) {
  const size_t n = c.rows * c.cols;
  HalfBuffer x(n, misalign), dy(n, misalign), dsum(n, misalign), dx(n, misalign);
  std::memcpy(x.data(), c.x.data(), n * sizeof(uint16_t));
  std::memcpy(dy.data(), c.dy.data(), n * sizeof(uint16_t));
  if (!c.dsum.empty()) std::memcpy(dsum.data(), c.dsum.data(), n * sizeof(uint16_t));
  Buffer dgamma(c.cols, misalign), dbeta(c.cols, misalign);
  uint16_t* out = place == Place::kDxIsDy     ? dy.data()
                  : place == Place::kDxIsDsum ? dsum.data()
                                              : dx.data();
  const nk_status s =
      HalfGrad(*c.fmt, c.op, c.rows, c.cols, x.data(), dy.data(),
               c.dsum.empty() ? nullptr : dsum.data(), c.mean.data(), c.rstd.data(),
               c.gamma.empty() ? nullptr : c.gamma.data(), out,
               c.params ? dgamma.data() : nullptr, c.params ? dbeta.data() : nullptr);
  EXPECT_EQ(s, NK_OK) << nk_last_error();
  GradOut g;
  g.dx.assign(out, out + n);
  if (c.params) {
    g.dgamma.assign(dgamma.data(), dgamma.data() + c.cols);
    if (Centered(c.op)) g.dbeta.assign(dbeta.data(), dbeta.data() + c.cols);
  }
  return g;
}

// The f32 kernel on the widened tensors: dx rounded once, dgamma / dbeta as they are.
GradOut RunF32Rounded(const GradCase& c) {
  const size_t n = c.rows * c.cols;
  const std::vector<float> x = c.Widened(c.x), dy = c.Widened(c.dy),
                           dsum = c.Widened(c.dsum);
  std::vector<float> dx(n), dgamma(c.cols), dbeta(c.cols);
  EXPECT_EQ(
      CallGrad(c.op, c.rows, c.cols, x.data(), dy.data(),
               c.dsum.empty() ? nullptr : dsum.data(), c.mean.data(), c.rstd.data(),
               c.gamma.empty() ? nullptr : c.gamma.data(), dx.data(),
               c.params ? dgamma.data() : nullptr, c.params ? dbeta.data() : nullptr),
      NK_OK)
      << nk_last_error();
  GradOut g;
  for (float v : dx) g.dx.push_back(Round(*c.fmt, v));
  if (c.params) {
    g.dgamma = dgamma;
    if (Centered(c.op)) g.dbeta = dbeta;
  }
  return g;
}

std::string Describe(const GradCase& c) {
  return std::string(OpName(c.op)) + "_backward_" + c.fmt->name + " " +
         std::to_string(c.rows) + "x" + std::to_string(c.cols) + " isa " + nk_get_isa() +
         " threads " + std::to_string(nk_get_num_threads());
}

// dx equal (NaN: a quiet NaN where the rounded f32 result is NaN), dgamma / dbeta
// bitwise.
void ExpectSame(const GradCase& c, const GradOut& got, const GradOut& want) {
  SCOPED_TRACE(Describe(c));
  ASSERT_EQ(got.dx.size(), want.dx.size());
  for (size_t i = 0; i < got.dx.size(); ++i) {
    if (IsNaN(*c.fmt, want.dx[i])) {
      ASSERT_TRUE(IsNaN(*c.fmt, got.dx[i]) && IsQuiet(*c.fmt, got.dx[i])) << "dx " << i;
    } else {
      ASSERT_EQ(got.dx[i], want.dx[i]) << "dx " << i << " of row " << i / c.cols;
    }
  }
  for (size_t j = 0; j < got.dgamma.size(); ++j) {
    ASSERT_EQ(std::memcmp(&got.dgamma[j], &want.dgamma[j], sizeof(float)), 0)
        << "dgamma " << j << ": " << got.dgamma[j] << " against " << want.dgamma[j];
  }
  ASSERT_EQ(got.dbeta.size(), want.dbeta.size());
  for (size_t j = 0; j < got.dbeta.size(); ++j) {
    ASSERT_EQ(std::memcmp(&got.dbeta[j], &want.dbeta[j], sizeof(float)), 0)
        << "dbeta " << j;
  }
}

class HalfBackward : public IsaTest {};

constexpr const HalfFormat* kFormats[] = {&kBf16, &kF16};

// Every op, both formats: tails (1..67 columns), primes, a chunked row (over kChunk
// columns), optional arguments NULL or not.
TEST_P(HalfBackward, IsTheF32KernelRounded) {
  const std::vector<std::pair<size_t, size_t>> shapes = {
      {1, 1},    {3, 7},      {5, 13},   {2, 67},   {4, 256},
      {7, 4099}, {1, 100003}, {64, 768}, {2, 20000}};
  uint32_t seed = 1;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : kAllOps) {
      for (auto [rows, cols] : shapes) {
        for (int variant = 0; variant < 2; ++variant) {
          GradCase c = MakeCase(*fmt, op, rows, cols, ++seed, variant == 0, variant == 0);
          c.params = variant == 0 || cols % 2 == 1;
          ExpectSame(c, RunHalf(c), RunF32Rounded(c));
        }
      }
      for (size_t cols = 1; cols <= 67; cols += 3) {
        const GradCase c = MakeCase(*fmt, op, 3, cols, ++seed);
        ExpectSame(c, RunHalf(c), RunF32Rounded(c));
      }
    }
  }
}

// Rows of whole cache lines at every 16-byte offset from a line, in place or not: the
// rows share lines at +16 / +32 / +48 bytes, which the streamed path (the .streamed
// run, NK_STREAM_BYTES=1) writes in 16-byte pieces at AVX-512.
TEST_P(HalfBackward, WholeLineRowsAtEveryOffset) {
  uint32_t seed = 300;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : kAllOps) {
      for (auto [rows, cols] :
           {std::pair<size_t, size_t>{13, 96}, {9, 1024}, {5, 2048}}) {
        const GradCase c = MakeCase(*fmt, op, rows, cols, ++seed);
        const GradOut want = RunF32Rounded(c);
        for (size_t misalign : {0, 8, 16, 24}) {
          SCOPED_TRACE(misalign);
          ExpectSame(c, RunHalf(c, misalign), want);
          ExpectSame(c, RunHalf(c, misalign, Place::kDxIsDy), want);
        }
      }
    }
  }
}

// design.md's half rule against the long-double reference of the widened inputs.
TEST_P(HalfBackward, MeetsTheHalfRule) {
  uint32_t seed = 100;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : kAllOps) {
      for (auto [rows, cols] : {std::pair<size_t, size_t>{4, 61}, {2, 1024}, {1, 4099}}) {
        const GradCase c = MakeCase(*fmt, op, rows, cols, ++seed);
        const GradOut got = RunHalf(c);
        const std::vector<float> x = c.Widened(c.x), dy = c.Widened(c.dy),
                                 dsum = c.Widened(c.dsum);
        for (size_t r = 0; r < rows; ++r) {
          const RowGradRef ref = ReferenceRowGrad(
              Centered(op), cols, x.data() + r * cols, dy.data() + r * cols,
              c.dsum.empty() ? nullptr : dsum.data() + r * cols, c.mean[r], c.rstd[r],
              c.gamma.data());
          for (size_t j = 0; j < cols; ++j) {
            ASSERT_TRUE(MeetsHalf(*fmt, got.dx[r * cols + j], ref.dx[j], ref.dx_bound[j]))
                << Describe(c) << " row " << r << " col " << j << ": got "
                << Widen(*fmt, got.dx[r * cols + j]) << ", reference " << ref.dx[j];
          }
        }
      }
    }
  }
}

// Misaligned tensors and in place (dx == dy; the fused forms also dx == dsum) give the
// bits of separate aligned ones.
TEST_P(HalfBackward, MisalignedAndInPlace) {
  uint32_t seed = 200;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : kAllOps) {
      const GradCase c = MakeCase(*fmt, op, 9, 1000, ++seed);
      const GradOut want = RunHalf(c);
      for (size_t misalign : {1, 3, 8}) ExpectSame(c, RunHalf(c, misalign), want);
      ExpectSame(c, RunHalf(c, 1, Place::kDxIsDy), want);
      if (Fused(op)) ExpectSame(c, RunHalf(c, 3, Place::kDxIsDsum), want);
    }
  }
}

// A NaN or Inf in one row of x or dy stays in that row's dx (and the columns' dgamma /
// dbeta), as the f32 kernel gives; ill-conditioned rows (1e4 + N(0, 1), rounded).
TEST_P(HalfBackward, NonFiniteAndIllConditioned) {
  uint32_t seed = 300;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : kAllOps) {
      GradCase c = MakeCase(*fmt, op, 6, 130, ++seed);
      c.x[1 * 130 + 5] = InfBits(*fmt) | QuietBit(*fmt);  // NaN in row 1
      c.dy[3 * 130 + 7] = InfBits(*fmt);                  // Inf in row 3
      ExpectSame(c, RunHalf(c), RunF32Rounded(c));
      const GradOut got = RunHalf(c);
      for (size_t j = 0; j < 130; ++j) {
        ASSERT_FALSE(IsNaN(*fmt, got.dx[j])) << Describe(c) << " row 0 col " << j;
      }
      const GradCase ill = MakeCase(*fmt, op, 4, 777, ++seed, true, true, 1e4f);
      ExpectSame(ill, RunHalf(ill), RunF32Rounded(ill));
    }
  }
}

// 1, 2 and 3 threads give the same bits, on shapes that split (rows in parts, a long
// row in chunks).
TEST_P(HalfBackward, ThreadCountsAgree) {
  uint32_t seed = 400;
  for (const HalfFormat* fmt : kFormats) {
    for (Op op : {Op::kLayerNorm, Op::kAddRmsNorm}) {
      for (auto [rows, cols] : {std::pair<size_t, size_t>{96, 4096}, {2, 1 << 18}}) {
        const GradCase c = MakeCase(*fmt, op, rows, cols, ++seed);
        nk_set_num_threads(1);
        const GradOut one = RunHalf(c);
        for (int t : {2, 3}) {
          nk_set_num_threads(t);
          ExpectSame(c, RunHalf(c), one);
        }
      }
    }
  }
}

// The strided forms: the contiguous call's bits on rows a stride apart, nothing
// written between rows.
TEST_P(HalfBackward, StridedGivesTheContiguousBits) {
  const size_t rows = 5, cols = 300, ld = 333;
  for (const HalfFormat* fmt : kFormats) {
    const bool bf16 = fmt == &kBf16;
    const GradCase c = MakeCase(*fmt, Op::kAddLayerNorm, rows, cols, 500);
    const GradOut want = RunHalf(c);
    std::vector<uint16_t> x(rows * ld, 0), dy(rows * ld, 0), dsum(rows * ld, 0),
        dx(rows * ld, 0x7777);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(&x[r * ld], &c.x[r * cols], cols * 2);
      std::memcpy(&dy[r * ld], &c.dy[r * cols], cols * 2);
      std::memcpy(&dsum[r * ld], &c.dsum[r * cols], cols * 2);
    }
    std::vector<float> dgamma(cols), dbeta(cols);
    ASSERT_EQ(
        (bf16 ? nk_add_layernorm_backward_strided_bf16
              : nk_add_layernorm_backward_strided_f16)(
            rows, cols, x.data(), ld, dy.data(), ld, dsum.data(), ld, c.mean.data(),
            c.rstd.data(), c.gamma.data(), dx.data(), ld, dgamma.data(), dbeta.data()),
        NK_OK)
        << nk_last_error();
    GradOut got{{}, dgamma, dbeta};
    for (size_t r = 0; r < rows; ++r) {
      got.dx.insert(got.dx.end(), &dx[r * ld], &dx[r * ld] + cols);
      for (size_t j = cols; j < ld && r + 1 < rows; ++j) {
        ASSERT_EQ(dx[r * ld + j], 0x7777) << "written between rows";
      }
    }
    ExpectSame(c, got, want);
  }
}

// Refused calls name the half function and the argument, and write nothing.
TEST_P(HalfBackward, BadArguments) {
  for (const HalfFormat* fmt : kFormats) {
    const bool bf16 = fmt == &kBf16;
    const std::string fn = std::string("nk_layernorm_backward_") + fmt->name;
    const size_t rows = 2, cols = 8;
    std::vector<uint16_t> x(rows * cols, 0x3C00), dy(rows * cols, 0x3C00),
        dx(rows * cols + 1, 0x1234);
    std::vector<float> mean(rows, 0), rstd(rows, 1), dgamma(cols, 7), dbeta(cols, 7);
    const auto call = [&](const uint16_t* px, const uint16_t* pdy, uint16_t* pdx,
                          size_t c) {
      return (bf16 ? nk_layernorm_backward_bf16 : nk_layernorm_backward_f16)(
          rows, c, px, pdy, mean.data(), rstd.data(), nullptr, pdx, dgamma.data(),
          dbeta.data());
    };
    EXPECT_EQ(call(x.data(), nullptr, dx.data(), cols), NK_ERR_NULL_POINTER);
    EXPECT_NE(std::string(nk_last_error()).find(fn + ": dy"), std::string::npos)
        << nk_last_error();
    EXPECT_EQ(call(x.data(), dy.data(), dx.data(), 0), NK_ERR_INVALID_SHAPE);
    EXPECT_NE(std::string(nk_last_error()).find(fn), std::string::npos);
    // dx overlapping x by one element (x's last one).
    std::vector<uint16_t> both(2 * rows * cols, 0x3C00);
    EXPECT_EQ(call(both.data(), dy.data(), both.data() + rows * cols - 1, cols),
              NK_ERR_OVERLAP);
    EXPECT_NE(std::string(nk_last_error()).find(fn), std::string::npos);
    for (uint16_t v : dx) EXPECT_EQ(v, 0x1234);
    for (float v : dgamma) EXPECT_EQ(v, 7.0f);
    for (size_t i = 0; i < both.size(); ++i) EXPECT_EQ(both[i], 0x3C00);
  }
}

NK_INSTANTIATE_FOR_EACH_ISA(HalfBackward);

}  // namespace
}  // namespace nk_test
