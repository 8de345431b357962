// CPU backend: the FlashAttention backward.
// D = rowsum(dO∘O); then K/V blocks outer, Q blocks inner, P recomputed from LSE, dK/dV of the
// K/V block held per thread; dQ reduced in a fixed order. Extra memory O(S·D), never O(Sq·Sk).
//
// Determinism (1 thread and N threads give the same bits): a task is (batch, kv head, key chunk)
// and owns the dK/dV rows of its chunk outright, summing the group's query heads in head order.
// dQ needs every key: each chunk adds its contribution, K/V blocks in ascending order, into its
// own fp32 partial dQ[chunk]; a last pass sums the partials in chunk order. The chunk count
// depends on the problem only, never on the thread count. Memory: chunks × Hq × rows × D fp32
// (capped, see chunk_count), against the second pass that recomputes S, dP and dS with Q blocks
// outer (7 GEMMs instead of 5).
//
// Scores are [queries][keys], S = Q·Kᵀ, unlike the forward: Kᵀ and Vᵀ are transposed once per
// K/V block (they stay), while the Q and dO blocks that pass by are only converted, never
// transposed. dV += Pᵀ·dO and dK += dSᵀ·Q read P and dS through transposed strides.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
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

struct BwdBuffers {
  std::vector<float> kt;   // [D][Bkp]  Kᵀ (keys padded with 0): B of S = Q·Kᵀ
  std::vector<float> vt;   // [Dv][Bkp] Vᵀ: B of dP = dO·Vᵀ
  std::vector<float> k;    // [Bk][Dp]  K: B of dQ += dS·K
  std::vector<float> dk;   // [Bk][Dp]  dK accumulator
  std::vector<float> dv;   // [Bk][Dvp] dV accumulator
  std::vector<float> q;    // [Bq][Dp]  Q
  std::vector<float> dout; // [Bq][Dvp] dO
  std::vector<float> s;    // [Bq][Bkp] S, then P
  std::vector<float> dp;   // [Bq][Bkp] dP, then dS (times scale)
  std::vector<float> th;   // [Bq][Bkp] tanh(s/c), softcap only
  std::vector<uint16_t> ktp, vtp;  // [D/2][Bkp][2], [Dv/2][Bkp][2]: Kᵀ, Vᵀ in bf16 pairs
  std::vector<int64_t> klo, khi;   // [Bq]  partial blocks: visible keys of each query (block-relative)
  std::vector<int64_t> qlo, qhi;   // [Bkp] and the queries that see each key
};

// Key chunks per (batch, kv head): enough tasks for the cores (16 in all, so a causal mask's
// uneven chunks still balance), at least two K/V blocks per chunk, and the partial dQ buffers
// within 256 MiB. Depends on the problem only: the summation order must not follow the threads.
int64_t chunk_count(const Problem& p, int64_t rows, int64_t Dp) {
  const int64_t kv_blocks = (p.seqlen_k + kBwdBk - 1) / kBwdBk;
  const int64_t want = (16 + p.batch * p.heads_kv - 1) / (p.batch * p.heads_kv);
  const int64_t per_chunk = std::max<int64_t>(1, p.heads_q * rows * Dp * int64_t(sizeof(float)));
  const int64_t by_memory = (int64_t(256) << 20) / per_chunk;
  return std::max<int64_t>(1, std::min({want, kv_blocks / 2, by_memory}));
}

template <class T>
void bwd_impl(const Problem& p) {
  const int64_t D = p.head_dim, Dp = round_up(D, kLanes);
  const int64_t Dv = p.head_dim_v, Dvp = round_up(Dv, kLanes);
  const int64_t G = p.group(), Hq = p.heads_q;
  const int64_t rows = total_q_rows(p);
  const bool softcap = p.softcap > 0;
  // S is scaled after the GEMM: x = qs·S (log2 units), or tanh(qs·S) with softcap.
  const V16 qs = set1(softcap ? p.scale / p.softcap : p.scale * kLog2e);
  const V16 cap = set1(p.softcap * kLog2e);
  const V16 ds_scale = set1(p.scale);
  const int nt = thread_count(p);
  // bf16 with AVX512-BF16: S = Q·Kᵀ and dP = dO·Vᵀ by exact bf16 products (tile_gemm_bf16),
  // Q and dO read in place; needs an even inner dimension.
  constexpr bool kPairs = kHaveBf16Dot && std::is_same_v<T, bf16>;
  const bool s_pairs = kPairs && D % 2 == 0, dp_pairs = kPairs && Dv % 2 == 0;

  const int64_t NC = chunk_count(p, rows, Dp);
  std::unique_ptr<float[]> dq_part(new float[size_t(NC * Hq * rows * Dp)]);
  auto dq_rows = [&](int64_t c, int64_t h, int64_t row) {
    return dq_part.get() + ((c * Hq + h) * rows + row) * Dp;
  };

  constexpr int64_t Bkp = round_up(kBwdBk, kLanes);
  std::vector<BwdBuffers> bufs(static_cast<size_t>(nt));
  for (auto& bf : bufs) {
    if (s_pairs)
      bf.ktp.resize(size_t(D * Bkp));
    else
      bf.kt.resize(size_t(D * Bkp));
    if (dp_pairs)
      bf.vtp.resize(size_t(Dv * Bkp));
    else
      bf.vt.resize(size_t(Dv * Bkp));
    bf.k.resize(size_t(kBwdBk * Dp));
    bf.dk.resize(size_t(kBwdBk * Dp));
    bf.dv.resize(size_t(kBwdBk * Dvp));
    bf.q.resize(size_t(kBwdBq * Dp));
    bf.dout.resize(size_t(kBwdBq * Dvp));
    bf.s.resize(size_t(kBwdBq * Bkp));
    bf.dp.resize(size_t(kBwdBq * Bkp));
    if (softcap) bf.th.resize(size_t(kBwdBq * Bkp));
    bf.klo.resize(kBwdBq);
    bf.khi.resize(kBwdBq);
    bf.qlo.resize(Bkp);
    bf.qhi.resize(Bkp);
  }
  // D_i = rowsum(dO_i ∘ O_i), laid out like the LSE. It is summed in the order and with the
  // instructions that dP_ij = dO_i · V_j uses, so that dP − D is exactly 0 where O_i = V_j
  // (a query with one visible key: its dQ and the key's dK are then exactly 0, as in exact math).
  // Scratch is written before it is read: allocated without initialisation.
  std::unique_ptr<float[]> Dd(new float[size_t(Hq * rows)]);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t task = 0; task < p.batch * Hq; ++task) {
    const int64_t b = task / Hq, h = task % Hq;
    const Seq s = sequence(p, b);
    if (dp_pairs) {
      // 16 rows at a time: the diagonal of dO·Oᵀ by the bf16-pair kernel of dP = dO·Vᵀ.
      BwdBuffers& bf = bufs[size_t(this_thread())];
      constexpr int64_t kRows = kLanes;
      for (int64_t i0 = 0; i0 < s.sq; i0 += kRows) {
        const int64_t n = std::min(kRows, s.sq - i0);
        const T* o = row_ptr<const T>(p, p.o, b, s.q_row0, i0, h);
        const T* dout = row_ptr<const T>(p, p.dout, b, s.q_row0, i0, h);
        if constexpr (kPairs) pack_pairs_transposed(o, p.o.row_stride, n, Dv, bf.vtp.data(), kRows);
        tile_gemm_bf16(n, kRows, Dv, reinterpret_cast<const uint16_t*>(dout), p.dout.row_stride, bf.vtp.data(),
                       2 * kRows, bf.s.data(), kRows);
        for (int64_t r = 0; r < n; ++r) Dd[size_t(lse_index(p, s, b, h, i0 + r))] = bf.s[size_t(r * kRows + r)];
      }
      continue;
    }
    for (int64_t i = 0; i < s.sq; ++i) {
      const T* o = row_ptr<const T>(p, p.o, b, s.q_row0, i, h);
      const T* dout = row_ptr<const T>(p, p.dout, b, s.q_row0, i, h);
      float acc = 0.f;  // acc = fma(dO_d, O_d, acc), d ascending, as the fp32 dP kernel
      for (int64_t d = 0; d < Dv; ++d) acc += to_float(dout[d]) * to_float(o[d]);
      Dd[size_t(lse_index(p, s, b, h, i))] = acc;
    }
  }

  alignas(64) static const float kIota[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

  const int64_t bhk = p.batch * p.heads_kv;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t task = 0; task < NC * bhk; ++task) {
    // Chunk 0 first: under a causal mask the first keys are seen by the most queries.
    const int64_t c = task / bhk, b = (task % bhk) / p.heads_kv, hk = task % p.heads_kv;
    const Seq s = sequence(p, b);
    BwdBuffers& bf = bufs[size_t(this_thread())];
    for (int64_t h = hk * G; h < (hk + 1) * G; ++h)
      std::fill(dq_rows(c, h, s.q_row0), dq_rows(c, h, s.q_row0 + s.sq), 0.f);

    const int64_t nkb = (s.sk + kBwdBk - 1) / kBwdBk;
    const int64_t kb_first = c * nkb / NC, kb_last = (c + 1) * nkb / NC;
    for (int64_t kbi = kb_first; kbi < kb_last; ++kbi) {
      const int64_t j0 = kbi * kBwdBk, bk = std::min(kBwdBk, s.sk - j0), j1 = j0 + bk;
      const T* k = row_ptr<const T>(p, p.k, b, s.k_row0, j0, hk);
      const T* v = row_ptr<const T>(p, p.v, b, s.k_row0, j0, hk);
      if constexpr (kPairs) {
        if (s_pairs) pack_pairs_transposed(k, p.k.row_stride, bk, D, bf.ktp.data(), Bkp);
        if (dp_pairs) pack_pairs_transposed(v, p.v.row_stride, bk, Dv, bf.vtp.data(), Bkp);
      }
      if (!s_pairs) load_tile_transposed(k, p.k.row_stride, bk, D, 1.f, bf.kt.data(), Bkp);
      if (!dp_pairs) load_tile_transposed(v, p.v.row_stride, bk, Dv, 1.f, bf.vt.data(), Bkp);
      load_tile(k, p.k.row_stride, bk, D, 1.f, bf.k.data(), Dp);
      std::fill(bf.dk.begin(), bf.dk.end(), 0.f);
      std::fill(bf.dv.begin(), bf.dv.end(), 0.f);

      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < s.sq; i0 += kBwdBq) {
          const int64_t bq = std::min(kBwdBq, s.sq - i0), il = i0 + bq - 1;
          // Does any row of this Q block see any key of this K/V block? key_begin/key_end
          // grow with the row, so once the first row starts past the block, all later do.
          if (p.mask.key_begin(i0, s.sq, s.sk) >= j1) break;
          if (p.mask.key_end(il, s.sq, s.sk) <= j0) continue;
          const bool full = p.mask.key_begin(il, s.sq, s.sk) <= j0 && p.mask.key_end(i0, s.sq, s.sk) >= j1;

          const T* q = row_ptr<const T>(p, p.q, b, s.q_row0, i0, h);
          const T* dout = row_ptr<const T>(p, p.dout, b, s.q_row0, i0, h);
          load_tile(q, p.q.row_stride, bq, D, 1.f, bf.q.data(), Dp);
          load_tile(dout, p.dout.row_stride, bq, Dv, 1.f, bf.dout.data(), Dvp);
          // The next Q block's Q, dO and partial dQ stream into L2 while this one is computed.
          if (i0 + bq < s.sq) {
            const int64_t nq = std::min(kBwdBq, s.sq - i0 - bq);
            prefetch_tile(row_ptr<const T>(p, p.q, b, s.q_row0, i0 + bq, h), p.q.row_stride, nq, D);
            prefetch_tile(row_ptr<const T>(p, p.dout, b, s.q_row0, i0 + bq, h), p.dout.row_stride, nq, Dv);
            prefetch_tile(dq_rows(c, h, s.q_row0 + i0 + bq), Dp, nq, Dp);
          }

          // A partial pair: the band of visible (query, key) pairs, so that register tiles outside
          // it are skipped (S, dP) or their inner loop cut short (dV, dK, dQ). Both ranges grow
          // monotonically, so the queries that see key c follow from a two-pointer sweep.
          Band by_key, k_by_key, k_by_query;
          if (!full) {
            for (int64_t r = 0; r < bq; ++r) {
              bf.klo[size_t(r)] = std::clamp<int64_t>(p.mask.key_begin(i0 + r, s.sq, s.sk) - j0, 0, bk);
              bf.khi[size_t(r)] =
                  std::clamp<int64_t>(p.mask.key_end(i0 + r, s.sq, s.sk) - j0, bf.klo[size_t(r)], bk);
            }
            int64_t lo = 0, hi = 0;
            for (int64_t c = 0; c < bk; ++c) {
              while (lo < bq && bf.khi[size_t(lo)] <= c) ++lo;  // first query whose range ends past c
              while (hi < bq && bf.klo[size_t(hi)] <= c) ++hi;  // first query whose range starts past c
              bf.qlo[size_t(c)] = lo;
              bf.qhi[size_t(c)] = std::max(lo, hi);
            }
            for (int64_t c = bk; c < Bkp; ++c) bf.qlo[size_t(c)] = bf.qhi[size_t(c)] = bf.qhi[size_t(bk - 1)];
            by_key = {Band::rows_by_col, bf.qlo.data(), bf.qhi.data()};
            k_by_key = {Band::k_by_row, bf.qlo.data(), bf.qhi.data()};
            k_by_query = {Band::k_by_row, bf.klo.data(), bf.khi.data()};
          }

          float* sp = bf.s.data();
          float* dp = bf.dp.data();
          // S = Q·Kᵀ;  dP = dO·Vᵀ   [bq][Bkp]
          if (s_pairs)
            tile_gemm_bf16(bq, Bkp, D, reinterpret_cast<const uint16_t*>(q), p.q.row_stride, bf.ktp.data(),
                           2 * Bkp, sp, Bkp, by_key);
          else
            tile_gemm<Accum::store>(bq, Bkp, D, bf.q.data(), Dp, 1, bf.kt.data(), Bkp, sp, Bkp, nullptr, by_key);
          if (dp_pairs)
            tile_gemm_bf16(bq, Bkp, Dv, reinterpret_cast<const uint16_t*>(dout), p.dout.row_stride,
                           bf.vtp.data(), 2 * Bkp, dp, Bkp, by_key);
          else
            tile_gemm<Accum::store>(bq, Bkp, Dv, bf.dout.data(), Dvp, 1, bf.vt.data(), Bkp, dp, Bkp, nullptr,
                                    by_key);

          for (int64_t r = 0; r < bq; ++r) {
            const int64_t idx = lse_index(p, s, b, h, i0 + r);
            // LSE' = log2(e)·LSE; a row without keys (-inf) gets P = 0.
            const float lse_r = p.lse[idx] == -kInf ? kInf : p.lse[idx] * kLog2e;
            const V16 lse = set1(lse_r), dd = set1(Dd[size_t(idx)]);
            V16 lo = zero(), hi = zero();
            if (!full) {
              lo = set1(float(clamp_rel(p.mask.key_begin(i0 + r, s.sq, s.sk) - j0, bk)));
              hi = set1(float(clamp_rel(p.mask.key_end(i0 + r, s.sq, s.sk) - j0, bk)));
            }
            float* srow = sp + r * Bkp;
            float* dprow = dp + r * Bkp;
            for (int64_t g = 0; g < Bkp; g += kLanes) {
              // x = s' − LSE' with s' = log2(e)·scale·q·k, or c·log2(e)·tanh(scale·q·k / c)
              V16 x, th = zero();
              if (softcap) {
                th = simd::tanh(load(srow + g) * qs);
                x = fma(cap, th, zero() - lse);
              } else {
                x = fma(load(srow + g), qs, zero() - lse);
              }
              const V16 key = load(kIota) + set1(float(g));
              if (!full) x = keep_in_range(x, key, lo, hi, set1(-kInf));
              // P = 2^x;  dS = P ∘ (dP − D), times scale (and 1 − tanh² with softcap)
              const V16 pv = exp2(x);
              V16 ds = pv * (load(dprow + g) - dd) * ds_scale;
              if (softcap) ds = fnma(ds * th, th, ds);
              // Masked: exactly 0, whatever a skipped register tile left in S and dP.
              if (!full) ds = keep_in_range(ds, key, lo, hi, zero());
              store(srow + g, pv);
              store(dprow + g, ds);
            }
          }

          // dV += Pᵀ·dO;  dK += dSᵀ·Q   (Pᵀ, dSᵀ read through transposed strides)
          tile_gemm<Accum::add>(bk, Dvp, bq, sp, 1, Bkp, bf.dout.data(), Dvp, bf.dv.data(), Dvp, nullptr, k_by_key);
          tile_gemm<Accum::add>(bk, Dp, bq, dp, 1, Bkp, bf.q.data(), Dp, bf.dk.data(), Dp, nullptr, k_by_key);
          // dQ[chunk] += dS·K
          tile_gemm<Accum::add>(bq, Dp, bk, dp, Bkp, 1, bf.k.data(), Dp, dq_rows(c, h, s.q_row0 + i0), Dp, nullptr,
                                k_by_query);
        }
      }
      store_tile(bf.dk.data(), Dp, bk, D, nullptr, row_ptr<T>(p, p.dk, b, s.k_row0, j0, hk), p.dk.row_stride);
      store_tile(bf.dv.data(), Dvp, bk, Dv, nullptr, row_ptr<T>(p, p.dv, b, s.k_row0, j0, hk),
                 p.dv.row_stride);
    }
  }

  // dQ = Σ_chunk dQ[chunk], chunks in ascending order.
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t task = 0; task < p.batch * Hq; ++task) {
    const int64_t b = task / Hq, h = task % Hq;
    const Seq s = sequence(p, b);
    float* acc = bufs[size_t(this_thread())].q.data();  // Dp floats of scratch
    for (int64_t i = 0; i < s.sq; ++i) {
      std::copy(dq_rows(0, h, s.q_row0 + i), dq_rows(0, h, s.q_row0 + i) + D, acc);
      for (int64_t c = 1; c < NC; ++c) {
        const float* part = dq_rows(c, h, s.q_row0 + i);
        for (int64_t d = 0; d < D; ++d) acc[d] += part[d];
      }
      T* dq = row_ptr<T>(p, p.dq, b, s.q_row0, i, h);
      for (int64_t d = 0; d < D; ++d) dq[d] = from_float<T>(acc[d]);
    }
  }
}

}  // namespace

void flash_bwd_kernel(const Problem& p) {
  dispatch_dtype(p.dtype, [&](auto t) { bwd_impl<decltype(t)>(p); });
}

FA_CPU_END
