// SPDX-License-Identifier: Apache-2.0
// suite.cc: registry, buffers, copy baselines, and the rounds (each case beside its
// baselines; ratios as medians of the rounds' ratios, each with its spread; a table or
// a JSON summary).
#include "suite.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

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

// A case's measurements in one round: its own and, run right after it, its baselines'
// (0 where a baseline is missing).
struct Round {
  double bps, memcpy_bps, nt_bps, onednn_bps;
  double copy_bps() const { return std::max(memcpy_bps, nt_bps); }  // the faster copy
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Sample standard deviation over mean, as Google Benchmark's cv; 0 for one value.
double Cv(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double mean = 0, ss = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) ss += (x - mean) * (x - mean);
  return mean > 0 ? std::sqrt(ss / (v.size() - 1)) / mean : 0.0;
}

// f applied to each round, as a list.
template <class F>
std::vector<double> Each(const std::vector<Round>& rounds, F f) {
  std::vector<double> v;
  for (const Round& r : rounds) v.push_back(f(r));
  return v;
}

// A JSON array of strings.
std::string JsonList(const std::vector<std::string>& items) {
  std::string s = "[";
  for (const std::string& item : items) s += (s.size() > 1 ? ", \"" : "\"") + item + "\"";
  return s + "]";
}

// Google Benchmark's console lines, its context once (it reports it on every call of
// RunSpecifiedBenchmarks), and each run's bytes/s kept for the caller.
class RoundReporter : public benchmark::ConsoleReporter {
 public:
  bool ReportContext(const Context& context) override {
    if (reported_context_) return true;
    reported_context_ = true;
    return ConsoleReporter::ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) bps_[r.run_name.function_name] = it->second.value;
    }
  }

  // The bytes/s of the runs since the last call, by benchmark name.
  std::map<std::string, double> Take() { return std::exchange(bps_, {}); }

 private:
  bool reported_context_ = false;
  std::map<std::string, double> bps_;
};

// Whether Google Benchmark's --benchmark_filter selects the benchmark `name` (an
// extended regular expression searched in the name, or with a leading '-' not found in
// it; "" and "all" select every one), as Google Benchmark matches it.
bool Selected(std::string filter, const std::string& name) {
  if (filter.empty() || filter == "all") return true;
  const bool negative = filter[0] == '-';
  if (negative) filter.erase(0, 1);
  const std::regex re(filter, std::regex::extended);
  return std::regex_search(name + "/real_time", re) != negative;  // Register's timing
}

// An extended regular expression matching exactly these benchmarks' names.
std::string Exactly(const std::vector<std::string>& names) {
  std::string spec = "^(";
  for (const std::string& name : names) {
    if (spec.size() > 2) spec += '|';
    for (char ch : name) {
      if (std::strchr(".[]{}()\\*+?^$|", ch)) spec += '\\';
      spec += ch;
    }
  }
  return spec + ")/real_time$";
}

struct Summary {
  const std::vector<std::string>& isas;
  const std::string& onednn_isa;
  const std::map<std::string, std::vector<Round>>& rounds;      // by case
  const std::map<std::string, std::vector<double>>& baselines;  // every run's bytes/s
  int n;                                                        // rounds asked for
};

void PrintTable(const Summary& s) {
  std::printf("\n%-22s %-22s %-7s %3s %3s %8s %5s %7s %8s\n", "kernel", "shape", "ISA",
              "off", "thr", "GB/s", "cv %", "x copy", "x oneDNN");
  for (const auto& [name, rounds] : s.rounds) {
    const Case& c = Cases()[name];
    std::printf(
        "%-22s %-22s %-7s %3zu %3d %8.1f %5.1f %7.2f", c.kernel.c_str(), c.shape.c_str(),
        c.isa.c_str(), c.offset, c.threads,
        Median(Each(rounds, [](const Round& r) { return r.bps; })) * 1e-9,
        Cv(Each(rounds, [](const Round& r) { return r.bps; })) * 100,
        Median(Each(rounds, [](const Round& r) { return r.bps / r.copy_bps(); })));
    if (rounds[0].onednn_bps > 0) {
      std::printf(
          " %8.2f\n",
          Median(Each(rounds, [](const Round& r) { return r.bps / r.onednn_bps; })));
    } else {
      std::printf(" %8s\n", "-");
    }
  }
  if (!s.onednn_isa.empty()) std::printf("oneDNN ran at %s\n", s.onednn_isa.c_str());
}

// A JSON array of numbers.
std::string JsonNumbers(const std::vector<double>& v) {
  std::ostringstream out;
  out.precision(17);
  out << '[';
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  return out.str() + "]";
}

void WriteJson(const Summary& s, const std::string& path) {
  std::ofstream out(path);
  out.precision(17);
  std::string process;  // names this process's baselines in a merge of processes
  for (const std::string& isa : s.isas) process += (process.empty() ? "" : ",") + isa;
  out << "{\n  \"rounds\": " << s.n << ",\n  \"isas\": " << JsonList(s.isas)
      << ",\n  \"onednn_isa\": \"" << s.onednn_isa << "\",\n  \"cases\": [\n";
  size_t i = 0;
  for (const auto& [name, rounds] : s.rounds) {
    const Case& c = Cases()[name];
    const auto bps = Each(rounds, [](const Round& r) { return r.bps; });
    const auto copy = Each(rounds, [](const Round& r) { return r.copy_bps(); });
    const auto dnnl = Each(rounds, [](const Round& r) { return r.onednn_bps; });
    const bool with_dnnl = dnnl[0] > 0;
    out << "    {\"name\": \"" << name << "\", \"kernel\": \"" << c.kernel
        << "\", \"shape\": \"" << c.shape << "\", \"isa\": \"" << c.isa
        << "\", \"offset\": " << c.offset << ", \"threads\": " << c.threads
        << ", \"group\": \"" << c.group << "\", \"main\": " << (c.main ? "true" : "false")
        << ", \"bytes\": " << static_cast<long long>(c.bytes)
        << ", \"bytes_per_second\": " << Median(bps)
        << ", \"copy_bytes_per_second\": " << Median(copy)
        << ", \"onednn_bytes_per_second\": " << (with_dnnl ? Median(dnnl) : 0.0)
        << ", \"x_copy\": "
        << Median(Each(rounds, [](const Round& r) { return r.bps / r.copy_bps(); }))
        << ", \"x_onednn\": "
        << (with_dnnl ? Median(Each(rounds,
                                    [](const Round& r) { return r.bps / r.onednn_bps; }))
                      : 0.0)
        << ", \"cv\": " << Cv(bps) << ", \"copy_cv\": " << Cv(copy)
        << ", \"onednn_cv\": " << (with_dnnl ? Cv(dnnl) : 0.0) << ", \"onednn_isa\": \""
        << (with_dnnl ? s.onednn_isa : "") << "\", \"onednn_impl\": \""
        << (with_dnnl ? Cases()[c.onednn].impl : "")
        << "\", \"round_bytes_per_second\": " << JsonNumbers(bps)
        << ", \"round_copy_memcpy\": "
        << JsonNumbers(Each(rounds, [](const Round& r) { return r.memcpy_bps; }))
        << ", \"round_copy_nt\": "
        << JsonNumbers(Each(rounds, [](const Round& r) { return r.nt_bps; }))
        << ", \"round_onednn\": " << JsonNumbers(dnnl) << "}"
        << (++i < s.rounds.size() ? ",\n" : "\n");
  }
  // The baselines the ratios were computed from, measured in this same run: every run
  // (a copy shared by several cases runs beside each), their median and spread.
  out << "  ],\n  \"baselines\": [\n";
  i = 0;
  for (const auto& [name, runs] : s.baselines) {
    out << (i++ ? ",\n" : "") << "    {\"name\": \"" << name << "\", \"kernel\": \""
        << Cases()[name].kernel << "\", \"process\": \"" << process
        << "\", \"bytes_per_second\": " << Median(runs) << ", \"cv\": " << Cv(runs)
        << ", \"runs\": " << JsonNumbers(runs) << "}";
  }
  out << "\n  ]\n}\n";
  std::printf("\nwrote %s (%zu cases)\n", path.c_str(), s.rounds.size());
}

}  // namespace

size_t RunRounds(int n, const std::string& json_path,
                 const std::vector<std::string>& isas, const std::string& onednn_isa) {
  const std::string filter = benchmark::GetBenchmarkFilter();
  std::vector<std::string> selected;
  for (const auto& [name, c] : Cases()) {
    if (!c.copy.empty() && Selected(filter, name)) selected.push_back(name);
  }
  // Each case with its baselines: the case, its two copies, oneDNN's.
  const auto group = [](const std::string& name) {
    const Case& c = Cases()[name];
    std::vector<std::string> names = {name, "copy_memcpy/" + c.copy, "copy_nt/" + c.copy};
    if (!c.onednn.empty()) names.push_back(c.onednn);
    return names;
  };
  // One untimed call of each first: a first call pays for thread pools and oneDNN's
  // primitives, and Google Benchmark takes a single call that outlasts the minimum
  // time as the measurement.
  for (const std::string& name : selected) {
    for (const std::string& run : group(name)) {
      if (Runners()[run].setup()) Runners()[run].body();
    }
  }
  RoundReporter reporter;
  std::map<std::string, std::vector<Round>> rounds;
  std::map<std::string, std::vector<double>> baselines;
  for (int round = 1; round <= n; ++round) {
    std::printf("bench_normkernels: round %d of %d\n", round, n);
    for (const std::string& name : selected) {
      const Case& c = Cases()[name];
      const std::string memcpy_name = "copy_memcpy/" + c.copy, nt = "copy_nt/" + c.copy;
      benchmark::RunSpecifiedBenchmarks(&reporter, Exactly(group(name)));
      std::map<std::string, double> bps = reporter.Take();
      for (const auto& [run, value] : bps) {
        if (run != name) baselines[run].push_back(value);
      }
      if (!bps.count(name)) continue;  // its setup failed (reported above)
      rounds[name].push_back(
          {bps[name], bps[memcpy_name], bps[nt], c.onednn.empty() ? 0.0 : bps[c.onednn]});
    }
  }
  const Summary summary{isas, onednn_isa, rounds, baselines, n};
  if (json_path.empty()) {
    PrintTable(summary);
  } else {  // scripts/bench_report.py prints the table (and warns of spreads)
    WriteJson(summary, json_path);
  }
  return rounds.size();
}

}  // namespace nk_bench
