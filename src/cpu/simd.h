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

#include "cpu/isa.h"

FA_CPU_BEGIN
namespace simd {

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

// Sum and maximum of the 16 lanes.
inline float reduce_add(V16 a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(V16 a) { return _mm512_reduce_max_ps(a.v); }

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

#else  // generic vector extensions: 16 lanes as kParts vectors of the machine's width

// Vectors of the width the target has (AVX: 8 floats; SSE2, NEON: 4): GCC keeps those in
// registers, while a 64-byte vector type on such a target goes through the stack.
#if defined(__AVX__)
constexpr int kPartLanes = 8;
#else
constexpr int kPartLanes = 4;
#endif
constexpr int kParts = kLanes / kPartLanes;
typedef float vfp __attribute__((vector_size(kPartLanes * 4)));
typedef int32_t vip __attribute__((vector_size(kPartLanes * 4)));
// The same, for loads and stores at any float address.
typedef float vfp_mem __attribute__((vector_size(kPartLanes * 4), aligned(4), may_alias));

struct V16 {
  vfp p[kParts];
};
// r.p[i] = expr for every part i (a macro: the parts loop stays a plain, unrolled loop).
#define FA_SIMD_PARTS(expr)                         \
  V16 r;                                            \
  for (int i = 0; i < kParts; ++i) r.p[i] = (expr); \
  return r

inline V16 load(const float* q) { FA_SIMD_PARTS(*reinterpret_cast<const vfp_mem*>(q + i * kPartLanes)); }
inline void store(float* q, V16 a) {
  for (int i = 0; i < kParts; ++i) *reinterpret_cast<vfp_mem*>(q + i * kPartLanes) = a.p[i];
}
inline V16 set1(float x) { FA_SIMD_PARTS(vfp{} + x); }
inline V16 zero() { FA_SIMD_PARTS(vfp{}); }
inline V16 operator+(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] + b.p[i]); }
inline V16 operator-(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] - b.p[i]); }
inline V16 operator*(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] * b.p[i]); }
inline V16 operator/(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] / b.p[i]); }
inline V16 fma(V16 a, V16 b, V16 c) { FA_SIMD_PARTS(a.p[i] * b.p[i] + c.p[i]); }
inline V16 fnma(V16 a, V16 b, V16 c) { FA_SIMD_PARTS(c.p[i] - a.p[i] * b.p[i]); }
inline V16 max(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] > b.p[i] ? a.p[i] : b.p[i]); }
inline V16 min(V16 a, V16 b) { FA_SIMD_PARTS(a.p[i] < b.p[i] ? a.p[i] : b.p[i]); }
inline V16 abs(V16 a) { FA_SIMD_PARTS(a.p[i] < 0 ? -a.p[i] : a.p[i]); }
inline V16 keep_in_range(V16 a, V16 x, V16 lo, V16 hi, V16 other) {
  FA_SIMD_PARTS((lo.p[i] <= x.p[i]) & (x.p[i] < hi.p[i]) ? a.p[i] : other.p[i]);
}
inline V16 keep_if_eq(V16 a, V16 x, V16 y, V16 other) { FA_SIMD_PARTS(x.p[i] == y.p[i] ? a.p[i] : other.p[i]); }
inline V16 select_abs_lt(V16 x, float t, V16 a, V16 b) {
  const V16 ax = abs(x);
  FA_SIMD_PARTS(ax.p[i] < t ? a.p[i] : b.p[i]);
}
inline V16 with_sign_of(V16 a, V16 s) { FA_SIMD_PARTS(s.p[i] < 0 ? -a.p[i] : a.p[i]); }
// Sum and maximum of the 16 lanes.
inline float reduce_add(V16 a) {
  vfp t = a.p[0];
  for (int i = 1; i < kParts; ++i) t += a.p[i];
  float r = t[0];
  for (int i = 1; i < kPartLanes; ++i) r += t[i];
  return r;
}
inline float reduce_max(V16 a) {
  vfp t = a.p[0];
  for (int i = 1; i < kParts; ++i) t = t > a.p[i] ? t : a.p[i];
  float r = t[0];
  for (int i = 1; i < kPartLanes; ++i) r = r > t[i] ? r : t[i];
  return r;
}

// 2^x; exactly 0 for x <= -127 (also -inf), clamped at 2^127. Taylor degree 6: ~2e-7.
inline vfp exp2_part(vfp x) {
  const vfp lo = vfp{} - 127.f, hi = vfp{} + 127.f;
  vfp xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const vfp magic = vfp{} + 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const vfp n = (xc + magic) - magic;
  const vfp f = (xc - n) * 0.6931471805599453f;
  vfp p = vfp{} + 1.f / 720.f;
  p = p * f + 1.f / 120.f;
  p = p * f + 1.f / 24.f;
  p = p * f + 1.f / 6.f;
  p = p * f + 0.5f;
  p = p * f + 1.f;
  p = p * f + 1.f;
  const vip e = (__builtin_convertvector(n, vip) + 127) << 23;  // n = -127 gives 0
  vfp scale;
  std::memcpy(&scale, &e, sizeof scale);
  return p * scale;
}
inline V16 exp2(V16 x) { FA_SIMD_PARTS(exp2_part(x.p[i])); }
#undef FA_SIMD_PARTS

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

}  // namespace simd
FA_CPU_END
