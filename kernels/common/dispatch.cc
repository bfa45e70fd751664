// SPDX-License-Identifier: Apache-2.0
// dispatch.cc: ISA selection (nk_*_isa), thread count (nk_*_num_threads) and the
// environment (NK_ISA, NK_NUM_THREADS, NK_STREAM_BYTES), read once.
#include "kernels/common/dispatch.h"

#include <omp.h>
#include <pthread.h>
#include <strings.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "hwy/targets.h"
#include "include/normkernels.h"
#include "kernels/common/cpu_targets.h"
#include "kernels/common/errors.h"

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

// Names users type for a target: Highway calls AVX-512 (F, BW, DQ, VL) "AVX3".
constexpr struct {
  const char* alias;
  const char* target;
} kAliases[] = {{"AVX512", "AVX3"}, {"AVX-512", "AVX3"}};

// `name` without surrounding white space, in buf; "" if it does not fit.
const char* Trim(const char* name, char (&buf)[32]) {
  while (std::isspace(static_cast<unsigned char>(*name))) ++name;
  size_t n = std::strlen(name);
  while (n != 0 && std::isspace(static_cast<unsigned char>(name[n - 1]))) --n;
  if (n >= sizeof(buf)) n = 0;
  std::memcpy(buf, name, n);
  buf[n] = '\0';
  for (const auto& a : kAliases) {
    if (strcasecmp(buf, a.alias) == 0) return a.target;
  }
  return buf;
}

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

// "AVX3, AVX2, SSE4, SSSE3, SCALAR": the targets this CPU runs, best first.
std::string AvailableNames() {
  std::string names;
  for (int64_t t = Available(); t != 0; t &= t - 1) {
    if (!names.empty()) names += ", ";
    names += hwy::TargetName(t & -t);
  }
  return names;
}

// The target `name` selects (Best() for NULL or "auto"), or 0 with the reason's
// status in *status.
int64_t Select(const char* name, nk_status* status) {
  if (name == nullptr) return Best();
  char buf[32];
  const char* trimmed = Trim(name, buf);
  if (strcasecmp(trimmed, "auto") == 0) return Best();
  if (const int64_t target = Find(trimmed)) return target;
  *status = Known(trimmed) ? NK_ERR_UNSUPPORTED : NK_ERR_INVALID_ARGUMENT;
  return 0;
}

// Why Select refused `name`, e.g. "\"AVX9\" is not an instruction set name; ...".
std::string Refusal(const char* name, nk_status status) {
  char text[256];
  std::snprintf(text, sizeof(text),
                status == NK_ERR_UNSUPPORTED
                    ? "\"%.64s\" is a target that this build does not contain or this "
                      "CPU does not support; this CPU runs %s, or \"auto\" (the best)"
                    : "\"%.64s\" is not an instruction set name; this CPU runs %s, or "
                      "\"auto\" (the best)",
                name, AvailableNames().c_str());
  return text;
}

// After fork() only the calling thread exists in the child, but libgomp's pool still
// counts its threads, so the child's next parallel region would wait for them forever
// (DataLoader and multiprocessing workers): the child runs kernels on one thread until
// it sets a count itself.
std::atomic<bool> g_forked{false};
void OnFork() {
  g_forked.store(true, std::memory_order_relaxed);
  g_threads.store(1, std::memory_order_relaxed);
}
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, &OnFork);

// `text` as a whole decimal integer in [lo, hi] (white space around it allowed).
bool ParseInteger(const char* text, long long lo, long long hi, long long* value) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text, &end, 10);
  while (end != text && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (end == text || *end != '\0' || errno != 0 || n < lo || n > hi) return false;
  *value = n;
  return true;
}

// NK_STREAM_BYTES: bytes, a positive integer; kStreamBytes otherwise.
size_t ReadStreamBytes() {
  const char* env = std::getenv("NK_STREAM_BYTES");
  long long n = 0;
  if (env == nullptr) return kStreamBytes;
  if (ParseInteger(env, 1, std::numeric_limits<long long>::max(), &n)) {
    return static_cast<size_t>(n);
  }
  std::fprintf(stderr,
               "normkernels: NK_STREAM_BYTES=\"%.64s\" is not a size in bytes (a "
               "positive integer); using the default (%zu)\n",
               env, kStreamBytes);
  return kStreamBytes;
}

std::atomic<size_t> g_stream_bytes{kStreamBytes};

void Init() {
  std::call_once(g_init, [] {
    int64_t target = Best();
    if (const char* env = std::getenv("NK_ISA")) {
      nk_status status = NK_OK;
      if (const int64_t t = Select(env, &status)) {
        target = t;
      } else {
        std::fprintf(stderr, "normkernels: NK_ISA=%s; using %s\n",
                     Refusal(env, status).c_str(), hwy::TargetName(target));
      }
    }
    g_target.store(target, std::memory_order_relaxed);
    g_stream_bytes.store(ReadStreamBytes(), std::memory_order_relaxed);
    const char* env = std::getenv("NK_NUM_THREADS");
    if (env != nullptr && !g_forked.load(std::memory_order_relaxed)) {
      long long n = 0;
      if (ParseInteger(env, 0, 1 << 20, &n)) {
        g_threads.store(static_cast<int>(n), std::memory_order_relaxed);
      } else {
        const int omp = omp_get_max_threads();
        std::fprintf(stderr,
                     "normkernels: NK_NUM_THREADS=\"%.64s\" is not a thread count (an "
                     "integer from 0 to 1048576); using the default (%d)\n",
                     env, omp > 0 ? omp : 1);
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

size_t StreamBytes() {
  Init();
  return g_stream_bytes.load(std::memory_order_relaxed);
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
  nk_status status = NK_OK;
  const int64_t target = nk::Select(name, &status);
  if (target == 0) {
    return nk::SetError(status, "nk_set_isa: name %s", nk::Refusal(name, status).c_str());
  }
  nk::g_target.store(target, std::memory_order_relaxed);
  return NK_OK;
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
