// SPDX-License-Identifier: Apache-2.0
// suite.h: the benchmark suite's registry. Each case knows its bytes, the copy
// baseline of the same bytes and threads, and (when built with oneDNN) oneDNN's
// benchmark of the same shape and threads, all run in the same binary; the reporter
// turns them into ratios, a table and a JSON file.
//
// Bytes count each tensor once: inputs read plus outputs written (x, residual, sum,
// y), not gamma, beta or per-row/per-channel statistics. The copy moves half the
// counted bytes from one buffer to another.
#ifndef NK_BENCH_SUITE_H_
#define NK_BENCH_SUITE_H_

#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nk_bench {

struct Case {
  std::string kernel;  // "layernorm", "batchnorm_training", "onednn_layernorm", ...
  std::string shape;   // "4096x1024", "32x64x56x56 NCHW"
  std::string isa;     // an nk ISA, "oneDNN", or "-" for copies
  int threads = 1;
  double bytes = 0;    // counted per call
  double elements = 0;
  std::string copy;    // the name of the copy baseline's benchmark
  std::string onednn;  // the name of oneDNN's benchmark of the same work, or ""
  std::string group;   // plot series: cases of one group differ only in size
  // For --nk_verify: the output tensor the body writes in full (NaN-filled first).
  float* out = nullptr;
  size_t out_n = 0;
};

// What to register: ISAs, thread counts, and the quick or the full selection.
struct Selection {
  std::vector<std::string> isas;  // best first
  std::vector<int> threads;       // 1 and all
  bool full = false;
};
void RegisterLayerNormCases(const Selection& s);
void RegisterBatchNormCases(const Selection& s);

// Every registered case by benchmark name.
std::map<std::string, Case>& Cases();

// Registers a benchmark `name` running `body` once per iteration (after `setup`
// returned true; false skips it). Returns name.
std::string Register(const std::string& name, const Case& c,
                     std::function<bool()> setup, std::function<void()> body);

// --nk_verify: runs every case's body once on a NaN-filled output and checks that it
// wrote exactly its counted elements. Returns the number of failures.
int VerifyCases();

// The copy baseline for `bytes` counted bytes (bytes / 2 copied) with `threads`:
// registered once; returns the name prefix shared by its two variants.
std::string CopyFor(double bytes, int threads);

// A page-aligned, prefaulted buffer of n floats, one per (slot, n), kept for the run.
float* Tensor(int slot, size_t n);

// Per-channel / per-column parameters (gamma near 1, beta, mean, var > 0), n floats.
const float* Gamma(size_t n);
const float* Beta(size_t n);

// oneDNN's counterparts (bench/onednn.cc); "" when the suite was built without it.
std::string OneDnnLayerNorm(size_t rows, size_t cols, int threads);
std::string OneDnnBatchNorm(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                            bool training, int threads);

// Prints the table to stdout or, if `json_path` is not empty, writes the JSON summary
// there: per case the median bytes/s over the repetitions and their coefficient of
// variation (cv), the same of its copy baseline, and the ratios.
std::unique_ptr<benchmark::BenchmarkReporter> MakeReporter(const std::string& json_path);

}  // namespace nk_bench

#endif  // NK_BENCH_SUITE_H_
