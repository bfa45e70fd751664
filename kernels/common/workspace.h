// SPDX-License-Identifier: Apache-2.0
// workspace.h: buffers a call needs, kept by the calling thread between calls.
#ifndef NK_KERNELS_WORKSPACE_H_
#define NK_KERNELS_WORKSPACE_H_

#include <cstddef>
#include <new>
#include <type_traits>

namespace nk {

// Buffers up to this size stay with the calling thread after a call; a larger one is
// freed when its call ends.
constexpr size_t kKeptBytes = size_t{16} << 20;

// n elements of T for the length of a call, from a buffer that the calling thread
// keeps between calls, one per Tag. Allocated and freed by every call, buffers of
// 128 KiB or more went back to the kernel (glibc's trim and mmap thresholds), and the
// next call faulted their pages in again: BatchNorm statistics of 1x2048x7x7 NHWC,
// 1 thread, took 328 us (a brk system call or more per call; a copy of x: 4-6 us).
//
// Buffers start on a cache line: BatchNorm's NHWC parameter arrays at malloc's 16
// bytes made every vector load span two lines, and two threads reading them ran the
// normalization of 8x512x7x7 at half speed (inference, 2 threads: 27 -> 14 us).
template <class T, class Tag>
class Workspace {
  static_assert(std::is_trivially_default_constructible<T>::value &&
                    std::is_trivially_destructible<T>::value,
                "elements are used without construction");

 public:
  static constexpr size_t kAlign = 64;

  // nullptr when out of memory. The elements hold whatever an earlier call left.
  T* Get(size_t n) {
    if (n > kKeptBytes / sizeof(T)) return own_.Reserve(n);
    thread_local Buffer kept;
    return kept.Reserve(n);
  }

 private:
  class Buffer {
   public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { Free(); }

    T* Reserve(size_t n) {
      if (n == 0) n = 1;
      if (n > size_) {
        Free();
        if (n > ~size_t{0} / sizeof(T)) return nullptr;
        data_ = static_cast<T*>(
            ::operator new(n * sizeof(T), std::align_val_t{kAlign}, std::nothrow));
        if (data_ == nullptr) return nullptr;
        size_ = n;
      }
      return data_;
    }

   private:
    void Free() {
      if (data_ != nullptr) ::operator delete(data_, std::align_val_t{kAlign});
      data_ = nullptr;
      size_ = 0;
    }
    T* data_ = nullptr;
    size_t size_ = 0;
  };
  Buffer own_;
};

}  // namespace nk

#endif  // NK_KERNELS_WORKSPACE_H_
