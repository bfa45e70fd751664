// parallel.h: OpenMP regions that a one-thread call does not enter.
#ifndef NK_KERNELS_PARALLEL_H_
#define NK_KERNELS_PARALLEL_H_

#include <omp.h>

#include <cstddef>

namespace nk {

// fn(t, parts) on each of `threads` OpenMP threads, or fn(0, 1) on the calling thread
// when threads <= 1. libgomp makes a system call (futex) for every region, a
// one-thread team under if(false) included; on this machine's VM a system call costs
// about 1 us and the passes right after it run slower (BatchNorm of 8x512x7x7 NHWC,
// 1 thread, A/B: training 57 -> 48 us, inference 32 -> 29 us). fn must not hold
// OpenMP constructs (`omp for`, `omp barrier`): run directly, they would bind to the
// caller's own region, if any, and share one call's loop among the caller's threads.
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
