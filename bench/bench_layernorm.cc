// bench_layernorm.cc: the LayerNorm-family forwards under every ISA, 1 and 2 threads,
// beside the copy baseline of the same bytes in the same run; ends with a table of
// ratios to the copy (kernel bytes/s over the best copy's bytes/s).
//
// Bytes count each tensor once: inputs read plus outputs written (x, residual, sum,
// y), not gamma, beta or statistics. The copy moves half the counted bytes from one
// buffer to another (x to y for LayerNorm), so both count the same bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "copy_baseline.h"
#include "normkernels.h"

namespace nk_bench {
namespace {

enum class Op { kLayerNorm, kRmsNorm, kAddLayerNorm, kAddRmsNorm };
const char* kOpNames[] = {"layernorm", "rmsnorm", "add_layernorm", "add_rmsnorm"};

// Page-aligned, prefaulted buffers, shared by every benchmark of a size.
struct Buffers {
  std::vector<float*> tensors;
  size_t n;
  explicit Buffers(size_t elements) : n(elements) {
    for (int i = 0; i < 4; ++i) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, n * sizeof(float))) std::abort();
      float* f = static_cast<float*>(p);
      for (size_t k = 0; k < n; ++k) f[k] = static_cast<float>((k * 7919) % 1000) * 1e-3f;
      tensors.push_back(f);
    }
  }
};

Buffers& BuffersFor(size_t n) {
  static std::map<size_t, std::unique_ptr<Buffers>> cache;
  auto& b = cache[n];
  if (!b) b = std::make_unique<Buffers>(n);
  return *b;
}

struct Params {
  float gamma[8192], beta[8192];
  Params() {
    for (int i = 0; i < 8192; ++i) {
      gamma[i] = 1.0f + (i % 7) * 0.01f;
      beta[i] = (i % 5) * 0.1f;
    }
  }
};
const Params& GammaBeta() {
  static Params p;
  return p;
}

// What a run measured, keyed by the registered name, for the ratio table.
struct Info {
  std::string op, isa;
  size_t cols, mib;
  int threads;
  std::string copy_key;  // the copy baseline of the same bytes and threads
};
std::map<std::string, Info>& Infos() {
  static std::map<std::string, Info> infos;
  return infos;
}

std::string CopyKey(size_t floats, int threads) {
  return "floats:" + std::to_string(floats) + "/threads:" + std::to_string(threads);
}

// Copies of n floats (memcpy and non-temporal), once per size and thread count.
void RegisterCopy(size_t n, int threads) {
  for (bool streaming : {false, true}) {
    const std::string name =
        std::string(streaming ? "copy_nt/" : "copy_memcpy/") + CopyKey(n, threads);
    if (Infos().count(name)) continue;
    Infos()[name] = Info{streaming ? "copy_nt" : "copy_memcpy", "-", 0, 0, threads, ""};
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
      Buffers& b = BuffersFor(n);
      for (auto _ : state) {
        Copy(b.tensors[0], b.tensors[1], n, threads, streaming);
        benchmark::ClobberMemory();
      }
      state.SetBytesProcessed(state.iterations() * 2 * n * sizeof(float));
    })->UseRealTime();
  }
}

void RegisterKernel(Op op, const std::string& isa, size_t cols, size_t mib, int threads) {
  const size_t n = (mib << 20) / sizeof(float);
  const size_t rows = n / cols;
  const bool fused = op == Op::kAddLayerNorm || op == Op::kAddRmsNorm;
  const size_t tensors = fused ? 4 : 2;  // x, residual, sum, y / x, y
  const size_t bytes = tensors * rows * cols * sizeof(float);
  const size_t copy_floats = bytes / 2 / sizeof(float);
  RegisterCopy(copy_floats, threads);
  const std::string name = std::string(kOpNames[static_cast<int>(op)]) + "/" + isa +
                           "/cols:" + std::to_string(cols) + "/MiB:" +
                           std::to_string(mib) + "/threads:" + std::to_string(threads);
  Infos()[name] = Info{kOpNames[static_cast<int>(op)], isa, cols, mib, threads,
                       CopyKey(copy_floats, threads)};
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    if (nk_set_isa(isa.c_str()) != NK_OK || nk_set_num_threads(threads) != NK_OK) {
      state.SkipWithError(nk_last_error());
      return;
    }
    Buffers& b = BuffersFor(n);
    const float* x = b.tensors[0];
    const float* res = b.tensors[1];
    float* sum = b.tensors[2];
    float* y = b.tensors[3];
    const float* g = GammaBeta().gamma;
    const float* be = GammaBeta().beta;
    std::vector<float> mean(rows), rstd(rows);
    nk_status s = NK_OK;
    for (auto _ : state) {
      switch (op) {
        case Op::kLayerNorm:
          s = nk_layernorm_forward_f32(rows, cols, x, g, be, 1e-5f, y, mean.data(), rstd.data());
          break;
        case Op::kRmsNorm:
          s = nk_rmsnorm_forward_f32(rows, cols, x, g, 1e-5f, y, rstd.data());
          break;
        case Op::kAddLayerNorm:
          s = nk_add_layernorm_forward_f32(rows, cols, x, res, g, be, 1e-5f, sum, y,
                                           mean.data(), rstd.data());
          break;
        case Op::kAddRmsNorm:
          s = nk_add_rmsnorm_forward_f32(rows, cols, x, res, g, 1e-5f, sum, y, rstd.data());
          break;
      }
      benchmark::ClobberMemory();
    }
    if (s != NK_OK) state.SkipWithError(nk_last_error());
    state.SetBytesProcessed(state.iterations() * bytes);
    state.SetLabel(std::to_string(rows) + "x" + std::to_string(cols));
  })->UseRealTime();
}

// Prints the usual console output, then the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    // The median of the repetitions where there are several (both for kernels and
    // copies: the machine's run-to-run spread is large), else the single run.
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type == Run::RT_Aggregate && !median) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const std::string& name = r.run_name.function_name;
      if (median || !medians_.count(name)) bps_[name] = it->second.value;
      if (median) medians_.insert(name);
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-14s %6s %4s %-7s %3s %9s %9s\n", "kernel", "cols", "MiB", "ISA",
                "thr", "GB/s", "x copy");
    for (const auto& [name, info] : Infos()) {
      if (info.copy_key.empty() || !bps_.count(name)) continue;
      const double copy = std::max(Bps("copy_memcpy/" + info.copy_key),
                                   Bps("copy_nt/" + info.copy_key));
      std::printf("%-14s %6zu %4zu %-7s %3d %9.1f %9.2f\n", info.op.c_str(), info.cols,
                  info.mib, info.isa.c_str(), info.threads, bps_[name] * 1e-9,
                  copy > 0 ? bps_[name] / copy : 0.0);
    }
  }

 private:
  double Bps(const std::string& name) const {
    auto it = bps_.find(name);
    return it == bps_.end() ? 0.0 : it->second;
  }
  std::map<std::string, double> bps_;
  std::set<std::string> medians_;
};

}  // namespace
}  // namespace nk_bench

int main(int argc, char** argv) {
  using namespace nk_bench;
  std::vector<const char*> isas(nk_list_isas(nullptr, 0));
  nk_list_isas(isas.data(), isas.size());
  for (int op = 0; op < 4; ++op) {
    for (const char* isa : isas) {
      for (size_t mib : {4, 64}) {
        for (size_t cols : {64, 256, 768, 1024, 4096, 8192}) {
          for (int threads : {1, 2}) {
            RegisterKernel(static_cast<Op>(op), isa, cols, mib, threads);
          }
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
