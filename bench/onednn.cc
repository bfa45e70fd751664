// SPDX-License-Identifier: Apache-2.0
// onednn.cc: oneDNN's layer_normalization and batch_normalization on the suite's
// shapes, thread counts and offsets (when built with Debian's libdnnl-dev), capped at
// the ISA of the process's cases. Its counterparts of our calls: LayerNorm
// forward_training with scale and shift (mean and variance out); BatchNorm
// forward_training with scale and shift, and forward_inference with global statistics.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>

#include "suite.h"

#if NK_HAVE_DNNL
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace nk_bench {

// oneDNN has nothing below SSE4.1 but reference code: SSSE3 and the baseline are
// compared with its SSE4.1 paths.
std::string OneDnnCapFor(const std::string& isa) {
  if (isa.rfind("AVX3", 0) == 0) return "avx512_core";  // and AVX3_DL, AVX3_ZEN4, ...
  return isa == "AVX2" ? "avx2" : "sse41";
}

#if NK_HAVE_DNNL
namespace {

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A primitive and its arguments, run on a stream.
struct Job {
  std::unique_ptr<dnnl::primitive> primitive;
  std::unordered_map<int, dnnl::memory> args;
  std::unique_ptr<dnnl::stream> stream;
  void Run(int threads) {
    omp_set_num_threads(threads);  // and runs on OpenMP's maximum thread count
    if (!stream) stream = std::make_unique<dnnl::stream>(Engine());
    primitive->execute(*stream, args);
    stream->wait();
  }
};

dnnl::memory Wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, Engine(), const_cast<void*>(data));
}

// oneDNN sizes its work partition when a primitive is created, from OpenMP's maximum
// thread count then: create each primitive under the thread count it will run with.
class ThreadsDuringCreation {
 public:
  explicit ThreadsDuringCreation(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadsDuringCreation() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Registers oneDNN's run of `elements` elements as a case; `tensors` of them are
// counted (x read, y written; backward: x and dy read, dx written).
std::string RegisterJob(const std::string& kernel, const std::string& shape,
                        double elements, std::shared_ptr<Job> job, const char* impl,
                        int threads, size_t offset, double tensors = 2,
                        size_t elem_bytes = sizeof(float)) {
  Case c;
  c.kernel = kernel;
  c.shape = shape;
  c.isa = "oneDNN";
  c.threads = threads;
  c.offset = offset;
  c.elements = elements;
  c.bytes = tensors * elements * elem_bytes;
  c.impl = impl;
  return Register(kernel + "/" + shape + Placement(offset, threads), c,
                  [] { return true; }, [job, threads] { job->Run(threads); });
}

const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::all: return "all";
    default: return "other";
  }
}

}  // namespace

std::string CapOneDnn(const std::string& isa) {
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  for (dnnl::cpu_isa c : {dnnl::cpu_isa::sse41, dnnl::cpu_isa::avx2,
                          dnnl::cpu_isa::avx512_core}) {
    if (OneDnnCapFor(isa) == IsaName(c)) cap = c;
  }
  // (DNNL_MAX_CPU_ISA in the environment is overridden: oneDNN reads it only if
  // nothing set the cap before its first use.)
  const dnnl::status status = dnnl::set_max_cpu_isa(cap);
  const dnnl::cpu_isa effective = dnnl::get_effective_cpu_isa();
  if (status != dnnl::status::success || effective != cap) {
    std::fprintf(stderr, "bench_normkernels: oneDNN capped at %s for %s cases runs at %s "
                 "(status %d)\n", IsaName(cap), isa.c_str(), IsaName(effective),
                 static_cast<int>(status));
    std::exit(1);
  }
  return IsaName(effective);
}

// The memory of a rows x cols LayerNorm: the tensors, the per-row statistics, and
// gamma / beta.
struct LayerNormMemory {
  dnnl::memory::desc data, stat, param;
  LayerNormMemory(size_t rows, size_t cols,
                  dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
    using dnnl::memory;
    const auto r = static_cast<memory::dim>(rows), c = static_cast<memory::dim>(cols);
    data = memory::desc({r, c}, type, memory::format_tag::ab);
    stat = memory::desc({r}, memory::data_type::f32, memory::format_tag::a);
    param = memory::desc({c}, memory::data_type::f32, memory::format_tag::a);
  }
  // forward_training with scale and shift: our forward's counterpart, and the hint of
  // the backward.
  dnnl::layer_normalization_forward::primitive_desc Forward() const {
    return dnnl::layer_normalization_forward::primitive_desc(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data,
                                                stat, 1e-5f, Flags()),
        Engine());
  }
  static dnnl::normalization_flags Flags() {
    return dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  }
};

std::string OneDnnLayerNorm(size_t rows, size_t cols, int threads, size_t offset) {
  const ThreadsDuringCreation creation(threads);
  const size_t n = rows * cols;
  const LayerNormMemory m(rows, cols);
  const auto& data = m.data;
  const auto& stat = m.stat;
  const auto& param = m.param;
  const dnnl::layer_normalization_forward::primitive_desc pd = m.Forward();
  auto job = std::make_shared<Job>();
  job->primitive = std::make_unique<dnnl::layer_normalization_forward>(pd);
  job->args = {{DNNL_ARG_SRC, Wrap(data, Tensor(0, n, offset))},
               {DNNL_ARG_DST, Wrap(data, Tensor(3, n, offset))},
               {DNNL_ARG_MEAN, Wrap(stat, Tensor(4, rows, offset))},
               {DNNL_ARG_VARIANCE, Wrap(stat, Tensor(5, rows, offset))},
               {DNNL_ARG_SCALE, Wrap(param, Gamma(cols, offset))},
               {DNNL_ARG_SHIFT, Wrap(param, Beta(cols, offset))}};
  return RegisterJob("onednn_layernorm", std::to_string(rows) + "x" + std::to_string(cols),
                     static_cast<double>(n), job, pd.impl_info_str(), threads, offset);
}

std::string OneDnnLayerNormBf16(size_t rows, size_t cols, int threads, size_t offset) {
  const ThreadsDuringCreation creation(threads);
  const size_t n = rows * cols;
  const LayerNormMemory m(rows, cols, dnnl::memory::data_type::bf16);
  dnnl::layer_normalization_forward::primitive_desc pd;
  try {
    pd = m.Forward();
  } catch (const dnnl::error&) {
    return "";  // no bf16 implementation at this ISA
  }
  auto job = std::make_shared<Job>();
  job->primitive = std::make_unique<dnnl::layer_normalization_forward>(pd);
  job->args = {{DNNL_ARG_SRC, Wrap(m.data, HalfTensor(0, n, offset, true))},
               {DNNL_ARG_DST, Wrap(m.data, HalfTensor(3, n, offset, true))},
               {DNNL_ARG_MEAN, Wrap(m.stat, Tensor(4, rows, offset))},
               {DNNL_ARG_VARIANCE, Wrap(m.stat, Tensor(5, rows, offset))},
               {DNNL_ARG_SCALE, Wrap(m.param, Gamma(cols, offset))},
               {DNNL_ARG_SHIFT, Wrap(m.param, Beta(cols, offset))}};
  return RegisterJob("onednn_layernorm_bf16",
                     std::to_string(rows) + "x" + std::to_string(cols),
                     static_cast<double>(n), job, pd.impl_info_str(), threads, offset, 2,
                     sizeof(uint16_t));
}

std::string OneDnnLayerNormBackward(size_t rows, size_t cols, int threads,
                                    size_t offset) {
  const ThreadsDuringCreation creation(threads);
  const size_t n = rows * cols;
  const LayerNormMemory m(rows, cols);
  const auto& data = m.data;
  const auto& stat = m.stat;
  const auto& param = m.param;
  const dnnl::layer_normalization_backward::primitive_desc pd(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, data, data,
                                               stat, 1e-5f, LayerNormMemory::Flags()),
      Engine(), m.Forward());
  auto job = std::make_shared<Job>();
  job->primitive = std::make_unique<dnnl::layer_normalization_backward>(pd);
  // The backward's gradients of gamma and beta: slots of their own.
  job->args = {{DNNL_ARG_SRC, Wrap(data, Tensor(0, n, offset))},
               {DNNL_ARG_DIFF_DST, Wrap(data, Tensor(1, n, offset))},
               {DNNL_ARG_MEAN, Wrap(stat, Tensor(4, rows, offset))},
               {DNNL_ARG_VARIANCE, Wrap(stat, Tensor(5, rows, offset))},
               {DNNL_ARG_SCALE, Wrap(param, Gamma(cols, offset))},
               {DNNL_ARG_SHIFT, Wrap(param, Beta(cols, offset))},  // unread, but required
               {DNNL_ARG_DIFF_SRC, Wrap(data, Tensor(3, n, offset))},
               {DNNL_ARG_DIFF_SCALE, Wrap(param, Tensor(6, cols, offset))},
               {DNNL_ARG_DIFF_SHIFT, Wrap(param, Tensor(7, cols, offset))}};
  return RegisterJob("onednn_layernorm_backward",
                     std::to_string(rows) + "x" + std::to_string(cols),
                     static_cast<double>(n), job, pd.impl_info_str(), threads, offset, 3);
}

// The memory of an n x c x h x w BatchNorm: the tensors (NCHW or NHWC) and the
// per-channel vectors.
struct BatchNormMemory {
  dnnl::memory::desc data, param;
  std::string shape;
  BatchNormMemory(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                  dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
    using dnnl::memory;
    const memory::dims dims = {static_cast<memory::dim>(n), static_cast<memory::dim>(c),
                               static_cast<memory::dim>(h), static_cast<memory::dim>(w)};
    data = memory::desc(dims, type,
                        nhwc ? memory::format_tag::nhwc : memory::format_tag::nchw);
    param = memory::desc({static_cast<memory::dim>(c)}, memory::data_type::f32,
                         memory::format_tag::a);
    shape = std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" +
            std::to_string(w) + (nhwc ? " NHWC" : " NCHW");
  }
  // With scale and shift; inference with the given (global) statistics. Training is
  // our training forward's counterpart, and the hint of the backward.
  static dnnl::normalization_flags Flags(bool training) {
    const auto flags =
        dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    return training ? flags : flags | dnnl::normalization_flags::use_global_stats;
  }
  dnnl::batch_normalization_forward::primitive_desc Forward(bool training) const {
    return dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(
            training ? dnnl::prop_kind::forward_training
                     : dnnl::prop_kind::forward_inference,
            data, 1e-5f, Flags(training)),
        Engine());
  }
};

std::string OneDnnBatchNorm(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                            bool training, int threads, size_t offset, bool bf16) {
  const ThreadsDuringCreation creation(threads);
  const size_t elements = n * c * h * w;
  const BatchNormMemory m(
      n, c, h, w, nhwc,
      bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32);
  dnnl::batch_normalization_forward::primitive_desc pd;
  try {
    pd = m.Forward(training);
  } catch (const dnnl::error&) {
    return "";  // no implementation of this type at this ISA
  }
  auto job = std::make_shared<Job>();
  job->primitive = std::make_unique<dnnl::batch_normalization_forward>(pd);
  float* var = Tensor(9, c, offset);
  for (size_t i = 0; i < c; ++i) var[i] = 1.0f;
  void* src = bf16 ? static_cast<void*>(HalfTensor(0, elements, offset, true))
                   : Tensor(0, elements, offset);
  void* dst = bf16 ? static_cast<void*>(HalfTensor(3, elements, offset, true))
                   : Tensor(3, elements, offset);
  job->args = {{DNNL_ARG_SRC, Wrap(m.data, src)},
               {DNNL_ARG_DST, Wrap(m.data, dst)},
               {DNNL_ARG_MEAN, Wrap(m.param, Tensor(8, c, offset))},
               {DNNL_ARG_VARIANCE, Wrap(m.param, var)},
               {DNNL_ARG_SCALE, Wrap(m.param, Gamma(c, offset))},
               {DNNL_ARG_SHIFT, Wrap(m.param, Beta(c, offset))}};
  return RegisterJob(
      std::string(training ? "onednn_batchnorm_training" : "onednn_batchnorm_inference") +
          (bf16 ? "_bf16" : ""),
      m.shape, static_cast<double>(elements), job, pd.impl_info_str(), threads, offset, 2,
      bf16 ? sizeof(uint16_t) : sizeof(float));
}

std::string OneDnnBatchNormBackward(size_t n, size_t c, size_t h, size_t w, bool nhwc,
                                    int threads, size_t offset) {
  const ThreadsDuringCreation creation(threads);
  const size_t elements = n * c * h * w;
  const BatchNormMemory m(n, c, h, w, nhwc);
  const dnnl::batch_normalization_backward::primitive_desc pd(
      dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, m.data, m.data,
                                               1e-5f, BatchNormMemory::Flags(true)),
      Engine(), m.Forward(true));
  auto job = std::make_shared<Job>();
  job->primitive = std::make_unique<dnnl::batch_normalization_backward>(pd);
  float* var = Tensor(9, c, offset);
  for (size_t i = 0; i < c; ++i) var[i] = 1.0f;
  job->args = {{DNNL_ARG_SRC, Wrap(m.data, Tensor(0, elements, offset))},
               {DNNL_ARG_DIFF_DST, Wrap(m.data, Tensor(1, elements, offset))},
               {DNNL_ARG_MEAN, Wrap(m.param, Tensor(8, c, offset))},
               {DNNL_ARG_VARIANCE, Wrap(m.param, var)},
               {DNNL_ARG_SCALE, Wrap(m.param, Gamma(c, offset))},
               {DNNL_ARG_SHIFT, Wrap(m.param, Beta(c, offset))},  // unread, but required
               {DNNL_ARG_DIFF_SRC, Wrap(m.data, Tensor(3, elements, offset))},
               {DNNL_ARG_DIFF_SCALE, Wrap(m.param, Tensor(6, c, offset))},
               {DNNL_ARG_DIFF_SHIFT, Wrap(m.param, Tensor(7, c, offset))}};
  return RegisterJob("onednn_batchnorm_backward", m.shape, static_cast<double>(elements),
                     job, pd.impl_info_str(), threads, offset, 3);
}

#else  // built without oneDNN

std::string CapOneDnn(const std::string&) { return ""; }
std::string OneDnnLayerNorm(size_t, size_t, int, size_t) { return ""; }
std::string OneDnnLayerNormBackward(size_t, size_t, int, size_t) { return ""; }
std::string OneDnnLayerNormBf16(size_t, size_t, int, size_t) { return ""; }
std::string OneDnnBatchNorm(size_t, size_t, size_t, size_t, bool, bool, int, size_t,
                            bool) {
  return "";
}
std::string OneDnnBatchNormBackward(size_t, size_t, size_t, size_t, bool, int, size_t) {
  return "";
}

#endif

}  // namespace nk_bench
