// CPU backend: the reference path, the yardstick every other path is checked against.
// Naive attention in fp64: materialises S and P for one (batch, head) at a time
// (O(Sq·Sk) memory per thread by design). Correctness over speed; threaded over heads only.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

namespace fa::cpu {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Scores of one (sequence, query head): s_raw = scale·q·k; s = c·tanh(s_raw/c) with softcap;
// masked entries -inf. Also returns t = tanh(s_raw/c) (for the backward's chain rule).
template <class T>
void scores(const Problem& p, const Seq& sq, int64_t b, int64_t h, std::vector<double>& S,
            std::vector<double>& tanh_out) {
  const int64_t hk = h / p.group();
  const double c = p.softcap;
  S.assign(size_t(sq.sq * sq.sk), kNegInf);
  if (c > 0) tanh_out.assign(size_t(sq.sq * sq.sk), 0.0);
  for (int64_t i = 0; i < sq.sq; ++i) {
    const T* q = row_ptr<const T>(p, p.q, b, sq.q_row0, i, h);
    for (int64_t j = 0; j < sq.sk; ++j) {
      if (!p.mask.visible(i, j, sq.sq, sq.sk)) continue;
      const T* k = row_ptr<const T>(p, p.k, b, sq.k_row0, j, hk);
      double dot = 0;
      for (int64_t d = 0; d < p.head_dim; ++d) dot += double(to_float(q[d])) * double(to_float(k[d]));
      double s = double(p.scale) * dot;
      if (c > 0) {
        const double t = std::tanh(s / c);
        tanh_out[size_t(i * sq.sk + j)] = t;
        s = c * t;
      }
      S[size_t(i * sq.sk + j)] = s;
    }
  }
}

// P = softmax(S) row by row, in place; returns each row's LSE (-inf for a row without keys).
void softmax_rows(int64_t rows, int64_t cols, std::vector<double>& S, std::vector<double>& lse) {
  lse.assign(size_t(rows), kNegInf);
  for (int64_t i = 0; i < rows; ++i) {
    double* s = S.data() + i * cols;
    double m = kNegInf;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, s[j]);
    if (m == kNegInf) {  // fully masked: P = 0
      for (int64_t j = 0; j < cols; ++j) s[j] = 0;
      continue;
    }
    double l = 0;
    for (int64_t j = 0; j < cols; ++j) {
      s[j] = s[j] == kNegInf ? 0.0 : std::exp(s[j] - m);
      l += s[j];
    }
    for (int64_t j = 0; j < cols; ++j) s[j] /= l;
    lse[size_t(i)] = m + std::log(l);
  }
}

template <class T>
void fwd_impl(const Problem& p) {
  const int64_t tasks = p.batch * p.heads_q;
  const int64_t Dv = p.head_dim_v;
  ExceptionSlot slot;
#pragma omp parallel num_threads(thread_count(p))
  {
    std::vector<double> S, tanh_s, lse, acc;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) slot.run([&] {
      const int64_t b = task / p.heads_q, h = task % p.heads_q, hk = h / p.group();
      const Seq sq = sequence(p, b);
      scores<T>(p, sq, b, h, S, tanh_s);
      softmax_rows(sq.sq, sq.sk, S, lse);
      acc.assign(size_t(Dv), 0.0);
      for (int64_t i = 0; i < sq.sq; ++i) {
        // O_i = sum_j P_ij V_j
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sq.sk; ++j) {
          const double pij = S[size_t(i * sq.sk + j)];
          if (pij == 0) continue;
          const T* v = row_ptr<const T>(p, p.v, b, sq.k_row0, j, hk);
          for (int64_t d = 0; d < Dv; ++d) acc[size_t(d)] += pij * double(to_float(v[d]));
        }
        T* o = row_ptr<T>(p, p.o, b, sq.q_row0, i, h);
        for (int64_t d = 0; d < Dv; ++d) o[d] = from_float<T>(float(acc[size_t(d)]));
        if (p.lse) p.lse[lse_index(p, sq, b, h, i)] = float(lse[size_t(i)]);
      }
    });
  }
  slot.rethrow();
}

template <class T>
void bwd_impl(const Problem& p) {
  // One task per (batch, kv head): the group's query heads are summed into dK/dV in order.
  const int64_t tasks = p.batch * p.heads_kv;
  const int64_t D = p.head_dim, Dv = p.head_dim_v, G = p.group();
  ExceptionSlot slot;
#pragma omp parallel num_threads(thread_count(p))
  {
    std::vector<double> S, tanh_s, lse, dP, dK, dV, dq;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) slot.run([&] {
      const int64_t b = task / p.heads_kv, hk = task % p.heads_kv;
      const Seq sq = sequence(p, b);
      dK.assign(size_t(sq.sk * D), 0.0);
      dV.assign(size_t(sq.sk * Dv), 0.0);
      dq.assign(size_t(D), 0.0);
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        scores<T>(p, sq, b, h, S, tanh_s);
        softmax_rows(sq.sq, sq.sk, S, lse);  // S now holds P
        dP.assign(size_t(sq.sk), 0.0);
        for (int64_t i = 0; i < sq.sq; ++i) {
          const T* dout = row_ptr<const T>(p, p.dout, b, sq.q_row0, i, h);
          const T* q = row_ptr<const T>(p, p.q, b, sq.q_row0, i, h);
          const double* P = S.data() + i * sq.sk;
          // dP_ij = dO_i · V_j;  D_i = sum_j P_ij dP_ij
          double Di = 0;
          for (int64_t j = 0; j < sq.sk; ++j) {
            dP[size_t(j)] = 0;
            if (P[j] == 0) continue;
            const T* v = row_ptr<const T>(p, p.v, b, sq.k_row0, j, hk);
            double s = 0;
            for (int64_t d = 0; d < Dv; ++d) s += double(to_float(dout[d])) * double(to_float(v[d]));
            dP[size_t(j)] = s;
            Di += P[j] * s;
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int64_t j = 0; j < sq.sk; ++j) {
            if (P[j] == 0) continue;
            const T* k = row_ptr<const T>(p, p.k, b, sq.k_row0, j, hk);
            // dS = P ∘ (dP − D); softcap: dS_raw = dS · (1 − tanh²)
            double ds = P[j] * (dP[size_t(j)] - Di);
            if (p.softcap > 0) {
              const double t = tanh_s[size_t(i * sq.sk + j)];
              ds *= 1.0 - t * t;
            }
            ds *= double(p.scale);
            // dQ_i += scale·dS_ij K_j;  dK_j += scale·dS_ij Q_i;  dV_j += P_ij dO_i
            for (int64_t d = 0; d < D; ++d) {
              dq[size_t(d)] += ds * double(to_float(k[d]));
              dK[size_t(j * D + d)] += ds * double(to_float(q[d]));
            }
            for (int64_t d = 0; d < Dv; ++d) dV[size_t(j * Dv + d)] += P[j] * double(to_float(dout[d]));
          }
          T* dqp = row_ptr<T>(p, p.dq, b, sq.q_row0, i, h);
          for (int64_t d = 0; d < D; ++d) dqp[d] = from_float<T>(float(dq[size_t(d)]));
        }
      }
      for (int64_t j = 0; j < sq.sk; ++j) {
        T* dk = row_ptr<T>(p, p.dk, b, sq.k_row0, j, hk);
        T* dv = row_ptr<T>(p, p.dv, b, sq.k_row0, j, hk);
        for (int64_t d = 0; d < D; ++d) dk[d] = from_float<T>(float(dK[size_t(j * D + d)]));
        for (int64_t d = 0; d < Dv; ++d) dv[d] = from_float<T>(float(dV[size_t(j * Dv + d)]));
      }
    });
  }
  slot.rethrow();
}

}  // namespace

void reference_fwd(const Problem& p) {
  dispatch_dtype(p.dtype, [&](auto t) { fwd_impl<decltype(t)>(p); });
}

void reference_bwd(const Problem& p) {
  dispatch_dtype(p.dtype, [&](auto t) { bwd_impl<decltype(t)>(p); });
}

}  // namespace fa::cpu
