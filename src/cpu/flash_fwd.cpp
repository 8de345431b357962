// CPU backend: the FlashAttention forward.
// Q blocks outer, K/V blocks inner, online softmax in the log2 domain; writes only O and LSE.
// Extra memory: one set of fp32 tiles per thread (O(tile)), never O(Sq·Sk).
//
// Scores are computed transposed, Sᵀ = K·Qᵀ (keys are rows, queries are the 16-lane vectors):
// the per-query max and sum are then lane-wise vector ops with no horizontal reduction, and
// P·V reads P through the transposed strides of the same buffer (see tile_gemm.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/flash_tiles.h"
#include "cpu/kernels.h"
#include "cpu/simd.h"
#include "cpu/tile_gemm.h"

FA_CPU_BEGIN
namespace {

using namespace simd;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct FwdBuffers {
  std::vector<float> qt;     // [D][Bq]   Q block transposed
  std::vector<uint16_t> qp;  // [D/2][Bq][2] the same in bf16 pairs (bf16 path)
  std::vector<float> k;      // [Bk][D]   K block converted (fp16, odd-D bf16)
  std::vector<float> v;      // [Bk][Dvp] V block, columns padded with 0
  std::vector<float> st;     // [Bk][Bq]  Sᵀ, then Pᵀ
  std::vector<float> o;      // [Bq][Dvp] un-normalised O accumulator
  std::vector<float> m, l;   // [Bq] running max (log2 units) and denominator
  std::vector<float> alpha;  // [Bq] rescale of O for the current block
  std::vector<float> lo, hi; // [Bq] visible key range of each query, relative to the block
  std::vector<int64_t> kb, ke;  // [Bq] absolute visible key range of each query
  std::vector<int64_t> klo, khi;  // [Bq] the same relative to the block, clamped to [0, bk]
};

// Decoding: at most kDecodeRows (query, head) rows a task (Sq·gq: one query of an MHA head, or
// a GQA group of up to 8 heads). The block path below fills the 16 lanes with queries, and its
// Sᵀ = K·Qᵀ costs D vector FMAs a key however few are real. Here the lanes run across the head
// dim: a row's score for a key is ⌈D/16⌉ FMAs and one horizontal sum (K read once for all the
// rows), the softmax runs with keys across the lanes, and P·V with Dv across them.
constexpr int64_t kDecodeRows = 8;
constexpr int64_t kDecodeBk = 256;
// A sequence's visible keys are split into items of this many (a fixed count, so the bits do not
// depend on the thread count or the batch), run in parallel and merged in order: decoding one
// sequence on many cores.
constexpr int64_t kDecodeSplitKeys = 1024;

struct DecodeBuffers {
  std::vector<float> q;   // [R][Dp] the rows' queries, columns past D zero
  std::vector<uint16_t> qh;  // [R][D] the same as bf16 (the BF16 dot-product scores)
  std::vector<float> kv;  // [kDecodeBk][max(Dp, Dvp)] a K chunk, then a V chunk, as fp32
  std::vector<float> s;   // [R][kDecodeBk] scores (log2 units), then P
  std::vector<float> o;   // [R][Dvp] un-normalised O
  float m[kDecodeRows], l[kDecodeRows], alpha[kDecodeRows];
  int64_t kb[kDecodeRows], ke[kDecodeRows];
};

// Calls f(std::integral_constant<int, R>) for the row count R in 1..kDecodeRows.
template <class F>
void with_rows(int64_t R, F&& f) {
  switch (R) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// 16 values of a K or V row as fp32: fp32 as they are; bf16 (AVX-512 builds) by a shift into
// the top of each 32-bit word (exact).
inline V16 load_row(const float* p) { return load(p); }
#if defined(__AVX512F__)
constexpr bool kBf16Rows = true;
inline V16 load_row(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
#else
constexpr bool kBf16Rows = false;
#endif

// s[r][j] = q_r·K_j for the bk keys of a chunk (rows of ldk floats, Dp of them read). kKeys
// keys at a time, so that R·kKeys FMA chains are in flight (one row alone is latency-bound).
template <int R>
void decode_scores(const float* q, int64_t Dp, const float* kf, int64_t ldk, int64_t bk, float* s) {
  constexpr int kKeys = R == 1 ? 4 : (R <= 3 ? 2 : 1);
  const auto keys = [&](int64_t j, auto n) {
    constexpr int kN = decltype(n)::value;
    V16 acc[R][kN];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < kN; ++u) acc[r][u] = zero();
    for (int64_t d = 0; d < Dp; d += kLanes) {
      for (int u = 0; u < kN; ++u) {
        const V16 kv = load(kf + (j + u) * ldk + d);
        for (int r = 0; r < R; ++r) acc[r][u] = fma(load(q + r * Dp + d), kv, acc[r][u]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < kN; ++u) s[r * kDecodeBk + j + u] = reduce_add(acc[r][u]);
  };
  int64_t j = 0;
  for (; j + kKeys <= bk; j += kKeys) keys(j, std::integral_constant<int, kKeys>{});
  for (; j < bk; ++j) keys(j, std::integral_constant<int, 1>{});
}

#if defined(__AVX512BF16__)
// The same for bf16 q and K (D a multiple of 32, K read in place: whole rows of 64-byte
// vectors) by exact bf16 products into fp32 (vdpbf16ps, two products a lane).
template <int R>
void decode_scores_bf16(const uint16_t* q, int64_t D, const uint16_t* k, int64_t ldk, int64_t bk, float* s) {
  constexpr int kKeys = R == 1 ? 4 : (R <= 3 ? 2 : 1);
  const auto keys = [&](int64_t j, auto n) {
    constexpr int kN = decltype(n)::value;
    __m512 acc[R][kN];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < kN; ++u) acc[r][u] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 32) {
      for (int u = 0; u < kN; ++u) {
        const __m512bh kv = (__m512bh)_mm512_loadu_si512(k + (j + u) * ldk + d);
        for (int r = 0; r < R; ++r)
          acc[r][u] = _mm512_dpbf16_ps(acc[r][u], (__m512bh)_mm512_loadu_si512(q + r * D + d), kv);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < kN; ++u) s[r * kDecodeBk + j + u] = _mm512_reduce_add_ps(acc[r][u]);
  };
  int64_t j = 0;
  for (; j + kKeys <= bk; j += kKeys) keys(j, std::integral_constant<int, kKeys>{});
  for (; j < bk; ++j) keys(j, std::integral_constant<int, 1>{});
}
#endif

// o_r = alpha_r·o_r + Σ_j P[r][j]·V_j over the bk keys of a chunk (rows of ldv floats). Keys
// outer, so each V row is read as whole vectors in turn (rows are often far apart: BSHD); the
// columns go in groups of kNV vectors, whose R·kNV accumulators stay in registers.
template <int R, class TV>
void decode_pv(const float* P, const TV* vf, int64_t ldv, int64_t bk, int64_t Dvp, const float* alpha,
               float* o) {
  constexpr int kNV = R <= 2 ? 8 : (R <= 4 ? 4 : 2);
  for (int64_t d0 = 0; d0 < Dvp; d0 += kNV * kLanes) {
    const int nv = int(std::min<int64_t>(kNV, (Dvp - d0) / kLanes));
    V16 acc[R][kNV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kNV; ++c)
        if (c < nv) acc[r][c] = load(o + r * Dvp + d0 + c * kLanes) * set1(alpha[r]);
    for (int64_t j = 0; j < bk; ++j) {
      const TV* vj = vf + j * ldv + d0;
      for (int c = 0; c < kNV; ++c) {
        if (c >= nv) break;
        const V16 vc = load_row(vj + c * kLanes);
        for (int r = 0; r < R; ++r) acc[r][c] = fma(set1(P[r * kDecodeBk + j]), vc, acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kNV; ++c)
        if (c < nv) store(o + r * Dvp + d0 + c * kLanes, acc[r][c]);
  }
}

// One item of the decoding path: batch b, the gq query heads from h (a GQA group stacked, or one
// head), every query of the sequence: R = sq·gq ≤ kDecodeRows rows, row r = query r / gq, head
// h + r % gq; the keys of [j_begin, j_end) only. With part == nullptr the item covers every key
// and writes O and LSE; else it leaves its rows' running max, sum and un-normalised O in part
// (R rows of Dvp + 2 floats: m, l, O) for decode_merge. Each row's arithmetic is the same
// whatever R and gq are, so a sequence gets the same bits alone or in a varlen batch.
template <class T>
void decode_item(const Problem& p, DecodeBuffers& bf, int64_t b, int64_t h, int64_t gq, int64_t j_begin,
                 int64_t j_end, float* part) {
  const int64_t D = p.head_dim, Dv = p.head_dim_v, Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes);
  const Seq s = sequence(p, b);
  const int64_t R = s.sq * gq;
  if (R == 0) return;
  const bool softcap = p.softcap > 0;
  // Scores in log2 units as the block path: s' = f·S, or c·log2(e)·tanh(scale·S / c) with softcap.
  const V16 f = set1(softcap ? 1.f : p.scale * kLog2e);
  const V16 cap_in = set1(softcap ? p.scale / p.softcap : 0.f);
  const V16 cap = set1(p.softcap * kLog2e);
  alignas(64) static constexpr float kIota[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const V16 iota = load(kIota);
  // K and V rows read in place when they are whole vectors: fp32; bf16 K with BF16 dot products
  // (D a multiple of 32), bf16 V in AVX-512 builds. Else converted to fp32 a chunk at a time.
  constexpr bool kF32 = std::is_same_v<T, float>, kBf16 = std::is_same_v<T, bf16>;
  const bool k_in_place = kF32 && D % kLanes == 0;
  const bool k_bf16_dot = kBf16 && kHaveBf16Dot && D % 32 == 0;
  constexpr bool kVRows = kF32 || (kBf16 && kBf16Rows);  // load_row reads T
  const bool v_in_place = kVRows && Dv % kLanes == 0;

  const T* q = row_ptr<const T>(p, p.q, b, s.q_row0, 0, h);
  const T* k = row_ptr<const T>(p, p.k, b, s.k_row0, 0, h / p.group());
  const T* v = row_ptr<const T>(p, p.v, b, s.k_row0, 0, h / p.group());
  T* o = row_ptr<T>(p, p.o, b, s.q_row0, 0, h);
  for (int64_t r = 0; r < R; ++r) {
    const T* qr = q + (r / gq) * p.q.row_stride + (r % gq) * p.q.head_stride;
    load_tile(qr, 0, 1, D, 1.f, bf.q.data() + r * Dp, Dp);
    if (k_bf16_dot) std::memcpy(bf.qh.data() + r * D, qr, size_t(D) * 2);
    bf.m[r] = -kInf;
    bf.l[r] = 0.f;
    bf.kb[r] = p.mask.key_begin(r / gq, s.sq, s.sk);
    bf.ke[r] = p.mask.key_end(r / gq, s.sq, s.sk);
  }
  std::fill(bf.o.begin(), bf.o.begin() + R * Dvp, 0.f);

  // Keys any row sees (the ranges grow with the row), within this item's.
  const int64_t kbeg = std::max(bf.kb[0], j_begin), kend = std::min(bf.ke[R - 1], j_end);
  for (int64_t j0 = kbeg; j0 < kend; j0 += kDecodeBk) {
    const int64_t bk = std::min(kDecodeBk, kend - j0), bkp = round_up(bk, kLanes);
    if (j0 + bk < kend) {
      const int64_t nk = std::min(kDecodeBk, kend - j0 - bk);
      prefetch_tile(k + (j0 + bk) * p.k.row_stride, p.k.row_stride, nk, D);
      prefetch_tile(v + (j0 + bk) * p.v.row_stride, p.v.row_stride, nk, Dv);
    }
    // Scores.
    float* sc = bf.s.data();
    if constexpr (kHaveBf16Dot && kBf16) {
      if (k_bf16_dot) {
#if defined(__AVX512BF16__)
        with_rows(R, [&](auto rc) {
          decode_scores_bf16<decltype(rc)::value>(bf.qh.data(), D, reinterpret_cast<const uint16_t*>(k + j0 * p.k.row_stride),
                                                  p.k.row_stride, bk, sc);
        });
#endif
      }
    }
    if (!k_bf16_dot) {
      const float* kf = bf.kv.data();
      int64_t ldk = Dp;
      if (k_in_place) {
        kf = reinterpret_cast<const float*>(k + j0 * p.k.row_stride);
        ldk = p.k.row_stride;
      } else {
        load_tile(k + j0 * p.k.row_stride, p.k.row_stride, bk, D, 1.f, bf.kv.data(), Dp);
      }
      with_rows(R, [&](auto rc) { decode_scores<decltype(rc)::value>(bf.q.data(), Dp, kf, ldk, bk, sc); });
    }
    // Online softmax per row, keys across the lanes (lanes past bk: -inf, P = 0).
    for (int64_t r = 0; r < R; ++r) {
      float* sr = sc + r * kDecodeBk;
      for (int64_t j = bk; j < bkp; ++j) sr[j] = -kInf;
      const V16 lo = set1(float(clamp_rel(bf.kb[r] - j0, bk))), hi = set1(float(clamp_rel(bf.ke[r] - j0, bk)));
      V16 vmax = set1(-kInf);
      for (int64_t j = 0; j < bkp; j += kLanes) {
        V16 x = load(sr + j);
        if (softcap) x = cap * simd::tanh(x * cap_in);
        x = keep_in_range(x * f, iota + set1(float(j)), lo, hi, set1(-kInf));
        store(sr + j, x);
        vmax = max(vmax, x);
      }
      const float mx = std::max(bf.m[r], reduce_max(vmax));
      // A row that has seen no key yet keeps m = -inf; subtract 0 instead (P stays 0).
      const float m_use = mx == -kInf ? 0.f : mx;
      V16 vsum = zero();
      for (int64_t j = 0; j < bkp; j += kLanes) {
        const V16 pj = exp2(load(sr + j) - set1(m_use));
        store(sr + j, pj);
        vsum = vsum + pj;
      }
      const float al = std::exp2(bf.m[r] - m_use);
      bf.l[r] = al * bf.l[r] + reduce_add(vsum);
      bf.m[r] = mx;
      bf.alpha[r] = al;
    }
    // O = diag(alpha)·O + P·V.
    with_rows(R, [&](auto rc) {
      constexpr int kR = decltype(rc)::value;
      if constexpr (kVRows) {
        if (v_in_place) return decode_pv<kR>(sc, v + j0 * p.v.row_stride, p.v.row_stride, bk, Dvp, bf.alpha, bf.o.data());
      }
      load_tile(v + j0 * p.v.row_stride, p.v.row_stride, bk, Dv, 1.f, bf.kv.data(), Dvp);
      decode_pv<kR>(sc, static_cast<const float*>(bf.kv.data()), Dvp, bk, Dvp, bf.alpha, bf.o.data());
    });
  }

  if (part != nullptr) {
    for (int64_t r = 0; r < R; ++r) {
      float* pr = part + r * (Dvp + 2);
      pr[0] = bf.m[r];
      pr[1] = bf.l[r];
      std::copy(bf.o.begin() + r * Dvp, bf.o.begin() + (r + 1) * Dvp, pr + 2);
    }
    return;
  }
  // O = O / l;  LSE = ln2·(m + log2 l);  a row without keys (l = 0): O = 0, LSE = -inf.
  for (int64_t r = 0; r < R; ++r) bf.alpha[r] = bf.l[r] == 0.f ? 0.f : 1.f / bf.l[r];
  store_tile(bf.o.data(), Dvp, R, Dv, bf.alpha, o, p.o.row_stride, gq, p.o.head_stride);
  if (p.lse) {
    for (int64_t r = 0; r < R; ++r)
      p.lse[lse_index(p, s, b, h + r % gq, r / gq)] = bf.l[r] == 0.f ? -kInf : (bf.m[r] + std::log2(bf.l[r])) * kLn2;
  }
}

// Merges the n partial results of one (b, h) unit, in order: M = max m_i; L = Σ l_i·2^(m_i − M);
// O = Σ O_i·2^(m_i − M) / L; LSE = ln2·(M + log2 L); a row without keys: O = 0, LSE = -inf.
template <class T>
void decode_merge(const Problem& p, int64_t b, int64_t h, int64_t gq, const float* parts, int64_t n, float* o_acc) {
  const int64_t Dv = p.head_dim_v, Dvp = round_up(Dv, kLanes);
  const Seq s = sequence(p, b);
  const int64_t R = s.sq * gq, stride = R * (Dvp + 2);
  T* o = row_ptr<T>(p, p.o, b, s.q_row0, 0, h);
  for (int64_t r = 0; r < R; ++r) {
    float M = -kInf;
    for (int64_t i = 0; i < n; ++i) M = std::max(M, parts[i * stride + r * (Dvp + 2)]);
    const float m_use = M == -kInf ? 0.f : M;
    float L = 0.f;
    std::fill(o_acc, o_acc + Dvp, 0.f);
    for (int64_t i = 0; i < n; ++i) {
      const float* pr = parts + i * stride + r * (Dvp + 2);
      const float w = std::exp2(pr[0] - m_use);
      L += w * pr[1];
      for (int64_t d = 0; d < Dvp; d += kLanes) store(o_acc + d, fma(set1(w), load(pr + 2 + d), load(o_acc + d)));
    }
    const float inv = L == 0.f ? 0.f : 1.f / L;
    store_tile(o_acc, Dvp, 1, Dv, &inv, o + (r / gq) * p.o.row_stride + (r % gq) * p.o.head_stride, 0);
    if (p.lse) p.lse[lse_index(p, s, b, h + r % gq, r / gq)] = L == 0.f ? -kInf : (M + std::log2(L)) * kLn2;
  }
}

// Every decoding sequence (sq·G ≤ kDecodeRows) of p: items of at most kDecodeSplitKeys visible
// keys each, in parallel, then the merge of the sequences that had more than one.
template <class T>
void decode_all(const Problem& p, int64_t gq, int nt) {
  const int64_t D = p.head_dim, Dp = round_up(D, kLanes), Dvp = round_up(p.head_dim_v, kLanes);
  const int64_t G = p.group(), heads_per_unit = p.heads_q / gq;
  struct Item {
    int64_t b, h, j_begin, j_end, part;  // part: offset in parts, or -1 (a whole sequence)
  };
  struct Unit {
    int64_t b, h, part, n;
  };
  std::vector<Item> items;
  std::vector<Unit> merges;
  int64_t part_floats = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Seq s = sequence(p, b);
    if (s.sq == 0 || s.sq * G > kDecodeRows) continue;
    // The visible keys of the sequence's rows: from the first query's first to the last's last.
    const int64_t kbeg = p.mask.key_begin(0, s.sq, s.sk), kend = p.mask.key_end(s.sq - 1, s.sq, s.sk);
    const int64_t n = kend > kbeg ? (kend - kbeg + kDecodeSplitKeys - 1) / kDecodeSplitKeys : 1;
    const int64_t stride = s.sq * gq * (Dvp + 2);
    for (int64_t u = 0; u < heads_per_unit; ++u) {
      const int64_t h = u * gq;
      if (n == 1) {
        items.push_back({b, h, kbeg, std::max(kend, kbeg), -1});
        continue;
      }
      merges.push_back({b, h, part_floats, n});
      for (int64_t i = 0; i < n; ++i)
        items.push_back({b, h, kbeg + i * kDecodeSplitKeys, std::min(kend, kbeg + (i + 1) * kDecodeSplitKeys),
                         part_floats + i * stride});
      part_floats += n * stride;
    }
  }
  if (items.empty()) return;
  std::vector<float> parts(static_cast<size_t>(part_floats));
  std::vector<DecodeBuffers> bufs(static_cast<size_t>(nt));
  for (auto& bf : bufs) {
    bf.q.resize(size_t(kDecodeRows * Dp));
    bf.qh.resize(size_t(kDecodeRows * D));
    bf.kv.resize(size_t(kDecodeBk * std::max(Dp, Dvp)));
    bf.s.resize(size_t(kDecodeRows * kDecodeBk));
    bf.o.resize(size_t(kDecodeRows * Dvp));
  }
  const int64_t n_items = int64_t(items.size()), n_merges = int64_t(merges.size());
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < n_items; ++i) {
    const Item& it = items[size_t(i)];
    decode_item<T>(p, bufs[size_t(this_thread())], it.b, it.h, gq, it.j_begin, it.j_end,
                   it.part < 0 ? nullptr : parts.data() + it.part);
  }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < n_merges; ++i) {
    const Unit& m = merges[size_t(i)];
    decode_merge<T>(p, m.b, m.h, gq, parts.data() + m.part, m.n, bufs[size_t(this_thread())].o.data());
  }
}

template <class T>
void fwd_impl(const Problem& p) {
  const int64_t D = p.head_dim, Dv = p.head_dim_v, Dvp = round_up(Dv, kLanes);
  const int64_t G = p.group();
  // Short query sequences (decoding: Sq·G fits one block): the query heads of a GQA group share
  // a block, (query, head) rows with the head fastest, so K and V are read once per group and
  // the 16-lane vectors hold the group's queries instead of padding. Longer ones keep one head a
  // block (stacking gained nothing there: GQA causal prefill S = 512–2048 ran 8–12 % slower).
  // gq heads and qpb queries per block.
  const int64_t gq = G > 1 && p.seqlen_q * G <= kFwdBq ? G : 1;
  // Sequences with sq·G ≤ kDecodeRows take the decoding path (decode_all), a dense batch all or
  // none of them.
  const bool blocks = p.seqlen_q * G > kDecodeRows || p.cu_seqlens_q != nullptr;
  const bool decodes = p.seqlen_q * G <= kDecodeRows || p.cu_seqlens_q != nullptr;
  const int64_t qpb = kFwdBq / gq;
  const int64_t nqb = (p.seqlen_q + qpb - 1) / qpb;
  const int64_t heads_per_task = p.heads_q / gq;
  const int64_t bh = p.batch * heads_per_task;
  const int64_t tasks = nqb * bh;
  const bool softcap = p.softcap > 0;
  // Scores in log2 units, s' = f·S with S = K·Qᵀ: f = log2(e)·scale; with softcap c the pass
  // after the GEMM sets S = c·log2(e)·tanh(scale·S / c) and f = 1.
  const V16 f = set1(softcap ? 1.f : p.scale * kLog2e);
  const V16 cap_in = set1(softcap ? p.scale / p.softcap : 0.f);
  const V16 cap = set1(p.softcap * kLog2e);
  // bf16 with AVX512-BF16: S = K·Qᵀ by exact bf16 products (tile_gemm_bf16), K read in place.
  constexpr bool kPairs = kHaveBf16Dot && std::is_same_v<T, bf16>;
  const bool pairs = kPairs && D % 2 == 0;
  const int nt = thread_count(p);
  if (decodes) decode_all<T>(p, gq, nt);
  if (!blocks) return;
  std::vector<FwdBuffers> bufs(static_cast<size_t>(nt));
  for (auto& bf : bufs) {
    if (pairs)
      bf.qp.resize(size_t(D * kFwdBq));
    else
      bf.qt.resize(size_t(D * kFwdBq));
    if (!pairs && !std::is_same_v<T, float>) bf.k.resize(size_t(kFwdBk * D));
    bf.v.resize(size_t(kFwdBk * Dvp));
    bf.st.resize(size_t(kFwdBk * kFwdBq));
    bf.o.resize(size_t(kFwdBq * Dvp));
    for (auto* a : {&bf.m, &bf.l, &bf.alpha, &bf.lo, &bf.hi}) a->resize(kFwdBq);
    for (auto* a : {&bf.kb, &bf.ke, &bf.klo, &bf.khi}) a->resize(kFwdBq);
  }

#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    // Last Q blocks first: under a causal mask they see the most keys.
    const int64_t qb = nqb - 1 - task / bh;
    const int64_t b = (task % bh) / heads_per_task, h = (task % heads_per_task) * gq, hk = h / G;
    const Seq s = sequence(p, b);
    const int64_t i0 = qb * qpb;
    if (i0 >= s.sq) continue;
    if (s.sq * G <= kDecodeRows) continue;  // decode_all's
    const int64_t bq = (s.sq - i0 < qpb ? s.sq - i0 : qpb) * gq;  // rows: query i0 + r / gq, head h + r % gq
    // Columns of Sᵀ computed: the block's queries rounded up to whole 16-lane vectors (a short
    // block, e.g. one decoding query, does not pay for the full kFwdBq).
    const int64_t bqp = round_up(bq, kLanes);
    FwdBuffers& bf = bufs[size_t(this_thread())];

    const T* q = row_ptr<const T>(p, p.q, b, s.q_row0, i0, h);
    const T* k = row_ptr<const T>(p, p.k, b, s.k_row0, 0, hk);
    const T* v = row_ptr<const T>(p, p.v, b, s.k_row0, 0, hk);
    T* o = row_ptr<T>(p, p.o, b, s.q_row0, i0, h);

    if constexpr (kPairs) {
      if (pairs) pack_pairs_transposed(q, p.q.row_stride, bq, D, bf.qp.data(), kFwdBq, gq, p.q.head_stride);
    }
    if (!pairs) load_tile_transposed(q, p.q.row_stride, bq, D, 1.f, bf.qt.data(), kFwdBq, gq, p.q.head_stride);
    for (int64_t r = 0; r < kFwdBq; ++r) {
      bf.m[size_t(r)] = -kInf;
      bf.l[size_t(r)] = 0.f;
      // Padding queries see nothing. (Rows of one query are adjacent, so the ranges never
      // decrease along the rows, as Band and the block bounds below need.)
      bf.kb[size_t(r)] = r < bq ? p.mask.key_begin(i0 + r / gq, s.sq, s.sk) : 0;
      bf.ke[size_t(r)] = r < bq ? p.mask.key_end(i0 + r / gq, s.sq, s.sk) : 0;
    }
    std::fill(bf.o.begin(), bf.o.end(), 0.f);

    // Keys any row of the block sees: key_begin and key_end grow with the row.
    const int64_t kbeg = bf.kb[0], kend = bf.ke[size_t(bq - 1)];
    for (int64_t j0 = kbeg; j0 < kend; j0 += kFwdBk) {
      const int64_t bk = kend - j0 < kFwdBk ? kend - j0 : kFwdBk;
      // Every row sees every key of the block: no element mask.
      const bool full = bf.kb[size_t(bq - 1)] <= j0 && bf.ke[0] >= j0 + bk;

      // A partial block: each query's visible keys, relative to the block; register tiles
      // outside every query's range are skipped (Sᵀ) or cut short (P·V).
      Band st_band, pv_band;
      if (!full) {
        for (int64_t r = 0; r < bq; ++r) {
          bf.klo[size_t(r)] = std::clamp<int64_t>(bf.kb[size_t(r)] - j0, 0, bk);
          bf.khi[size_t(r)] = std::clamp<int64_t>(bf.ke[size_t(r)] - j0, bf.klo[size_t(r)], bk);
        }
        // Padding queries: an empty range after the last query's, keeping both arrays monotone.
        for (int64_t r = bq; r < bqp; ++r) bf.klo[size_t(r)] = bf.khi[size_t(r)] = bf.khi[size_t(bq - 1)];
        st_band = {Band::rows_by_col, bf.klo.data(), bf.khi.data()};
        pv_band = {Band::k_by_row, bf.klo.data(), bf.khi.data()};
      }

      // Sᵀ = K·Qᵀ   [bk][Bq]. K is only broadcast from (the A operand): fp32 and bf16-pair K
      // are read in place, other types converted first.
      if constexpr (kPairs) {
        if (pairs)
          tile_gemm_bf16(bk, bqp, D, reinterpret_cast<const uint16_t*>(k + j0 * p.k.row_stride),
                         p.k.row_stride, bf.qp.data(), 2 * kFwdBq, bf.st.data(), kFwdBq, st_band);
      }
      if (!pairs) {
        const float* kf;
        int64_t ldk = D;
        if constexpr (std::is_same_v<T, float>) {
          kf = k + j0 * p.k.row_stride;
          ldk = p.k.row_stride;
        } else {
          load_tile(k + j0 * p.k.row_stride, p.k.row_stride, bk, D, 1.f, bf.k.data(), D);
          kf = bf.k.data();
        }
        tile_gemm<Accum::store>(bk, bqp, D, kf, ldk, 1, bf.qt.data(), kFwdBq, bf.st.data(), kFwdBq,
                                nullptr, st_band);
      }
      load_tile(v + j0 * p.v.row_stride, p.v.row_stride, bk, Dv, 1.f, bf.v.data(), Dvp);
      // The next K/V block streams into L2 while this one is computed (K/V of a head is
      // larger than L2 at long S: without this the copies stall on L3).
      if (j0 + bk < kend) {
        const int64_t nk = std::min(kFwdBk, kend - j0 - bk);
        prefetch_tile(k + (j0 + bk) * p.k.row_stride, p.k.row_stride, nk, D);
        prefetch_tile(v + (j0 + bk) * p.v.row_stride, p.v.row_stride, nk, Dv);
      }

      float* st = bf.st.data();
      if (softcap) {
        // s' = c·log2(e)·tanh(s/c)
        for (int64_t j = 0; j < bk; ++j)
          for (int64_t g = 0; g < bqp; g += kLanes)
            store(st + j * kFwdBq + g, cap * simd::tanh(load(st + j * kFwdBq + g) * cap_in));
      }
      if (!full) {
        for (int64_t r = 0; r < bqp; ++r) {
          bf.lo[size_t(r)] = float(clamp_rel(bf.kb[size_t(r)] - j0, bk));
          bf.hi[size_t(r)] = float(clamp_rel(bf.ke[size_t(r)] - j0, bk));
        }
        for (int64_t g = 0; g < bqp; g += kLanes) {
          const V16 lo = load(&bf.lo[size_t(g)]), hi = load(&bf.hi[size_t(g)]);
          for (int64_t j = 0; j < bk; ++j) {
            float* sj = st + j * kFwdBq + g;
            store(sj, keep_in_range(load(sj), set1(float(j)), lo, hi, set1(-kInf)));
          }
        }
      }

      // Online softmax, 16 queries at a time (s' = f·S, f > 0):
      //   m_new = max(m_old, max_j s'_j);  alpha = 2^(m_old − m_new);  P_j = 2^(s'_j − m_new)
      //   l_new = alpha·l_old + Σ_j P_j
      for (int64_t g = 0; g < bqp; g += kLanes) {
        const V16 m_old = load(&bf.m[size_t(g)]);
        V16 smax = set1(-kInf);
        for (int64_t j = 0; j < bk; ++j) smax = max(smax, load(st + j * kFwdBq + g));
        const V16 mx = max(m_old, smax * f);
        // A query that has seen no key yet keeps m = -inf; subtract 0 instead (P stays 0).
        const V16 m_use = keep_if_eq(zero(), mx, set1(-kInf), mx);
        const V16 al = exp2(m_old - m_use);
        V16 sum = zero();
        for (int64_t j = 0; j < bk; ++j) {
          float* sj = st + j * kFwdBq + g;
          const V16 pj = exp2(fma(load(sj), f, zero() - m_use));
          store(sj, pj);
          sum = sum + pj;
        }
        store(&bf.l[size_t(g)], fma(al, load(&bf.l[size_t(g)]), sum));
        store(&bf.m[size_t(g)], mx);
        store(&bf.alpha[size_t(g)], al);
      }

      // O = diag(alpha)·O + P·V   (P read from Pᵀ: row stride 1, k stride Bq)
      tile_gemm<Accum::scale_add>(bq, Dvp, bk, bf.st.data(), 1, kFwdBq, bf.v.data(), Dvp, bf.o.data(),
                                  Dvp, bf.alpha.data(), pv_band);
    }

    // O = O / l;  LSE = ln2·(m + log2 l);  a row without keys (l = 0): O = 0, LSE = -inf.
    // (A NaN l, from a NaN input, stays NaN in O and LSE.)
    for (int64_t r = 0; r < bq; ++r) {
      const float l = bf.l[size_t(r)];
      bf.alpha[size_t(r)] = l == 0.f ? 0.f : 1.f / l;
    }
    store_tile(bf.o.data(), Dvp, bq, Dv, bf.alpha.data(), o, p.o.row_stride, gq, p.o.head_stride);
    if (p.lse) {
      for (int64_t r = 0; r < bq; ++r) {
        const float l = bf.l[size_t(r)];
        p.lse[lse_index(p, s, b, h + r % gq, i0 + r / gq)] =
            l == 0.f ? -kInf : (bf.m[size_t(r)] + std::log2(l)) * kLn2;
      }
    }
  }
}

}  // namespace

void flash_fwd_kernel(const Problem& p) {
  dispatch_dtype(p.dtype, [&](auto t) { fwd_impl<decltype(t)>(p); });
}

FA_CPU_END
