// CPU backend: a 16-lane fp32 vector, the only vector type the flash kernels use.
// AVX-512 intrinsics when compiled for them; otherwise GCC/Clang vector extensions, which
// lower to AVX2, SSE or NEON. Elementwise math only (exp2, tanh); no attention logic.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
// GCC 12's AVX-512 headers seed unused pass-through operands with self-initialised
// variables (GCC PR 105593); the warning points into the header, so it is silenced there only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace fa::cpu::simd {

constexpr int kLanes = 16;

#if defined(__AVX512F__)

struct V16 {
  __m512 v;
};
inline V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void store(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline V16 set1(float x) { return {_mm512_set1_ps(x)}; }
inline V16 zero() { return {_mm512_setzero_ps()}; }
inline V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 operator/(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a*b+c
inline V16 fnma(V16 a, V16 b, V16 c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c-a*b
inline V16 max(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V16 min(V16 a, V16 b) { return {_mm512_min_ps(a.v, b.v)}; }
inline V16 abs(V16 a) { return {_mm512_abs_ps(a.v)}; }
// a where lo <= x < hi, else `other`.
inline V16 keep_in_range(V16 a, V16 x, V16 lo, V16 hi, V16 other) {
  const __mmask16 m = _mm512_cmp_ps_mask(lo.v, x.v, _CMP_LE_OQ) & _mm512_cmp_ps_mask(x.v, hi.v, _CMP_LT_OQ);
  return {_mm512_mask_blend_ps(m, other.v, a.v)};
}
// a where a == b (lanewise), else `other`.
inline V16 keep_if_eq(V16 a, V16 x, V16 y, V16 other) {
  return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x.v, y.v, _CMP_EQ_OQ), other.v, a.v)};
}
// a where |x| < t, else b.
inline V16 select_abs_lt(V16 x, float t, V16 a, V16 b) {
  return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(abs(x).v, _mm512_set1_ps(t), _CMP_LT_OQ), b.v, a.v)};
}
// Copies the sign of s onto the non-negative a.
inline V16 with_sign_of(V16 a, V16 s) {
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(s.v), _mm512_set1_epi32(int(0x80000000u)));
  return {_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a.v), sign))};
}

// 2^x; exactly 0 for x <= -200 (also -inf), +inf above 128, NaN for NaN. Taylor degree 6 on
// |f| <= 1/2: relative error ~2e-7.
inline V16 exp2(V16 x) {
  // max returns its second operand when either is NaN: x goes second so a NaN score stays NaN.
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-200.f), x.v);
  const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(xc, n), _mm512_set1_ps(0.6931471805599453f));
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return {_mm512_scalef_ps(p, n)};
}

#else  // generic vector extensions

typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

struct V16 {
  vf16 v;
};
inline V16 load(const float* p) {
  V16 r;
  std::memcpy(&r.v, p, 64);
  return r;
}
inline void store(float* p, V16 a) { std::memcpy(p, &a.v, 64); }
inline V16 set1(float x) { return {vf16{} + x}; }
inline V16 zero() { return {vf16{}}; }
inline V16 operator+(V16 a, V16 b) { return {a.v + b.v}; }
inline V16 operator-(V16 a, V16 b) { return {a.v - b.v}; }
inline V16 operator*(V16 a, V16 b) { return {a.v * b.v}; }
inline V16 operator/(V16 a, V16 b) { return {a.v / b.v}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {a.v * b.v + c.v}; }
inline V16 fnma(V16 a, V16 b, V16 c) { return {c.v - a.v * b.v}; }
inline V16 max(V16 a, V16 b) { return {a.v > b.v ? a.v : b.v}; }
inline V16 min(V16 a, V16 b) { return {a.v < b.v ? a.v : b.v}; }
inline V16 abs(V16 a) { return {a.v < 0 ? -a.v : a.v}; }
inline V16 keep_in_range(V16 a, V16 x, V16 lo, V16 hi, V16 other) {
  return {(lo.v <= x.v) & (x.v < hi.v) ? a.v : other.v};
}
inline V16 keep_if_eq(V16 a, V16 x, V16 y, V16 other) { return {x.v == y.v ? a.v : other.v}; }
inline V16 select_abs_lt(V16 x, float t, V16 a, V16 b) { return {abs(x).v < t ? a.v : b.v}; }
inline V16 with_sign_of(V16 a, V16 s) { return {s.v < 0 ? -a.v : a.v}; }

// 2^x; exactly 0 for x <= -127 (also -inf), clamped at 2^127. Taylor degree 6: ~2e-7.
inline V16 exp2(V16 x) {
  const vf16 lo = vf16{} - 127.f, hi = vf16{} + 127.f;
  vf16 xc = x.v < lo ? lo : x.v;
  xc = xc > hi ? hi : xc;
  const vf16 magic = vf16{} + 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const vf16 n = (xc + magic) - magic;
  const vf16 f = (xc - n) * 0.6931471805599453f;
  vf16 p = vf16{} + 1.f / 720.f;
  p = p * f + 1.f / 120.f;
  p = p * f + 1.f / 24.f;
  p = p * f + 1.f / 6.f;
  p = p * f + 0.5f;
  p = p * f + 1.f;
  p = p * f + 1.f;
  const vi16 e = (__builtin_convertvector(n, vi16) + 127) << 23;  // n = -127 gives 0
  vf16 scale;
  std::memcpy(&scale, &e, 64);
  return {p * scale};
}

#endif

// tanh(x): odd Taylor series below |x| < 0.2 (error < 1e-8 relative), else
// 1 - 2 / (e^{2|x|} + 1) with the sign restored (relative error < 1e-6).
inline V16 tanh(V16 x) {
  const V16 x2 = x * x;
  V16 small = set1(-17.f / 315.f);
  small = fma(small, x2, set1(2.f / 15.f));
  small = fma(small, x2, set1(-1.f / 3.f));
  small = fma(small * x2, x, x);
  const V16 e = exp2(abs(x) * set1(2.f * 1.4426950408889634f));
  const V16 big = with_sign_of(set1(1.f) - set1(2.f) / (e + set1(1.f)), x);
  return select_abs_lt(x, 0.2f, small, big);
}

}  // namespace fa::cpu::simd
