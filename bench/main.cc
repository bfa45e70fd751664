// SPDX-License-Identifier: Apache-2.0
// main.cc: the benchmark suite: every kernel under every ISA this CPU runs, 1 and all
// threads, beside the copy baseline and oneDNN in the same run.
//
//   bench_normkernels [--full] [--nk_json=PATH] [--nk_verify] [Google Benchmark flags]
//
// The default is a quick selection (every kernel on the best ISA, the main ones on the
// others); --full registers every kernel x ISA x shape. After Google Benchmark's lines
// it prints a table of the cases (medians, spreads, ratios), or with --nk_json writes
// it to PATH for scripts/bench_report.py. --nk_verify runs each case once and checks
// it wrote exactly the elements its bytes count, instead of timing.
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "normkernels.h"
#include "suite.h"

int main(int argc, char** argv) {
  using namespace nk_bench;
  Selection s;
  std::string json;
  bool verify = false;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      s.full = true;
    } else if (std::strncmp(argv[i], "--nk_json=", 10) == 0) {
      json = argv[i] + 10;
    } else if (std::strcmp(argv[i], "--nk_verify") == 0) {
      verify = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::vector<const char*> isas(nk_list_isas(nullptr, 0));
  nk_list_isas(isas.data(), isas.size());
  s.isas.assign(isas.begin(), isas.end());
  const int all = nk_get_num_threads();
  s.threads = all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
  RegisterLayerNormCases(s);
  RegisterBatchNormCases(s);
  if (verify) return VerifyCases() == 0 ? 0 : 1;
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  auto reporter = MakeReporter(json);
  benchmark::RunSpecifiedBenchmarks(reporter.get());
  benchmark::Shutdown();
  return 0;
}
