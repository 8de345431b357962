// CPU backend: shared plumbing of the reference and flash paths.
// Storage converters (bf16/fp16 <-> fp32, round-to-nearest-even), per-sequence views of the
// strided tensors, the LSE layout and the thread count. No attention arithmetic here.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>

#include "api/problem.h"
#include "cpu/isa.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "cpu/simd.h"  // the intrinsics headers, when compiled for AVX-512

FA_CPU_BEGIN

// ---------------------------------------------------------------------------------------------
// Storage types. bf16 and fp16 are 16-bit patterns; arithmetic is always in fp32 or wider.

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 -> fp32 is exact: the pattern is the top half of the fp32 pattern.
inline float to_float(bf16 x) { return bits_float(uint32_t(x.bits) << 16); }

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
inline bf16 bf16_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(rounded >> 16)};
}

// fp16 -> fp32 is exact (subnormal halves become normal floats).
inline float to_float(f16 x) {
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu;
  const uint32_t man = x.bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);
  // Subnormal half: man * 2^-24, exact in fp32.
  const float v = float(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

// fp32 -> fp16, round to nearest even; overflow to inf, underflow through the subnormals.
inline f16 f16_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};   // NaN
  if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (a >= 0x38800000u) {                                      // normal half (>= 2^-14)
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);         // RNE at bit 13
    return f16{uint16_t(sign | ((r - 0x38000000u) >> 13))};
  }
  if (a < 0x33000000u) return f16{sign};  // below half the smallest subnormal (2^-25): 0
  // Subnormal half: value = m * 2^-24 with m = a_float * 2^24, rounded to nearest even.
  const uint32_t e = a >> 23;                   // 102..112
  const uint32_t man = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const uint32_t shift = 126u - e;              // 14..24: m = man >> shift, exactly
  const uint32_t m = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t r = m + ((rem > half || (rem == half && (m & 1u))) ? 1u : 0u);
  return f16{uint16_t(sign | r)};
}

inline float to_float(float x) { return x; }

template <class T>
inline T from_float(float f);
template <>
inline float from_float<float>(float f) {
  return f;
}
template <>
inline bf16 from_float<bf16>(float f) {
  return bf16_from_float(f);
}
template <>
inline f16 from_float<f16>(float f) {
  return f16_from_float(f);
}

// Calls fn.template operator()<T>() with T the storage type of the problem.
template <class Fn>
void dispatch_dtype(Dtype t, Fn&& fn) {
  switch (t) {
    case Dtype::f32: fn(float{}); break;
    case Dtype::bf16: fn(bf16{}); break;
    case Dtype::f16: fn(f16{}); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Sequences. A batch entry b is one (Sq_b, Sk_b) pair; varlen packs them along rows.

struct Seq {
  int64_t sq = 0, sk = 0;  // lengths of this sequence
  int64_t q_row0 = 0;      // first packed row of q/o/lse (varlen) or b * Sq
  int64_t k_row0 = 0;
};

inline Seq sequence(const Problem& p, int64_t b) {
  Seq s;
  if (p.varlen()) {
    s.q_row0 = p.cu_seqlens_q[b];
    s.k_row0 = p.cu_seqlens_k[b];
    s.sq = p.cu_seqlens_q[b + 1] - s.q_row0;
    s.sk = p.cu_seqlens_k[b + 1] - s.k_row0;
  } else {
    s.sq = p.seqlen_q;
    s.sk = p.seqlen_k;
    s.q_row0 = b * p.seqlen_q;
    s.k_row0 = b * p.seqlen_k;
  }
  return s;
}

// Rows of q/o/lse over all sequences (the varlen total, or B * Sq).
inline int64_t total_q_rows(const Problem& p) { return p.varlen() ? p.total_q : p.batch * p.seqlen_q; }

// Element (row i of sequence b, head h) of a strided tensor: a typed pointer to its dim 0.
template <class T>
inline T* row_ptr(const Problem& p, const Tensor& t, int64_t b, int64_t row0, int64_t i, int64_t h) {
  int64_t off;
  if (p.varlen())
    off = (row0 + i) * t.row_stride + h * t.head_stride;
  else
    off = b * t.batch_stride + i * t.row_stride + h * t.head_stride;
  return static_cast<T*>(t.data) + off;
}

// Index of (head h, row i of sequence b) in an LSE-shaped fp32 array:
// [B, Hq, Sq] or, varlen, [Hq, total_q].
inline int64_t lse_index(const Problem& p, const Seq& s, int64_t b, int64_t h, int64_t i) {
  if (p.varlen()) return h * p.total_q + s.q_row0 + i;
  return (b * p.heads_q + h) * p.seqlen_q + i;
}

// p.num_threads, 0 meaning every core. A hint: more than 8 threads a core only costs per-thread
// buffers, so larger requests are capped there.
inline int thread_count(const Problem& p) {
#if defined(_OPENMP)
  const int cores = omp_get_num_procs();
  return p.num_threads > 0 ? std::min(p.num_threads, 8 * cores) : cores;
#else
  (void)p;
  return 1;
#endif
}

inline int this_thread() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Carries the first exception thrown inside an OpenMP region out of it (an exception must
// not cross the region's boundary). Use: slot.run([&] { ... }) inside, slot.rethrow() after.
class ExceptionSlot {
 public:
  template <class F>
  void run(F&& f) {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
#pragma omp critical(fa_cpu_exception_slot)
      {
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

FA_CPU_END

FA_CPU_BEGIN

// d[0..n) = scale · s[0..n) in fp32.
template <class T>
inline void convert_row(const T* s, int64_t n, float scale, float* d) {
  for (int64_t c = 0; c < n; ++c) d[c] = to_float(s[c]) * scale;
}
#if defined(__AVX512F__)
// fp16 through the hardware converter (exact, like to_float), 16 at a time.
template <>
inline void convert_row<f16>(const f16* s, int64_t n, float scale, float* d) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c));
    _mm512_storeu_ps(d + c, _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(scale)));
  }
  for (; c < n; ++c) d[c] = to_float(s[c]) * scale;
}
#endif

// Copies rows × cols of a strided tile (rows `src_row` elements apart) into a row-major fp32
// buffer with leading dimension ld >= cols, multiplying by `scale`; columns cols..ld-1 are 0.
template <class T>
void load_tile(const T* src, int64_t src_row, int64_t rows, int64_t cols, float scale, float* dst,
               int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * ld;
    convert_row(src + r * src_row, cols, scale, d);
    for (int64_t c = cols; c < ld; ++c) d[c] = 0.f;
  }
}

// The transpose of the same tile: dst[c·ld + r], ld >= rows; rows rows..ld-1 are 0. With
// group > 1 the rows are (query, head) pairs, head fastest: row r is src + (r / group)·src_row +
// (r % group)·src_head (the query heads of a GQA group stacked in one block; also below).
template <class T>
void load_tile_transposed(const T* src, int64_t src_row, int64_t rows, int64_t cols, float scale,
                          float* dst, int64_t ld, int64_t group = 1, int64_t src_head = 0) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + (r / group) * src_row + (r % group) * src_head;
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = to_float(s[c]) * scale;
  }
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = rows; r < ld; ++r) dst[c * ld + r] = 0.f;
}

// bf16 rows [rows][cols] (cols even) as the B operand of tile_gemm_bf16 (tile_gemm.h), i.e. the
// transpose in column pairs: the pair (k, k+1) of row r goes to dst[(k/2)·2·ld + 2r]. Rows
// rows..ld-1 are 0. A pair is one 32-bit word, so this is a 32-bit transpose.
inline void pack_pairs_transposed(const bf16* src, int64_t src_row, int64_t rows, int64_t cols,
                                  uint16_t* dst, int64_t ld, int64_t group = 1, int64_t src_head = 0) {
  const int64_t pairs = cols / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* s = src + (r / group) * src_row + (r % group) * src_head;
    for (int64_t kk = 0; kk < pairs; ++kk) std::memcpy(dst + 2 * (kk * ld + r), s + 2 * kk, 4);
  }
  for (int64_t kk = 0; kk < pairs; ++kk) std::memset(dst + 2 * (kk * ld + rows), 0, size_t(4 * (ld - rows)));
}

// Asks for a strided tile to be brought into L2 ahead of its use (a hint; never faults).
template <class T>
inline void prefetch_tile(const T* src, int64_t src_row, int64_t rows, int64_t cols) {
  const int64_t bytes = cols * int64_t(sizeof(T));
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(src + r * src_row);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
  }
}

// Writes rows × cols of a row-major fp32 buffer to a strided tile of T, each row times
// row_scale[r] (nullptr: 1); group / dst_head as for load_tile_transposed.
template <class T>
void store_tile(const float* src, int64_t ld, int64_t rows, int64_t cols, const float* row_scale,
                T* dst, int64_t dst_row, int64_t group = 1, int64_t dst_head = 0) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    T* d = dst + (r / group) * dst_row + (r % group) * dst_head;
    const float f = row_scale ? row_scale[r] : 1.f;
    for (int64_t c = 0; c < cols; ++c) d[c] = from_float<T>(s[c] * f);
  }
}

FA_CPU_END
