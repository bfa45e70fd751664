// workspace.h: buffers a call needs, kept by the calling thread between calls.
#ifndef NK_KERNELS_WORKSPACE_H_
#define NK_KERNELS_WORKSPACE_H_

#include <cstddef>
#include <new>
#include <vector>

namespace nk {

// Buffers up to this size stay with the calling thread after a call; a larger one is
// freed when its call ends.
constexpr size_t kKeptBytes = size_t{16} << 20;

// n elements of T for the length of a call, from a buffer that the calling thread
// keeps between calls, one per Tag. Allocated and freed by every call, buffers of
// 128 KiB or more went back to the kernel (glibc's trim and mmap thresholds), and the
// next call faulted their pages in again: BatchNorm statistics of 1x2048x7x7 NHWC,
// 1 thread, took 328 us (a brk system call or more per call; a copy of x: 4-6 us).
template <class T, class Tag>
class Workspace {
 public:
  // nullptr when out of memory. The elements hold whatever an earlier call left.
  T* Get(size_t n) {
    std::vector<T>& v = n * sizeof(T) <= kKeptBytes ? Kept() : own_;
    if (v.size() < n) {
      try {
        v.resize(n);
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
    }
    return v.data();
  }

 private:
  static std::vector<T>& Kept() {
    thread_local std::vector<T> kept;
    return kept;
  }
  std::vector<T> own_;
};

}  // namespace nk

#endif  // NK_KERNELS_WORKSPACE_H_
