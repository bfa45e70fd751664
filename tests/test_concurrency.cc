// SPDX-License-Identifier: Apache-2.0
// test_concurrency.cc: kernels called from many threads at once while another thread
// flips the ISA and the thread count, from inside the caller's OpenMP region, and in a
// child process forked after a parallel call.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "batchnorm_case.h"
#include "rownorm_case.h"
#include "test_util.h"

namespace nk_test {
namespace {

TEST(Concurrency, CallersWhileSettingsChange) {
  const std::vector<std::string> isas = Isas();
  std::atomic<bool> done{false};
  std::thread flipper([&] {
    for (size_t i = 0; !done.load(); ++i) {
      EXPECT_EQ(nk_set_isa(isas[i % isas.size()].c_str()), NK_OK);
      EXPECT_EQ(nk_set_num_threads(static_cast<int>(i % 4)), NK_OK);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 12; ++rep) {
        Case c;
        c.op = kAllOps[(t + rep) % 4];
        c.rows = 1 + (t * 7 + rep) % 40;
        c.cols = (size_t{1} << (t % 6 + 2)) + (rep % 3 == 0 ? 0 : t + rep);  // some tails
        if (rep == 5) c.cols = 20000;  // chunked rows
        c.alias = rep % 2 ? Alias::kYIsX : Alias::kNone;
        c.misalign = rep % 3;
        if (CheckCase(c) < 0) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& c : callers) c.join();
  done.store(true);
  flipper.join();
  nk_set_isa(nullptr);
  nk_set_num_threads(0);
  EXPECT_EQ(failures.load(), 0);
}

// The failures of check(i), i in [0, cases), called on two threads of the caller's
// own OpenMP region while the library is set to two threads.
template <class Check>
int FailuresInsideCallersRegion(int cases, const Check& check) {
  EXPECT_EQ(nk_set_num_threads(2), NK_OK);
  int failures = 0;
#pragma omp parallel for num_threads(2) reduction(+ : failures)
  for (int i = 0; i < cases; ++i) failures += check(i);
  nk_set_num_threads(0);
  return failures;
}

TEST(Concurrency, InsideCallersOpenMpRegion) {
  const int failures = FailuresInsideCallersRegion(8, [](int i) {
    Case c;
    c.op = kAllOps[i % 4];
    c.rows = 64;
    c.cols = 1000 + i;
    return CheckCase(c) < 0 ? 1 : 0;
  });
  EXPECT_EQ(failures, 0);
}

// BatchNorm from inside the caller's region: short NCHW planes, whole channels per
// thread, spans and NHWC rows, each small enough to run on the calling thread alone. A
// kernel that ran on its caller's thread with OpenMP work-sharing in it would share
// that loop with the caller's other threads, each inside a call of its own.
TEST(Concurrency, BatchNormInsideCallersOpenMpRegion) {
  const int failures = FailuresInsideCallersRegion(16, [](int i) {
    BnCase k;
    k.n = 2 + i % 3;
    k.c = 5 + i;
    k.spatial = i % 2 == 0 ? 7 : 300;
    k.layout = i % 4 < 2 ? NK_LAYOUT_NCHW : NK_LAYOUT_NHWC;
    k.training = i % 8 < 6;
    return RunAndCheckBn(k);
  });
  EXPECT_EQ(failures, 0);
}

// After fork() the child has only the forking thread, while libgomp still counts the
// parent's pool: a parallel region in the child would wait forever (DataLoader and
// multiprocessing workers). The child runs kernels on one thread, with the same bits,
// until it sets a count itself.
TEST(Fork, ChildRunsKernelsAfterAParallelCall) {
  ASSERT_EQ(nk_set_num_threads(2), NK_OK);
  constexpr size_t rows = 512, cols = 1024;  // work for two threads
  Buffer x(rows * cols), y(rows * cols), y_child(rows * cols);
  FillNormal(x, Seed(11));
  const auto layernorm = [&](Buffer& out) {
    return nk_layernorm_forward_f32(rows, cols, x.data(), nullptr, nullptr, 1e-5f,
                                    out.data(), nullptr, nullptr);
  };
  constexpr size_t n = 8, c = 64, spatial = 1024;  // BatchNorm's regions too
  Buffer bx(n * c * spatial), by(n * c * spatial), by_child(n * c * spatial);
  FillNormal(bx, Seed(12));
  const auto batchnorm = [&](Buffer& out) {
    return nk_batchnorm_forward_training_f32(n, c, spatial, NK_LAYOUT_NCHW, bx.data(),
                                             nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                             nullptr, out.data(), nullptr, nullptr);
  };
  ASSERT_EQ(layernorm(y), NK_OK);
  ASSERT_EQ(batchnorm(by), NK_OK);
  const pid_t pid = fork();
  ASSERT_NE(pid, -1);
  if (pid == 0) {
    alarm(20);  // a hang ends the child by SIGALRM
    int code = 0;
    if (nk_get_num_threads() != 1) code |= 1;
    if (layernorm(y_child) != NK_OK || batchnorm(by_child) != NK_OK) code |= 2;
    if (std::memcmp(y.data(), y_child.data(), rows * cols * sizeof(float)) != 0 ||
        std::memcmp(by.data(), by_child.data(), n * c * spatial * sizeof(float)) != 0) {
      code |= 4;
    }
    if (nk_set_num_threads(1) != NK_OK || nk_get_num_threads() != 1) code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status)
                                 << " (SIGALRM: it hung)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: threads, 2: status, 4: bits, 8: set";
  EXPECT_EQ(nk_get_num_threads(), 2);  // the parent keeps its setting
  nk_set_num_threads(0);
}

}  // namespace
}  // namespace nk_test
