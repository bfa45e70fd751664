// SPDX-License-Identifier: Apache-2.0
// suite.cc: registry, buffers, copy baselines, and the reporter (ratios from the
// medians of one process's run, each with its spread; a table or a JSON summary).
#include "suite.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
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

// Floats after a verified output that must stay NaN (Tensor leaves room for them).
constexpr size_t kGuard = 16;

int VerifyCases(double max_bytes) {
  int failures = 0, checked = 0, larger = 0;
  for (const auto& [name, c] : Cases()) {
    if (c.out == nullptr) continue;
    if (c.bytes > max_bytes) {
      ++larger;
      continue;
    }
    const Runner& run = Runners()[name];
    // NaN in both formats: a float's bits, or 0xFFFF for each half.
    const auto is_nan = [&](size_t i) {
      return c.out_bytes == sizeof(float) ? std::isnan(static_cast<float*>(c.out)[i])
                                          : static_cast<uint16_t*>(c.out)[i] == 0xFFFF;
    };
    for (size_t i = 0; i < c.out_n + kGuard; ++i) {
      if (c.out_bytes == sizeof(float)) {
        static_cast<float*>(c.out)[i] = NAN;
      } else {
        static_cast<uint16_t*>(c.out)[i] = 0xFFFF;
      }
    }
    if (!run.setup()) {
      std::printf("FAIL %s: setup\n", name.c_str());
      ++failures;
      continue;
    }
    run.body();
    size_t written = 0, after = 0;
    for (size_t i = 0; i < c.out_n; ++i) written += !is_nan(i);
    for (size_t i = c.out_n; i < c.out_n + kGuard; ++i) after += !is_nan(i);
    ++checked;
    if (written != static_cast<size_t>(c.elements) || after != 0) {
      std::printf("FAIL %s: wrote %zu of %zu output elements (counted %.0f) and %zu of "
                  "the %zu after them\n", name.c_str(), written, c.out_n, c.elements,
                  after, kGuard);
      ++failures;
    }
  }
  std::printf("verified %d cases (%d larger left out), %d failures\n", checked, larger,
              failures);
  return checked == 0 ? 1 : failures;  // a check of nothing is no check
}

std::string Register(const std::string& name, const Case& c, std::function<bool()> setup,
                     std::function<void()> body) {
  if (Cases().count(name)) {  // a case in two selections: one benchmark
    Case& known = Cases()[name];
    if (!c.group.empty()) known.group = c.group;
    known.main = known.main || c.main;
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

std::vector<Case> Placements(const std::vector<std::string>& isas,
                             const std::vector<int>& threads, const std::string& group) {
  std::vector<Case> placements;
  for (const std::string& isa : isas) {
    for (int t : threads) {
      for (size_t offset : kOffsets) {
        Case c;
        c.isa = isa;
        c.threads = t;
        c.offset = offset;
        c.group = group;
        placements.push_back(c);
      }
    }
  }
  return placements;
}

std::string Placement(size_t offset, int threads) {
  return "/offset:" + std::to_string(offset) + "/threads:" + std::to_string(threads);
}

std::string CopyFor(double bytes, int threads, size_t offset) {
  const size_t n = static_cast<size_t>(bytes / 2 / sizeof(float));
  const std::string key = "floats:" + std::to_string(n) + Placement(offset, threads);
  for (bool streaming : {false, true}) {
    Case c;
    c.kernel = streaming ? "copy_nt" : "copy_memcpy";
    c.shape = std::to_string(n);
    c.isa = "-";
    c.threads = threads;
    c.offset = offset;
    c.bytes = 2.0 * n * sizeof(float);
    c.elements = static_cast<double>(n);
    const float* src = Tensor(0, n, offset);
    float* dst = Tensor(1, n, offset);
    Register(std::string(streaming ? "copy_nt/" : "copy_memcpy/") + key, c,
             [] { return true; }, [=] { Copy(src, dst, n, threads, streaming); });
  }
  return key;
}

namespace {

// Room after each buffer's n floats: for the largest offset below a line and the
// guard --nk_verify checks after an output.
constexpr size_t kPadFloats = 64 / sizeof(float) + kGuard;

// One page-aligned buffer of n + kPadFloats floats per (slot, n), filled with
// value(k) on first use (so prefaulted) and kept for the run; returns it `offset`
// bytes on.
template <class Value>
float* Buffer(int slot, size_t n, size_t offset, const Value& value) {
  if (offset % sizeof(float) != 0 || offset >= 64) std::abort();
  static std::map<std::pair<int, size_t>, float*> buffers;
  float*& b = buffers[{slot, n}];
  if (b == nullptr) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, (n + kPadFloats) * sizeof(float))) std::abort();
    b = static_cast<float*>(p);
    for (size_t k = 0; k < n + kPadFloats; ++k) b[k] = value(k);
  }
  return b + offset / sizeof(float);
}

}  // namespace

float* Tensor(int slot, size_t n, size_t offset) {
  return Buffer(slot, n, offset, [slot](size_t k) {
    return static_cast<float>((k * 7919 + slot) % 1000) * 1e-3f;
  });
}

uint16_t* HalfTensor(int slot, size_t n, size_t offset, bool bf16) {
  // Element k: m / 256 with m = (k * 7919 + slot) % 256, as the format encodes it.
  const auto half = [=](size_t k) -> uint32_t {
    const uint32_t m = (k * 7919 + slot) % 256;
    if (m == 0) return 0;
    int e = 7;  // m's highest bit
    while ((m >> e) == 0) --e;
    if (bf16) return (127 + e - 8) << 7 | ((m << (7 - e)) & 0x7F);
    return (15 + e - 8) << 10 | ((m << (10 - e)) & 0x3FF);
  };
  // Floats holding two elements each, little-endian; a slot range of its own.
  float* p = Buffer(100 + 2 * slot + bf16, (n + 1) / 2, offset, [&](size_t k) {
    const uint32_t bits = half(2 * k) | half(2 * k + 1) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  });
  return reinterpret_cast<uint16_t*>(p);
}

// gamma / beta at the tensors' offset, as a caller's allocator would place them;
// oneDNN and these kernels read the same ones.
const float* Gamma(size_t n, size_t offset) {
  return Buffer(0, n, offset, [](size_t i) { return 1.0f + (i % 7) * 0.01f; });
}
const float* Beta(size_t n, size_t offset) {
  return Buffer(1, n, offset, [](size_t i) { return (i % 5) * 0.1f; });
}

namespace {

struct Row {
  std::string name;
  Case c;
  double bps, copy_bps, onednn_bps;
  double cv, copy_cv, onednn_cv;  // spreads of the three over the repetitions
  std::string onednn_impl;
};

// A JSON array of strings.
std::string JsonList(const std::vector<std::string>& items) {
  std::string s = "[";
  for (const std::string& item : items) s += (s.size() > 1 ? ", \"" : "\"") + item + "\"";
  return s + "]";
}

class SuiteReporter : public benchmark::ConsoleReporter {
 public:
  SuiteReporter(std::string json_path, std::vector<std::string> isas,
                std::string onednn_isa)
      : json_path_(std::move(json_path)),
        isas_(std::move(isas)),
        onednn_isa_(std::move(onednn_isa)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    // The median of the repetitions where there are several (kernels and copies
    // alike: this machine's run-to-run spread is large), else the single run; and
    // their coefficient of variation, which says whether the machine was busy.
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const std::string& name = r.run_name.function_name;
      repetitions_ = std::max(repetitions_, r.repetitions);
      const bool aggregate = r.run_type == Run::RT_Aggregate;
      if (aggregate && r.aggregate_name == "cv") {
        cv_[name] = it->second.value;
      } else if (aggregate && r.aggregate_name == "median") {
        bps_[name] = it->second.value;
        medians_.insert(name);
      } else if (!aggregate && !medians_.count(name)) {
        bps_[name] = it->second.value;
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::vector<Row> rows;
    for (const auto& [name, c] : Cases()) {
      if (c.copy.empty() || !bps_.count(name)) continue;
      // The faster of the two copies is the baseline.
      const std::string plain = "copy_memcpy/" + c.copy, nt = "copy_nt/" + c.copy;
      const std::string& copy = Get(bps_, plain) >= Get(bps_, nt) ? plain : nt;
      const bool dnnl = !c.onednn.empty();
      rows.push_back({name, c, bps_[name], Get(bps_, copy),
                      dnnl ? Get(bps_, c.onednn) : 0.0, Get(cv_, name), Get(cv_, copy),
                      dnnl ? Get(cv_, c.onednn) : 0.0,
                      dnnl ? Cases()[c.onednn].impl : ""});
    }
    // With a JSON summary, scripts/bench_report.py prints the table (and warns when
    // the spreads say the machine was busy).
    if (json_path_.empty()) {
      PrintTable(rows);
    } else {
      WriteJson(rows);
    }
  }

 private:
  static double Get(const std::map<std::string, double>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? 0.0 : it->second;
  }

  void PrintTable(const std::vector<Row>& rows) const {
    std::printf("\n%-22s %-22s %-7s %3s %3s %8s %5s %7s %8s\n", "kernel", "shape", "ISA",
                "off", "thr", "GB/s", "cv %", "x copy", "x oneDNN");
    for (const Row& r : rows) {
      std::printf("%-22s %-22s %-7s %3zu %3d %8.1f %5.1f %7.2f", r.c.kernel.c_str(),
                  r.c.shape.c_str(), r.c.isa.c_str(), r.c.offset, r.c.threads,
                  r.bps * 1e-9, r.cv * 100, r.copy_bps > 0 ? r.bps / r.copy_bps : 0.0);
      if (r.onednn_bps > 0) {
        std::printf(" %8.2f\n", r.bps / r.onednn_bps);
      } else {
        std::printf(" %8s\n", "-");
      }
    }
    if (!onednn_isa_.empty()) std::printf("oneDNN ran at %s\n", onednn_isa_.c_str());
  }

  void WriteJson(const std::vector<Row>& rows) const {
    std::ofstream out(json_path_);
    out.precision(17);
    std::string process;  // names this process's baselines in a merge of processes
    for (const std::string& isa : isas_) process += (process.empty() ? "" : ",") + isa;
    out << "{\n  \"repetitions\": " << repetitions_ << ",\n  \"isas\": "
        << JsonList(isas_) << ",\n  \"onednn_isa\": \"" << onednn_isa_
        << "\",\n  \"cases\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const bool dnnl = r.onednn_bps > 0;
      out << "    {\"name\": \"" << r.name << "\", \"kernel\": \"" << r.c.kernel
          << "\", \"shape\": \"" << r.c.shape << "\", \"isa\": \"" << r.c.isa
          << "\", \"offset\": " << r.c.offset << ", \"threads\": " << r.c.threads
          << ", \"group\": \"" << r.c.group << "\", \"main\": "
          << (r.c.main ? "true" : "false")
          << ", \"bytes\": " << static_cast<long long>(r.c.bytes)
          << ", \"bytes_per_second\": " << r.bps
          << ", \"copy_bytes_per_second\": " << r.copy_bps
          << ", \"onednn_bytes_per_second\": " << r.onednn_bps
          << ", \"x_copy\": " << (r.copy_bps > 0 ? r.bps / r.copy_bps : 0.0)
          << ", \"x_onednn\": " << (dnnl ? r.bps / r.onednn_bps : 0.0)
          << ", \"cv\": " << r.cv << ", \"copy_cv\": " << r.copy_cv
          << ", \"onednn_cv\": " << r.onednn_cv << ", \"onednn_isa\": \""
          << (dnnl ? onednn_isa_ : "") << "\", \"onednn_impl\": \"" << r.onednn_impl
          << "\"}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    // The baselines the ratios were computed from, measured in this same run.
    out << "  ],\n  \"baselines\": [\n";
    bool first = true;
    for (const auto& [name, c] : Cases()) {
      if (!c.copy.empty() || !bps_.count(name)) continue;
      out << (first ? "" : ",\n") << "    {\"name\": \"" << name << "\", \"kernel\": \""
          << c.kernel << "\", \"process\": \"" << process
          << "\", \"bytes_per_second\": " << Get(bps_, name)
          << ", \"cv\": " << Get(cv_, name) << "}";
      first = false;
    }
    out << "\n  ]\n}\n";
    std::printf("\nwrote %s (%zu cases)\n", json_path_.c_str(), rows.size());
  }

  std::string json_path_;
  std::vector<std::string> isas_;
  std::string onednn_isa_;
  std::map<std::string, double> bps_;
  std::map<std::string, double> cv_;  // 0 where a case ran once
  std::set<std::string> medians_;
  int64_t repetitions_ = 1;
};

}  // namespace

std::unique_ptr<benchmark::BenchmarkReporter> MakeReporter(
    const std::string& json_path, const std::vector<std::string>& isas,
    const std::string& onednn_isa) {
  return std::make_unique<SuiteReporter>(json_path, isas, onednn_isa);
}

}  // namespace nk_bench
