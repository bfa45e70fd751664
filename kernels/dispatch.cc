// SPDX-License-Identifier: Apache-2.0
// dispatch.cc: ISA selection (nk_*_isa), thread count (nk_*_num_threads) and the
// environment (NK_ISA, NK_NUM_THREADS), read once.
#include "kernels/dispatch.h"

#include <omp.h>
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "hwy/targets.h"
#include "kernels/cpu_targets.h"
#include "include/normkernels.h"
#include "kernels/errors.h"

namespace nk {
namespace {

// Every target name Highway has used (some only in later versions): a name here
// that is not compiled in or not supported is NK_ERR_UNSUPPORTED, anything else
// NK_ERR_INVALID_ARGUMENT.
constexpr const char* kKnownTargetNames[] = {
    "AVX3_SPR", "AVX3_ZEN4", "AVX3_DL", "AVX3",  "AVX2",     "SSE4",
    "SSSE3",    "SSE2",      "SVE2_128", "SVE_256", "SVE2",  "SVE",
    "NEON_BF16", "NEON",     "PPC10",   "PPC9",  "PPC8",     "Z15",
    "Z14",      "WASM_EMU256", "WASM",  "RVV",   "EMU128",   "SCALAR"};

// Compiled in and supported by this CPU. Highway's lower bits are better targets.
int64_t Available() {
  static const int64_t available = CpuTargets() & HWY_TARGETS;
  return available;
}

int64_t Best() {
  const int64_t a = Available();
  return a & -a;
}

std::atomic<int64_t> g_target{0};
std::atomic<int> g_threads{0};  // 0: OpenMP's default
std::once_flag g_init;

// Returns the target called `name` among the available ones, 0 if none.
int64_t Find(const char* name) {
  for (int64_t t = Available(); t != 0; t &= t - 1) {
    const int64_t bit = t & -t;
    if (strcasecmp(name, hwy::TargetName(bit)) == 0) return bit;
  }
  return 0;
}

bool Known(const char* name) {
  for (const char* known : kKnownTargetNames) {
    if (strcasecmp(name, known) == 0) return true;
  }
  return false;
}

void Init() {
  std::call_once(g_init, [] {
    int64_t target = Best();
    if (const char* env = std::getenv("NK_ISA")) {
      if (strcasecmp(env, "auto") != 0 && Find(env) != 0) target = Find(env);
    }
    g_target.store(target, std::memory_order_relaxed);
    if (const char* env = std::getenv("NK_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && n >= 0 && n <= 1 << 20) {
        g_threads.store(static_cast<int>(n), std::memory_order_relaxed);
      }
    }
  });
}

// Below this many elements per thread, starting threads costs more than it saves.
constexpr size_t kMinWorkPerThread = 32768;

}  // namespace

int64_t CurrentTarget() {
  Init();
  return g_target.load(std::memory_order_relaxed);
}

int ThreadsFor(size_t work) {
  const int threads = nk_get_num_threads();
  const size_t useful = work / kMinWorkPerThread;
  if (useful <= 1) return 1;
  return useful < static_cast<size_t>(threads) ? static_cast<int>(useful) : threads;
}

}  // namespace nk

extern "C" {

const char* nk_get_isa(void) { return hwy::TargetName(nk::CurrentTarget()); }

size_t nk_list_isas(const char** names, size_t capacity) {
  size_t count = 0;
  for (int64_t t = nk::Available(); t != 0; t &= t - 1) {
    if (names != nullptr && count < capacity) names[count] = hwy::TargetName(t & -t);
    ++count;
  }
  return count;
}

nk_status nk_set_isa(const char* name) {
  nk::Init();
  if (name == nullptr || strcasecmp(name, "auto") == 0) {
    nk::g_target.store(nk::Best(), std::memory_order_relaxed);
    return NK_OK;
  }
  if (const int64_t target = nk::Find(name)) {
    nk::g_target.store(target, std::memory_order_relaxed);
    return NK_OK;
  }
  if (nk::Known(name)) {
    return nk::SetError(NK_ERR_UNSUPPORTED,
                        "nk_set_isa: name \"%s\" is a target that this build does not "
                        "contain or this CPU does not support; see nk_list_isas",
                        name);
  }
  return nk::SetError(NK_ERR_INVALID_ARGUMENT,
                      "nk_set_isa: name \"%.64s\" is not an instruction set name; "
                      "expected e.g. \"AVX3\", \"AVX2\", \"SSE4\" or \"auto\"",
                      name);
}

int nk_get_num_threads(void) {
  nk::Init();
  const int n = nk::g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  const int omp = omp_get_max_threads();
  return omp > 0 ? omp : 1;
}

nk_status nk_set_num_threads(int n) {
  nk::Init();
  if (n < 0) {
    return nk::SetError(NK_ERR_INVALID_ARGUMENT,
                        "nk_set_num_threads: n is %d; it must be >= 1, or 0 for the "
                        "default",
                        n);
  }
  nk::g_threads.store(n, std::memory_order_relaxed);
  return NK_OK;
}

}  // extern "C"
