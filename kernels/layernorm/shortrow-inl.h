// SPDX-License-Identifier: Apache-2.0
// shortrow-inl.h: rows of kVecs full vectors (cols == kVecs * Lanes), up to 16 held in
// registers, kRows rows at a time so that their reductions overlap, and up to 32 (x86
// below AVX-512) read again from L1, three rows in flight (x86's half rows too). Small
// rows spend their time in horizontal reductions, sqrt/div and loop overhead, not in
// memory.
//
// Statistics take two passes: a pairwise sum, then the squared deviations from the
// mean; held rows keep the deviations for normalization. cols is a power of two here,
// so a constant row's sum and its scaling by 1 / cols are exact: its mean is exactly
// its value, with no shift by the first element. A row whose statistics are not finite
// is finished by the general path.
#if defined(NK_KERNELS_SHORTROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NK_KERNELS_SHORTROW_INL_H_
#undef NK_KERNELS_SHORTROW_INL_H_
#else
#define NK_KERNELS_SHORTROW_INL_H_
#endif

#include <cmath>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/common/moments.h"
#include "kernels/common/sources-inl.h"
#include "kernels/layernorm/rownorm-inl.h"
#include "kernels/layernorm/rownorm.h"

HWY_BEFORE_NAMESPACE();
namespace nk {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows of up to kMaxShortVectors whole vectors take a short path (x86 and NEON vectors
// have a size, so arrays of them live in registers): up to kMaxHeldVectors held in
// registers (ShortRows), longer ones read again from L1 for each step (RereadRows).
// x86 below AVX-512 has 16 vector registers: rows of more than 8 vectors, held or
// through the general row path before, are faster read again (LayerNorm, 1 thread,
// Zen 4, calls alternating in one process, p25: AVX2 8192x128 195 -> 170 us, 4096x256
// 208 -> 153 us, 65536x256 3.97 -> 3.06 ms; SSE4 16384x64 401 -> 310 us, 8192x128 360
// -> 301 us). Longer rows gained nothing: SSE4 4096x256 0-3%, AVX3 2048x512 from 4%
// slower to 1.7x slower at +16 bytes (where the general path reads line pairs).
constexpr bool kSixteenRegisters =
    HWY_ARCH_X86 && HWY_MAX_BYTES >= 16 && HWY_MAX_BYTES <= 32;
constexpr size_t kMaxHeldVectors = HWY_HAVE_SCALABLE ? 0 : kSixteenRegisters ? 8 : 16;
constexpr size_t kMaxShortVectors = HWY_HAVE_SCALABLE ? 0 : kSixteenRegisters ? 32 : 16;

// RMSNorm's beta: short rows apply one (an add of -0.0, which keeps every value, -0
// included), which keeps the number of compiled variants small. (An absent gamma or
// LayerNorm beta has its stand-in from the op layer: layernorm.cc.)
#define NK_NZ4 -0.0f, -0.0f, -0.0f, -0.0f
#define NK_NZ16 NK_NZ4, NK_NZ4, NK_NZ4, NK_NZ4
#define NK_NZ64 NK_NZ16, NK_NZ16, NK_NZ16, NK_NZ16
HWY_ALIGN constexpr float kNegativeZeros[256] = {NK_NZ64, NK_NZ64, NK_NZ64, NK_NZ64};
#undef NK_NZ64
#undef NK_NZ16
#undef NK_NZ4
static_assert(kMaxHeldVectors * hn::MaxLanes(hn::ScalableTag<float>()) <= 256,
              "kNegativeZeros must cover the longest held row");

// The sum of t[0] .. t[n - 1] (n a power of two) as a pairwise tree; overwrites t.
template <size_t n, class V>
HWY_INLINE V PairwiseSum(V (&t)[n]) {
  static_assert((n & (n - 1)) == 0, "a power of two");
  HWY_UNROLL(16)
  for (size_t w = n / 2; w != 0; w /= 2) {
    HWY_UNROLL(16)
    for (size_t k = 0; k < w; ++k) t[k] = hn::Add(t[2 * k], t[2 * k + 1]);
  }
  return t[0];
}

// How far ahead a streamed short row asks for x (the row kVecs vectors on): 2 KiB for
// rows of under 1 KiB whose vectors are narrower than a line, else 8 KiB. Zen 4, 64 MiB
// of x, 1 thread, both builds alternating in one process, p25 time 2 KiB / 8 KiB, +0 /
// +16 bytes: fp32 rows of 128 columns 0.70 / 0.71 at AVX2, 0.85 / 0.80 at SSE4; of 64
// columns 0.93 / 0.94 at AVX2, 0.94 / 0.90 at SSE4; bf16 at AVX3, rows of 128 and 256
// columns, 0.86-0.91; fp16 at AVX2 0.81-0.94; 2 threads, AVX2 fp32 0.80-0.89. fp32 at
// AVX-512 (a vector a line) lost on rows of 64 columns at +0 (1.13-1.15) and held on 128
// (0.95-1.01); rows of 1 KiB held or lost (fp32 65536x256 at AVX2 1.04 / 1.14).
template <class T, size_t kVecs>
constexpr size_t StreamedRowAhead() {
  constexpr size_t vector_bytes = hn::MaxLanes(hn::ScalableTag<float>()) * sizeof(T);
  return vector_bytes < kLineBytes && kVecs * vector_bytes < 1024 ? kCacheAheadBytes
                                                                  : kReadAheadBytes;
}

// Asks for the lines of a streamed short row's x StreamedRowAhead bytes on: into L1 at
// 2 KiB, into L2 at 8 KiB (8 KiB of lines in flight into L1 are a quarter of it, beside
// the rows in use). Zen 4, 64 MiB of x, fp32, both builds alternating in one process, p25
// time L2 / L1 at 8 KiB, +0 / +16 bytes: AVX3 65536x256 0.82-0.97 / 0.80-0.95, 131072x128
// 0.79-0.88 / 0.94-0.99, 262144x64 0.77-0.80 / 0.88-0.98, 2 threads 0.84-1.01; AVX2
// 65536x256 0.89-0.98 / 0.87-0.92, 2 threads 0.87-0.93. Where L1 at 2 KiB is the rule
// (AVX2 and SSE4 rows of 64 and 128 columns), L2 instead lost (4 KiB 0.95-1.29, 8-16 KiB
// 1.07-1.36) and so did L2 8-16 KiB on top (0.98-1.45).
template <class T, size_t kVecs, class Src>
HWY_INLINE void AskStreamedRow(const Src& src, size_t n) {
  constexpr size_t ahead = StreamedRowAhead<T, kVecs>();
  constexpr CacheLevel level =
      ahead >= kReadAheadBytes ? CacheLevel::kL2 : CacheLevel::kL1;
  PrefetchAhead<level>(src, 0, n, ahead);
}

// y of rows [r, r + kRows) from their deviations v (RMSNorm: values) and rstd;
// rows whose bit is set in `skip` are not written.
template <size_t kVecs, size_t kRows, class D, class T, class V = hn::Vec<D>>
HWY_INLINE void StoreNormalized(D d, const V (&v)[kRows][kVecs], const V (&rstd)[kRows],
                                const float* HWY_RESTRICT gamma,
                                const float* HWY_RESTRICT beta, T* y, size_t ldy,
                                bool stream, uint32_t skip) {
  const size_t N = hn::Lanes(d);
  if constexpr (StoresInPairs<D, T>() && kVecs % 2 == 0) {  // a line of each row a step
    HWY_UNROLL(8)
    for (size_t k = 0; k < kVecs; k += 2) {
      const V g0 = hn::LoadU(d, gamma + k * N), g1 = hn::LoadU(d, gamma + k * N + N);
      const V b0 = hn::LoadU(d, beta + k * N), b1 = hn::LoadU(d, beta + k * N + N);
      HWY_UNROLL(16)
      for (size_t i = 0; i < kRows; ++i) {
        if (skip & (1u << i)) continue;
        const V lo = hn::MulAdd(hn::Mul(v[i][k], rstd[i]), g0, b0);
        const V hi = hn::MulAdd(hn::Mul(v[i][k + 1], rstd[i]), g1, b1);
        T* p = y + i * ldy + k * N;
        if (stream) {
          StreamPair(lo, hi, d, p);
        } else {
          StorePair(lo, hi, d, p);
        }
      }
    }
    return;
  }
  HWY_UNROLL(16)
  for (size_t k = 0; k < kVecs; ++k) {
    const V g = hn::LoadU(d, gamma + k * N);
    const V b = hn::LoadU(d, beta + k * N);
    HWY_UNROLL(16)
    for (size_t i = 0; i < kRows; ++i) {
      if (skip & (1u << i)) continue;
      const V out = hn::MulAdd(hn::Mul(v[i][k], rstd[i]), g, b);
      T* p = y + i * ldy + k * N;
      if (stream) {
        StreamElems(out, d, p);
      } else {
        StoreElems(out, d, p);
      }
    }
  }
}

// The same through a RealignedStream (the rows of y contiguous and off a line
// boundary), row by row in memory order; rows in `skip` are left to other stores.
template <size_t kVecs, size_t kRows, class D, class T, class V = hn::Vec<D>>
HWY_INLINE void StreamNormalized(D d, const V (&v)[kRows][kVecs], const V (&rstd)[kRows],
                                 const float* HWY_RESTRICT gamma,
                                 const float* HWY_RESTRICT beta,
                                 RealignedStream<D, T>& stream, uint32_t skip) {
  const size_t N = hn::Lanes(d);
  RealignedStream<D, T> out = stream;
  HWY_UNROLL(16)
  for (size_t i = 0; i < kRows; ++i) {
    if (skip & (1u << i)) {
      stream = out;
      stream.Skip(d, kVecs * N);
      out = stream;
      continue;
    }
    out.template PutAll<kVecs>(d, [&](size_t k) NK_INLINE_LAMBDA {
      return hn::MulAdd(hn::Mul(v[i][k], rstd[i]), hn::LoadU(d, gamma + k * N),
                        hn::LoadU(d, beta + k * N));
    });
  }
  stream = out;
}

// Rows [r, r + kRows). Returns the rows (a bit mask) whose statistics came out
// non-finite, with their fast-path moments in bad_moments: their sum is stored,
// everything else of theirs is left to the caller. With `stream`, y (aligned to the
// vector size) is written with non-temporal stores; with `joined`, through it.
template <size_t kVecs, size_t kRows, bool kCenter, class T, class Src,
          class D = hn::ScalableTag<float>>
HWY_INLINE uint32_t ShortRows(const RowNormJobT<T>& job, const Src& src0, size_t r,
                              bool stream, RealignedStream<D, T>* joined,
                              Moments* bad_moments) {
  const D d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t cols = job.cols;
  T* HWY_RESTRICT sum = job.sum;
  T* HWY_RESTRICT y = job.y + r * job.ldy;
  V v[kRows][kVecs];
  HWY_UNROLL(16)
  for (size_t i = 0; i < kRows; ++i) {
    const Src src = src0.Row(r + i);
    if (job.stream) AskStreamedRow<T, kVecs>(src, kVecs * N);
    HWY_UNROLL(16)
    for (size_t k = 0; k < kVecs; ++k) v[i][k] = src.Load(d, k * N);
  }
  if (sum != nullptr) {
    HWY_UNROLL(16)
    for (size_t i = 0; i < kRows; ++i) {
      HWY_UNROLL(16)
      for (size_t k = 0; k < kVecs; ++k) {
        StoreElems(v[i][k], d, sum + (r + i) * job.lds + k * N);
      }
    }
  }
  const V inv_n = hn::Set(d, 1.0f / static_cast<float>(cols));
  const V eps = hn::Set(d, job.eps);
  V mean[kRows], m2[kRows], rstd[kRows];
#if HWY_TARGET != HWY_SCALAR
  // Rows of up to four vectors go four at a time, the leftovers one at a time (then
  // each of SumOfLanes4's four inputs is the one row): the same operations per row, so
  // a row gets the same bits alone or in a group, whatever the threads' partition.
  if constexpr (kVecs <= 4) {
    static_assert(kRows == 4 || kRows == 1, "ShortRowsLoop's groups");
    const auto sum4 = [&](V (&t)[kRows][kVecs]) HWY_ATTR {
      V p[kRows];
      for (size_t i = 0; i < kRows; ++i) p[i] = PairwiseSum(t[i]);
      return SumOfLanes4(d, p[0], p[kRows > 1 ? 1 : 0], p[kRows > 2 ? 2 : 0],
                         p[kRows > 3 ? 3 : 0]);
    };
    const hn::CappedTag<float, 4> d4;
    HWY_ALIGN float lanes[4];
    V t[kRows][kVecs];
    if (kCenter) {
      for (size_t i = 0; i < kRows; ++i) {
        for (size_t k = 0; k < kVecs; ++k) t[i][k] = v[i][k];
      }
      hn::Store(hn::Mul(sum4(t), hn::Set(d4, 1.0f / static_cast<float>(cols))), d4,
                lanes);
      for (size_t i = 0; i < kRows; ++i) {
        mean[i] = hn::Set(d, lanes[i]);
        for (size_t k = 0; k < kVecs; ++k) v[i][k] = hn::Sub(v[i][k], mean[i]);
      }
    } else {
      for (size_t i = 0; i < kRows; ++i) mean[i] = hn::Zero(d);
    }
    for (size_t i = 0; i < kRows; ++i) {
      for (size_t k = 0; k < kVecs; ++k) t[i][k] = hn::Mul(v[i][k], v[i][k]);
    }
    const auto m2_4 = sum4(t);
    const auto rstd_4 = hn::Div(
        hn::Set(d4, 1.0f),
        hn::Sqrt(hn::MulAdd(m2_4, hn::Set(d4, 1.0f / static_cast<float>(cols)),
                            hn::Set(d4, job.eps))));
    HWY_ALIGN float rstd_lanes[4];
    hn::Store(m2_4, d4, lanes);
    hn::Store(rstd_4, d4, rstd_lanes);
    for (size_t i = 0; i < kRows; ++i) {
      m2[i] = hn::Set(d, lanes[i]);
      rstd[i] = hn::Set(d, rstd_lanes[i]);
    }
  } else
#endif
  {
    HWY_UNROLL(16)
    for (size_t i = 0; i < kRows; ++i) {
      if (kCenter) {
        V t[kVecs];
        HWY_UNROLL(16)
        for (size_t k = 0; k < kVecs; ++k) t[k] = v[i][k];
        mean[i] = hn::Mul(hn::SumOfLanes(d, PairwiseSum(t)), inv_n);
        HWY_UNROLL(16)
        for (size_t k = 0; k < kVecs; ++k) v[i][k] = hn::Sub(v[i][k], mean[i]);
      } else {
        mean[i] = hn::Zero(d);
      }
      constexpr size_t kChains = kVecs < 4 ? kVecs : 4;  // squares: short FMA chains
      V q[kChains];
      HWY_UNROLL(4)
      for (size_t k = 0; k < kChains; ++k) q[k] = hn::Mul(v[i][k], v[i][k]);
      HWY_UNROLL(16)
      for (size_t k = kChains; k < kVecs; ++k) {
        q[k % kChains] = hn::MulAdd(v[i][k], v[i][k], q[k % kChains]);
      }
      m2[i] = hn::SumOfLanes(d, PairwiseSum(q));
      rstd[i] = hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::MulAdd(m2[i], inv_n, eps)));
    }
  }
  uint32_t bad = 0;
  for (size_t i = 0; i < kRows; ++i) {
    const float mean_i = hn::GetLane(mean[i]);
    const float m2_i = hn::GetLane(m2[i]);
    if (HWY_UNLIKELY(!std::isfinite(mean_i) || !std::isfinite(m2_i))) {
      bad |= 1u << i;
      bad_moments[i] = Moments{static_cast<double>(cols), mean_i, m2_i};
      continue;
    }
    if (job.mean != nullptr) job.mean[r + i] = mean_i;
    if (job.rstd != nullptr) job.rstd[r + i] = hn::GetLane(rstd[i]);
  }
  const float* gamma = job.gamma;
  const float* beta = job.beta != nullptr ? job.beta : kNegativeZeros;
  if (joined != nullptr) {
    StreamNormalized<kVecs, kRows>(d, v, rstd, gamma, beta, *joined, bad);
  } else if (HWY_LIKELY(bad == 0)) {
    StoreNormalized<kVecs, kRows>(d, v, rstd, gamma, beta, y, job.ldy, stream, 0);
  } else {
    StoreNormalized<kVecs, kRows>(d, v, rstd, gamma, beta, y, job.ldy, stream, bad);
  }
  return bad;
}

// The sum of load(base) .. load(base + kVecs - 1) (kVecs a power of two) in
// PairwiseSum's tree (halves added, recursively), loading each vector as it goes.
template <size_t kVecs, class Load>
HWY_INLINE auto TreeSum(const Load& load, size_t base) {
  if constexpr (kVecs == 1) {
    return load(base);
  } else {
    const auto lo = TreeSum<kVecs / 2>(load, base);
    return hn::Add(lo, TreeSum<kVecs / 2>(load, base + kVecs / 2));
  }
}

// Finishes the rows of a ShortRows group whose fast statistics were not finite.
template <bool kCenter, class T>
HWY_NOINLINE void FinishShortRows(const RowNormJobT<T>& job, size_t r, uint32_t bad,
                                  const Moments* moments) {
  for (size_t i = 0; bad != 0; ++i, bad >>= 1) {
    if ((bad & 1) == 0) continue;
    const size_t row = r + i;
    const SetStats st = RowStatistics(
        job.cols, job.eps, moments[i],
        [&](size_t c0, size_t n, float scale, bool) {
          return ChunkMomentsT<kCenter>(job, row, c0, n, scale, false);
        },
        [&](size_t c0, size_t n) { return RowMaxAbs(job, row, c0, n); });
    RowApply(job, row, 0, job.cols, st);
    if (job.mean != nullptr) job.mean[row] = st.mean_out;
    if (job.rstd != nullptr) job.rstd[row] = st.rstd_out;
  }
}

// Rows of kVecs vectors, more than the registers hold (kMaxHeldVectors), in three
// steps that each read the row again from L1: its mean (a pairwise sum, as ShortRows
// takes it: exact for a constant row), its squared deviations in chains, its y.
// The steps after the first read the stored sum where there is one (it may be x or
// residual). y is Affine's, as the general path's (RMSNorm: no beta).
template <size_t kVecs, bool kCenter, class T, class Src,
          class D = hn::ScalableTag<float>>
class RereadRows {
 public:
  using V = hn::Vec<D>;
  // Squares in eight chains; rows that registers could hold in four, as ShortRows sums
  // them, so that a row has the same bits on either path.
  static constexpr size_t kChains = kVecs <= kMaxHeldVectors ? 4 : 8;
  static_assert(kVecs >= kChains, "a vector per chain");

  RereadRows(const RowNormJobT<T>& job, const Src& src0) : job_(job), src0_(src0) {}

  // Row r's mean (0 for RMSNorm), after its sum store.
  HWY_INLINE V Mean(size_t r) const {
    const D d;
    const size_t N = hn::Lanes(d);
    const Src src = src0_.Row(r);
    if (job_.stream) AskStreamedRow<T, kVecs>(src, kVecs * N);
    T* HWY_RESTRICT sum = job_.sum != nullptr ? job_.sum + r * job_.lds : nullptr;
    const auto first = [&](size_t k) NK_INLINE_LAMBDA {
      const V v = src.Load(d, k * N);
      if (sum != nullptr) StoreElems(v, d, sum + k * N);
      return v;
    };
    if constexpr (kCenter) {
      const V total = hn::SumOfLanes(d, TreeSum<kVecs>(first, 0));
      return hn::Mul(total, hn::Set(d, 1.0f / static_cast<float>(kVecs * N)));
    } else {
      // The sum store alone (StoreSum's lane-by-lane tail, never taken for whole
      // vectors, drew GCC's -Waggressive-loop-optimizations here).
      if (sum != nullptr) {
        for (size_t k = 0; k < kVecs; ++k) first(k);
      }
      return hn::Zero(d);
    }
  }

  // Row r's rstd from its mean, both stored to mean / rstd; where they are not finite,
  // the row is finished by the slow path and `done` set.
  HWY_INLINE V Rstd(size_t r, V mean, bool& done) const {
    const D d;
    const size_t N = hn::Lanes(d);
    const V inv_n = hn::Set(d, 1.0f / static_cast<float>(kVecs * N));
    const V m2 = WithRow(r, [&](const auto& src) NK_INLINE_LAMBDA {
      V q[kChains];
      HWY_UNROLL(8)
      for (size_t k = 0; k < kChains; ++k) {
        const V e = kCenter ? hn::Sub(src.Load(d, k * N), mean) : src.Load(d, k * N);
        q[k] = hn::Mul(e, e);
      }
      HWY_UNROLL(32)
      for (size_t k = kChains; k < kVecs; ++k) {
        const V e = kCenter ? hn::Sub(src.Load(d, k * N), mean) : src.Load(d, k * N);
        q[k % kChains] = hn::MulAdd(e, e, q[k % kChains]);
      }
      return hn::SumOfLanes(d, PairwiseSum(q));
    });
    const V rstd =
        hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::MulAdd(m2, inv_n, hn::Set(d, job_.eps))));
    const float mean_lane = hn::GetLane(mean), m2_lane = hn::GetLane(m2);
    done = !std::isfinite(mean_lane) || !std::isfinite(m2_lane);
    if (HWY_UNLIKELY(done)) {
      const Moments m{static_cast<double>(kVecs * N), mean_lane, m2_lane};
      FinishShortRows<kCenter>(job_, r, 1, &m);
      return rstd;
    }
    if (job_.mean != nullptr) job_.mean[r] = mean_lane;
    if (job_.rstd != nullptr) job_.rstd[r] = hn::GetLane(rstd);
    return rstd;
  }

  // How y is written: regular stores, non-temporal ones (rows on line boundaries), or
  // through a RealignedStream (rows contiguous, off a line boundary).
  enum Store { kRegular, kStream, kJoin };

  // y of row r from its mean and rstd.
  template <Store kStore>
  HWY_INLINE void Normalize(size_t r, V mean, V rstd, RealignedStream<D, T>& out) const {
    const D d;
    const size_t N = hn::Lanes(d);
    const float* HWY_RESTRICT gamma = job_.gamma;
    const float* HWY_RESTRICT beta = job_.beta;
    T* HWY_RESTRICT y = job_.y + r * job_.ldy;
    WithRow(r, [&](const auto& src) NK_INLINE_LAMBDA {
      const auto value = [&](size_t k) NK_INLINE_LAMBDA {
        const V b = kCenter ? hn::LoadU(d, beta + k * N) : hn::Zero(d);
        return Affine<kCenter>(src.Load(d, k * N), mean, rstd,
                               hn::LoadU(d, gamma + k * N), b);
      };
      if constexpr (kStore == kJoin) {
        (void)y;
        out.template PutAll<kVecs>(d, value);
      } else if constexpr (StoresInPairs<D, T>() && kVecs % 2 == 0) {
        // A line of y a step (bf16 at AVX3, 1 thread: 4096x256 read again 112 -> 97
        // us; streamed 65536x256 at a line 0.90 of the time).
        HWY_UNROLL(16)
        for (size_t k = 0; k < kVecs; k += 2) {
          if constexpr (kStore == kStream) {
            StreamPair(value(k), value(k + 1), d, y + k * N);
          } else {
            StorePair(value(k), value(k + 1), d, y + k * N);
          }
        }
      } else {
        HWY_UNROLL(32)
        for (size_t k = 0; k < kVecs; ++k) {
          const V v = value(k);
          if constexpr (kStore == kStream) {
            StreamElems(v, d, y + k * N);
          } else {
            StoreElems(v, d, y + k * N);
          }
        }
      }
    });
  }

  // Rows [r0, r1), three in flight: row j's mean, row j - 1's statistics and row j -
  // 2's y, each from what the step before left, so that none waits on the latency of
  // the one before it. (A row's steps one after another, its sums, square root and
  // divide one chain: AVX2 256x256, 1 thread, 10.6 against 9.2 us.)
  void Run(size_t r0, size_t r1, bool stream, bool join,
           RealignedStream<D, T>& out) const {
    if (join) return Run<kJoin>(r0, r1, out);
    return stream ? Run<kStream>(r0, r1, out) : Run<kRegular>(r0, r1, out);
  }

 private:
  template <Store kStore>
  HWY_NOINLINE void Run(size_t r0, size_t r1, RealignedStream<D, T>& joined) const {
    const D d;
    const V zero = hn::Zero(d);
    V mean1 = zero, mean2 = zero, rstd2 = zero;
    bool done2 = true;
    RealignedStream<D, T> out = joined;  // a local copy (RealignedStream says why)
    for (size_t j = r0; j < r1 + 2; ++j) {
      const V mean0 = j < r1 ? Mean(j) : zero;
      bool done1 = true;
      const V rstd1 = j >= r0 + 1 && j - 1 < r1 ? Rstd(j - 1, mean1, done1) : zero;
      if (!done2) {
        Normalize<kStore>(j - 2, mean2, rstd2, out);
      } else if (kStore == kJoin && j >= r0 + 2) {
        out.Skip(d, kVecs * hn::Lanes(d));  // y written by FinishShortRows
      }
      mean2 = mean1, rstd2 = rstd1, done2 = done1;
      mean1 = mean0;
    }
    joined = out;
  }

  // fn(src) with the source row r is read from once its first step is done: the
  // stored sum where there is one, as WithRowSource chooses it (without compiling the
  // sources a Src of x alone cannot need).
  template <class Fn>
  HWY_INLINE auto WithRow(size_t r, const Fn& fn) const {
    if constexpr (!std::is_same_v<Src, TensorSource<T>>) {
      if (job_.sum != nullptr) return fn(TensorSource<T>{job_.sum, job_.lds}.Row(r));
    }
    return fn(src0_.Row(r));
  }

  const RowNormJobT<T>& job_;
  const Src& src0_;
};

// Rows [r0, r1) of kVecs vectors each; src reads x (+ residual) of row 0.
template <size_t kVecs, bool kCenter, class T, class Src>
void ShortRowsLoop(const RowNormJobT<T>& job, const Src& src0, size_t r0, size_t r1) {
  using D = hn::ScalableTag<float>;
  const D d;
  // Streamed where every row of y starts a cache line, so that the stores fill whole
  // lines (sources-inl.h). Rows of y that follow each other off a line boundary are
  // streamed as one span (RealignedStream) where a vector is a whole line (AVX-512,
  // fp32) and for rows read again whose vectors are half a line (AVX2 fp32, AVX-512
  // half tensors). LayerNorm, y at +16 bytes, 1 thread,
  // alternating processes: 65536x256 3.0 ms against 4.0 with regular stores,
  // 262144x64 3.0 against 4.2. With two or four non-temporal stores per line the joined
  // span was slower than regular stores for rows held in registers (262144x64: AVX2 4.9
  // against 4.1 ms, SSE4 9.4 against 6.4; AVX2 with one permute per store, 6.0
  // against 4.1), but faster for AVX2's rows read again (65536x256: 3.69 -> 2.88 ms, 2
  // threads 1.92 -> 1.54) and for AVX-512's bf16 / fp16 (65536x256, Zen 5: bf16
  // 1.87-2.20 -> 1.30-1.72 ms, fp16 1.74-2.04 -> 1.23-1.26).
  const bool stream = job.stream &&
                      reinterpret_cast<uintptr_t>(job.y) % kLineBytes == 0 &&
                      job.ldy % kLineElems<T> == 0 && job.cols % kLineElems<T> == 0;
  constexpr bool kVectorIsLine = hn::MaxLanes(D()) * sizeof(T) == kLineBytes;
  constexpr bool kVectorIsHalfLine = hn::MaxLanes(D()) * sizeof(T) * 2 == kLineBytes;
  // Half a line: AVX2's fp32 rows read again (over 8 vectors), AVX-512's half rows of 16.
  constexpr bool kJoinable = kVectorIsLine || (kVectorIsHalfLine && kVecs > 8);
  const bool join = kJoinable && job.stream && !stream && job.ldy == job.cols &&
                    RealignedStream<D, T>::Fits(job.y);
  RealignedStream<D, T> out(d, job.y + r0 * job.ldy, join ? (r1 - r0) * job.cols : 0);
  RealignedStream<D, T>* joined = join ? &out : nullptr;
  // AVX-512's streamed rows of 16 vectors are faster read again, three in flight, than
  // held: joined into one span (65536x256 at +16 bytes, Zen 4: 1 thread 3.96 -> 2.92
  // ms, 2 threads 2.45 -> 1.98) and at a line (65536x256, Zen 5, 1 thread, p25 of
  // alternating processes: 2.31-2.34 -> 2.05-2.08 ms, 131072x256 5.33 -> 4.50; bf16
  // and fp16 at a line 1.35-1.42 -> 0.83-1.37 ms, as fast as memory gives). Held fp32
  // rows are faster in the cache (4096x256 at +16 bytes: 172 against 195 us).
  // RereadRows sums their squares as ShortRows does: same bits.
  constexpr bool kRereadStreamed = kJoinable && kVecs == 16;
  // Half rows of 8 or more vectors are faster read again on x86 from the cache too,
  // where a load widens in one instruction (bf16; fp16 with F16C): held, a row's
  // chain of sums, square root and divide waits one row at a time. LayerNorm, 1
  // thread, calls alternating in one process, time read again / held: AVX3 4096x256
  // bf16 0.58-0.60, fp16 0.55-0.56; 8192x128 bf16 0.79-0.80, fp16 0.71-0.72; streamed
  // 131072x128 bf16 0.80-0.86, fp16 0.72-0.89 (1 and 2 threads, +0 and +16 bytes). AVX2
  // 16384x64 bf16 0.75, fp16 0.71-0.76. SSE4 bf16 32768x32 0.88, but fp16 (widened in
  // integer steps) 1.54. fp32 rows lost (AVX3 8192x128 and 16384x64 1.21;
  // AVX2 1.01-1.09). Rows of 4 vectors stay held: their statistics take SumOfLanes4, the
  // fp32 kernel's bits.
  constexpr bool kRereadHalves =
      HWY_ARCH_X86 && HWY_MAX_BYTES >= 16 && kVecs >= 8 &&
      (std::is_same_v<T, hwy::bfloat16_t> ||
       (std::is_same_v<T, hwy::float16_t> && HWY_TARGET <= HWY_AVX2));
  if constexpr (kVecs > kMaxHeldVectors || kRereadHalves || kRereadStreamed) {
    if (kVecs > kMaxHeldVectors || kRereadHalves || join || stream) {
      RereadRows<kVecs, kCenter, T, Src>(job, src0).Run(r0, r1, stream, join, out);
      if (join) out.Finish(d);
      return;
    }
  }
  if constexpr (kVecs <= kMaxHeldVectors && !kRereadHalves) {
    constexpr size_t kRows = kVecs >= 8 ? 16 / kVecs : 4;
    Moments bad_moments[kRows];
    size_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
      const uint32_t bad =
          ShortRows<kVecs, kRows, kCenter>(job, src0, r, stream, joined, bad_moments);
      if (HWY_UNLIKELY(bad != 0)) FinishShortRows<kCenter>(job, r, bad, bad_moments);
    }
    for (; r < r1; ++r) {  // the same arithmetic, one row at a time
      const uint32_t bad =
          ShortRows<kVecs, 1, kCenter>(job, src0, r, stream, joined, bad_moments);
      if (HWY_UNLIKELY(bad != 0)) FinishShortRows<kCenter>(job, r, bad, bad_moments);
    }
  }
  if (join) out.Finish(d);
}

// Runs ShortRowsLoop for rows of 1, 2, 4, 8, 16 (or 32, kMaxShortVectors) whole
// vectors; false otherwise.
template <bool kCenter, class T, class Src>
bool TryShortRows(const RowNormJobT<T>& job, const Src& src0, size_t r0, size_t r1) {
  if constexpr (kMaxShortVectors == 0) {  // not instantiated: no arrays of vectors
    (void)job, (void)src0, (void)r0, (void)r1;
    return false;
  } else {
    const size_t N = hn::Lanes(hn::ScalableTag<float>());
    if (job.cols % N != 0 || job.cols / N > kMaxShortVectors) return false;
    // clang-format off
    switch (job.cols / N) {
      case 1: ShortRowsLoop<1, kCenter>(job, src0, r0, r1); return true;
      case 2: ShortRowsLoop<2, kCenter>(job, src0, r0, r1); return true;
      case 4: ShortRowsLoop<4, kCenter>(job, src0, r0, r1); return true;
      case 8: ShortRowsLoop<8, kCenter>(job, src0, r0, r1); return true;
      case 16: ShortRowsLoop<16, kCenter>(job, src0, r0, r1); return true;
      case 32:
        if constexpr (kMaxShortVectors >= 32) {
          ShortRowsLoop<32, kCenter>(job, src0, r0, r1);
          return true;
        }
        return false;
      default: return false;
    }
    // clang-format on
  }
}

// Rows [r0, r1) of LayerNorm (kCenter) or RMSNorm, with or without the residual,
// when they are 1, 2, 4, 8, 16 (or 32) whole vectors long; false (nothing done)
// otherwise.
// Instantiated per element type by shortrow_{layernorm,rmsnorm}_*.cc.
template <bool kCenter, class T>
bool NormalizeShortRows(const RowNormJobT<T>& job, size_t r0, size_t r1) {
  return job.residual == nullptr
             ? TryShortRows<kCenter>(job, TensorSource<T>{job.x, job.ldx}, r0, r1)
             : TryShortRows<kCenter>(
                   job, AddSourceT<T>{job.x, job.residual, job.ldx, job.ldr}, r0, r1);
}

}  // namespace HWY_NAMESPACE
}  // namespace nk
HWY_AFTER_NAMESPACE();

#endif  // NK_KERNELS_SHORTROW_INL_H_
