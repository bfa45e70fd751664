// SPDX-License-Identifier: Apache-2.0
// sources-inl.h: what a row is read from (x, x + residual, rescaled), per target, and
// the loop helpers the row and channel paths share (read-ahead, tails, y's alignment).
// A source loads the row's elements [i, i + Lanes(d)) as fp32, widening half
// tensors here, so statistics and normalization code is written once for every
// element type.
#if defined(NK_KERNELS_SOURCES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_SOURCES_INL_H_
#undef NK_KERNELS_SOURCES_INL_H_
#else
#define NK_KERNELS_SOURCES_INL_H_
#endif

#include <stdint.h>

#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/half-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads from memory that feed much arithmetic fill the FP scheduler with operations
// waiting on them, so few of them are in flight; passes over data larger than the cache
// ask for the lines this far ahead (software prefetch) to keep memory busy. Measured on
// Zen 4, 1 thread: BatchNorm statistics of 32x64x56x56 0.83 -> 0.60 ms (2 KiB -> 8 KiB;
// 16 KiB the same), LayerNorm of 64 MiB with 256 columns 0.45x -> 0.70x of a copy.
constexpr size_t kReadAheadBytes = 8192;
// The same for rows that come from L3 (tensors that fit in the cache): a shorter
// distance did better there (LayerNorm of 4 MiB, 1 thread: 10-12% faster with 2 KiB,
// 3-9% with 8 KiB).
constexpr size_t kCacheAheadBytes = 2048;

// Stores into lines that are not in the cache wait for the line to be read first
// (read for ownership) and soon fill the store buffer; asking for a line of the output
// this far ahead overlaps those reads with the work (LayerNorm of 4 MiB, 1 thread, A/B
// in one process: 5-10% faster, a line every four vectors; asking for every line gained
// nothing). Streamed outputs take non-temporal stores instead.
constexpr size_t kWriteAheadBytes = 8192;

// Tensor elements of type T (float, hwy::bfloat16_t, hwy::float16_t) as fp32 vectors
// of D: loads widen exactly, stores round to nearest even (half-inl.h).
template <class D>
HWY_INLINE hn::Vec<D> LoadElems(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadElems(D d, const hwy::bfloat16_t* p) {
  return LoadWidenBf16(d, reinterpret_cast<const uint16_t*>(p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadElems(D d, const hwy::float16_t* p) {
  return WidenF16(d, hn::LoadU(HalfTag<D>(), reinterpret_cast<const uint16_t*>(p)));
}

template <class D>
HWY_INLINE hn::Vec<HalfTag<D>> Narrow(D d, hn::Vec<D> v, const hwy::bfloat16_t*) {
  return NarrowBf16(d, v);
}
template <class D>
HWY_INLINE hn::Vec<HalfTag<D>> Narrow(D d, hn::Vec<D> v, const hwy::float16_t*) {
  return NarrowF16(d, v);
}

template <class D>
HWY_INLINE void StoreElems(hn::Vec<D> v, D d, float* p) {
  hn::StoreU(v, d, p);
}
template <class D, class T>
HWY_INLINE void StoreElems(hn::Vec<D> v, D d, T* p) {
  hn::StoreU(Narrow(d, v, p), HalfTag<D>(), reinterpret_cast<uint16_t*>(p));
}

// A non-temporal store of a whole vector at a multiple of its size. Half vectors of
// less than 16 bytes (SSE4, SSSE3) take a regular store: Highway's Stream writes 16
// bytes for any vector there.
template <class D>
HWY_INLINE void StreamElems(hn::Vec<D> v, D d, float* p) {
  hn::Stream(v, d, p);
}
template <class D, class T>
HWY_INLINE void StreamElems(hn::Vec<D> v, D d, T* p) {
  const HalfTag<D> dh;
  if constexpr (hn::MaxLanes(dh) * sizeof(uint16_t) >= 16) {
    hn::Stream(Narrow(d, v, p), dh, reinterpret_cast<uint16_t*>(p));
  } else {
    StoreElems(v, d, p);
  }
}

// Whether StorePair / StreamPair narrow two vectors in one instruction (bf16 at
// AVX-512: NarrowBf16Pair), so that loops storing consecutive vectors take them in
// pairs.
template <class D, class T>
constexpr bool StoresInPairs() {
  return HWY_TARGET == HWY_AVX3 && hn::MaxLanes(D()) == 16 &&
         std::is_same_v<T, hwy::bfloat16_t>;
}

// lo at p, hi at p + Lanes(d), as StoreElems each.
template <class D, class T>
HWY_INLINE void StorePair(hn::Vec<D> lo, hn::Vec<D> hi, D d, T* p) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (StoresInPairs<D, T>()) {
    __m512i h;
    if (NarrowBf16Pair(lo.raw, hi.raw, &h)) {
      _mm512_storeu_si512(p, h);
      return;
    }
  }
#endif
  StoreElems(lo, d, p);
  StoreElems(hi, d, p + hn::Lanes(d));
}

// The same with non-temporal stores, p at a multiple of both vectors' size.
template <class D, class T>
HWY_INLINE void StreamPair(hn::Vec<D> lo, hn::Vec<D> hi, D d, T* p) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (StoresInPairs<D, T>()) {
    __m512i h;
    if (NarrowBf16Pair(lo.raw, hi.raw, &h)) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p), h);
      return;
    }
  }
#endif
  StreamElems(lo, d, p);
  StreamElems(hi, d, p + hn::Lanes(d));
}

// y[i, i + 4 Lanes(d)) = value(d, i), value(d, i + N), ...: four vectors, taken in
// pairs where StoresInPairs says. value may read y: each vector is computed before it
// is stored.
template <class D, class Value, class T>
HWY_INLINE void StoreFour(D d, const Value& value, size_t i, T* y) {
  const size_t N = hn::Lanes(d);
  if constexpr (StoresInPairs<D, T>()) {
    StorePair(value(d, i), value(d, i + N), d, y + i);
    StorePair(value(d, i + 2 * N), value(d, i + 3 * N), d, y + i + 2 * N);
  } else {
    StoreElems(value(d, i), d, y + i);
    StoreElems(value(d, i + N), d, y + i + N);
    StoreElems(value(d, i + 2 * N), d, y + i + 2 * N);
    StoreElems(value(d, i + 3 * N), d, y + i + 3 * N);
  }
}

// v as a T holds it: v itself for float, rounded to nearest even for halves.
template <class T, class D>
HWY_INLINE hn::Vec<D> RoundTo(D d, hn::Vec<D> v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
    return RoundBf16(d, v);
  } else {
    return WidenF16(d, NarrowF16(d, v));
  }
}

// Asks for the cache line at p into L2, not L1 (hwy::Prefetch's): for lines needed
// after the ones L1 holds now.
template <class T>
HWY_INLINE void PrefetchToL2(const T* p) {
  __builtin_prefetch(p, /*write=*/0, /*locality=*/2);  // x86: prefetcht1
}

// Where a source's requests put the lines: L1, or L2 only (PrefetchToL2).
enum class CacheLevel { kL1, kL2 };
template <CacheLevel kLevel>
HWY_INLINE void PrefetchLine(const void* p) {
  if constexpr (kLevel == CacheLevel::kL1) {
    hwy::Prefetch(p);
  } else {
    PrefetchToL2(p);
  }
}

template <class T>
struct TensorSource {
  const T* x;
  size_t ld = 0;  // row stride in elements (row paths)
  TensorSource Row(size_t r) const { return {x + r * ld, ld}; }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    return LoadElems(d, x + i);
  }
  // Asks for the cache line `bytes` past element i.
  template <CacheLevel kLevel = CacheLevel::kL1>
  HWY_INLINE void Prefetch(size_t i, size_t bytes) const {
    PrefetchLine<kLevel>(reinterpret_cast<const char*>(x + i) + bytes);
  }
};
using F32Source = TensorSource<float>;

#undef NK_LINE_PAIRS  // per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define NK_LINE_PAIRS 1
// fp32 at 4-60 bytes past a cache line (malloc's and NumPy's 16 bytes), read with
// aligned loads: the vector of element i is taken from the two lines around it by one
// two-table permute, where a plain 64-byte load at such an offset straddles them (and
// the statistics load each vector twice). The same values, so the same bits wherever
// the tensor lies. AVX-512 only: Highway 1.0.3 has no two-table lookup.
// (LayerNorm of 4 MiB with x and y at +16 bytes, 1 thread, against the build before,
// 4 alternating processes, ratio to a copy in each: 768 columns 0.52-0.55 ->
// 0.61-0.64, 1024 0.50-0.53 -> 0.58-0.63, 4096 0.48-0.49 -> 0.55-0.56; aligned:
// 0.60-0.63, 0.66-0.67, 0.55-0.56.)
// Lane indices l + shift: _mm512_permutex2var_ps(lo, ShiftedLanes(shift), hi) is the
// 16 floats from lane `shift` of lo on, continued into hi.
HWY_INLINE __m512i ShiftedLanes(size_t shift) {
  return _mm512_add_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int>(shift)));
}

class LinePairSource {
 public:
  // Whether x's elements [c0, c0 + n) are read faster so, and the lines their vectors'
  // pairs take lie inside the tensor [begin, end) (those of its first and last rows
  // may not).
  static bool Fits(const float* x, size_t c0, size_t n, const float* begin,
                   const float* end) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(x);
    if (a % 64 == 0 || a % sizeof(float) != 0 || n < 16) return false;
    const size_t shift = a % 64 / sizeof(float);
    return static_cast<size_t>(x + c0 - begin) >= shift &&
           static_cast<size_t>(end - (x + c0)) >= n + (16 - shift);
  }
  explicit LinePairSource(const float* x) : x_(x) {
    const size_t shift = reinterpret_cast<uintptr_t>(x) % 64 / sizeof(float);
    line_ = reinterpret_cast<uintptr_t>(x) - shift * sizeof(float);
    idx_ = ShiftedLanes(shift);
  }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    if constexpr (hn::MaxLanes(D()) == 16) {
      const float* lo = reinterpret_cast<const float*>(line_ + i * sizeof(float));
      return hn::Vec<D>{_mm512_permutex2var_ps(_mm512_loadu_ps(lo), idx_,
                                               _mm512_loadu_ps(lo + 16))};
    } else {
      return hn::LoadU(d, x_ + i);
    }
  }
  template <CacheLevel kLevel = CacheLevel::kL1>
  HWY_INLINE void Prefetch(size_t i, size_t bytes) const {
    PrefetchLine<kLevel>(reinterpret_cast<const char*>(x_ + i) + bytes);
  }

 private:
  const float* x_;
  uintptr_t line_;  // x's line
  __m512i idx_;
};
#endif

// The fused residual step without a stored sum: s = x + residual, recomputed and
// rounded to T, as a stored sum holds it.
template <class T>
struct AddSourceT {
  const T* x;
  const T* residual;
  size_t ldx, ldr;  // row strides in elements
  AddSourceT Row(size_t r) const { return {x + r * ldx, residual + r * ldr, ldx, ldr}; }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    return RoundTo<T>(d, hn::Add(LoadElems(d, x + i), LoadElems(d, residual + i)));
  }
  template <CacheLevel kLevel = CacheLevel::kL1>
  HWY_INLINE void Prefetch(size_t i, size_t bytes) const {
    PrefetchLine<kLevel>(reinterpret_cast<const char*>(x + i) + bytes);
    PrefetchLine<kLevel>(reinterpret_cast<const char*>(residual + i) + bytes);
  }
};
using AddSource = AddSourceT<float>;

// The overflow slow path: the source times a power of two (exact).
template <class Src>
struct ScaledSource {
  Src src;
  float scale;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t i) const {
    return hn::Mul(src.Load(d, i), hn::Set(d, scale));
  }
  template <CacheLevel kLevel = CacheLevel::kL1>
  HWY_INLINE void Prefetch(size_t i, size_t bytes) const {
    src.template Prefetch<kLevel>(i, bytes);
  }
};

// Asks for the cache lines of src's elements [i, i + n), `ahead` bytes on: one request
// per 16 elements, a line of fp32, half a line of half tensors (one per line measured
// within noise: LayerNorm 1024x1024, 256x4096, 16384x1024, AVX3, 1 thread, bf16
// 0.99-1.03 of the time, fp16 0.98-1.00).
template <CacheLevel kLevel = CacheLevel::kL1, class Src>
HWY_INLINE void PrefetchAhead(const Src& src, size_t i, size_t n, size_t ahead) {
  for (size_t k = 0; k < n; k += 64 / sizeof(float)) {
    src.template Prefetch<kLevel>(i + k, ahead);
  }
}

// A lambda attribute: always inlined, for hot loops' steps the compiler might leave
// out of line (it did, in places: rownorm-inl.h, rownorm_backward-inl.h).
#ifndef NK_INLINE_LAMBDA
#define NK_INLINE_LAMBDA HWY_ATTR __attribute__((always_inline))
#endif

// Calls f(d, i) for each full vector of [begin, end) and f(d1, i) for each
// element of the tail, so no access leaves the caller's buffers (no masked or
// full-width loads past the end on targets where those may fault).
template <class D, class Func>
HWY_INLINE void ForEachVector(D d, size_t begin, size_t end, const Func& f) {
  const size_t N = hn::Lanes(d);
  size_t i = begin;
  for (; i + N <= end; i += N) f(d, i);
  const hn::CappedTag<float, 1> d1;
  for (; i < end; ++i) f(d1, i);
}

// As ForEachVector, with 16-byte vectors between the whole ones and the lanes: for
// the elements beside a streamed span, which take no whole-vector stores, up to a line
// less one at each end (the 12 before a line at malloc's / NumPy's 16 bytes: 3 calls
// in place of 12).
template <class D, class Func>
HWY_INLINE void ForEachVectorByQuads(D d, size_t begin, size_t end, const Func& f) {
  const size_t N = hn::Lanes(d);
  size_t i = begin;
  for (; i + N <= end; i += N) f(d, i);
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::CappedTag<float, 4> d4;
    for (; i + 4 <= end; i += 4) f(d4, i);
  }
  const hn::CappedTag<float, 1> d1;
  for (; i < end; ++i) f(d1, i);
}

// The elements of y before its first vector boundary (the vector of its elements; 0
// for y that is not even element-aligned: it is stored unaligned throughout).
template <class D, class T>
HWY_INLINE size_t HeadToAlign(D d, const T* y) {
  const size_t bytes = hn::Lanes(d) * sizeof(T);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(y);
  if (addr % sizeof(T) != 0) return 0;
  return (bytes - addr % bytes) % bytes / sizeof(T);
}

// Streamed outputs take non-temporal stores of whole cache lines only, each line
// filled by stores close together, and regular stores only to other lines: a line
// that a non-temporal store leaves partly filled is written to memory in pieces, and a
// regular store to it flushes it (AVX2 and SSE4, whose vectors are narrower than a
// line, 16 bytes off a line, 1 thread: channels-last BatchNorm of 32x64x56x56 streamed
// from y's first vector boundary on ran at 0.05x of a copy; LayerNorm of 65536x256 at
// 0.4x). So streaming starts at a line boundary.
constexpr size_t kLineBytes = 64;
template <class T>
constexpr size_t kLineElems = kLineBytes / sizeof(T);
constexpr size_t kLineFloats = kLineElems<float>;

// Whether an fp32 vector spans a cache line (AVX-512; SVE by its width at run time):
// each line of a row is then read whole at once, which the row paths' choices of row
// groups depend on.
HWY_INLINE bool FloatVectorSpansLine() {
  return hn::Lanes(hn::ScalableTag<float>()) >= kLineFloats;
}

// The elements of y before its first cache line boundary (0 for y that is not even
// element-aligned: it is not streamed).
template <class T>
HWY_INLINE size_t HeadToLine(const T* y) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(y);
  if (addr % sizeof(T) != 0) return 0;
  return (kLineBytes - addr % kLineBytes) % kLineBytes / sizeof(T);
}

template <class T>
HWY_INLINE bool IsLineAligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % kLineBytes == 0;
}

// Where a streamed span of y starts: its first vector boundary where that is y itself
// (the rows of a vector-aligned tensor are streamed whole, their shared lines included:
// LayerNorm of 65536x256 at SSE4 and +16 bytes, 1 thread, 0.62x of a copy against 0.52x
// from the line boundary on), else its first line boundary. StreamUnit: the elements
// the streamed part is whole multiples of, accordingly.
template <class D, class T>
HWY_INLINE size_t StreamLead(D d, const T* y) {
  return HeadToAlign(d, y) == 0 ? 0 : HeadToLine(y);
}
template <class D, class T>
HWY_INLINE size_t StreamUnit(D d, const T* y) {
  return HeadToAlign(d, y) == 0 ? hn::Lanes(d) : kLineElems<T>;
}

// y[i] = value(d, i) for i in [begin, end) with regular stores that write no element
// outside it (the lines around it are streamed): whole vectors, then 16-byte ones, then
// lane by lane (ForEachVectorByQuads). Masked stores were slower on this AMD CPU, AVX2's
// and AVX-512's alike (LayerNorm at +16 bytes, 1 thread, ratio to a copy: 65536x256 at
// AVX2 0.37 against 0.50-0.61 lane by lane; 16384x1024 at AVX3 0.82 against 1.02).
template <class D, class Value, class T>
HWY_INLINE void StoreWithin(D d, const Value& value, size_t begin, size_t end, T* y) {
  ForEachVectorByQuads(d, begin, end, [&](auto dv, size_t i) HWY_ATTR {
    StoreElems(value(dv, i), dv, y + i);
  });
}

// y[i] = value(d, i) for i in [begin, end) (multiples of 16 bytes of T) by streamed
// 16-byte stores, y + begin on a 16-byte boundary: the pieces of a line that other
// streamed stores fill. Half tensors where 8 floats fit a vector (kQuadsStreamable).
template <class T>
using QuadTag = hn::CappedTag<float, 16 / sizeof(T)>;  // one lane on the scalar target
template <class T>
constexpr bool kQuadsStreamable = std::is_same_v<T, float> ||
                                  hn::MaxLanes(QuadTag<T>()) * sizeof(T) == 16;
template <class Value, class T>
HWY_INLINE void StreamQuadsInline(const Value& value, size_t begin, size_t end, T* y) {
  const QuadTag<T> dq;
  const size_t n = hn::Lanes(dq);
  for (size_t i = begin; i + n <= end; i += n) StreamElems(value(dq, i), dq, y + i);
}
template <class Value, class T>
HWY_NOINLINE void StreamQuadsOutline(const Value& value, size_t begin, size_t end, T* y) {
  StreamQuadsInline(value, begin, end, y);
}
// Half tensors call it out of line: inlined beside AVX-512's line-aligned bf16 loop it
// slowed that loop by 2-3% (LayerNorm 16384x1024 at +0 bytes, where it never runs).
template <class Value, class T>
HWY_INLINE void StreamQuads(const Value& value, size_t begin, size_t end, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    StreamQuadsInline(value, begin, end, y);
  } else {
    StreamQuadsOutline(value, begin, end, y);
  }
}

// p[l - from] = lanes [from, to) of v, one by one: regular stores to lines shared with
// other writers, beside streamed ones.
template <class D, class T>
inline void StoreLanes(D d, hn::Vec<D> v, size_t from, size_t to, T* p) {
  HWY_ALIGN float lanes[hn::MaxLanes(D())];
  hn::Store(v, d, lanes);
  const hn::CappedTag<float, 1> d1;
  for (size_t l = from; l < to; ++l) {
    StoreElems(hn::Set(d1, lanes[l]), d1, p + l - from);
  }
}

// Streams the values of a contiguous span y[0, n) (n a multiple of N), put in order a
// vector at a time, where y lies off a vector boundary (malloc's and NumPy's 16 bytes):
// each aligned non-temporal store joins the last `shift` lanes of one value and the
// first N - shift of the next (every value rotated once, two rotations blended), so
// every line inside the span is written whole, by streamed stores in order, rows'
// shared lines included. The lanes before the span's first line boundary and after its
// last take regular stores (those lines may be shared with other writers). The
// rotation is of fp32 lanes, before narrowing, so half tensors are joined alike.
// Hot loops put through a copy in a local (and give it back): vector stores may alias
// any memory, so a stream reached by pointer is stored back at every put.
template <class D, class T>
class RealignedStream {
 public:
  using V = hn::Vec<D>;

  // Whether y can be streamed so: element-aligned.
  static bool Fits(const T* y) { return reinterpret_cast<uintptr_t>(y) % sizeof(T) == 0; }

  RealignedStream(D d, T* y, size_t n) {
    const size_t N = hn::Lanes(d);
    const uintptr_t end = reinterpret_cast<uintptr_t>(y + n);
    line_end_ = end - end % kLineBytes;
    shift_ = reinterpret_cast<uintptr_t>(y) % (N * sizeof(T)) / sizeof(T);
    for (size_t l = 0; l < N; ++l) idx_[l] = static_cast<int32_t>((l + N - shift_) % N);
    from_prev_ = hn::FirstN(d, shift_);
    prev_ = hn::Zero(d);
    Start(d, y);
  }

  // The value of the next N elements.
  HWY_INLINE void Put(D d, V v) {
    const V rotated = Rotate(d, v);
    const V joined = hn::IfThenElse(from_prev_, prev_, rotated);
    T* p = next_ - shift_;  // a vector boundary
    if (HWY_LIKELY(reinterpret_cast<uintptr_t>(p) - line_begin_ < streamed_)) {
      StreamElems(joined, d, p);
    } else {
      StoreOutside(d, joined, p, next_ == begin_ ? shift_ : 0);
    }
    prev_ = rotated;
    next_ += hn::Lanes(d);
  }

  // Puts value(0) .. value(n - 1), a row, checking once (not at every put) whether
  // they all land on streamed lines, as every row inside the span does.
  template <size_t n, class Value>
  HWY_INLINE void PutAll(D d, const Value& value) {
    const size_t N = hn::Lanes(d);
    T* p = next_ - shift_;
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) - line_begin_;
    if (HWY_UNLIKELY(first >= streamed_ ||
                     first + (n - 1) * N * sizeof(T) >= streamed_)) {
      HWY_UNROLL(32)
      for (size_t k = 0; k < n; ++k) Put(d, value(k));
      return;
    }
#if HWY_TARGET != HWY_SCALAR
    if (shift_ == N / 2) {
      // Half a vector off (fp32 at AVX2 at NumPy's and malloc's 16 bytes): each store is
      // the upper half of one value and the lower half of the next, one
      // ConcatLowerUpper of the two as they are (AVX2 65536x256, 1 thread: 2-4% faster
      // than a rotation and a blend). Swapped halves are the rotation by N / 2.
      V prev = hn::ConcatLowerUpper(d, prev_, prev_);  // unrotated
      HWY_UNROLL(32)
      for (size_t k = 0; k < n; ++k) {
        const V v = value(k);
        StreamElems(hn::ConcatLowerUpper(d, v, prev), d, p + k * N);
        prev = v;
      }
      prev_ = hn::ConcatLowerUpper(d, prev, prev);
      next_ += n * N;
      return;
    }
#endif
    V prev = prev_;
    HWY_UNROLL(32)
    for (size_t k = 0; k < n; ++k) {
      const V rotated = Rotate(d, value(k));
      StreamElems(hn::IfThenElse(from_prev_, prev, rotated), d, p + k * N);
      prev = rotated;
    }
    prev_ = prev;
    next_ += n * N;
  }

  // Leaves the next n elements unwritten (values that are put later, by other stores).
  void Skip(D d, size_t n) {
    Finish(d);
    Start(d, next_ + n);
  }

  // Stores the last value's lanes that no aligned store took; call after the last Put.
  void Finish(D d) {
    if (next_ != begin_) StoreLanes(d, prev_, 0, shift_, next_ - shift_);
    begin_ = next_;
  }

 private:
  // v's lanes rotated up by shift_ (lane l takes lane l - shift_, mod N): one permute at
  // AVX-512 and AVX2, by its intrinsic (Highway 1.0.3's SetTableIndices asserts in
  // sanitized builds, and on x86 the library links no libhwy for the assertion's
  // Abort); through memory elsewhere, where the stream is not used (it is slower).
  HWY_INLINE V Rotate(D d, V v) const {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if constexpr (hn::MaxLanes(D()) == 16) {
      return V{_mm512_permutexvar_ps(_mm512_load_si512(idx_), v.raw)};
    }
#elif HWY_TARGET == HWY_AVX2
    if constexpr (hn::MaxLanes(D()) == 8) {
      return V{_mm256_permutevar8x32_ps(
          v.raw, _mm256_load_si256(reinterpret_cast<const __m256i*>(idx_)))};
    }
#endif
    const size_t N = hn::Lanes(d);
    HWY_ALIGN float lanes[2 * hn::MaxLanes(D())];
    hn::Store(v, d, lanes);
    hn::Store(v, d, lanes + N);
    return hn::LoadU(d, lanes + N - shift_);
  }

  void Start(D d, T* p) {
    begin_ = next_ = p;
    line_begin_ = reinterpret_cast<uintptr_t>(p + HeadToLine(p));
    // Vector boundaries q with [q, q + N) inside [line_begin_, line_end_).
    const uintptr_t bytes = hn::Lanes(d) * sizeof(T);
    streamed_ =
        line_end_ >= line_begin_ + bytes ? line_end_ - line_begin_ - bytes + 1 : 0;
  }

  // A joined vector bound for p outside the streamed lines: its lanes from `from` on
  // (the first put's lanes before the span are not its own).
  static HWY_NOINLINE void StoreOutside(D d, V joined, T* p, size_t from) {
    if (from == 0) {
      StoreElems(joined, d, p);
    } else {
      StoreLanes(d, joined, from, hn::Lanes(d), p + from);
    }
  }

  T* begin_;              // where the current run of puts began
  T* next_;               // where the next value goes
  uintptr_t line_begin_;  // the run's first line boundary
  uintptr_t line_end_;    // the span's last line boundary
  uintptr_t streamed_;    // bytes of boundaries from line_begin_ that are streamed
  size_t shift_;          // y's lanes past a vector boundary
  HWY_ALIGN int32_t idx_[hn::MaxLanes(D())];  // Rotate's lanes
  hn::Mask<D> from_prev_;
  V prev_;  // the last value, rotated
};

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_SOURCES_INL_H_
