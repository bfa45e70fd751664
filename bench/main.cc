// SPDX-License-Identifier: Apache-2.0
// main.cc: the benchmark suite: the kernels under the ISAs of one process, 1 and all
// threads, their arrays on a 64-byte boundary and 16 bytes past one, beside the copy
// baseline and oneDNN capped at the same ISA in the same run.
//
//   bench_normkernels [--full] [--nk_isas=LIST] [--nk_processes] [--nk_rounds=K]
//                     [--nk_json=PATH] [--nk_verify[=MIB]] [Google Benchmark flags]
//
// oneDNN's ISA is set once per process, so a run is one process per oneDNN ISA:
// --nk_processes prints their --nk_isas, one line each (this CPU's AVX3, AVX2 and
// SSE4; with --full, SSSE3 and the baseline join SSE4's, compared with oneDNN's
// SSE4.1), and --nk_isas=LIST (comma-separated) runs one; the default is the first.
// scripts/bench.sh runs them all and merges their JSON.
//
// The default is a quick selection (the cells of the documentation's table, and the
// plot's size sweeps); --full registers every kernel x shape. After Google
// Benchmark's lines it prints a table of the cases (medians, spreads, ratios), or
// with --nk_json writes it to PATH for scripts/bench_report.py. --nk_rounds=K (default
// 1) measures every case K times, each time beside its baselines (RunRounds), in
// place of Google Benchmark's repetitions, which this refuses. --nk_verify runs each
// case once and checks it wrote exactly the elements its bytes count, instead of
// timing; --nk_verify=MIB only the cases that move at most MIB MiB per call (under an
// emulator, where the largest take minutes).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "normkernels.h"
#include "suite.h"

namespace {

// The --nk_isas of each process a run needs: this CPU's ISAs grouped by the ISA
// oneDNN is capped at for them; the quick selection takes the first of each group.
std::vector<std::string> Processes(const std::vector<std::string>& isas, bool full) {
  std::vector<std::string> lines;
  std::string cap;
  for (const std::string& isa : isas) {
    if (!lines.empty() && nk_bench::OneDnnCapFor(isa) == cap) {
      if (full) lines.back() += "," + isa;
    } else {
      lines.push_back(isa);
      cap = nk_bench::OneDnnCapFor(isa);
    }
  }
  return lines;
}

// The ISAs of --nk_isas=LIST, or an empty list after a message.
std::vector<std::string> ParseIsas(const std::string& list,
                                   const std::vector<std::string>& runs) {
  std::vector<std::string> isas;
  for (size_t b = 0, e; b <= list.size(); b = e + 1) {
    e = std::min(list.find(',', b), list.size());
    isas.push_back(list.substr(b, e - b));
    if (std::find(runs.begin(), runs.end(), isas.back()) == runs.end()) {
      std::string names;
      for (const std::string& r : runs) names += " " + r;
      std::fprintf(stderr, "bench_normkernels: --nk_isas=%s: '%s' is not an ISA this CPU "
                   "runs (it runs:%s)\n", list.c_str(), isas.back().c_str(),
                   names.c_str());
      return {};
    }
    if (nk_bench::OneDnnCapFor(isas.back()) != nk_bench::OneDnnCapFor(isas.front())) {
      std::fprintf(stderr, "bench_normkernels: --nk_isas=%s: %s and %s are compared with "
                   "oneDNN at different ISAs (%s, %s): run them in two processes\n",
                   list.c_str(), isas.front().c_str(), isas.back().c_str(),
                   nk_bench::OneDnnCapFor(isas.front()).c_str(),
                   nk_bench::OneDnnCapFor(isas.back()).c_str());
      return {};
    }
  }
  return isas;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nk_bench;
  Selection s;
  std::string json, isas_arg;
  bool verify = false, processes = false;
  int rounds = 1;
  double verify_bytes = HUGE_VAL;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      s.full = true;
    } else if (std::strncmp(argv[i], "--nk_isas=", 10) == 0) {
      isas_arg = argv[i] + 10;
    } else if (std::strcmp(argv[i], "--nk_processes") == 0) {
      processes = true;
    } else if (std::strncmp(argv[i], "--nk_rounds=", 12) == 0) {
      char* end = nullptr;
      const long k = std::strtol(argv[i] + 12, &end, 10);
      if (end == argv[i] + 12 || *end != '\0' || k < 1 || k > 1000) {
        std::fprintf(stderr,
                     "bench_normkernels: %s: K must be a whole number from 1 to "
                     "1000\n",
                     argv[i]);
        return 2;
      }
      rounds = static_cast<int>(k);
    } else if (std::strncmp(argv[i], "--benchmark_repetitions", 23) == 0 ||
               std::strncmp(argv[i], "--benchmark_enable_random_interleaving", 38) == 0 ||
               std::strncmp(argv[i], "--benchmark_out", 15) == 0) {
      // Each case runs beside its baselines (RunRounds), one Google Benchmark run at
      // a time: repetitions would be taken apart from them, and each run rewrites
      // --benchmark_out.
      std::fprintf(stderr,
                   "bench_normkernels: %s: not with this suite: repeat with "
                   "--nk_rounds=K, write the results with --nk_json=PATH\n",
                   argv[i]);
      return 2;
    } else if (std::strncmp(argv[i], "--nk_json=", 10) == 0) {
      json = argv[i] + 10;
    } else if (std::strcmp(argv[i], "--nk_verify") == 0) {
      verify = true;
    } else if (std::strncmp(argv[i], "--nk_verify=", 12) == 0) {
      verify = true;
      char* end = nullptr;
      verify_bytes = std::strtod(argv[i] + 12, &end) * (1 << 20);
      if (end == argv[i] + 12 || *end != '\0' || !(verify_bytes > 0)) {
        std::fprintf(stderr, "bench_normkernels: %s: MIB must be a positive number\n",
                     argv[i]);
        return 2;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::vector<const char*> names(nk_list_isas(nullptr, 0));
  nk_list_isas(names.data(), names.size());
  const std::vector<std::string> runs(names.begin(), names.end());
  const std::vector<std::string> lines = Processes(runs, s.full);
  if (processes) {
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
    return 0;
  }
  s.isas = ParseIsas(isas_arg.empty() ? lines.front() : isas_arg, runs);
  if (s.isas.empty()) return 2;
  const std::string onednn_isa = CapOneDnn(s.isas.front());  // before any primitive
  const int all = nk_get_num_threads();
  s.threads = all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
  RegisterLayerNormCases(s);
  RegisterBatchNormCases(s);
  RegisterGroupNormCases(s);
  if (verify) return VerifyCases(verify_bytes) == 0 ? 0 : 1;
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  RunRounds(rounds, json, s.isas, onednn_isa);
  benchmark::Shutdown();
  return 0;
}
