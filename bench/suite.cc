// SPDX-License-Identifier: Apache-2.0
// suite.cc: registry, buffers, copy baselines, and the reporter (ratios from the
// medians of one run, a table, a JSON summary).
#include "suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>

#include "copy_baseline.h"

namespace nk_bench {

std::map<std::string, Case>& Cases() {
  static std::map<std::string, Case> cases;
  return cases;
}

namespace {
struct Runner {
  std::function<bool()> setup;
  std::function<void()> body;
};
std::map<std::string, Runner>& Runners() {
  static std::map<std::string, Runner> runners;
  return runners;
}
}  // namespace

int VerifyCases() {
  int failures = 0, checked = 0;
  for (const auto& [name, c] : Cases()) {
    if (c.out == nullptr) continue;
    const Runner& run = Runners()[name];
    for (size_t i = 0; i < c.out_n; ++i) c.out[i] = NAN;
    if (!run.setup()) {
      std::printf("FAIL %s: setup\n", name.c_str());
      ++failures;
      continue;
    }
    run.body();
    size_t written = 0;
    for (size_t i = 0; i < c.out_n; ++i) written += !std::isnan(c.out[i]);
    ++checked;
    if (written != static_cast<size_t>(c.elements)) {
      std::printf("FAIL %s: wrote %zu of %zu output elements, counted %.0f\n", name.c_str(),
                  written, c.out_n, c.elements);
      ++failures;
    }
  }
  std::printf("verified %d cases, %d failures\n", checked, failures);
  return failures;
}

std::string Register(const std::string& name, const Case& c, std::function<bool()> setup,
                     std::function<void()> body) {
  if (Cases().count(name)) {  // a case in two selections: one benchmark
    if (!c.group.empty()) Cases()[name].group = c.group;
    return name;
  }
  Cases()[name] = c;
  Runners()[name] = {setup, body};
  const double bytes = c.bytes, elements = c.elements;
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    if (!setup()) {
      state.SkipWithError("setup failed");
      return;
    }
    for (auto _ : state) {
      body();
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.counters["elements_per_ns"] = benchmark::Counter(
        elements * state.iterations() * 1e-9, benchmark::Counter::kIsRate);
  })->UseRealTime();
  return name;
}

std::string CopyFor(double bytes, int threads) {
  const size_t n = static_cast<size_t>(bytes / 2 / sizeof(float));
  const std::string key = "floats:" + std::to_string(n) + "/threads:" + std::to_string(threads);
  for (bool streaming : {false, true}) {
    Case c;
    c.kernel = streaming ? "copy_nt" : "copy_memcpy";
    c.shape = std::to_string(n);
    c.isa = "-";
    c.threads = threads;
    c.bytes = 2.0 * n * sizeof(float);
    c.elements = static_cast<double>(n);
    Register(std::string(streaming ? "copy_nt/" : "copy_memcpy/") + key, c,
             [] { return true; },
             [=] { Copy(Tensor(0, n), Tensor(1, n), n, threads, streaming); });
  }
  return key;
}

namespace {

// One buffer of n floats per (slot, n), aligned to `align` and filled with value(k) on
// first use (so prefaulted), kept for the run.
template <class Value>
float* Buffer(int slot, size_t n, size_t align, const Value& value) {
  static std::map<std::pair<int, size_t>, float*> buffers;
  float*& b = buffers[{slot, n}];
  if (b == nullptr) {
    void* p = nullptr;
    if (posix_memalign(&p, align, std::max<size_t>(n, 1) * sizeof(float))) std::abort();
    b = static_cast<float*>(p);
    for (size_t k = 0; k < n; ++k) b[k] = value(k);
  }
  return b;
}

}  // namespace

float* Tensor(int slot, size_t n) {
  return Buffer(slot, n, 4096, [slot](size_t k) {
    return static_cast<float>((k * 7919 + slot) % 1000) * 1e-3f;
  });
}

// gamma / beta aligned to 64 bytes, as framework allocators give them (PyTorch's CPU
// allocator aligns to 64); oneDNN and these kernels read the same ones.
const float* Gamma(size_t n) {
  return Buffer(0, n, 64, [](size_t i) { return 1.0f + (i % 7) * 0.01f; });
}
const float* Beta(size_t n) {
  return Buffer(1, n, 64, [](size_t i) { return (i % 5) * 0.1f; });
}

namespace {

struct Row {
  std::string name;
  Case c;
  double bps, copy_bps, onednn_bps;
};

class SuiteReporter : public benchmark::ConsoleReporter {
 public:
  explicit SuiteReporter(std::string json_path) : json_path_(std::move(json_path)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    // The median of the repetitions where there are several (kernels and copies
    // alike: this machine's run-to-run spread is large), else the single run.
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
    std::vector<Row> rows;
    for (const auto& [name, c] : Cases()) {
      if (c.copy.empty() || !bps_.count(name)) continue;
      const double copy = std::max(Bps("copy_memcpy/" + c.copy), Bps("copy_nt/" + c.copy));
      rows.push_back({name, c, bps_[name], copy, c.onednn.empty() ? 0.0 : Bps(c.onednn)});
    }
    std::printf("\n%-22s %-22s %-7s %3s %8s %7s %8s\n", "kernel", "shape", "ISA", "thr",
                "GB/s", "x copy", "x oneDNN");
    for (const Row& r : rows) {
      std::printf("%-22s %-22s %-7s %3d %8.1f %7.2f", r.c.kernel.c_str(),
                  r.c.shape.c_str(), r.c.isa.c_str(), r.c.threads, r.bps * 1e-9,
                  r.copy_bps > 0 ? r.bps / r.copy_bps : 0.0);
      if (r.onednn_bps > 0) {
        std::printf(" %8.2f\n", r.bps / r.onednn_bps);
      } else {
        std::printf(" %8s\n", "-");
      }
    }
    if (!json_path_.empty()) WriteJson(rows);
  }

 private:
  double Bps(const std::string& name) const {
    auto it = bps_.find(name);
    return it == bps_.end() ? 0.0 : it->second;
  }

  void WriteJson(const std::vector<Row>& rows) const {
    std::ofstream out(json_path_);
    out.precision(17);
    out << "{\n  \"cases\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << "    {\"name\": \"" << r.name << "\", \"kernel\": \"" << r.c.kernel
          << "\", \"shape\": \"" << r.c.shape << "\", \"isa\": \"" << r.c.isa
          << "\", \"threads\": " << r.c.threads << ", \"group\": \"" << r.c.group
          << "\", \"bytes\": " << static_cast<long long>(r.c.bytes)
          << ", \"bytes_per_second\": " << r.bps
          << ", \"copy_bytes_per_second\": " << r.copy_bps
          << ", \"onednn_bytes_per_second\": " << r.onednn_bps
          << ", \"x_copy\": " << (r.copy_bps > 0 ? r.bps / r.copy_bps : 0.0)
          << ", \"x_onednn\": " << (r.onednn_bps > 0 ? r.bps / r.onednn_bps : 0.0) << "}"
          << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    // The baselines the ratios were computed from, measured in this same run.
    out << "  ],\n  \"baselines\": [\n";
    bool first = true;
    for (const auto& [name, c] : Cases()) {
      if (!c.copy.empty() || !bps_.count(name)) continue;
      out << (first ? "" : ",\n") << "    {\"name\": \"" << name << "\", \"kernel\": \""
          << c.kernel << "\", \"bytes_per_second\": " << Bps(name) << "}";
      first = false;
    }
    out << "\n  ]\n}\n";
    std::printf("\nwrote %s (%zu cases)\n", json_path_.c_str(), rows.size());
  }

  std::string json_path_;
  std::map<std::string, double> bps_;
  std::set<std::string> medians_;
};

}  // namespace

std::unique_ptr<benchmark::BenchmarkReporter> MakeReporter(const std::string& json_path) {
  return std::make_unique<SuiteReporter>(json_path);
}

}  // namespace nk_bench
