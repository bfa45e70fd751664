// SPDX-License-Identifier: Apache-2.0
// test_layernorm_half.cc: the LayerNorm family's bfloat16 and fp16 forwards, under
// every ISA. y against the long-double reference on the widened inputs by design.md's
// half rule (MeetsHalf), the fused forms' sum as x + residual rounded once, bit for
// bit, and the statistics as the f32 kernel's bits on the widened input. Tails,
// alignment, optional arguments, in place, ties to even, fp16's overflow and
// subnormals, non-finite and ill-conditioned rows, thread counts, streamed tensors,
// addresses, row strides, and validation naming the half functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "half_reference.h"
#include "reference.h"
#include "rownorm_case.h"
#include "strided_tensor.h"
#include "test_util.h"

namespace nk_test {
namespace {

constexpr HalfFormat kFormats[] = {kBf16, kF16};

bool IsBf16(const HalfFormat& fmt) { return fmt.exponent_bits == kBf16.exponent_bits; }

std::string FunctionName(const HalfFormat& fmt, Op op, bool strided = false) {
  return std::string("nk_") + OpName(op) + "_forward_" + (strided ? "strided_" : "") +
         fmt.name;
}

// nk_bf16 and nk_f16 are both uint16_t: one signature serves both formats.
nk_status CallHalf(const HalfFormat& fmt, Op op, size_t rows, size_t cols,
                   const uint16_t* x, const uint16_t* res, const float* gamma,
                   const float* beta, float eps, uint16_t* sum, uint16_t* y, float* mean,
                   float* rstd) {
  const bool bf16 = IsBf16(fmt);
  switch (op) {
    case Op::kLayerNorm:
      return (bf16 ? nk_layernorm_forward_bf16 : nk_layernorm_forward_f16)(
          rows, cols, x, gamma, beta, eps, y, mean, rstd);
    case Op::kRmsNorm:
      return (bf16 ? nk_rmsnorm_forward_bf16 : nk_rmsnorm_forward_f16)(
          rows, cols, x, gamma, eps, y, rstd);
    case Op::kAddLayerNorm:
      return (bf16 ? nk_add_layernorm_forward_bf16 : nk_add_layernorm_forward_f16)(
          rows, cols, x, res, gamma, beta, eps, sum, y, mean, rstd);
    case Op::kAddRmsNorm:
      return (bf16 ? nk_add_rmsnorm_forward_bf16 : nk_add_rmsnorm_forward_f16)(
          rows, cols, x, res, gamma, eps, sum, y, rstd);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

nk_status CallHalfStrided(const HalfFormat& fmt, Op op, size_t rows, size_t cols,
                          const uint16_t* x, size_t ldx, const uint16_t* res, size_t ldr,
                          const float* gamma, const float* beta, float eps, uint16_t* sum,
                          size_t lds, uint16_t* y, size_t ldy, float* mean, float* rstd) {
  const bool bf16 = IsBf16(fmt);
  switch (op) {
    case Op::kLayerNorm:
      return (bf16 ? nk_layernorm_forward_strided_bf16
                   : nk_layernorm_forward_strided_f16)(rows, cols, x, ldx, gamma, beta,
                                                       eps, y, ldy, mean, rstd);
    case Op::kRmsNorm:
      return (bf16 ? nk_rmsnorm_forward_strided_bf16 : nk_rmsnorm_forward_strided_f16)(
          rows, cols, x, ldx, gamma, eps, y, ldy, rstd);
    case Op::kAddLayerNorm:
      return (bf16 ? nk_add_layernorm_forward_strided_bf16
                   : nk_add_layernorm_forward_strided_f16)(
          rows, cols, x, ldx, res, ldr, gamma, beta, eps, sum, lds, y, ldy, mean, rstd);
    case Op::kAddRmsNorm:
      return (bf16 ? nk_add_rmsnorm_forward_strided_bf16
                   : nk_add_rmsnorm_forward_strided_f16)(
          rows, cols, x, ldx, res, ldr, gamma, eps, sum, lds, y, ldy, rstd);
  }
  return NK_ERR_INVALID_ARGUMENT;
}

std::vector<float> Normal(size_t n, uint32_t seed, float mean, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sd);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<uint16_t> ToHalf(const HalfFormat& fmt, const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = Round(fmt, v[i]);
  return h;
}

std::vector<float> Widened(const HalfFormat& fmt, const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = Widen(fmt, h[i]);
  return f;
}

// A case's inputs before x and residual are rounded to the format: by default x
// N(0, 1), residual N(0, 0.5), gamma N(1, 0.25), beta N(0, 0.5).
struct Values {
  std::vector<float> x, res, gamma, beta;
};

// The inputs of a call: x and residual in half, gamma and beta as passed.
struct Inputs {
  std::vector<uint16_t> x, res;
  std::vector<float> gamma, beta;
};

struct HalfCase {
  HalfFormat fmt = kBf16;
  Op op = Op::kLayerNorm;
  size_t rows = 1, cols = 1;
  bool gamma = true, beta = true;
  bool stats = true;    // mean / rstd wanted
  size_t misalign = 0;  // elements past a 64-byte boundary, every tensor
  size_t y_shift = 0;   // y and sum that many elements further
  Alias alias = Alias::kNone;
  float eps = 1e-5f;
  std::function<void(Values&)> fill;

  std::string Describe() const {
    std::ostringstream os;
    os << FunctionName(fmt, op) << " rows=" << rows << " cols=" << cols
       << " gamma=" << gamma << " beta=" << beta << " stats=" << stats
       << " misalign=" << misalign << "+" << y_shift
       << " alias=" << static_cast<int>(alias) << " eps=" << eps
       << " isa=" << nk_get_isa() << " threads=" << nk_get_num_threads();
    return os.str();
  }
};

HalfCase MakeCase(const HalfFormat& fmt, Op op, size_t rows, size_t cols,
                  size_t misalign = 0) {
  HalfCase c;
  c.fmt = fmt;
  c.op = op;
  c.rows = rows;
  c.cols = cols;
  c.misalign = misalign;
  return c;
}

Inputs MakeInputs(const HalfCase& c) {
  const size_t n = c.rows * c.cols;
  const uint32_t seed = Seed(c.rows * 1000003 + c.cols);
  Values v{Normal(n, seed, 0.0f, 1.0f), Normal(n, seed + 1, 0.0f, 0.5f),
           Normal(c.cols, seed + 2, 1.0f, 0.25f), Normal(c.cols, seed + 3, 0.0f, 0.5f)};
  if (c.fill) c.fill(v);
  Inputs in;
  in.x = ToHalf(c.fmt, v.x);
  if (Fused(c.op)) in.res = ToHalf(c.fmt, v.res);
  in.gamma = std::move(v.gamma);
  in.beta = std::move(v.beta);
  return in;
}

// The inputs of a case without `fill`, made once per format and shape in the process
// and shared by the ops (rounding values to half cost more than the calls using them).
const Inputs& SharedInputs(const HalfCase& c) {
  static std::map<std::tuple<int, size_t, size_t>, Inputs> made;
  const auto key = std::make_tuple(c.fmt.exponent_bits, c.rows, c.cols);
  auto it = made.find(key);
  if (it == made.end()) {
    HalfCase fused = c;
    fused.op = Op::kAddLayerNorm;
    fused.fill = nullptr;
    it = made.emplace(key, MakeInputs(fused)).first;
  }
  return it->second;
}

// The outputs as the caller sees them after the call (aliases resolved).
struct HalfResult {
  std::vector<uint16_t> y, sum;   // sum: empty when not stored
  std::vector<float> mean, rstd;  // empty without statistics
};

HalfResult RunHalf(const HalfCase& c, const Inputs& in) {
  const size_t n = c.rows * c.cols;
  const bool fused = Fused(c.op);
  const size_t out_at = c.misalign + c.y_shift;
  HalfBuffer x(n, c.misalign), res(n, c.misalign), y(n, out_at), sum(n, out_at);
  Buffer gamma(c.cols, c.misalign), beta(c.cols, c.misalign);
  Buffer mean(c.rows, c.misalign), rstd(c.rows, c.misalign);  // NaN: a missed write shows
  std::memcpy(x.data(), in.x.data(), n * sizeof(uint16_t));
  if (fused) std::memcpy(res.data(), in.res.data(), n * sizeof(uint16_t));
  std::memcpy(gamma.data(), in.gamma.data(), c.cols * sizeof(float));
  std::memcpy(beta.data(), in.beta.data(), c.cols * sizeof(float));
  uint16_t* py = y.data();
  uint16_t* ps = fused ? sum.data() : nullptr;
  switch (c.alias) {
    case Alias::kNone:
      break;
    case Alias::kYIsX:
      py = x.data();
      break;
    case Alias::kSumXYRes:
      ps = x.data();
      py = res.data();
      break;
    case Alias::kSumResYX:
      ps = res.data();
      py = x.data();
      break;
    case Alias::kNoSum:
      ps = nullptr;
      break;
  }
  const nk_status s =
      CallHalf(c.fmt, c.op, c.rows, c.cols, x.data(), fused ? res.data() : nullptr,
               c.gamma ? gamma.data() : nullptr, c.beta ? beta.data() : nullptr, c.eps,
               ps, py, c.stats ? mean.data() : nullptr, c.stats ? rstd.data() : nullptr);
  EXPECT_EQ(s, NK_OK) << c.Describe() << ": " << nk_last_error();
  HalfResult r;
  r.y.assign(py, py + n);
  if (ps) r.sum.assign(ps, ps + n);
  if (c.stats) {
    r.mean.assign(mean.data(), mean.data() + c.rows);
    r.rstd.assign(rstd.data(), rstd.data() + c.rows);
  }
  return r;
}

// What the rows are normalized from: x, or (fused) x + residual rounded once.
std::vector<uint16_t> Normalized(const HalfCase& c, const Inputs& in) {
  if (!Fused(c.op)) return in.x;
  std::vector<uint16_t> s(in.x.size());
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = Round(c.fmt, Value(c.fmt, in.x[i]) + Value(c.fmt, in.res[i]));
  }
  return s;
}

std::string Hex(uint16_t h) {
  std::ostringstream os;
  os << "0x" << std::hex << h;
  return os.str();
}

// Whether `got` holds s exactly (a NaN: any quiet NaN).
bool SameHalf(const HalfFormat& fmt, uint16_t got, uint16_t want) {
  return got == want || (IsNaN(fmt, want) && IsNaN(fmt, got) && IsQuiet(fmt, got));
}

// Checks the outputs of c on `in`: sum, the statistics (bits of the f32 kernel on the
// widened rows), and y by the half rule. Reports at most five failures.
bool MeetsReference(const HalfCase& c, const Inputs& in, const HalfResult& r) {
  SCOPED_TRACE(c.Describe());
  const HalfFormat& fmt = c.fmt;
  const bool center = Centered(c.op), use_beta = c.beta && center;
  const std::vector<uint16_t> s = Normalized(c, in);
  const std::vector<float> sw = Widened(fmt, s);
  int failures = 0;
  for (size_t i = 0; i < r.sum.size() && failures == 0; ++i) {
    if (!SameHalf(fmt, r.sum[i], s[i])) {
      ADD_FAILURE() << "sum element " << i << ": " << Hex(r.sum[i]) << " != " << Hex(s[i])
                    << " = " << Hex(in.x[i]) << " + " << Hex(in.res[i]);
      ++failures;
    }
  }
  if (c.stats) {
    std::vector<float> y32(sw.size()), mean32(c.rows), rstd32(c.rows);
    EXPECT_EQ(CallOp(center ? Op::kLayerNorm : Op::kRmsNorm, c.rows, c.cols, sw.data(),
                     nullptr, nullptr, nullptr, c.eps, nullptr, y32.data(), mean32.data(),
                     rstd32.data()),
              NK_OK)
        << nk_last_error();
    for (size_t row = 0; row < c.rows && failures < 5; ++row) {
      if (center && !SameBits(r.mean[row], mean32[row])) {
        ADD_FAILURE() << "mean row " << row << ": " << r.mean[row] << " ("
                      << std::hexfloat << r.mean[row] << "), the f32 kernel's "
                      << mean32[row];
        ++failures;
      }
      if (!SameBits(r.rstd[row], rstd32[row])) {
        ADD_FAILURE() << "rstd row " << row << ": " << r.rstd[row] << " ("
                      << std::hexfloat << r.rstd[row] << "), the f32 kernel's "
                      << rstd32[row];
        ++failures;
      }
    }
  }
  for (size_t row = 0; row < c.rows && failures < 5; ++row) {
    const size_t off = row * c.cols;
    const RowRef ref = ReferenceRow(center, c.cols, sw.data() + off, nullptr,
                                    c.gamma ? in.gamma.data() : nullptr,
                                    use_beta ? in.beta.data() : nullptr, c.eps);
    for (size_t i = 0; i < c.cols; ++i) {
      const float g = c.gamma ? in.gamma[i] : 1.0f;
      const float b = use_beta ? in.beta[i] : 0.0f;
      const long double bound = BoundY(c.cols, ref, i, g, b);
      const uint16_t got = r.y[off + i];
      if (!MeetsHalf(fmt, got, ref.y[i], bound)) {
        ADD_FAILURE() << "y row " << row << " col " << i << ": got " << Hex(got) << " ("
                      << static_cast<double>(Value(fmt, got)) << ") want "
                      << Hex(Round(fmt, ref.y[i])) << " (y_ref "
                      << static_cast<double>(ref.y[i]) << ", bound "
                      << static_cast<double>(bound) << ")";
        if (++failures >= 5) break;
      }
    }
  }
  return failures == 0;
}

bool CheckHalf(const HalfCase& c) {
  if (!c.fill) return MeetsReference(c, SharedInputs(c), RunHalf(c, SharedInputs(c)));
  const Inputs in = MakeInputs(c);
  return MeetsReference(c, in, RunHalf(c, in));
}

std::string Show(uint16_t h) { return Hex(h); }
std::string Show(float f) {
  std::ostringstream os;
  os << std::hexfloat << f;
  return os.str();
}

// Names the first element at which a and b differ in bits, if any.
template <class T>
void FirstDifference(const char* name, const std::vector<T>& a, const std::vector<T>& b,
                     std::ostringstream& os) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      os << " " << name << "[" << i << "] " << Show(a[i]) << " vs " << Show(b[i]);
      return;
    }
  }
  if (a.size() != b.size())
    os << " " << name << " sizes " << a.size() << ", " << b.size();
}

// Whether every output of a and b holds the same bits.
testing::AssertionResult SameOutputs(const HalfResult& a, const HalfResult& b) {
  std::ostringstream os;
  FirstDifference("y", a.y, b.y, os);
  FirstDifference("sum", a.sum, b.sum, os);
  FirstDifference("mean", a.mean, b.mean, os);
  FirstDifference("rstd", a.rstd, b.rstd, os);
  if (os.str().empty()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "differ:" << os.str();
}

class LayerNormHalfTest : public IsaTest {};
NK_INSTANTIATE_FOR_EACH_ISA(LayerNormHalfTest);

TEST_P(LayerNormHalfTest, EveryLengthUpTo67) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols = 1; cols <= 67; ++cols) {
        HalfCase c = MakeCase(fmt, op, 3, cols, cols % 4);
        ASSERT_TRUE(CheckHalf(c));
      }
    }
  }
}

TEST_P(LayerNormHalfTest, PrimesAndLongRows) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols :
           {97, 127, 128, 251, 256, 509, 768, 1021, 1024, 4093, 4096, 4099, 100003}) {
        HalfCase c = MakeCase(fmt, op, cols > 20000 ? 1 : 3, cols, cols % 2 ? 1 : 3);
        ASSERT_TRUE(CheckHalf(c));
      }
    }
  }
}

TEST_P(LayerNormHalfTest, OptionalGammaBetaAndStatistics) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols : {5, 64, 300}) {
        for (int mask = 0; mask < 8; ++mask) {
          HalfCase c = MakeCase(fmt, op, 5, cols);  // a group of four rows, one alone
          c.gamma = mask & 1;
          c.beta = mask & 2;
          c.stats = mask & 4;
          ASSERT_TRUE(CheckHalf(c));
        }
      }
    }
  }
}

TEST_P(LayerNormHalfTest, Misaligned) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t misalign : {0, 1, 2, 3, 5, 7, 15, 31}) {
        for (size_t y_shift : {0, 1}) {
          HalfCase c = MakeCase(fmt, op, 3, 129, misalign);
          c.y_shift = y_shift;
          ASSERT_TRUE(CheckHalf(c));
        }
      }
    }
  }
}

TEST_P(LayerNormHalfTest, InPlace) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      std::vector<Alias> aliases = {Alias::kYIsX};
      if (Fused(op)) {
        aliases = {Alias::kYIsX, Alias::kSumXYRes, Alias::kSumResYX, Alias::kNoSum};
      }
      for (size_t cols : {3, 64, 1000, 17000}) {  // the last: rows longer than a chunk
        for (Alias a : aliases) {
          HalfCase c = MakeCase(fmt, op, cols > 1000 ? 2 : 3, cols, 1);
          c.alias = a;
          ASSERT_TRUE(CheckHalf(c));
        }
      }
    }
  }
}

// The values whose rounding the store must get exactly right: every 97th half value,
// the midpoint to the next one (a tie: to even) and the fp32 values beside it, then the
// named ones (the largest values, the ties past them, subnormals), at both signs.
std::vector<float> RoundingTargets(const HalfFormat& fmt) {
  std::vector<float> t;
  const uint16_t inf = InfBits(fmt);
  for (uint32_t h = 0; h < inf; h += 97) {
    const long double v = Value(fmt, static_cast<uint16_t>(h));
    const long double next = h + 1 < inf
                                 ? Value(fmt, static_cast<uint16_t>(h + 1))
                                 : 2 * v - Value(fmt, static_cast<uint16_t>(h - 1));
    const float mid = static_cast<float>((v + next) / 2);  // exact in fp32
    for (float f : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, HUGE_VALF)}) {
      t.push_back(f);
    }
  }
  const std::vector<float> named =
      IsBf16(fmt)
          ? std::vector<float>{1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 0x1.fcp127f,  0x1.fdp127f,
                               0x1.fep127f,    0x1.ffp127f,    3.4e38f,      0x1p-133f,
                               0x1p-134f,      0x1.8p-133f,    0x1.fep-127f, 0x1.01p-126f}
          : std::vector<float>{65504.0f,     65519.996f,      65520.0f,        65536.0f,
                               1e6f,         1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 0x1p-24f,
                               0x1p-25f,     0x1.000002p-25f, 0x1.8p-24f,      3e-6f,
                               0x1.ffcp-15f, 0x1.ffep-15f,    0x1p-14f};
  t.insert(t.end(), named.begin(), named.end());
  const size_t positive = t.size();
  for (size_t i = 0; i < positive; ++i) t.push_back(-t[i]);
  // Not 0: beta = -0 gives y = x_hat * 0 + -0, +0 where x_hat * 0 is.
  t.erase(std::remove(t.begin(), t.end(), 0.0f), t.end());
  // Repeated up to a power of two: RMSNorm's mean of squares of +-1 is then 1 however
  // it is formed (a sum times 1 / cols too).
  size_t cols = 1;
  while (cols < t.size()) cols *= 2;
  for (size_t i = 0; t.size() < cols; ++i) t.push_back(t[i]);
  return t;
}

// Rows whose y is a chosen fp32 value exactly, so that the store's rounding is seen
// alone (no bound applies): LayerNorm with gamma 0 gives y = beta; RMSNorm of a row of
// +-1 with eps 0 has rrms 1 and gives y = +-gamma. Ties go to even; fp16 reaches
// 65504 and Inf at 65520 and beyond; subnormal results are kept.
TEST_P(LayerNormHalfTest, TiesToEvenOverflowAndSubnormalsExactly) {
  for (const HalfFormat& fmt : kFormats) {
    const std::vector<float> targets = RoundingTargets(fmt);
    const size_t cols = targets.size();
    for (Op op : kAllOps) {
      HalfCase c = MakeCase(fmt, op, 3, cols, 1);
      c.eps = Centered(op) ? 1e-5f : 0.0f;
      c.fill = [&](Values& v) {
        if (Centered(op)) {
          std::fill(v.gamma.begin(), v.gamma.end(), 0.0f);
          v.beta = targets;
        } else {
          v.gamma = targets;
          for (size_t i = 0; i < v.x.size(); ++i) v.x[i] = i % 3 ? 1.0f : -1.0f;
          std::fill(v.res.begin(), v.res.end(), 0.0f);
        }
      };
      SCOPED_TRACE(c.Describe());
      const Inputs in = MakeInputs(c);
      const HalfResult r = RunHalf(c, in);
      int failures = 0;
      for (size_t i = 0; i < r.y.size() && failures < 5; ++i) {
        const float sign = Centered(op) ? 1.0f : Widen(fmt, in.x[i]);
        const float want = sign * targets[i % cols];
        if (r.y[i] != Round(fmt, want)) {
          ADD_FAILURE() << "element " << i << ": y exactly " << std::hexfloat << want
                        << " stored as " << Hex(r.y[i]) << ", not "
                        << Hex(Round(fmt, want));
          ++failures;
        }
      }
    }
  }
}

// fp16 by the rule on ordinary rows: gamma large enough that y passes 65504 (Inf where
// the reference is 65520 or more), and small enough (1e-6) that y lies among the
// subnormals, which flushing to 0 would lose.
TEST_P(LayerNormHalfTest, Fp16OverflowAndSubnormals) {
  for (Op op : kAllOps) {
    for (float scale : {3e4f, 1e-6f}) {
      for (size_t cols : {7, 64, 1000}) {
        HalfCase c = MakeCase(kF16, op, 4, cols);
        c.beta = false;
        c.fill = [&](Values& v) {
          for (float& g : v.gamma) g *= scale;
        };
        ASSERT_TRUE(CheckHalf(c));
      }
    }
  }
}

TEST_P(LayerNormHalfTest, NonFiniteValuesStayInTheirRow) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols : {1, 7, 64, 333}) {
        for (float bad : {NAN, INFINITY, -INFINITY}) {
          HalfCase c = MakeCase(fmt, op, 4, cols);
          // Row 1 has one bad value, row 2 is bad throughout; rows 0 and 3 are clean.
          c.fill = [&](Values& v) {
            v.x[1 * cols + cols / 2] = bad;
            for (size_t i = 0; i < cols; ++i) v.x[2 * cols + i] = bad;
          };
          ASSERT_TRUE(CheckHalf(c));
        }
      }
      if (!Fused(op)) continue;
      // x + residual beyond the format's largest value: s, stored and normalized, is
      // Inf (fp16: 60000 + 60000; bf16: 3e38 + 3e38).
      for (size_t cols : {1, 64, 333}) {
        HalfCase c = MakeCase(fmt, op, 4, cols);
        const float big = IsBf16(fmt) ? 3e38f : 6e4f;
        c.fill = [&](Values& v) {
          v.x[1 * cols + cols / 2] = big;
          v.res[1 * cols + cols / 2] = big;
          for (size_t i = 0; i < cols; ++i) {
            v.x[2 * cols + i] = -big;
            v.res[2 * cols + i] = -big;
          }
        };
        ASSERT_TRUE(CheckHalf(c));
      }
    }
  }
}

// 1e4 + N(0, sd) rounded to half (bf16's step there is 64, fp16's 8): few distinct
// values, a mean far from 0 (bf16 with sd 1: a constant row). The long row takes the sd
// that leaves its format's values most ill-conditioned and not constant.
TEST_P(LayerNormHalfTest, IllConditionedRows) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols : {64, 4096, 100003}) {
        for (float sd : {1.0f, 100.0f}) {
          if (cols > 20000 && sd != (IsBf16(fmt) ? 100.0f : 1.0f)) continue;
          HalfCase c = MakeCase(fmt, op, cols > 20000 ? 1 : 2, cols);
          c.fill = [&](Values& v) { v.x = Normal(v.x.size(), Seed(cols), 1e4f, sd); };
          ASSERT_TRUE(CheckHalf(c));
        }
      }
    }
  }
}

// The same inputs give the same bits with 1, 2 and 3 threads: row partitions and the
// chunked long-row path.
TEST_P(LayerNormHalfTest, BitwiseEqualAcrossThreadCounts) {
  for (const HalfFormat& fmt : kFormats) {
    for (std::pair<size_t, size_t> shape : {std::make_pair(size_t{64}, size_t{4096}),
                                            std::make_pair(size_t{1}, size_t{1} << 20),
                                            std::make_pair(size_t{3}, size_t{100003})}) {
      for (Op op : kAllOps) {
        HalfCase c = MakeCase(fmt, op, shape.first, shape.second);
        const Inputs& in = SharedInputs(c);
        HalfResult first;
        for (int threads : {1, 2, 3}) {
          ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
          SCOPED_TRACE(c.Describe());
          const HalfResult r = RunHalf(c, in);
          if (threads == 1) {
            first = r;
            continue;
          }
          EXPECT_TRUE(SameOutputs(r, first)) << threads << " threads against 1";
        }
      }
    }
  }
}

// Tensors of 32 MiB in all (x and y; residual and sum too) are streamed: their rows
// repeat a block of 64 rows, and each must give the block's bits (the block is checked
// against the reference): rows of 1024 columns, and of 256 (the register path), with
// y aligned and not (rows of 256 at NumPy's 16 bytes: one joined span at AVX-512, a
// NaN row skipped in it and finished by the general path; rows of 1024 at 16 and 32
// bytes: the lines two rows share streamed in 16-byte pieces).
TEST_P(LayerNormHalfTest, LargeTensorsStream) {
  struct Big {
    Op op;
    size_t rows, cols, misalign;
    bool nan_row;
  };
  constexpr size_t kBlock = 64;
  for (const HalfFormat& fmt : kFormats) {
    for (Big b : {Big{Op::kLayerNorm, 8192, 1024, 0, false},
                  Big{Op::kLayerNorm, 8192, 1024, 8, false},
                  Big{Op::kAddLayerNorm, 4096, 1024, 16, false},
                  Big{Op::kAddRmsNorm, 4096, 1024, 1, false},
                  Big{Op::kRmsNorm, 32768, 256, 0, false},
                  Big{Op::kAddLayerNorm, 16384, 256, 0, false},
                  Big{Op::kLayerNorm, 32768, 256, 8, true}}) {
      const HalfCase block = MakeCase(fmt, b.op, kBlock, b.cols, b.misalign);
      Inputs in = SharedInputs(block);
      if (b.nan_row) in.x[5 * b.cols + 9] = ToHalf(fmt, {NAN})[0];
      const HalfResult want = RunHalf(block, in);
      ASSERT_TRUE(MeetsReference(block, in, want));
      HalfCase big = block;
      big.rows = b.rows;
      Inputs tiled{{}, {}, in.gamma, in.beta};
      for (size_t r = 0; r < big.rows; r += kBlock) {
        tiled.x.insert(tiled.x.end(), in.x.begin(), in.x.end());
        if (Fused(b.op)) tiled.res.insert(tiled.res.end(), in.res.begin(), in.res.end());
      }
      const HalfResult got = RunHalf(big, tiled);
      SCOPED_TRACE(big.Describe());
      // Block k of an output of the big call holds the bits of that output of the block.
      const auto same = [](const auto& big_out, const auto& block_out, size_t k) {
        const size_t len = block_out.size();
        return len == 0 || std::memcmp(big_out.data() + k * len, block_out.data(),
                                       len * sizeof(block_out[0])) == 0;
      };
      for (size_t k = 0; k < big.rows / kBlock; ++k) {
        ASSERT_TRUE(same(got.y, want.y, k)) << "rows " << k * kBlock << "..";
        ASSERT_TRUE(same(got.sum, want.sum, k)) << "rows " << k * kBlock << "..";
        ASSERT_TRUE(same(got.mean, want.mean, k)) << "rows " << k * kBlock << "..";
        ASSERT_TRUE(same(got.rstd, want.rstd, k)) << "rows " << k * kBlock << "..";
      }
    }
  }
}

// The bits do not depend on where the tensors lie.
TEST_P(LayerNormHalfTest, SameBitsAtAnyAddress) {
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (size_t cols : {64, 100, 1024, 4099}) {
        HalfCase c = MakeCase(fmt, op, cols > 1024 ? 3 : 9, cols);
        const Inputs& in = SharedInputs(c);
        const HalfResult first = RunHalf(c, in);
        for (size_t misalign : {1, 3, 8, 16}) {
          for (size_t y_shift : {0, 5}) {
            c.misalign = misalign;
            c.y_shift = y_shift;
            SCOPED_TRACE(c.Describe());
            ASSERT_TRUE(SameOutputs(RunHalf(c, in), first));
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- row strides

// The row strides of one call: cols plus these pads.
struct Pads {
  size_t x, res, sum, y;
};

// Runs c both contiguously and at the strides `pads` give (in place: y at x's place and
// stride, sum at the residual's), and expects the same bits in every output and
// untouched elements between rows.
void ExpectContiguousBits(const HalfCase& c, Pads pads, bool in_place) {
  SCOPED_TRACE(c.Describe() + " pads=" + std::to_string(pads.x) + "," +
               std::to_string(pads.res) + "," + std::to_string(pads.sum) + "," +
               std::to_string(pads.y) + " in_place=" + std::to_string(in_place));
  const bool fused = Fused(c.op);
  const size_t rows = c.rows, cols = c.cols;
  const Inputs& in = SharedInputs(c);
  const HalfResult want = RunHalf(c, in);

  // Inputs' gaps hold NaN (a kernel that used one would give NaN); outputs' a value.
  constexpr uint16_t kGap = 0x3E5A;
  const uint16_t nan = Unwritten<uint16_t>();
  const size_t m = c.misalign;
  StridedTensor<uint16_t> sx(rows, cols, cols + pads.x, m, nan);
  StridedTensor<uint16_t> sr(rows, cols, cols + pads.res, (m + 3) % 32, nan);
  StridedTensor<uint16_t> ss(rows, cols, cols + (in_place ? pads.res : pads.sum), m,
                             kGap);
  StridedTensor<uint16_t> sy(rows, cols, cols + (in_place ? pads.x : pads.y),
                             (m + 5) % 32, kGap);
  sx.Set(in.x);
  if (fused) sr.Set(in.res);
  Buffer mean(rows), rstd(rows);
  StridedTensor<uint16_t>& out_y = in_place ? sx : sy;
  StridedTensor<uint16_t>& out_sum = in_place ? sr : ss;
  ASSERT_EQ(CallHalfStrided(c.fmt, c.op, rows, cols, sx.data(), sx.ld,
                            fused ? sr.data() : nullptr, sr.ld, in.gamma.data(),
                            in.beta.data(), c.eps, fused ? out_sum.data() : nullptr,
                            out_sum.ld, out_y.data(), out_y.ld, mean.data(), rstd.data()),
            NK_OK)
      << nk_last_error();
  ASSERT_EQ(out_y.Dense(), want.y);
  if (fused) {
    ASSERT_EQ(out_sum.Dense(), want.sum);
  }
  ASSERT_TRUE(SameBits(std::vector<float>(rstd.data(), rstd.data() + rows), want.rstd));
  if (Centered(c.op)) {
    ASSERT_TRUE(SameBits(std::vector<float>(mean.data(), mean.data() + rows), want.mean));
  }
  ASSERT_TRUE(out_y.GapsHold(in_place ? nan : kGap)) << "y written between rows";
  if (fused) {
    ASSERT_TRUE(out_sum.GapsHold(in_place ? nan : kGap)) << "sum written between rows";
  }
}

TEST_P(LayerNormHalfTest, StridedGiveTheContiguousBits) {
  const Pads pads[] = {{1, 3, 5, 2}, {16, 16, 16, 16}, {61, 1, 0, 7}};
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (std::pair<size_t, size_t> shape : std::vector<std::pair<size_t, size_t>>{
               {1, 1}, {3, 7}, {17, 67}, {9, 256}, {40, 1024}, {5, 4099}}) {
        for (const Pads& p : pads) {
          for (size_t misalign : {0, 3}) {
            HalfCase c = MakeCase(fmt, op, shape.first, shape.second, misalign);
            ExpectContiguousBits(c, p, false);
            if (HasFatalFailure()) return;
          }
        }
      }
      for (size_t cols : {5, 64, 1024}) {
        HalfCase c = MakeCase(fmt, op, 37, cols, 1);
        ExpectContiguousBits(c, {cols, 3, 0, 0}, true);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// ---------------------------------------------------------------- validation

// The arguments of one small call, all outputs holding a sentinel; x and y in one
// buffer, as are residual and sum, so that overlaps can be made.
struct Args {
  static constexpr size_t kRows = 3, kCols = 8, kN = kRows * kCols;
  HalfBuffer xy{3 * kN}, rs{3 * kN};
  Buffer gamma{kCols}, beta{kCols}, mean{kRows}, rstd{kRows};
  const uint16_t* x = xy.data();
  const uint16_t* res = rs.data();
  uint16_t* y = xy.data() + 2 * kN;
  uint16_t* sum = rs.data() + 2 * kN;
  size_t rows = kRows, cols = kCols, ldx = kCols, ldy = kCols;
  float eps = 1e-5f;
  Args() {
    for (size_t i = 0; i < 3 * kN; ++i) {
      xy[i] = rs[i] = Round(kF16, 0.25f * static_cast<float>(i % 7));  // finite as bf16
    }
    gamma.Fill(1.0f);
    beta.Fill(0.0f);
    Mark();
  }
  // The sentinel in every output: nothing may be written on failure.
  void Mark() {
    for (size_t i = 0; i < kN; ++i) y[i] = sum[i] = 0x7777;
    mean.Fill(-5.0f);
    rstd.Fill(-5.0f);
  }
  bool Untouched() const {
    for (size_t i = 0; i < kN; ++i) {
      if (y[i] != 0x7777 || sum[i] != 0x7777) return false;
    }
    for (size_t r = 0; r < kRows; ++r) {
      if (mean[r] != -5.0f || rstd[r] != -5.0f) return false;
    }
    return true;
  }
  nk_status Run(const HalfFormat& fmt, Op op, bool strided) {
    const bool fused = Fused(op);
    if (strided) {
      return CallHalfStrided(fmt, op, rows, cols, x, ldx, fused ? res : nullptr, cols,
                             gamma.data(), beta.data(), eps, fused ? sum : nullptr, cols,
                             y, ldy, mean.data(), rstd.data());
    }
    return CallHalf(fmt, op, rows, cols, x, fused ? res : nullptr, gamma.data(),
                    beta.data(), eps, fused ? sum : nullptr, y, mean.data(), rstd.data());
  }
};

// Each bad call fails with `status`, a message from the half function naming `words`,
// and writes nothing.
void ExpectFailure(const HalfFormat& fmt, Op op, bool strided,
                   const std::function<void(Args&)>& set, nk_status status,
                   std::initializer_list<const char*> words) {
  Args a;
  set(a);
  a.Mark();
  const std::string name = FunctionName(fmt, op, strided);
  SCOPED_TRACE(name);
  ASSERT_EQ(a.Run(fmt, op, strided), status) << nk_last_error();
  const std::string m = nk_last_error();
  EXPECT_EQ(m.rfind(name + ": ", 0), 0u) << m;
  for (const char* w : words) EXPECT_NE(m.find(w), std::string::npos) << m;
  EXPECT_TRUE(a.Untouched());
}

TEST(LayerNormHalfValidation, BadArgumentsNameTheHalfFunction) {
  constexpr size_t kN = Args::kN;
  for (const HalfFormat& fmt : kFormats) {
    for (Op op : kAllOps) {
      for (bool strided : {false, true}) {
        ExpectFailure(fmt, op, strided, [](Args& a) { a.x = nullptr; },
                      NK_ERR_NULL_POINTER, {"x", "NULL"});
        ExpectFailure(fmt, op, strided, [](Args& a) { a.cols = a.ldx = a.ldy = 0; },
                      NK_ERR_INVALID_SHAPE, {"cols is 0"});
        ExpectFailure(fmt, op, strided, [](Args& a) { a.eps = -1.0f; },
                      NK_ERR_INVALID_ARGUMENT, {"eps"});
        // y's first element is x's last; the elements are 2 bytes.
        ExpectFailure(fmt, op, strided,
                      [](Args& a) { a.y = const_cast<uint16_t*>(a.x) + kN - 1; },
                      NK_ERR_OVERLAP, {"y", "x"});
        if (Fused(op)) {
          ExpectFailure(fmt, op, strided,
                        [](Args& a) { a.sum = const_cast<uint16_t*>(a.res) + kN - 1; },
                        NK_ERR_OVERLAP, {"sum", "residual"});
        }
        // Elements fit size_t, their bytes do not (x is NULL: a check that missed the
        // overflow would report that instead).
        ExpectFailure(fmt, op, strided,
                      [](Args& a) {
                        a.rows = std::numeric_limits<size_t>::max() / 8;
                        a.x = nullptr;
                      },
                      NK_ERR_INVALID_SHAPE, {"overflow"});
        if (strided) {
          ExpectFailure(fmt, op, true, [](Args& a) { a.ldx = Args::kCols - 1; },
                        NK_ERR_INVALID_SHAPE, {"ldx is 7"});
          ExpectFailure(fmt, op, true, [](Args& a) { a.ldy = 1; }, NK_ERR_INVALID_SHAPE,
                        {"ldy is 1"});
        }
        // Adjacent is not overlapping: y right after x, sum right after the residual.
        Args a;
        a.y = const_cast<uint16_t*>(a.x) + kN;
        a.sum = const_cast<uint16_t*>(a.res) + kN;
        EXPECT_EQ(a.Run(fmt, op, strided), NK_OK)
            << FunctionName(fmt, op, strided) << ": " << nk_last_error();
        // rows == 0 is a no-op, NULL pointers and all.
        Args empty;
        empty.rows = 0;
        empty.x = empty.res = nullptr;
        empty.y = empty.sum = nullptr;
        EXPECT_EQ(empty.Run(fmt, op, strided), NK_OK) << nk_last_error();
      }
    }
  }
}

}  // namespace
}  // namespace nk_test
