// SPDX-License-Identifier: Apache-2.0
// suite.h: the benchmark suite's registry. Each case knows its bytes, the copy
// baseline of the same bytes, threads and offset, and (when built with oneDNN)
// oneDNN's benchmark of the same shape, threads and offset, all run in the same
// process, with oneDNN capped at the ISA of the process's cases; RunRounds turns them
// into ratios, a table and a JSON file.
//
// Bytes count each tensor once: inputs read plus outputs written (x, residual, sum,
// y; backward: x or sum, dy, dsum, dx), not gamma, beta, their gradients or
// per-row/per-channel statistics. The copy moves half the
// counted bytes from one buffer to another.
#ifndef NK_BENCH_SUITE_H_
#define NK_BENCH_SUITE_H_

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace nk_bench {

struct Case {
  std::string kernel;  // "layernorm", "batchnorm_training", "onednn_layernorm", ...
  std::string shape;   // "4096x1024", "32x64x56x56 NCHW"
  std::string isa;     // an nk ISA, "oneDNN", or "-" for copies
  int threads = 1;
  size_t offset = 0;   // bytes past a 64-byte boundary where every array of the call is
  double bytes = 0;    // counted per call
  double elements = 0;
  std::string copy;    // the name of the copy baseline's benchmark
  std::string onednn;  // the name of oneDNN's benchmark of the same work, or ""
  std::string impl;    // oneDNN's cases: the implementation oneDNN chose
  std::string group;   // plot series: cases of one group differ only in size
  bool main = false;   // one of the cells the documentation's table compares
  // For --nk_verify: the output tensor the body writes in full (NaN-filled first), of
  // out_n elements of out_bytes each (4: float; 2: bfloat16 / fp16).
  void* out = nullptr;
  size_t out_n = 0;
  size_t out_bytes = sizeof(float);
};

// The tensors' element type, and its suffix in kernel names ("", "_bf16", "_f16").
enum class Elem { kF32, kBf16, kF16 };
inline const char* ElemSuffix(Elem e) {
  return e == Elem::kBf16 ? "_bf16" : e == Elem::kF16 ? "_f16" : "";
}

// Where the suite places arrays: on a 64-byte boundary (as PyTorch's allocator) and
// 16 bytes past one (as malloc and NumPy place large arrays).
constexpr size_t kOffsets[] = {0, 16};

// What to register: ISAs (this process's, best first), thread counts, and the quick
// or the full selection.
struct Selection {
  std::vector<std::string> isas;
  std::vector<int> threads;  // 1 and all
  bool full = false;
};
void RegisterLayerNormCases(const Selection& s);
void RegisterBatchNormCases(const Selection& s);
void RegisterGroupNormCases(const Selection& s);

// Cases with nothing but ISA, threads, offset and group set: one for each of `isas` x
// `threads` x kOffsets.
std::vector<Case> Placements(const std::vector<std::string>& isas,
                             const std::vector<int>& threads,
                             const std::string& group = "");

// Every registered case by benchmark name.
std::map<std::string, Case>& Cases();

// Registers a benchmark `name` running `body` once per iteration (after `setup`
// returned true; false skips it). Returns name.
std::string Register(const std::string& name, const Case& c,
                     std::function<bool()> setup, std::function<void()> body);

// "/offset:16/threads:2": the end of the name of a case with these arrays and threads.
std::string Placement(size_t offset, int threads);

// --nk_verify: runs the body of every case that moves at most max_bytes per call once
// on a NaN-filled output and checks that it wrote exactly its counted elements and
// nothing just after them. Returns the number of failures (1 where none was checked).
int VerifyCases(double max_bytes);

// The copy baseline for `bytes` counted bytes (bytes / 2 copied) with `threads`, its
// buffers at `offset`: registered once; returns the name suffix its two variants share.
std::string CopyFor(double bytes, int threads, size_t offset);

// n floats `offset` bytes past a page boundary, one buffer per (slot, n) whatever the
// offset (prefaulted, kept for the run), with at least 48 bytes after the n floats.
float* Tensor(int slot, size_t n, size_t offset = 0);

// n half-precision elements (bfloat16 bit patterns if `bf16`, else fp16) as Tensor
// places them: values k / 256 in [0, 1), exact in both formats.
uint16_t* HalfTensor(int slot, size_t n, size_t offset, bool bf16);

// The tensor in `slot` of n elements of type E: Tensor's floats, or (E a 16-bit type)
// HalfTensor's elements of `elem`'s format.
template <class E>
E* Elements(int slot, size_t n, size_t offset, Elem elem) {
  if constexpr (sizeof(E) == sizeof(float)) {
    return Tensor(slot, n, offset);
  } else {
    return HalfTensor(slot, n, offset, elem == Elem::kBf16);
  }
}

// Per-channel / per-column parameters (gamma near 1, beta), n floats at `offset`.
const float* Gamma(size_t n, size_t offset);
const float* Beta(size_t n, size_t offset);

// oneDNN's counterparts (bench/onednn.cc); "" when the suite was built without it.
std::string OneDnnLayerNorm(size_t rows, size_t cols, int threads, size_t offset);
// Its bfloat16 form (src and dst bf16; statistics, scale and shift f32), on HalfTensor's
// buffers; "" where oneDNN has no implementation for the process's ISA.
std::string OneDnnLayerNormBf16(size_t rows, size_t cols, int threads, size_t offset);
// Its backward (diff_src, diff_scale, diff_shift from src, diff_dst, mean, variance).
std::string OneDnnLayerNormBackward(size_t rows, size_t cols, int threads, size_t offset);
// bf16: src and dst bf16 on HalfTensor's buffers; "" where oneDNN has no such
// implementation for the process's ISA.
std::string OneDnnBatchNorm(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                            bool training, int threads, size_t offset, bool bf16 = false);
std::string OneDnnBatchNormBackward(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                                    int threads, size_t offset);

// oneDNN's ISA for cases of our `isa`: AVX3: avx512_core, AVX2: avx2, the others:
// sse41, the lowest oneDNN has.
std::string OneDnnCapFor(const std::string& isa);

// Caps oneDNN at OneDnnCapFor(isa) before it creates anything; once a process.
// Returns the ISA oneDNN then reports running ("" without oneDNN); exits with a
// message if oneDNN refuses the cap or reports another ISA.
std::string CapOneDnn(const std::string& isa);

// Runs the cases --benchmark_filter selects in n rounds. In each round every case
// runs, and right after it its copy baselines and oneDNN, so that the three see the
// machine at the same speed (this host's two threads reach memory at one of two speeds
// for minutes at a time); each ratio is the median of the rounds' ratios. Then prints
// the table to stdout or, if `json_path` is not empty, writes the JSON summary there:
// per case the medians of its bytes/s and of its baselines' over the rounds, their
// coefficients of variation (cv), the ratios and every round's figures. `isas` are
// the process's ISAs, `onednn_isa` what CapOneDnn returned. Returns the number of
// cases that ran.
size_t RunRounds(int n, const std::string& json_path,
                 const std::vector<std::string>& isas, const std::string& onednn_isa);

}  // namespace nk_bench

#endif  // NK_BENCH_SUITE_H_
