// SPDX-License-Identifier: Apache-2.0
// sync_batchnorm_check.cc: runs sync_batchnorm.c on seeded batches, rank r of P holding
// images [N r / P, N (r + 1) / P), and checks on rank 0 against one process computing
// the whole batch (nk_batchnorm_forward_training_f32, nk_batchnorm_backward_f32): y,
// the saved and running statistics, dx, dgamma and dbeta of both within the design.md
// bound of the long-double reference (tests/reference.h); the statistics, dgamma and
// dbeta the same bits on every rank; the statistics those of the shards' moments
// merged in rank order (up to 3 ranks); with one rank, the backward's bits of
// nk_batchnorm_backward_f32 given the same statistics. Writes the outputs' bits to
// FILE, for run.sh to compare two runs.
//   mpirun -np P sync_batchnorm_check [FILE]
// A faulty call, which must end the job with the library's reason and no hang:
//   mpirun -np P sync_batchnorm_check --one-value | --bad-layout-on-last-rank
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reference.h"
#include "sync_batchnorm.h"

namespace {

using namespace nk_test;

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.1f;

struct Shape {
  size_t n, c, spatial;
  nk_layout layout;
};

// The whole batch and the parameters, made from a seed: the same on every rank.
struct Batch {
  Shape s;
  std::vector<float> x, dy, gamma, beta, running_mean, running_var;

  size_t count() const { return s.n * s.spatial; }
  size_t image() const { return s.c * s.spatial; }  // floats per image
  size_t Index(size_t ci, size_t j) const {         // element j of channel ci
    const size_t ni = j / s.spatial, p = j % s.spatial;
    return s.layout == NK_LAYOUT_NCHW ? (ni * s.c + ci) * s.spatial + p
                                      : (ni * s.spatial + p) * s.c + ci;
  }
};

Batch MakeBatch(const Shape& s, unsigned seed) {
  Batch b{s, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  b.x.resize(s.n * s.c * s.spatial);
  b.dy.resize(b.x.size());
  for (size_t ci = 0; ci < s.c; ++ci) {
    // Channel 0 is 1e4 + N(0, 1), ill-conditioned: M r ~ 1e4 in the bound.
    const float shift = ci == 0 ? 1e4f : static_cast<float>(ci % 5);
    for (size_t j = 0; j < b.count(); ++j) {
      b.x[b.Index(ci, j)] = shift + normal(rng) * (1.0f + 0.5f * (ci % 3));
      b.dy[b.Index(ci, j)] = normal(rng);
    }
    b.gamma.push_back(1.0f + 0.25f * normal(rng));
    b.beta.push_back(0.5f * normal(rng));
    b.running_mean.push_back(normal(rng));
    b.running_var.push_back(1.0f + 0.1f * std::fabs(normal(rng)));
  }
  return b;
}

struct Outputs {
  std::vector<float> y, dx;  // the whole batch (on rank 0)
  std::vector<float> save_mean, save_rstd, running_mean, running_var, dgamma, dbeta;

  // The per-channel outputs, which every rank holds.
  std::vector<float> Channels() const {
    std::vector<float> all;
    for (const auto* v :
         {&save_mean, &save_rstd, &running_mean, &running_var, &dgamma, &dbeta}) {
      all.insert(all.end(), v->begin(), v->end());
    }
    return all;
  }
};

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Ranks() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

size_t FirstImage(size_t n, int rank) { return n * rank / Ranks(); }

// The ranks' shards of the batch, in rank order, on rank 0.
std::vector<float> GatherImages(const std::vector<float>& part, const Batch& b) {
  std::vector<int> counts(Ranks()), displs(Ranks());
  for (int r = 0; r < Ranks(); ++r) {
    displs[r] = static_cast<int>(FirstImage(b.s.n, r) * b.image());
    counts[r] = static_cast<int>(FirstImage(b.s.n, r + 1) * b.image()) - displs[r];
  }
  std::vector<float> all(Rank() == 0 ? b.x.size() : 0);
  MPI_Gatherv(part.data(), static_cast<int>(part.size()), MPI_FLOAT, all.data(),
              counts.data(), displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  return all;
}

// SyncBatchNorm on this rank's shard; failures (on rank 0) of ranks whose per-channel
// outputs differ from rank 0's in any bit.
Outputs RunShards(const Batch& b, nk_layout layout, int* failures) {
  const size_t n0 = FirstImage(b.s.n, Rank()), n1 = FirstImage(b.s.n, Rank() + 1);
  const size_t n = n1 - n0, c = b.s.c, at = n0 * b.image();
  Outputs o;
  o.running_mean = b.running_mean;
  o.running_var = b.running_var;
  for (auto* v : {&o.save_mean, &o.save_rstd, &o.dgamma, &o.dbeta}) v->resize(c);
  std::vector<float> y(n * b.image()), dx(y.size());
  uint64_t count = 0;
  sync_batchnorm_forward(MPI_COMM_WORLD, n, c, b.s.spatial, layout, b.x.data() + at,
                         b.gamma.data(), b.beta.data(), kEps, kMomentum,
                         o.running_mean.data(), o.running_var.data(), y.data(),
                         o.save_mean.data(), o.save_rstd.data(), &count);
  sync_batchnorm_backward(MPI_COMM_WORLD, n, c, b.s.spatial, layout, b.x.data() + at,
                          b.dy.data() + at, o.save_mean.data(), o.save_rstd.data(),
                          b.gamma.data(), count, dx.data(), o.dgamma.data(),
                          o.dbeta.data());
  o.y = GatherImages(y, b);
  o.dx = GatherImages(dx, b);

  const std::vector<float> mine = o.Channels();
  std::vector<float> every(Rank() == 0 ? mine.size() * Ranks() : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, every.data(),
             static_cast<int>(mine.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  for (int r = 1; r < Ranks() && Rank() == 0; ++r) {
    if (std::memcmp(every.data() + r * mine.size(), mine.data(),
                    mine.size() * sizeof(float)) != 0) {
      std::printf(
          "FAIL: rank %d's statistics or parameter gradients differ from rank "
          "0's\n",
          r);
      ++*failures;
    }
  }
  return o;
}

int Failed(const char* what, nk_status s) {
  if (s == NK_OK) return 0;
  std::printf("FAIL: %s: %s\n", what, nk_last_error());
  return 1;
}

// The whole batch in one process.
Outputs RunWhole(const Batch& b, int* failures) {
  const Shape& s = b.s;
  Outputs o;
  o.running_mean = b.running_mean;
  o.running_var = b.running_var;
  for (auto* v : {&o.save_mean, &o.save_rstd, &o.dgamma, &o.dbeta}) v->resize(s.c);
  o.y.resize(b.x.size());
  o.dx.resize(b.x.size());
  *failures +=
      Failed("nk_batchnorm_forward_training_f32",
             nk_batchnorm_forward_training_f32(
                 s.n, s.c, s.spatial, s.layout, b.x.data(), b.gamma.data(), b.beta.data(),
                 kEps, kMomentum, o.running_mean.data(), o.running_var.data(), o.y.data(),
                 o.save_mean.data(), o.save_rstd.data()));
  *failures += Failed(
      "nk_batchnorm_backward_f32",
      nk_batchnorm_backward_f32(s.n, s.c, s.spatial, s.layout, b.x.data(), b.dy.data(),
                                o.save_mean.data(), o.save_rstd.data(), b.gamma.data(),
                                o.dx.data(), o.dgamma.data(), o.dbeta.data()));
  return o;
}

// Every output of one run against the long-double reference of each channel, within
// design.md's bounds as tests/batchnorm_case.h and bngrad_case.h apply them (the
// backward's from the run's own saved statistics, taken as exact). Returns the
// failures; *worst gets the largest error as a fraction of its bound.
int CheckOutputs(const char* who, const Batch& b, const Outputs& o, double* worst) {
  const size_t m = b.count();
  int failures = 0;
  *worst = 0;
  std::vector<float> xs(m), dys(m), gs(m), bs(m);
  for (size_t ci = 0; ci < b.s.c; ++ci) {
    const auto check = [&](const char* what, size_t j, float got, long double want,
                           long double bound) {
      if (std::isfinite(got)) {
        *worst = std::max(*worst, static_cast<double>(std::fabs(got - want) / bound));
      }
      if (MeetsStat(got, want, bound)) return;
      if (++failures <= 5) {
        std::printf(
            "FAIL: %s %s, channel %zu element %zu: got %.9g want %.9Lg bound "
            "%.3Lg\n",
            who, what, ci, j, got, want, bound);
      }
    };
    for (size_t j = 0; j < m; ++j) {
      xs[j] = b.x[b.Index(ci, j)];
      dys[j] = b.dy[b.Index(ci, j)];
      gs[j] = b.gamma[ci];
      bs[j] = b.beta[ci];
    }
    const RowRef ref =
        ReferenceRow(true, m, xs.data(), nullptr, gs.data(), bs.data(), kEps);
    check("save_mean", 0, o.save_mean[ci], ref.mean, BoundMean(m, ref));
    check("save_rstd", 0, o.save_rstd[ci], ref.rstd, BoundRstd(m, ref));
    const long double mom = kMomentum;
    const long double unbiased = (1 / (ref.rstd * ref.rstd) - kEps) * m / (m - 1.0L);
    const long double rm = (1 - mom) * b.running_mean[ci] + mom * ref.mean;
    const long double rv = (1 - mom) * b.running_var[ci] + mom * unbiased;
    check("running_mean", 0, o.running_mean[ci], rm,
          mom * BoundMean(m, ref) + 2 * kU * std::fabs(rm));
    check("running_var", 0, o.running_var[ci], rv,
          mom * BoundVar(m, ref) * m / (m - 1.0L) + 2 * kU * std::fabs(rv));
    for (size_t j = 0; j < m; ++j) {
      check("y", j, o.y[b.Index(ci, j)], ref.y[j], BoundY(m, ref, j, gs[j], bs[j]));
    }
    const RowGradRef grad = ReferenceRowGrad(true, m, xs.data(), dys.data(), nullptr,
                                             o.save_mean[ci], o.save_rstd[ci], gs.data());
    long double dgamma = 0, dbeta = 0, abs_dgamma = 0, abs_dbeta = 0;
    for (size_t j = 0; j < m; ++j) {
      check("dx", j, o.dx[b.Index(ci, j)], grad.dx[j], grad.dx_bound[j]);
      dgamma += grad.dgamma_term[j];
      abs_dgamma += std::fabs(grad.dgamma_term[j]);
      dbeta += dys[j];
      abs_dbeta += std::fabs(dys[j]);
    }
    check("dgamma", 0, o.dgamma[ci], dgamma, BoundDgamma(m, abs_dgamma));
    check("dbeta", 0, o.dbeta[ci], dbeta, BoundDbeta(m, abs_dbeta));
  }
  return failures;
}

struct Moments {
  uint64_t count = 0;
  std::vector<float> mean, m2;
};

Moments Merge(const Moments& a, const Moments& b) {
  Moments m{a.count + b.count, a.mean, a.m2};
  Failed("nk_moments_merge_f32",
         nk_moments_merge_f32(a.mean.size(), a.count, a.mean.data(), a.m2.data(), b.count,
                              b.mean.data(), b.m2.data(), m.mean.data(), m.m2.data()));
  return m;
}

// The saved statistics are those of the shards' moments merged in rank order, as
// ((r0 r1) r2) or (r0 (r1 r2)): with up to 3 ranks, every bracketing MPI may choose.
int CheckRankOrder(const Batch& b, const Outputs& o) {
  std::vector<Moments> shards(Ranks());
  for (int r = 0; r < Ranks(); ++r) {
    const size_t n0 = FirstImage(b.s.n, r), n = FirstImage(b.s.n, r + 1) - n0;
    Moments& m = shards[r];
    m.count = n * b.s.spatial;
    m.mean.resize(b.s.c);
    m.m2.resize(b.s.c);
    Failed("nk_batchnorm_moments_f32",
           nk_batchnorm_moments_f32(n, b.s.c, b.s.spatial, b.s.layout,
                                    b.x.data() + n0 * b.image(), m.mean.data(),
                                    m.m2.data()));
  }
  Moments left = shards.front(), right = shards.back();
  for (int r = 1; r < Ranks(); ++r) left = Merge(left, shards[r]);
  for (int r = Ranks() - 2; r >= 0; --r) right = Merge(shards[r], right);
  for (const Moments& m : {left, right}) {
    std::vector<float> rstd(b.s.c);
    for (size_t ci = 0; ci < b.s.c; ++ci) {  // as sync_batchnorm_forward
      rstd[ci] =
          1.0f /
          std::sqrt(static_cast<float>(m.m2[ci] / static_cast<double>(m.count)) + kEps);
    }
    if (m.mean == o.save_mean && rstd == o.save_rstd) return 0;
  }
  std::printf("FAIL: the statistics are not the shards' moments merged in rank order\n");
  return 1;
}

// With one rank, reduce then apply are the whole backward: its bits, given the same
// saved statistics.
int CheckOneRankBackward(const Batch& b, const Outputs& o) {
  const Shape& s = b.s;
  std::vector<float> dx(b.x.size()), dgamma(s.c), dbeta(s.c);
  int failures = Failed(
      "nk_batchnorm_backward_f32",
      nk_batchnorm_backward_f32(s.n, s.c, s.spatial, s.layout, b.x.data(), b.dy.data(),
                                o.save_mean.data(), o.save_rstd.data(), b.gamma.data(),
                                dx.data(), dgamma.data(), dbeta.data()));
  if (dx != o.dx || dgamma != o.dgamma || dbeta != o.dbeta) {
    std::printf(
        "FAIL: one rank's dx, dgamma, dbeta are not the bits of "
        "nk_batchnorm_backward_f32\n");
    ++failures;
  }
  return failures;
}

void Write(std::FILE* f, const Outputs& o) {
  for (const auto* v : {&o.y, &o.dx}) std::fwrite(v->data(), sizeof(float), v->size(), f);
  const std::vector<float> channels = o.Channels();
  std::fwrite(channels.data(), sizeof(float), channels.size(), f);
}

const char* Name(nk_layout layout) { return layout == NK_LAYOUT_NCHW ? "NCHW" : "NHWC"; }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string arg = argc > 1 ? argv[1] : "";
  if (arg == "--one-value" || arg == "--bad-layout-on-last-rank") {
    const bool one = arg == "--one-value";
    const Batch b = MakeBatch(
        one ? Shape{1, 2, 1, NK_LAYOUT_NCHW} : Shape{5, 7, 81, NK_LAYOUT_NCHW}, 1);
    const bool last = Rank() == Ranks() - 1;
    int failures = 0;
    RunShards(b, !one && last ? static_cast<nk_layout>(7) : b.s.layout, &failures);
    std::printf("FAIL: rank %d: the faulty call returned\n", Rank());
    MPI_Finalize();
    return 1;
  }

  std::FILE* out = Rank() == 0 && !arg.empty() ? std::fopen(arg.c_str(), "wb") : nullptr;
  int failures = 0;
  if (Rank() == 0 && !arg.empty() && !out) {
    std::printf("FAIL: cannot write %s\n", arg.c_str());
    ++failures;
  }
  const Shape shapes[] = {
      {5, 7, 9 * 9, NK_LAYOUT_NCHW},     {5, 7, 9 * 9, NK_LAYOUT_NHWC},  // odd sizes
      {2, 3, 5, NK_LAYOUT_NCHW},         {2, 3, 5, NK_LAYOUT_NHWC},      // < 3 images
      {24, 32, 14 * 14, NK_LAYOUT_NCHW}, {24, 32, 14 * 14, NK_LAYOUT_NHWC},
  };
  unsigned seed = 1;
  for (const Shape& s : shapes) {
    const Batch b = MakeBatch(s, seed++);
    const Outputs shards = RunShards(b, s.layout, &failures);
    if (Rank() != 0) continue;
    const Outputs whole = RunWhole(b, &failures);
    double worst = 0, worst_whole = 0;
    failures += CheckOutputs("shards", b, shards, &worst);
    failures += CheckOutputs("whole batch", b, whole, &worst_whole);
    if (Ranks() <= 3) failures += CheckRankOrder(b, shards);
    if (Ranks() == 1) failures += CheckOneRankBackward(b, shards);
    if (out) Write(out, shards);
    std::printf(
        "%s %zux%zux%zu on %d rank%s: largest error %.3f of the bound "
        "(the whole batch in one process: %.3f)\n",
        Name(s.layout), s.n, s.c, s.spatial, Ranks(), Ranks() == 1 ? "" : "s", worst,
        worst_whole);
  }
  if (out) std::fclose(out);
  if (Rank() == 0) std::printf("%s: %d failures\n", failures ? "FAILED" : "ok", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
