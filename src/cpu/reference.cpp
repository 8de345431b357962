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

// Rows [0, n) of one head of a strided tensor, widened to fp64 and packed [n][dim].
template <class T>
void load_rows(const Problem& p, const Tensor& t, int64_t b, int64_t row0, int64_t n, int64_t h, int64_t dim,
               std::vector<double>& out) {
  out.resize(size_t(n * dim));
  for (int64_t i = 0; i < n; ++i) {
    const T* src = row_ptr<const T>(p, t, b, row0, i, h);
    for (int64_t d = 0; d < dim; ++d) out[size_t(i * dim + d)] = double(to_float(src[d]));
  }
}

// Scores of one (sequence, query head) from packed Q [sq][D] and K [sk][D]:
// s_raw = scale·q·k; s = c·tanh(s_raw/c) with softcap; masked entries -inf.
// Also returns t = tanh(s_raw/c) (for the backward's chain rule).
void scores(const Problem& p, const Seq& sq, const std::vector<double>& Q, const std::vector<double>& K,
            std::vector<double>& S, std::vector<double>& tanh_out) {
  const int64_t D = p.head_dim;
  const double c = p.softcap;
  S.assign(size_t(sq.sq * sq.sk), kNegInf);
  if (c > 0) tanh_out.assign(size_t(sq.sq * sq.sk), 0.0);
  for (int64_t i = 0; i < sq.sq; ++i) {
    const double* q = Q.data() + i * D;
    for (int64_t j = 0; j < sq.sk; ++j) {
      if (!p.mask.visible(i, j, sq.sq, sq.sk)) continue;
      const double* k = K.data() + j * D;
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
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
    std::vector<double> S, tanh_s, lse, acc, Q, K, V;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) slot.run([&] {
      const int64_t b = task / p.heads_q, h = task % p.heads_q, hk = h / p.group();
      const Seq sq = sequence(p, b);
      load_rows<T>(p, p.q, b, sq.q_row0, sq.sq, h, p.head_dim, Q);
      load_rows<T>(p, p.k, b, sq.k_row0, sq.sk, hk, p.head_dim, K);
      load_rows<T>(p, p.v, b, sq.k_row0, sq.sk, hk, Dv, V);
      scores(p, sq, Q, K, S, tanh_s);
      softmax_rows(sq.sq, sq.sk, S, lse);
      acc.assign(size_t(Dv), 0.0);
      for (int64_t i = 0; i < sq.sq; ++i) {
        // O_i = sum_j P_ij V_j
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sq.sk; ++j) {
          const double pij = S[size_t(i * sq.sk + j)];
          if (pij == 0) continue;
          const double* v = V.data() + j * Dv;
          for (int64_t d = 0; d < Dv; ++d) acc[size_t(d)] += pij * v[d];
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
    std::vector<double> S, tanh_s, lse, dP, dK, dV, dq, Q, K, V, dO;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) slot.run([&] {
      const int64_t b = task / p.heads_kv, hk = task % p.heads_kv;
      const Seq sq = sequence(p, b);
      load_rows<T>(p, p.k, b, sq.k_row0, sq.sk, hk, D, K);
      load_rows<T>(p, p.v, b, sq.k_row0, sq.sk, hk, Dv, V);
      dK.assign(size_t(sq.sk * D), 0.0);
      dV.assign(size_t(sq.sk * Dv), 0.0);
      dq.assign(size_t(D), 0.0);
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        load_rows<T>(p, p.q, b, sq.q_row0, sq.sq, h, D, Q);
        load_rows<T>(p, p.dout, b, sq.q_row0, sq.sq, h, Dv, dO);
        scores(p, sq, Q, K, S, tanh_s);
        softmax_rows(sq.sq, sq.sk, S, lse);  // S now holds P
        dP.assign(size_t(sq.sk), 0.0);
        for (int64_t i = 0; i < sq.sq; ++i) {
          const double* dout = dO.data() + i * Dv;
          const double* q = Q.data() + i * D;
          const double* P = S.data() + i * sq.sk;
          // D_i = dO_i · O_i with the O given (the backward is a function of o, as in the flash
          // path; with exact O it equals sum_j P_ij dP_ij);  dP_ij = dO_i · V_j
          const T* o = row_ptr<const T>(p, p.o, b, sq.q_row0, i, h);
          double Di = 0;
          for (int64_t d = 0; d < Dv; ++d) Di += dout[d] * double(to_float(o[d]));
          for (int64_t j = 0; j < sq.sk; ++j) {
            dP[size_t(j)] = 0;
            if (P[j] == 0) continue;
            const double* v = V.data() + j * Dv;
            double s = 0;
            for (int64_t d = 0; d < Dv; ++d) s += dout[d] * v[d];
            dP[size_t(j)] = s;
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int64_t j = 0; j < sq.sk; ++j) {
            if (P[j] == 0) continue;
            const double* k = K.data() + j * D;
            // dS = P ∘ (dP − D); softcap: dS_raw = dS · (1 − tanh²)
            double ds = P[j] * (dP[size_t(j)] - Di);
            if (p.softcap > 0) {
              const double t = tanh_s[size_t(i * sq.sk + j)];
              ds *= 1.0 - t * t;
            }
            ds *= double(p.scale);
            // dQ_i += scale·dS_ij K_j;  dK_j += scale·dS_ij Q_i;  dV_j += P_ij dO_i
            double* dk = dK.data() + j * D;
            double* dv = dV.data() + j * Dv;
            for (int64_t d = 0; d < D; ++d) {
              dq[size_t(d)] += ds * k[d];
              dk[d] += ds * q[d];
            }
            for (int64_t d = 0; d < Dv; ++d) dv[d] += P[j] * dout[d];
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
