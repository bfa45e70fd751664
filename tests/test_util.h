// SPDX-License-Identifier: Apache-2.0
// test_util.h: what every kernel test needs: a suite per ISA, exact-size buffers at
// chosen misalignments, seeded data.
#ifndef NK_TESTS_TEST_UTIL_H_
#define NK_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "normkernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define NK_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NK_TEST_ASAN 1
#endif
#endif
#ifdef NK_TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace nk_test {

// Marks bytes [p, p + n) unreadable under AddressSanitizer (poison = true), or
// readable again; nothing otherwise.
inline void PoisonForAsan(const void* p, size_t n, bool poison) {
#ifdef NK_TEST_ASAN
  if (poison) {
    ASAN_POISON_MEMORY_REGION(p, n);
  } else {
    ASAN_UNPOISON_MEMORY_REGION(p, n);
  }
#else
  (void)p, (void)n, (void)poison;
#endif
}

// Every ISA this CPU runs and the library contains, best first.
inline std::vector<std::string> Isas() {
  const size_t n = nk_list_isas(nullptr, 0);
  std::vector<const char*> names(n);
  nk_list_isas(names.data(), n);
  return std::vector<std::string>(names.begin(), names.end());
}

// A value-parameterized fixture that selects its ISA (and checks it took effect)
// and restores the defaults afterwards.
class IsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(nk_set_isa(GetParam().c_str()), NK_OK) << nk_last_error();
    ASSERT_STREQ(nk_get_isa(), GetParam().c_str());
  }
  void TearDown() override {
    nk_set_isa(nullptr);
    nk_set_num_threads(0);
  }
};

inline std::string IsaName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

#define NK_INSTANTIATE_FOR_EACH_ISA(suite) \
  INSTANTIATE_TEST_SUITE_P(Isa, suite, ::testing::ValuesIn(::nk_test::Isas()), \
                           ::nk_test::IsaName)

// The 32 MiB tests allocate and free many large buffers; glibc maps each one afresh
// and faults its pages in again, which took half of those tests' time on this VM.
// They stay on the heap instead. (The sanitizers' allocators ignore this.)
inline const bool kLargeBuffersReused = [] {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  return true;
}();

// What a buffer holds before anything is written, so that a missed write shows: NaN
// (0xFFFF is a NaN of both half formats).
template <typename T>
T Unwritten();
template <>
inline float Unwritten<float>() {
  return std::numeric_limits<float>::quiet_NaN();
}
template <>
inline uint16_t Unwritten<uint16_t>() {
  return 0xFFFF;
}

// A buffer of exactly `n` elements (float, or uint16_t for half tensors) that starts
// `misalign` elements past a 64-byte boundary, so a sanitizer sees any access past
// either end (the elements before it are poisoned: kernels that read whole lines
// around misaligned data must stay inside the tensor).
template <typename T>
class ElementBuffer {
 public:
  ElementBuffer(size_t n, size_t misalign = 0) : n_(n) {
    const size_t bytes = (n + misalign) * sizeof(T);
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes == 0 ? 64 : bytes) != 0) throw std::bad_alloc();
    raw_.reset(static_cast<T*>(p));
    data_ = raw_.get() + misalign;
    raw_.get_deleter().poisoned = misalign * sizeof(T);
    PoisonForAsan(raw_.get(), misalign * sizeof(T), true);
    Fill(Unwritten<T>());
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  T operator[](size_t i) const { return data_[i]; }
  void Fill(T v) {
    for (size_t i = 0; i < n_; ++i) data_[i] = v;
  }
  void CopyFrom(const ElementBuffer& other) {
    std::memcpy(data_, other.data_, n_ * sizeof(T));
  }

 private:
  struct Free {
    size_t poisoned;  // bytes before the data
    void operator()(T* p) const {
      PoisonForAsan(p, poisoned, false);
      free(p);
    }
  };
  std::unique_ptr<T, Free> raw_;
  T* data_;
  size_t n_;
};
using Buffer = ElementBuffer<float>;
using HalfBuffer = ElementBuffer<uint16_t>;

// Where calls start streaming: NK_STREAM_BYTES when it is a positive integer, the
// library's default (32 MiB) otherwise. Tests of the streamed paths that need not be
// large size their tensors from it, so the Arm runs under qemu (256 KiB) keep them
// small.
inline size_t StreamBytes() {
  constexpr size_t kDefault = size_t{32} << 20;
  const char* env = std::getenv("NK_STREAM_BYTES");
  if (env == nullptr || *env < '0' || *env > '9') return kDefault;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(env, &end, 10);
  return *end == '\0' && n > 0 ? n : kDefault;
}

// The seed of a test's data, printed by gtest on failure through SCOPED_TRACE.
inline uint32_t Seed(size_t salt) { return static_cast<uint32_t>(0x6e4ef93bu ^ (salt * 2654435761u)); }

inline void FillNormal(Buffer& b, uint32_t seed, float mean = 0.0f, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sd);
  for (size_t i = 0; i < b.size(); ++i) b[i] = dist(rng);
}

inline bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace nk_test

#endif  // NK_TESTS_TEST_UTIL_H_
