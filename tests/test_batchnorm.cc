// SPDX-License-Identifier: Apache-2.0
// test_batchnorm.cc: BatchNorm training and inference and the SyncBatchNorm pieces
// against the long-double reference, within the design.md bound, under every ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "batchnorm_case.h"
#include "reference.h"
#include "test_util.h"

namespace nk_test {
namespace {

class BatchNorm : public IsaTest {};

constexpr nk_layout kLayouts[] = {NK_LAYOUT_NCHW, NK_LAYOUT_NHWC};

// The grid: c in {1, 3, 17, 64}, spatial in {1, 7x7, 111, 56x56},
// n in {1, 2, 8}, both layouts, training and inference.
// Runs k with each thread count, checks the first run against the reference and
// expects the same bits from the others.
void ExpectSameBitsForThreadCounts(const BnCase& k, std::initializer_list<int> counts) {
  std::vector<BnRun> runs;
  for (int threads : counts) {
    ASSERT_EQ(nk_set_num_threads(threads), NK_OK);
    runs.push_back(RunBn(k));
    ASSERT_EQ(runs.back().status, NK_OK) << nk_last_error();
  }
  ASSERT_EQ(CheckBn(k, runs[0]), 0);
  for (size_t t = 1; t < runs.size(); ++t) {
    SCOPED_TRACE(k.Describe() + " run " + std::to_string(t + 1));
    EXPECT_TRUE(SameBits(runs[t].y, runs[0].y));
    EXPECT_TRUE(SameBits(runs[t].save_mean, runs[0].save_mean));
    EXPECT_TRUE(SameBits(runs[t].save_rstd, runs[0].save_rstd));
    EXPECT_TRUE(SameBits(runs[t].running_var, runs[0].running_var));
  }
}

TEST_P(BatchNorm, ShapeGrid) {
  for (size_t c : {1, 3, 17, 64}) {
    for (size_t spatial : {1, 49, 111, 3136}) {
      for (size_t n : {1, 2, 8}) {
        if (n * spatial == 1) continue;  // an error in training, tested in the API test
        for (nk_layout layout : kLayouts) {
          for (bool training : {true, false}) {
            BnCase k;
            k.n = n, k.c = c, k.spatial = spatial, k.layout = layout;
            k.training = training;
            ASSERT_EQ(RunAndCheckBn(k), 0);
          }
        }
      }
    }
  }
}

// Every channel count 1..67 (NHWC's vector and period tails) and every spatial size
// 1..67 (NCHW's), with odd n.
TEST_P(BatchNorm, EveryChannelCountAndSpatialUpTo67) {
  for (size_t c = 1; c <= 67; ++c) {
    BnCase k;
    k.n = 3, k.c = c, k.spatial = 37, k.layout = NK_LAYOUT_NHWC;
    ASSERT_EQ(RunAndCheckBn(k), 0);
  }
  for (size_t spatial = 1; spatial <= 67; ++spatial) {
    BnCase k;
    k.n = 2, k.c = 3, k.spatial = spatial, k.layout = NK_LAYOUT_NCHW;
    ASSERT_EQ(RunAndCheckBn(k), 0);
  }
}

// Long channels: several kChunk spans per plane (NCHW), several row chunks with a
// short last one (NHWC), primes.
TEST_P(BatchNorm, LongChannels) {
  for (nk_layout layout : kLayouts) {
    BnCase k;
    k.n = 1, k.c = 2, k.spatial = 100003, k.layout = layout;
    ASSERT_EQ(RunAndCheckBn(k), 0);
    k.n = 3, k.c = 5, k.spatial = 16411;
    ASSERT_EQ(RunAndCheckBn(k), 0);
  }
}

TEST_P(BatchNorm, OptionalArgumentsMisalignedAndInPlace) {
  for (nk_layout layout : kLayouts) {
    for (size_t misalign : {1, 3}) {
      for (int variant = 0; variant < 4; ++variant) {
        BnCase k;
        k.n = 2, k.c = 19, k.spatial = 53, k.layout = layout, k.misalign = misalign;
        k.gamma = variant & 1;
        k.beta = variant & 2;
        k.running = variant != 1;
        k.save = variant != 2;
        k.in_place = variant >= 2;
        ASSERT_EQ(RunAndCheckBn(k), 0);
        k.training = false;
        ASSERT_EQ(RunAndCheckBn(k), 0);
      }
    }
  }
}

// x (and every other tensor) at any offset gives the same bits as aligned: long NCHW
// planes off a line boundary are read as whole lines around each vector (line pairs,
// AVX-512), whose vectors must hold the same values in the same lanes. Shapes: planes
// shorter than that path takes, at its threshold, and long with a tail; NHWC alongside.
TEST_P(BatchNorm, SameBitsAtAnyAddress) {
  for (nk_layout layout : kLayouts) {
    for (size_t spatial : {53, 3072, 4099}) {
      for (bool training : {true, false}) {
        BnCase k;
        k.n = 2, k.c = 3, k.spatial = spatial, k.layout = layout, k.training = training;
        const BnRun aligned = RunBn(k);
        ASSERT_EQ(aligned.status, NK_OK) << nk_last_error();
        ASSERT_EQ(CheckBn(k, aligned), 0);
        for (size_t misalign : {1, 4, 7, 15}) {
          k.misalign = misalign;
          SCOPED_TRACE(k.Describe());
          const BnRun r = RunBn(k);
          ASSERT_EQ(r.status, NK_OK) << nk_last_error();
          EXPECT_TRUE(SameBits(r.y, aligned.y));
          EXPECT_TRUE(SameBits(r.save_mean, aligned.save_mean));
          EXPECT_TRUE(SameBits(r.save_rstd, aligned.save_rstd));
          EXPECT_TRUE(SameBits(r.running_mean, aligned.running_mean));
          EXPECT_TRUE(SameBits(r.running_var, aligned.running_var));
        }
      }
      // The statistics of a shard (SyncBatchNorm's first step) too.
      BnCase k;
      k.n = 2, k.c = 3, k.spatial = spatial, k.layout = layout;
      std::vector<float> mean0, m20;
      for (size_t misalign : {0, 1, 4, 7, 15}) {
        Buffer x(k.elements(), misalign);
        FillNormal(x, Seed(spatial), 2.0f, 1.5f);
        std::vector<float> mean(k.c, NAN), m2(k.c, NAN);
        ASSERT_EQ(nk_batchnorm_moments_f32(k.n, k.c, k.spatial, layout, x.data(),
                                           mean.data(), m2.data()),
                  NK_OK)
            << nk_last_error();
        if (misalign == 0) {
          mean0 = mean, m20 = m2;
          continue;
        }
        EXPECT_TRUE(SameBits(mean, mean0) && SameBits(m2, m20))
            << "spatial=" << spatial << " misalign=" << misalign;
      }
    }
  }
}

// Wide NHWC rows (ResNet's 512-2048 channels) are mapped row by row, in the cache and
// streamed (2048 channels); 1000 is not a whole number of vectors. Calls of decreasing
// size reuse the buffers the thread kept from the larger ones.
TEST_P(BatchNorm, WideChannelsLast) {
  struct Shape {
    size_t n, c, spatial, misalign;
    bool in_place;
  };
  for (const Shape& s : {Shape{1, 2048, 2049, 0, false}, Shape{1, 2048, 49, 1, false},
                         Shape{2, 1024, 97, 0, true}, Shape{3, 1000, 13, 2, false},
                         Shape{8, 512, 49, 3, true}, Shape{2, 512, 1, 0, false}}) {
    for (bool training : {true, false}) {
      BnCase k;
      k.n = s.n, k.c = s.c, k.spatial = s.spatial, k.layout = NK_LAYOUT_NHWC;
      k.misalign = s.misalign, k.in_place = s.in_place, k.training = training;
      ASSERT_EQ(RunAndCheckBn(k), 0);
    }
  }
  BnCase k;
  k.n = 8, k.c = 1024, k.spatial = 49, k.layout = NK_LAYOUT_NHWC;
  ExpectSameBitsForThreadCounts(k, {1, 2, 3});
}

// Tensors far larger than the cache (x and y over 32 MiB) take the streaming stores;
// narrow NHWC rows stream through their widened period.
TEST_P(BatchNorm, LargeTensorsStream) {
  for (nk_layout layout : kLayouts) {
    for (bool training : {true, false}) {
      BnCase k;
      k.n = 4, k.c = 64, k.spatial = 16384, k.layout = layout, k.training = training;
      ASSERT_EQ(RunAndCheckBn(k), 0);
    }
  }
  BnCase narrow;
  narrow.n = 8, narrow.c = 3, narrow.spatial = 174763, narrow.layout = NK_LAYOUT_NHWC;
  ASSERT_EQ(RunAndCheckBn(narrow), 0);
  // NCHW planes whose boundaries fall inside vectors (196, short planes) or that are
  // shorter than a vector (7), a misaligned y, in place; NHWC rows streamed to a y at
  // NumPy's 16 bytes or one float past a vector boundary (peeled to it: column blocks,
  // wide rows in place, narrow rows through their period); the same bits for 1 and 3
  // threads.
  struct Shape {
    size_t n, c, spatial, misalign;
    bool in_place;
    nk_layout layout;
  };
  for (const Shape& s : {Shape{168, 256, 196, 1, false, NK_LAYOUT_NCHW},
                         Shape{18750, 64, 7, 3, true, NK_LAYOUT_NCHW},
                         Shape{84, 256, 196, 4, false, NK_LAYOUT_NHWC},
                         Shape{16, 2048, 128, 1, true, NK_LAYOUT_NHWC},
                         Shape{16, 24, 11000, 4, false, NK_LAYOUT_NHWC}}) {
    for (bool training : {true, false}) {
      BnCase k;
      k.n = s.n, k.c = s.c, k.spatial = s.spatial, k.misalign = s.misalign;
      k.in_place = s.in_place, k.training = training, k.layout = s.layout;
      if (training) {
        ExpectSameBitsForThreadCounts(k, {1, 3});
      } else {
        ExpectSameBitsForThreadCounts(k, {1});
      }
    }
  }
}

// 1e4 + N(0, 1) per channel, and a channel that is a sorted ramp over 100003 values.
TEST_P(BatchNorm, IllConditioned) {
  for (nk_layout layout : kLayouts) {
    BnCase k;
    k.n = 4, k.c = 6, k.spatial = 1024, k.layout = layout;
    k.fill = [&](Buffer& x) {
      for (size_t i = 0; i < x.size(); ++i) x[i] += 1e4f;
    };
    ASSERT_EQ(RunAndCheckBn(k), 0);
    BnCase ramp;
    ramp.n = 1, ramp.c = 2, ramp.spatial = 100003, ramp.layout = layout;
    ramp.fill = [&](Buffer& x) {
      for (size_t ci = 0; ci < ramp.c; ++ci) {
        for (size_t j = 0; j < ramp.count(); ++j) {
          x[ramp.Index(ci, j)] = static_cast<float>(
              1e4L + (-1.7L + 3.4L * j / (ramp.count() - 1)) * (ci + 1));
        }
      }
    };
    ASSERT_EQ(RunAndCheckBn(ramp), 0);
  }
}

// |x| ~ 1e30: squared deviations overflow fp32; the rescaled slow path keeps y, mean
// and rstd finite and within the bound (running_var, a variance, may be Inf).
TEST_P(BatchNorm, HugeValues) {
  for (nk_layout layout : kLayouts) {
    for (float scale : {1e19f, 1e30f}) {
      BnCase k;
      k.n = 2, k.c = 5, k.spatial = 301, k.layout = layout;
      k.fill = [&](Buffer& x) {
        for (size_t i = 0; i < x.size(); ++i) x[i] *= scale;
      };
      const BnRun r = RunBn(k);
      ASSERT_EQ(CheckBn(k, r), 0);
      for (size_t ci = 0; ci < k.c; ++ci) {
        EXPECT_TRUE(std::isfinite(r.save_mean[ci]) && std::isfinite(r.save_rstd[ci]));
      }
    }
  }
}

// The slow path with a huge gamma: rstd * gamma is moderate in the units of x while
// the rescaled rstd times gamma would overflow (found by fuzz_batchnorm).
TEST_P(BatchNorm, SlowPathWithHugeGamma) {
  const float x[6] = {10001.5049f, -4.92590904f, 2.52483345e+38f,
                      -6.87753582f, 2.44552422f, -3.71959639f};
  const float gamma = 2.48344577e+38f, beta = -5.18499184f, eps = 1.5f;
  for (nk_layout layout : kLayouts) {  // n = 1, c = 1: both layouts hold the same
    float y[6], mean, rstd;
    ASSERT_EQ(nk_batchnorm_forward_training_f32(1, 1, 6, layout, x, &gamma, &beta, eps,
                                                0.1f, nullptr, nullptr, y, &mean, &rstd),
              NK_OK);
    const float g[6] = {gamma, gamma, gamma, gamma, gamma, gamma};
    const float b[6] = {beta, beta, beta, beta, beta, beta};
    const RowRef ref = ReferenceRow(true, 6, x, nullptr, g, b, eps);
    for (size_t j = 0; j < 6; ++j) {
      if (std::fabs(ref.y[j]) > std::numeric_limits<float>::max()) {  // beyond fp32
        EXPECT_TRUE(std::isinf(y[j]) && (y[j] > 0) == (ref.y[j] > 0)) << j;
        continue;
      }
      EXPECT_TRUE(Meets(y[j], ref.y[j], BoundY(6, ref, j, gamma, beta)))
          << j << ": " << y[j] << " vs " << static_cast<double>(ref.y[j]);
    }
    EXPECT_TRUE(MeetsStat(mean, ref.mean, BoundMean(6, ref)));
  }
}

// Inference with a huge gamma: rstd * gamma overflows fp32 while y does not, so the
// folded multiply-add would give Inf (found by fuzz_batchnorm). The huge channel is
// not the first, so that the run's other channels share its map; both layouts, checked
// against the reference with design.md's bound (CheckBn).
TEST_P(BatchNorm, InferenceWithHugeGamma) {
  constexpr size_t kC = 3, kSpatial = 5;
  const float values[kC][kSpatial] = {{0.5f, -1.25f, 2.0f, 0.0f, 1.5f},
                                      {-0.75f, 1.0f, 0.25f, -2.0f, 0.125f},
                                      {6.5e-31f, -0.25f, 0.25f, -0.5f, -1.25f}};
  for (nk_layout layout : kLayouts) {
    BnCase k;
    k.n = 1, k.c = kC, k.spatial = kSpatial, k.layout = layout, k.training = false;
    BnRun r;
    r.x.resize(k.elements());
    for (size_t ci = 0; ci < kC; ++ci) {
      for (size_t s = 0; s < kSpatial; ++s) r.x[k.Index(ci, s)] = values[ci][s];
    }
    r.mean_in = {0.25f, -0.5f, -0.558539f};
    r.var_in = {1.5f, 0.75f, 0.5062f};
    r.gamma = {1.25f, -0.5f, 2.48235296e+38f};
    r.beta = {0.5f, 0.0f, 9999.58496f};
    r.y.assign(k.elements(), NAN);
    r.save_mean = r.save_rstd = std::vector<float>(kC, NAN);  // inference writes none
    r.running_mean0 = r.running_var0 = r.running_mean = r.running_var =
        std::vector<float>(kC, 0.0f);
    r.status = nk_batchnorm_forward_inference_f32(
        k.n, k.c, k.spatial, k.layout, r.x.data(), r.mean_in.data(), r.var_in.data(),
        r.gamma.data(), r.beta.data(), k.eps, r.y.data());
    EXPECT_EQ(CheckBn(k, r), 0);
  }
}

// A constant channel gives exactly beta (also where its sum overflows: the rescaled
// path); a NaN or Inf stays in its channel.
TEST_P(BatchNorm, ConstantAndNonFiniteChannels) {
  for (nk_layout layout : kLayouts) {
    for (float v : {3.25f, -2.6e38f}) {
      BnCase k;
      k.n = 3, k.c = 4, k.spatial = 29, k.layout = layout;
      k.fill = [&](Buffer& x) {
        for (size_t j = 0; j < k.count(); ++j) {
          x[k.Index(0, j)] = v;
          if (j == 17) x[k.Index(1, j)] = NAN;
          if (j == 5) x[k.Index(2, j)] = INFINITY;
        }
      };
      const BnRun r = RunBn(k);
      ASSERT_EQ(CheckBn(k, r), 0);
      for (size_t j = 0; j < k.count(); ++j) {
        ASSERT_TRUE(SameBits(r.y[k.Index(0, j)], r.beta[0])) << j;
        ASSERT_TRUE(std::isnan(r.y[k.Index(1, j)])) << j;
        ASSERT_FALSE(std::isfinite(r.y[k.Index(2, j)])) << j;
        ASSERT_TRUE(std::isfinite(r.y[k.Index(3, j)])) << j;
      }
      EXPECT_EQ(r.save_mean[0], v);
      EXPECT_EQ(r.save_rstd[0], 1.0f / std::sqrt(k.eps));
      EXPECT_TRUE(std::isnan(r.save_mean[1]));
      EXPECT_TRUE(std::isfinite(r.save_mean[3]) && std::isfinite(r.save_rstd[3]));
    }
  }
}

// The same values laid out as NCHW and as NHWC give the same statistics (each within
// the bound of the reference, and so within twice the bound of each other).
TEST_P(BatchNorm, LayoutsAgree) {
  BnCase nchw;
  nchw.n = 4, nchw.c = 17, nchw.spatial = 111;
  BnCase nhwc = nchw;
  nhwc.layout = NK_LAYOUT_NHWC;
  nhwc.fill = [&](Buffer& x) {  // the NCHW case's values, transposed
    const BnRun src = RunBn(nchw);
    for (size_t ci = 0; ci < nchw.c; ++ci) {
      for (size_t j = 0; j < nchw.count(); ++j) x[nhwc.Index(ci, j)] = src.x[nchw.Index(ci, j)];
    }
  };
  const BnRun a = RunBn(nchw), b = RunBn(nhwc);
  ASSERT_EQ(CheckBn(nchw, a), 0);
  ASSERT_EQ(CheckBn(nhwc, b), 0);
  for (size_t ci = 0; ci < nchw.c; ++ci) {
    const RowRef ref = ChannelRef(nchw, a, ci);
    const size_t m = nchw.count();
    EXPECT_LE(std::fabs(a.save_mean[ci] - b.save_mean[ci]), 2 * BoundMean(m, ref));
    EXPECT_LE(std::fabs(a.save_rstd[ci] - b.save_rstd[ci]), 2 * BoundRstd(m, ref));
    for (size_t j = 0; j < m; ++j) {
      ASSERT_LE(std::fabs(a.y[nchw.Index(ci, j)] - b.y[nhwc.Index(ci, j)]),
                2 * BoundY(m, ref, j, a.gamma[ci], a.beta[ci]));
    }
  }
}

// The same bits for 1, 2 and 3 threads, in every partition mode: many channels
// (whole channels per thread), few long channels (spans in parallel), NHWC chunks.
TEST_P(BatchNorm, ThreadCountDoesNotChangeBits) {
  struct Shape {
    size_t n, c, spatial;
    nk_layout layout;
  };
  for (const Shape& s : {Shape{8, 64, 196, NK_LAYOUT_NCHW}, Shape{2, 3, 50021, NK_LAYOUT_NCHW},
                         Shape{1, 5, 40000, NK_LAYOUT_NCHW}, Shape{8, 64, 196, NK_LAYOUT_NHWC},
                         Shape{4, 3, 20011, NK_LAYOUT_NHWC}, Shape{2, 1000, 101, NK_LAYOUT_NHWC}}) {
    for (bool training : {true, false}) {
      BnCase k;
      k.n = s.n, k.c = s.c, k.spatial = s.spatial, k.layout = s.layout;
      k.training = training;
      ExpectSameBitsForThreadCounts(k, {1, 2, 3});
    }
  }
}

// NHWC runs in one region whose threads finish their own channels and then map rows
// with every channel's parameters: the last channel alone on the overflow slow path
// (the thread that finishes it must switch every thread's map), and fewer channels
// than threads (a thread with none still meets the barriers).
TEST_P(BatchNorm, ChannelsLastPartsAcrossThreads) {
  for (size_t c : {2, 6}) {
    for (bool training : {true, false}) {
      BnCase k;
      k.n = 4, k.c = c, k.spatial = 20011, k.layout = NK_LAYOUT_NHWC;
      k.training = training;
      k.fill = [&](Buffer& x) {
        for (size_t j = 0; j < k.count(); ++j) x[k.Index(c - 1, j)] *= 1e30f;
      };
      ExpectSameBitsForThreadCounts(k, {1, 2, 3});
    }
  }
}

// NCHW planes of up to kChunk elements are mapped a run of an image's planes at a
// time, a vector that straddles two planes taking each lane's parameters from its own
// plane: planes shorter and longer than a vector, one channel alone on the rescaled
// path in between normal ones, 1-3 threads bitwise.
TEST_P(BatchNorm, PlaneRunsAcrossChannels) {
  for (size_t spatial : {3, 17, 49, 111}) {
    for (bool training : {true, false}) {
      BnCase k;
      k.c = 7, k.spatial = spatial, k.layout = NK_LAYOUT_NCHW;
      k.n = 100000 / (k.c * spatial);  // enough for 3 threads
      k.training = training;
      k.fill = [&](Buffer& x) {
        for (size_t j = 0; j < k.count(); ++j) x[k.Index(3, j)] *= 1e30f;
      };
      ExpectSameBitsForThreadCounts(k, {1, 2, 3});
    }
  }
}

// Empty tensors are no-ops that write nothing.
TEST_P(BatchNorm, EmptyIsANoOp) {
  Buffer rm(4), rv(4), sm(4), sr(4), y(4);
  rm.Fill(1.0f);
  rv.Fill(2.0f);
  for (nk_layout layout : kLayouts) {
    EXPECT_EQ(nk_batchnorm_forward_training_f32(0, 4, 5, layout, nullptr, nullptr, nullptr,
                                                1e-5f, 0.1f, rm.data(), rv.data(),
                                                nullptr, sm.data(), sr.data()),
              NK_OK);
    EXPECT_EQ(nk_batchnorm_forward_training_f32(3, 0, 5, layout, nullptr, nullptr, nullptr,
                                                1e-5f, 0.1f, nullptr, nullptr, nullptr,
                                                nullptr, nullptr),
              NK_OK);
    EXPECT_EQ(nk_batchnorm_forward_inference_f32(2, 4, 0, layout, nullptr, nullptr, nullptr,
                                                 nullptr, nullptr, 1e-5f, nullptr),
              NK_OK);
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rm[i], 1.0f);
    EXPECT_EQ(rv[i], 2.0f);
    EXPECT_TRUE(std::isnan(sm[i]) && std::isnan(sr[i]));
  }
}

// ---------------------------------------------------------------- SyncBatchNorm

// Moments of a shard of `shard_n` images starting at image n0 (NCHW or NHWC: the
// images are contiguous either way).
void ShardMoments(const BnCase& k, const std::vector<float>& x, size_t n0, size_t shard_n,
                  std::vector<float>* mean, std::vector<float>* m2) {
  mean->assign(k.c, NAN);
  m2->assign(k.c, NAN);
  const float* base = shard_n ? x.data() + n0 * k.c * k.spatial : nullptr;
  ASSERT_EQ(nk_batchnorm_moments_f32(shard_n, k.c, k.spatial, k.layout, base,
                                     mean->data(), m2->data()),
            NK_OK)
      << nk_last_error();
}

TEST_P(BatchNorm, MomentsMatchTheReference) {
  for (nk_layout layout : kLayouts) {
    BnCase k;
    k.n = 3, k.c = 17, k.spatial = 111, k.layout = layout;
    const BnRun r = RunBn(k);  // for its x
    std::vector<float> mean, m2;
    ShardMoments(k, r.x, 0, k.n, &mean, &m2);
    for (size_t ci = 0; ci < k.c; ++ci) {
      const RowRef ref = ChannelRef(k, r, ci);
      const long double var = 1 / (ref.rstd * ref.rstd) - k.eps;
      EXPECT_TRUE(MeetsStat(mean[ci], ref.mean, BoundMean(k.count(), ref))) << ci;
      EXPECT_TRUE(MeetsStat(m2[ci], var * k.count(), BoundVar(k.count(), ref) * k.count()))
          << ci << ": " << m2[ci] << " vs " << static_cast<double>(var * k.count());
    }
  }
}

// Split a batch into 2 and 3 shards: moments per shard, merged, running stats updated
// and y normalized with the merged statistics equal the whole-batch training call
// within the bound. A zero-count shard changes nothing.
TEST_P(BatchNorm, SyncBatchNormEqualsWholeBatch) {
  for (nk_layout layout : kLayouts) {
    for (const std::vector<size_t>& shards :
         {std::vector<size_t>{3, 5}, std::vector<size_t>{2, 3, 3}}) {
      BnCase k;
      k.n = 8, k.c = 17, k.spatial = 49, k.layout = layout;
      SCOPED_TRACE(k.Describe() + " shards " + std::to_string(shards.size()));
      const BnRun whole = RunBn(k);
      ASSERT_EQ(CheckBn(k, whole), 0);

      std::vector<float> mean, m2, mean_b, m2_b;
      uint64_t count = 0;
      size_t n0 = 0;
      for (size_t shard_n : shards) {
        ShardMoments(k, whole.x, n0, shard_n, &mean_b, &m2_b);
        const uint64_t count_b = shard_n * k.spatial;
        if (count == 0) {
          mean = mean_b, m2 = m2_b;
        } else {
          ASSERT_EQ(nk_moments_merge_f32(k.c, count, mean.data(), m2.data(), count_b,
                                         mean_b.data(), m2_b.data(), mean.data(), m2.data()),
                    NK_OK);
        }
        count += count_b;
        n0 += shard_n;
      }
      // An empty shard merged from either side changes no bit.
      std::vector<float> empty_mean, empty_m2, out_mean(k.c), out_m2(k.c);
      ShardMoments(k, whole.x, 0, 0, &empty_mean, &empty_m2);
      for (size_t ci = 0; ci < k.c; ++ci) {
        ASSERT_EQ(empty_mean[ci], 0.0f);
        ASSERT_EQ(empty_m2[ci], 0.0f);
      }
      ASSERT_EQ(nk_moments_merge_f32(k.c, count, mean.data(), m2.data(), 0, empty_mean.data(),
                                     empty_m2.data(), out_mean.data(), out_m2.data()),
                NK_OK);
      EXPECT_TRUE(SameBits(out_mean, mean) && SameBits(out_m2, m2));
      ASSERT_EQ(nk_moments_merge_f32(k.c, 0, empty_mean.data(), empty_m2.data(), count,
                                     mean.data(), m2.data(), out_mean.data(), out_m2.data()),
                NK_OK);
      EXPECT_TRUE(SameBits(out_mean, mean) && SameBits(out_m2, m2));

      std::vector<float> rm = whole.running_mean0, rv = whole.running_var0, var(k.c);
      ASSERT_EQ(nk_batchnorm_update_running_f32(k.c, count, mean.data(), m2.data(),
                                                k.momentum, rm.data(), rv.data()),
                NK_OK);
      for (size_t ci = 0; ci < k.c; ++ci) var[ci] = m2[ci] / static_cast<float>(count);
      std::vector<float> y(k.elements(), NAN);
      ASSERT_EQ(nk_batchnorm_forward_inference_f32(k.n, k.c, k.spatial, k.layout,
                                                   whole.x.data(), mean.data(), var.data(),
                                                   whole.gamma.data(), whole.beta.data(),
                                                   k.eps, y.data()),
                NK_OK);
      BnRun synced = whole;
      synced.y = y;
      synced.save_mean = mean;
      for (size_t ci = 0; ci < k.c; ++ci) {
        synced.save_rstd[ci] = 1.0f / std::sqrt(var[ci] + k.eps);
      }
      synced.running_mean = rm;
      synced.running_var = rv;
      EXPECT_EQ(CheckBn(k, synced), 0);  // the whole-batch reference, same bound
    }
  }
}

TEST_P(BatchNorm, UpdateRunningFollowsPyTorch) {
  const float mean[3] = {1.0f, -2.0f, 0.5f}, m2[3] = {9.0f, 0.0f, 4.5f};
  float rm[3] = {0.0f, 1.0f, 2.0f}, rv[3] = {1.0f, 1.0f, 3.0f};
  ASSERT_EQ(nk_batchnorm_update_running_f32(3, 10, mean, m2, 0.25f, rm, rv), NK_OK);
  const float want_rm[3] = {0.25f, 0.25f, 1.625f};
  const float want_rv[3] = {1.0f, 0.75f, 2.375f};  // 0.75 * rv + 0.25 * m2 / 9
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rm[i], want_rm[i]) << i;
    EXPECT_EQ(rv[i], want_rv[i]) << i;
  }
  // momentum 0 keeps, 1 replaces.
  ASSERT_EQ(nk_batchnorm_update_running_f32(3, 10, mean, m2, 0.0f, rm, rv), NK_OK);
  EXPECT_EQ(rm[2], 1.625f);
  ASSERT_EQ(nk_batchnorm_update_running_f32(3, 10, mean, m2, 1.0f, rm, rv), NK_OK);
  EXPECT_EQ(rm[1], -2.0f);
  EXPECT_EQ(rv[0], 1.0f);
}

// ---------------------------------------------------------------- seed 003

// Seed 003_60decf3f94fee843: input [4, 3, 240, 240]; BatchNorm normalizes 3 times,
// each channel over its [4, 240, 240] values; running statistics follow
// x_n = (1 - momentum) * x_{n-1} + momentum * x; and a convolution's per-channel bias
// before BN changes nothing, since the mean moves by the bias and the spread does not.
TEST_P(BatchNorm, SeedDocumentFourByThreeBy240By240) {
  BnCase k;
  k.n = 4, k.c = 3, k.spatial = 240 * 240;
  const BnRun r = RunBn(k);
  ASSERT_EQ(CheckBn(k, r), 0);  // three channel statistics over [4, 240, 240] each

  const float bias[3] = {0.75f, -3.0f, 12.5f};
  BnCase biased = k;
  biased.fill = [&](Buffer& x) {
    for (size_t ci = 0; ci < 3; ++ci) {
      for (size_t j = 0; j < biased.count(); ++j) x[biased.Index(ci, j)] = r.x[k.Index(ci, j)] + bias[ci];
    }
  };
  const BnRun b = RunBn(biased);
  ASSERT_EQ(CheckBn(biased, b), 0);
  for (size_t ci = 0; ci < 3; ++ci) {
    const RowRef ref = ChannelRef(biased, b, ci);
    const size_t m = k.count();
    EXPECT_NEAR(b.save_mean[ci], r.save_mean[ci] + bias[ci], 2 * BoundMean(m, ref));
    EXPECT_NEAR(b.save_rstd[ci], r.save_rstd[ci], 2 * BoundRstd(m, ref));
    for (size_t j = 0; j < m; j += 97) {
      ASSERT_NEAR(b.y[k.Index(ci, j)], r.y[k.Index(ci, j)],
                  2 * BoundY(m, ref, j, r.gamma[ci], r.beta[ci]) +
                      4 * kU * std::fabs(bias[ci]) * ref.rstd * std::fabs(r.gamma[ci]));
    }
  }
}

NK_INSTANTIATE_FOR_EACH_ISA(BatchNorm);

}  // namespace
}  // namespace nk_test
