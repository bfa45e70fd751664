// SPDX-License-Identifier: Apache-2.0
// test_channelnorm_half: BatchNorm's and GroupNorm's bf16 / fp16 kernels under every
// ISA. They run the f32 kernels' arithmetic on the widened tensors, so every tensor
// output must be the f32 kernel's rounded once to nearest even, and every float output
// (statistics, moments, running stats, sums, dgamma, dbeta) the f32 kernel's bits. With
// test_batchnorm*, test_groupnorm holding the f32 kernels to the long-double bound,
// that is design.md's half rule; the rule is also checked directly against the
// reference (tests/half_reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "half_reference.h"
#include "reference.h"
#include "test_util.h"

namespace nk_test {
namespace {

// One element type's BatchNorm and GroupNorm tensor kernels (E: float, or uint16_t for
// both half formats, whose C types are uint16_t).
template <class E>
struct ChannelApi {
  nk_status (*training)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                        const float*, float, float, float*, float*, E*, float*, float*);
  nk_status (*inference)(size_t, size_t, size_t, nk_layout, const E*, const float*,
                         const float*, const float*, const float*, float, E*);
  nk_status (*moments)(size_t, size_t, size_t, nk_layout, const E*, float*, float*);
  nk_status (*backward)(size_t, size_t, size_t, nk_layout, const E*, const E*,
                        const float*, const float*, const float*, E*, float*, float*);
  nk_status (*reduce)(size_t, size_t, size_t, nk_layout, const E*, const E*, const float*,
                      const float*, float*, float*);
  nk_status (*apply)(size_t, size_t, size_t, nk_layout, const E*, const E*, const float*,
                     const float*, const float*, uint64_t, const float*, const float*,
                     E*);
  nk_status (*group_forward)(size_t, size_t, size_t, size_t, nk_layout, const E*,
                             const float*, const float*, float, E*, float*, float*);
  nk_status (*group_backward)(size_t, size_t, size_t, size_t, nk_layout, const E*,
                              const E*, const float*, const float*, const float*, E*,
                              float*, float*);
};
#define NK_CHANNEL_API(S)                                                    \
  {                                                                          \
    &nk_batchnorm_forward_training_##S, &nk_batchnorm_forward_inference_##S, \
        &nk_batchnorm_moments_##S, &nk_batchnorm_backward_##S,               \
        &nk_batchnorm_backward_reduce_##S, &nk_batchnorm_backward_apply_##S, \
        &nk_groupnorm_forward_##S, &nk_groupnorm_backward_##S                \
  }
const ChannelApi<float> kF32Api = NK_CHANNEL_API(f32);
const ChannelApi<uint16_t> kBf16Api = NK_CHANNEL_API(bf16);
const ChannelApi<uint16_t> kF16Api = NK_CHANNEL_API(f16);
#undef NK_CHANNEL_API

enum class Kernel {
  kTraining,
  kInference,
  kMoments,
  kBackward,
  kReduce,
  kApply,
  kGroupForward,
  kGroupBackward
};
constexpr Kernel kAllKernels[] = {
    Kernel::kTraining, Kernel::kInference, Kernel::kMoments,      Kernel::kBackward,
    Kernel::kReduce,   Kernel::kApply,     Kernel::kGroupForward, Kernel::kGroupBackward};
const char* KernelName(Kernel k) {
  constexpr const char* kNames[] = {
      "batchnorm_forward_training", "batchnorm_forward_inference",
      "batchnorm_moments",          "batchnorm_backward",
      "batchnorm_backward_reduce",  "batchnorm_backward_apply",
      "groupnorm_forward",          "groupnorm_backward"};
  return kNames[static_cast<int>(k)];
}
bool Group(Kernel k) { return k == Kernel::kGroupForward || k == Kernel::kGroupBackward; }
bool ReadsDy(Kernel k) {
  return k == Kernel::kBackward || k == Kernel::kReduce || k == Kernel::kApply ||
         k == Kernel::kGroupBackward;
}
// Whether the call writes a tensor (y or dx).
bool WritesTensor(Kernel k) { return k != Kernel::kMoments && k != Kernel::kReduce; }

// A call's inputs: half tensors, float parameters and given statistics.
struct Case {
  const HalfFormat* fmt = nullptr;
  Kernel kernel = Kernel::kTraining;
  nk_layout layout = NK_LAYOUT_NCHW;
  size_t n = 0, c = 0, spatial = 0, groups = 1;
  std::vector<uint16_t> x, dy;
  std::vector<float> gamma, beta;  // [c]
  // Given statistics: running mean / var (training), mean / var (inference), saved mean
  // / rstd (backward, reduce, apply: [c]; GroupNorm's backward: [n * groups]); and the
  // apply's sums over every shard.
  std::vector<float> stat_a, stat_b, sum_dy, sum_dy_xhat;
  uint64_t total_count = 0;

  size_t elements() const { return n * c * spatial; }
  size_t sets() const { return Group(kernel) ? n * groups : c; }
  // Element i's set (channel, or (sample, group)).
  size_t SetOf(size_t i) const {
    const size_t ch = layout == NK_LAYOUT_NCHW ? i / spatial % c : i % c;
    if (!Group(kernel)) return ch;
    return i / (c * spatial) * groups + ch / (c / groups);
  }
  size_t ChannelOf(size_t i) const {
    return layout == NK_LAYOUT_NCHW ? i / spatial % c : i % c;
  }
  std::vector<float> Widened(const std::vector<uint16_t>& h) const {
    static const auto table = [](const HalfFormat& f) {
      std::vector<float> v(65536);
      for (size_t p = 0; p < v.size(); ++p) v[p] = Widen(f, static_cast<uint16_t>(p));
      return v;
    };
    static const std::vector<float> bf16 = table(kBf16), f16 = table(kF16);
    const std::vector<float>& value = fmt == &kBf16 ? bf16 : f16;
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = value[h[i]];
    return f;
  }
  std::string Describe() const {
    return std::string("nk_") + KernelName(kernel) + "_" + fmt->name + " " +
           std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(spatial) +
           (Group(kernel) ? " groups " + std::to_string(groups) : std::string()) +
           (layout == NK_LAYOUT_NHWC ? " NHWC" : " NCHW") + " isa " + nk_get_isa() +
           " threads " + std::to_string(nk_get_num_threads());
  }
};

// What a call gave: the tensor (rounded, for the f32 kernel) and the float outputs.
struct Out {
  std::vector<uint16_t> tensor;
  std::vector<std::vector<float>> floats;
};

// Random inputs: x ~ N(x_mean, 2), dy ~ N(0, 1), rounded to the format (drawn from
// 4096 such values, which keeps the 32 MiB cases' set-up short); gamma around
// 1 with `spread` orders of magnitude either way (fp16 results beyond 65504 and in its
// subnormals); the given statistics those of the widened x (long double, rounded once).
Case MakeCase(const HalfFormat& fmt, Kernel kernel, nk_layout layout, size_t n, size_t c,
              size_t spatial, size_t groups, uint32_t seed, float x_mean = 0.5f,
              int spread = 0) {
  Case k;
  k.fmt = &fmt;
  k.kernel = kernel;
  k.layout = layout;
  k.n = n;
  k.c = c;
  k.spatial = spatial;
  k.groups = groups;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> power(-spread, spread);
  std::uniform_int_distribution<size_t> pick(0, 4095);
  std::vector<uint16_t> xs(4096), dys(4096);
  for (size_t i = 0; i < 4096; ++i) {
    xs[i] = Round(fmt, x_mean + 2 * normal(rng));
    dys[i] = Round(fmt, normal(rng));
  }
  for (size_t i = 0; i < k.elements(); ++i) k.x.push_back(xs[pick(rng)]);
  if (ReadsDy(kernel)) {
    for (size_t i = 0; i < k.elements(); ++i) k.dy.push_back(dys[pick(rng)]);
  }
  for (size_t j = 0; j < c; ++j) {
    k.gamma.push_back((1 + 0.25f * normal(rng)) * std::ldexp(1.0f, 5 * power(rng)));
    k.beta.push_back(0.5f * normal(rng));
  }
  const std::vector<float> x = k.Widened(k.x);
  std::vector<long double> sum(k.sets()), sq(k.sets());
  std::vector<size_t> count(k.sets());
  for (size_t i = 0; i < x.size(); ++i) {
    sum[k.SetOf(i)] += x[i];
    ++count[k.SetOf(i)];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const long double d = x[i] - sum[k.SetOf(i)] / count[k.SetOf(i)];
    sq[k.SetOf(i)] += d * d;
  }
  for (size_t s = 0; s < k.sets(); ++s) {
    const long double mean = sum[s] / count[s], var = sq[s] / count[s];
    k.stat_a.push_back(static_cast<float>(kernel == Kernel::kTraining ? 0.25L : mean));
    k.stat_b.push_back(static_cast<float>(kernel == Kernel::kTraining ? 2.0L
                                          : kernel == Kernel::kInference
                                              ? var
                                              : 1 / std::sqrt(var + 1e-5L)));
    k.sum_dy.push_back(normal(rng) * std::sqrt(static_cast<float>(count[s])));
    k.sum_dy_xhat.push_back(normal(rng) * std::sqrt(static_cast<float>(count[s])));
  }
  k.total_count = 2 * n * spatial;  // this shard is half of the batch
  return k;
}

// Where the call's tensor output goes.
enum class Place { kSeparate, kInPlace };  // in place: y == x, or dx == dy

// The case through `api` with tensors of E (half patterns, or the widened floats),
// `misalign` elements past a line.
template <class E>
Out Run(const ChannelApi<E>& api, const Case& k, const std::vector<E>& x_in,
        const std::vector<E>& dy_in, size_t misalign, Place place) {
  const size_t elems = k.elements(), sets = k.sets(), c = k.c;
  ElementBuffer<E> x(elems, misalign), dy(elems, misalign), out(elems, misalign);
  std::memcpy(x.data(), x_in.data(), elems * sizeof(E));
  if (!dy_in.empty()) std::memcpy(dy.data(), dy_in.data(), elems * sizeof(E));
  E* o = place == Place::kSeparate ? out.data()
         : ReadsDy(k.kernel)       ? dy.data()
                                   : x.data();
  std::vector<float> a = k.stat_a, b = k.stat_b;
  std::vector<float> f0(std::max(sets, c), -1.0f), f1(std::max(sets, c), -1.0f);
  const float* gamma = k.gamma.data();
  const float* beta = k.beta.data();
  nk_status s = NK_ERR_INVALID_ARGUMENT;
  switch (k.kernel) {
    case Kernel::kTraining:
      s = api.training(k.n, c, k.spatial, k.layout, x.data(), gamma, beta, 1e-5f, 0.1f,
                       a.data(), b.data(), o, f0.data(), f1.data());
      break;
    case Kernel::kInference:
      s = api.inference(k.n, c, k.spatial, k.layout, x.data(), a.data(), b.data(), gamma,
                        beta, 1e-5f, o);
      break;
    case Kernel::kMoments:
      s = api.moments(k.n, c, k.spatial, k.layout, x.data(), f0.data(), f1.data());
      break;
    case Kernel::kBackward:
      s = api.backward(k.n, c, k.spatial, k.layout, x.data(), dy.data(), a.data(),
                       b.data(), gamma, o, f0.data(), f1.data());
      break;
    case Kernel::kReduce:
      s = api.reduce(k.n, c, k.spatial, k.layout, x.data(), dy.data(), a.data(), b.data(),
                     f0.data(), f1.data());
      break;
    case Kernel::kApply:
      s = api.apply(k.n, c, k.spatial, k.layout, x.data(), dy.data(), a.data(), b.data(),
                    gamma, k.total_count, k.sum_dy.data(), k.sum_dy_xhat.data(), o);
      break;
    case Kernel::kGroupForward:
      s = api.group_forward(k.n, c, k.spatial, k.groups, k.layout, x.data(), gamma, beta,
                            1e-5f, o, f0.data(), f1.data());
      break;
    case Kernel::kGroupBackward:
      s = api.group_backward(k.n, c, k.spatial, k.groups, k.layout, x.data(), dy.data(),
                             a.data(), b.data(), gamma, o, f0.data(), f1.data());
      break;
  }
  EXPECT_EQ(s, NK_OK) << k.Describe() << ": " << nk_last_error();
  Out r;
  if (WritesTensor(k.kernel)) {
    for (size_t i = 0; i < elems; ++i) {
      if constexpr (std::is_same_v<E, float>) {
        r.tensor.push_back(Round(*k.fmt, o[i]));
      } else {
        r.tensor.push_back(o[i]);
      }
    }
  }
  r.floats = {f0, f1};
  if (k.kernel == Kernel::kTraining) r.floats.insert(r.floats.end(), {a, b});
  return r;
}

Out RunHalf(const Case& k, size_t misalign = 0, Place place = Place::kSeparate) {
  return Run(k.fmt == &kBf16 ? kBf16Api : kF16Api, k, k.x, k.dy, misalign, place);
}

// The f32 kernel on the widened tensors, its tensor output rounded once.
Out RunF32Rounded(const Case& k) {
  return Run(kF32Api, k, k.Widened(k.x), k.Widened(k.dy), 0, Place::kSeparate);
}

// Tensors equal (NaN: a quiet NaN where the rounded f32 result is NaN), floats bitwise.
void ExpectSame(const Case& k, const Out& got, const Out& want) {
  SCOPED_TRACE(k.Describe());
  ASSERT_EQ(got.tensor.size(), want.tensor.size());
  for (size_t i = 0; i < got.tensor.size(); ++i) {
    if (IsNaN(*k.fmt, want.tensor[i])) {
      ASSERT_TRUE(IsNaN(*k.fmt, got.tensor[i]) && IsQuiet(*k.fmt, got.tensor[i]))
          << "element " << i;
    } else {
      ASSERT_EQ(got.tensor[i], want.tensor[i])
          << "element " << i << " (set " << k.SetOf(i)
          << "): " << Widen(*k.fmt, got.tensor[i]) << " against "
          << Widen(*k.fmt, want.tensor[i]);
    }
  }
  ASSERT_EQ(got.floats.size(), want.floats.size());
  for (size_t v = 0; v < got.floats.size(); ++v) {
    for (size_t j = 0; j < got.floats[v].size(); ++j) {
      ASSERT_TRUE(SameBits(got.floats[v][j], want.floats[v][j]))
          << "float output " << v << " [" << j << "]: " << got.floats[v][j] << " against "
          << want.floats[v][j];
    }
  }
}

class ChannelHalf : public IsaTest {};

constexpr const HalfFormat* kFormats[] = {&kBf16, &kF16};
constexpr nk_layout kLayouts[] = {NK_LAYOUT_NCHW, NK_LAYOUT_NHWC};

struct Shape {
  size_t n, c, spatial, groups;
};

// Every kernel, both formats and layouts: vector tails (channels and planes of 1..67),
// 7x7 planes, primes, planes longer than a chunk, GroupNorm's LayerNorm-like (1 group),
// middle and InstanceNorm (c groups) sets; gamma over +-10 powers of two in some.
TEST_P(ChannelHalf, IsTheF32KernelRounded) {
  const std::vector<Shape> shapes = {{2, 3, 5, 3},    {3, 7, 49, 7},   {2, 67, 13, 1},
                                     {4, 16, 61, 4},  {1, 5, 4099, 5}, {2, 3, 16411, 3},
                                     {8, 64, 49, 32}, {3, 12, 7, 6},   {1, 2, 100003, 1},
                                     {5, 24, 31, 8}};
  uint32_t seed = 1;
  for (const HalfFormat* fmt : kFormats) {
    for (Kernel kernel : kAllKernels) {
      for (nk_layout layout : kLayouts) {
        for (const Shape& s : shapes) {
          ++seed;
          const Case k = MakeCase(*fmt, kernel, layout, s.n, s.c, s.spatial, s.groups,
                                  seed, 0.5f, seed % 3 == 0 ? 2 : 0);
          ExpectSame(k, RunHalf(k), RunF32Rounded(k));
        }
        for (size_t c = 1; c <= 67; c += 3) {
          const Case k = MakeCase(*fmt, kernel, layout, 2, c, 5, 1, ++seed);
          ExpectSame(k, RunHalf(k), RunF32Rounded(k));
        }
      }
    }
  }
}

// design.md's half rule against the long-double reference of the widened inputs: y of
// the training forward and of GroupNorm's forward per set, dx of both backwards.
TEST_P(ChannelHalf, MeetsTheHalfRule) {
  uint32_t seed = 100;
  for (const HalfFormat* fmt : kFormats) {
    for (Kernel kernel : {Kernel::kTraining, Kernel::kBackward, Kernel::kGroupForward,
                          Kernel::kGroupBackward}) {
      for (nk_layout layout : kLayouts) {
        const Case k = MakeCase(*fmt, kernel, layout, 3, 8, 301, 4, ++seed);
        const Out got = RunHalf(k);
        const std::vector<float> x = k.Widened(k.x), dy = k.Widened(k.dy);
        for (size_t s = 0; s < k.sets(); ++s) {
          // The set's elements, gathered with their channels' parameters.
          std::vector<size_t> at;
          std::vector<float> xs, dys, gammas, betas;
          for (size_t i = 0; i < k.elements(); ++i) {
            if (k.SetOf(i) != s) continue;
            at.push_back(i);
            xs.push_back(x[i]);
            if (!dy.empty()) dys.push_back(dy[i]);
            gammas.push_back(k.gamma[k.ChannelOf(i)]);
            betas.push_back(k.beta[k.ChannelOf(i)]);
          }
          const size_t m = at.size();
          if (ReadsDy(kernel)) {
            const RowGradRef ref =
                ReferenceRowGrad(true, m, xs.data(), dys.data(), nullptr, k.stat_a[s],
                                 k.stat_b[s], gammas.data());
            for (size_t j = 0; j < m; ++j) {
              ASSERT_TRUE(MeetsHalf(*fmt, got.tensor[at[j]], ref.dx[j], ref.dx_bound[j]))
                  << k.Describe() << " set " << s << " element " << at[j] << ": got "
                  << Widen(*fmt, got.tensor[at[j]]) << ", reference " << ref.dx[j];
            }
          } else {
            const RowRef ref = ReferenceRow(true, m, xs.data(), nullptr, gammas.data(),
                                            betas.data(), 1e-5f);
            for (size_t j = 0; j < m; ++j) {
              ASSERT_TRUE(MeetsHalf(*fmt, got.tensor[at[j]], ref.y[j],
                                    BoundY(m, ref, j, gammas[j], betas[j])))
                  << k.Describe() << " set " << s << " element " << at[j] << ": got "
                  << Widen(*fmt, got.tensor[at[j]]) << ", reference " << ref.y[j];
            }
          }
        }
      }
    }
  }
}

// Misaligned tensors (2 and 16 bytes past a line) and in place (y == x, dx == dy) give
// the bits of separate aligned ones.
TEST_P(ChannelHalf, MisalignedAndInPlace) {
  uint32_t seed = 200;
  for (const HalfFormat* fmt : kFormats) {
    for (Kernel kernel : kAllKernels) {
      for (nk_layout layout : kLayouts) {
        const Case k = MakeCase(*fmt, kernel, layout, 3, 32, 150, 8, ++seed);
        const Out want = RunHalf(k);
        for (size_t misalign : {1, 8}) ExpectSame(k, RunHalf(k, misalign), want);
        if (WritesTensor(kernel)) ExpectSame(k, RunHalf(k, 1, Place::kInPlace), want);
      }
    }
  }
}

// A NaN in one channel (BatchNorm) or one set (GroupNorm) stays there, as the f32
// kernel gives; an Inf likewise; ill-conditioned data (1e4 + N(0, 2), rounded).
TEST_P(ChannelHalf, NonFiniteAndIllConditioned) {
  uint32_t seed = 300;
  for (const HalfFormat* fmt : kFormats) {
    for (Kernel kernel : kAllKernels) {
      for (nk_layout layout : kLayouts) {
        Case k = MakeCase(*fmt, kernel, layout, 2, 8, 40, 4, ++seed);
        const size_t nan_at = 3 * (layout == NK_LAYOUT_NCHW ? 40 : 1);  // channel 3
        k.x[nan_at] = InfBits(*fmt) | QuietBit(*fmt);
        if (ReadsDy(kernel)) {  // the same channel's next value
          k.dy[nan_at + (layout == NK_LAYOUT_NCHW ? 1 : 8)] = InfBits(*fmt);
        }
        const Out got = RunHalf(k);
        ExpectSame(k, got, RunF32Rounded(k));
        for (size_t i = 0; i < got.tensor.size(); ++i) {
          if (k.SetOf(i) == k.SetOf(nan_at)) continue;
          ASSERT_FALSE(IsNaN(*fmt, got.tensor[i])) << k.Describe() << " element " << i;
        }
        const Case ill = MakeCase(*fmt, kernel, layout, 2, 8, 300, 4, ++seed, 1e4f);
        ExpectSame(ill, RunHalf(ill), RunF32Rounded(ill));
      }
    }
  }
}

// 1, 2 and 3 threads give the same bits, on shapes the threads split.
TEST_P(ChannelHalf, ThreadCountsAgree) {
  uint32_t seed = 400;
  for (const HalfFormat* fmt : kFormats) {
    for (Kernel kernel : kAllKernels) {
      for (nk_layout layout : kLayouts) {
        const Case k = MakeCase(*fmt, kernel, layout, 6, 64, 1024, 32, ++seed);
        nk_set_num_threads(1);
        const Out one = RunHalf(k);
        for (int t : {2, 3}) {
          nk_set_num_threads(t);
          ExpectSame(k, RunHalf(k), one);
        }
      }
    }
  }
}

// Tensors large enough to be streamed (x and y together past 32 MiB at 2 bytes an
// element), aligned and at NumPy's 16 bytes: the forward's and the backward's maps
// (GroupNorm's are the same steps); one format per ISA, both across the ISAs.
TEST_P(ChannelHalf, LargeTensorsStream) {
  uint32_t seed = 500;
  const HalfFormat* fmt = GetParam() == "AVX2" || GetParam() == "SSSE3" ? &kF16 : &kBf16;
  for (Kernel kernel : {Kernel::kTraining, Kernel::kBackward}) {
    for (nk_layout layout : kLayouts) {
      const Case k = MakeCase(*fmt, kernel, layout, 16, 64, 64 * 128, 32, ++seed);
      const Out want = RunF32Rounded(k);
      ExpectSame(k, RunHalf(k), want);
      ExpectSame(k, RunHalf(k, 8), want);
    }
  }
}

// Refused calls name the half function and the argument, and write nothing; the
// overlap check counts the half tensors' bytes.
TEST_P(ChannelHalf, BadArguments) {
  for (const HalfFormat* fmt : kFormats) {
    const ChannelApi<uint16_t>& api = fmt == &kBf16 ? kBf16Api : kF16Api;
    const size_t n = 2, c = 4, spatial = 3, elems = n * c * spatial;
    std::vector<uint16_t> x(2 * elems, 0x3C00), dy(elems, 0x3C00), out(elems, 0x1234);
    std::vector<float> mean(c, 0), rstd(c, 1), f0(c, 7), f1(c, 7);
    const std::string suffix = std::string("_") + fmt->name;
    const auto named = [&](const char* fn, const char* arg) {
      const std::string e = nk_last_error();
      return e.find(std::string(fn) + suffix + ": " + arg) != std::string::npos;
    };
    EXPECT_EQ(
        api.training(n, c, spatial, NK_LAYOUT_NCHW, nullptr, nullptr, nullptr, 1e-5f,
                     0.1f, nullptr, nullptr, out.data(), f0.data(), f1.data()),
        NK_ERR_NULL_POINTER);
    EXPECT_TRUE(named("nk_batchnorm_forward_training", "x")) << nk_last_error();
    EXPECT_EQ(api.backward(n, c, spatial, NK_LAYOUT_NHWC, x.data(), nullptr, mean.data(),
                           rstd.data(), nullptr, out.data(), f0.data(), f1.data()),
              NK_ERR_NULL_POINTER);
    EXPECT_TRUE(named("nk_batchnorm_backward", "dy")) << nk_last_error();
    EXPECT_EQ(api.group_forward(n, c, spatial, 3, NK_LAYOUT_NCHW, x.data(), nullptr,
                                nullptr, 1e-5f, out.data(), nullptr, nullptr),
              NK_ERR_INVALID_SHAPE);
    EXPECT_NE(std::string(nk_last_error()).find("nk_groupnorm_forward" + suffix),
              std::string::npos)
        << nk_last_error();
    // y overlapping x's last half element (not y == x): refused.
    EXPECT_EQ(api.inference(n, c, spatial, NK_LAYOUT_NCHW, x.data(), mean.data(),
                            rstd.data(), nullptr, nullptr, 1e-5f, x.data() + elems - 1),
              NK_ERR_OVERLAP);
    EXPECT_NE(
        std::string(nk_last_error()).find("nk_batchnorm_forward_inference" + suffix),
        std::string::npos)
        << nk_last_error();
    // One element past x: allowed (the half tensors are counted at 2 bytes).
    EXPECT_EQ(api.inference(n, c, spatial, NK_LAYOUT_NCHW, x.data(), mean.data(),
                            rstd.data(), nullptr, nullptr, 1e-5f, x.data() + elems),
              NK_OK)
        << nk_last_error();
    for (uint16_t v : out) EXPECT_EQ(v, 0x1234);
    for (float v : f0) EXPECT_EQ(v, 7.0f);
    for (size_t i = 0; i < elems; ++i) EXPECT_EQ(x[i], 0x3C00);
  }
}

NK_INSTANTIATE_FOR_EACH_ISA(ChannelHalf);

}  // namespace
}  // namespace nk_test
