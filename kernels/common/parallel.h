// SPDX-License-Identifier: Apache-2.0
// parallel.h: OpenMP regions that a one-thread call does not enter.
#ifndef NK_KERNELS_PARALLEL_H_
#define NK_KERNELS_PARALLEL_H_

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <thread>

namespace nk {

// fn(t, parts) on each of `threads` OpenMP threads, or fn(0, 1) on the calling thread
// when threads <= 1. libgomp makes a system call (futex) for every region, a
// one-thread team under if(false) included; on this machine's VM a system call costs
// about 1 us and the passes right after it run slower (BatchNorm of 8x512x7x7 NHWC,
// 1 thread, A/B: training 57 -> 48 us, inference 32 -> 29 us). fn must not hold
// OpenMP constructs (`omp for`, `omp barrier`; a SpinBarrier is safe): run directly,
// they would bind to the caller's own region, if any, and share one call's loop among
// the caller's threads.
template <class Fn>
void ForEachPart(int threads, const Fn& fn) {
  if (threads <= 1) {
    fn(size_t{0}, size_t{1});
    return;
  }
#pragma omp parallel num_threads(threads)
  fn(static_cast<size_t>(omp_get_thread_num()),
     static_cast<size_t>(omp_get_num_threads()));
}

// A barrier among the `parts` threads of one ForEachPart body (none for one part),
// spinning in user space: libgomp's `omp barrier` makes a futex system call every
// time, 1.5 us per barrier of two threads on this VM. Used only inside a region of
// ForEachPart's own, never in a caller's. Waiters yield after a while, so that threads
// sharing a core with others still progress.
class SpinBarrier {
 public:
  void Wait(size_t parts) {
    if (parts <= 1) return;
    const unsigned generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      return;
    }
    for (unsigned spins = 0; generation_.load(std::memory_order_acquire) == generation;) {
      if (++spins > 4096) std::this_thread::yield();
    }
  }

 private:
  std::atomic<size_t> arrived_{0};
  std::atomic<unsigned> generation_{0};
};

// fn(i) for i in [0, n), statically scheduled over `threads` threads; as in
// ForEachPart, fn holds no OpenMP constructs and does not ask for its thread number.
template <class Fn>
void ParallelFor(int threads, size_t n, const Fn& fn) {
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) fn(i);
}

}  // namespace nk

#endif  // NK_KERNELS_PARALLEL_H_
