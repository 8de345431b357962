// Tests of the CPU backend through properties attention must have, whatever the tiling:
// key permutation invariance, linearity in V, batch = items one by one, varlen = per-sequence
// runs, dK summing to zero over keys, fully masked rows, and strided layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace fat {
namespace {

constexpr fa_algorithm kAlgorithms[] = {FA_ALGORITHM_FLASH, FA_ALGORITHM_REFERENCE};
const char* alg_name(fa_algorithm a) { return a == FA_ALGORITHM_REFERENCE ? "reference" : "flash"; }

Problem make(const char* name, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
             int64_t Dv) {
  Problem p;
  p.name = name;
  p.B = B;
  p.Sq = Sq;
  p.Sk = Sk;
  p.Hq = Hq;
  p.Hkv = Hkv;
  p.D = D;
  p.Dv = Dv;
  return p;
}

std::string trace(uint64_t seed, const Problem& p, fa_dtype dt, fa_algorithm alg) {
  return "seed " + std::to_string(seed) + " (FA_TEST_SEED reruns it); " + p.str() + " " +
         dtype_name(dt) + " " + alg_name(alg);
}

void expect_close(const char* what, const std::vector<float>& a, const std::vector<float>& b,
                  double rel = 1e-5) {
  const double err = max_err(a, b);
  const double tol = rel * std::max(max_abs(b), 1e-30);
  EXPECT_LE(err, tol) << what << ": max error " << err << " > " << tol;
}

// Rows [r0, r0 + n) of a logical [rows, heads, dim] tensor.
std::vector<float> rows(const std::vector<float>& t, int64_t r0, int64_t n, int64_t width) {
  return std::vector<float>(t.begin() + r0 * width, t.begin() + (r0 + n) * width);
}

// ---- permuting keys ---------------------------------------------------------------------------

// Jointly permuting the rows of K and V (no mask) leaves O and LSE unchanged, leaves dQ
// unchanged, and permutes dK and dV the same way.
TEST(Properties, KeyPermutationInvariance) {
  for (float softcap : {0.f, 2.f})
    for (fa_algorithm alg : kAlgorithms) {
      Problem p = make("perm", 2, 37, 53, 4, 2, 32, 24);
      p.softcap = softcap;
      const uint64_t seed = test_seed();
      SCOPED_TRACE(trace(seed, p, FA_DTYPE_FP32, alg));
      std::mt19937_64 rng(seed);
      const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
      std::vector<int64_t> perm(static_cast<size_t>(p.Sk));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      Inputs pin = in;
      const int64_t wk = p.Hkv * p.D, wv = p.Hkv * p.Dv;
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t j = 0; j < p.Sk; ++j) {
          const int64_t dst = b * p.Sk + j, src = b * p.Sk + perm[j];
          std::copy_n(in.k.begin() + src * wk, wk, pin.k.begin() + dst * wk);
          std::copy_n(in.v.begin() + src * wv, wv, pin.v.begin() + dst * wv);
        }
      RunOpts o;
      o.algorithm = alg;
      const Outputs a = run(p, in, o, true), b = run(p, pin, o, true);
      if (HasFailure()) return;
      expect_close("O", b.o, a.o);
      expect_close("LSE", b.lse, a.lse);
      expect_close("dQ", b.dq, a.dq);
      std::vector<float> dk = b.dk, dv = b.dv;  // un-permute the gradients of the permuted run
      for (int64_t bb = 0; bb < p.B; ++bb)
        for (int64_t j = 0; j < p.Sk; ++j) {
          const int64_t permuted = bb * p.Sk + j, orig = bb * p.Sk + perm[j];
          std::copy_n(b.dk.begin() + permuted * wk, wk, dk.begin() + orig * wk);
          std::copy_n(b.dv.begin() + permuted * wv, wv, dv.begin() + orig * wv);
        }
      expect_close("dK", dk, a.dk);
      expect_close("dV", dv, a.dv);
    }
}

// ---- linearity in V ---------------------------------------------------------------------------

TEST(Properties, OutputIsLinearInV) {
  for (fa_algorithm alg : kAlgorithms) {
    Problem p = make("linear_v", 2, 41, 66, 6, 2, 48, 40);
    p.causal = true;
    const uint64_t seed = test_seed();
    SCOPED_TRACE(trace(seed, p, FA_DTYPE_FP32, alg));
    std::mt19937_64 rng(seed);
    Inputs in1 = random_inputs(p, FA_DTYPE_FP32, rng);
    Inputs in2 = random_inputs(p, FA_DTYPE_FP32, rng);
    in2.q = in1.q;
    in2.k = in1.k;
    const float a = 0.75f, c = -1.25f;
    Inputs mix = in1;
    for (size_t i = 0; i < mix.v.size(); ++i) mix.v[i] = a * in1.v[i] + c * in2.v[i];
    RunOpts o;
    o.algorithm = alg;
    const Outputs r1 = run(p, in1, o, false), r2 = run(p, in2, o, false), rm = run(p, mix, o, false);
    if (HasFailure()) return;
    std::vector<float> want(r1.o.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = a * r1.o[i] + c * r2.o[i];
    expect_close("O(a V1 + c V2) vs a O(V1) + c O(V2)", rm.o, want);
    EXPECT_TRUE(bitwise_equal(rm.lse, r1.lse)) << "LSE depends on V";
  }
}

// ---- batch = items ----------------------------------------------------------------------------

// Slices item b of a dense problem's logical inputs.
Inputs item(const Problem& p, const Inputs& in, int64_t b) {
  Inputs r;
  r.q = rows(in.q, b * p.Sq, p.Sq, p.Hq * p.D);
  r.k = rows(in.k, b * p.Sk, p.Sk, p.Hkv * p.D);
  r.v = rows(in.v, b * p.Sk, p.Sk, p.Hkv * p.Dv);
  r.dout = rows(in.dout, b * p.Sq, p.Sq, p.Hq * p.Dv);
  return r;
}

TEST(Properties, BatchEqualsItemsBitwise) {
  for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (fa_algorithm alg : kAlgorithms) {
      Problem p = make("batch", 3, 45, 70, 4, 2, 40, 24);
      p.causal = true;
      p.window_left = 20;
      p.softcap = 3.f;
      const uint64_t seed = test_seed();
      SCOPED_TRACE(trace(seed, p, dt, alg));
      std::mt19937_64 rng(seed);
      const Inputs in = random_inputs(p, dt, rng);
      RunOpts o;
      o.dtype = dt;
      o.algorithm = alg;
      const Outputs all = run(p, in, o, true);
      if (HasFailure()) return;
      Problem one = p;
      one.B = 1;
      for (int64_t b = 0; b < p.B; ++b) {
        SCOPED_TRACE("item " + std::to_string(b));
        const Outputs r = run(one, item(p, in, b), o, true);
        if (HasFailure()) return;
        EXPECT_TRUE(bitwise_equal(r.o, rows(all.o, b * p.Sq, p.Sq, p.Hq * p.Dv))) << "O";
        EXPECT_TRUE(bitwise_equal(r.lse, rows(all.lse, b * p.Hq, p.Hq, p.Sq))) << "LSE";
        EXPECT_TRUE(bitwise_equal(r.dq, rows(all.dq, b * p.Sq, p.Sq, p.Hq * p.D))) << "dQ";
        EXPECT_TRUE(bitwise_equal(r.dk, rows(all.dk, b * p.Sk, p.Sk, p.Hkv * p.D))) << "dK";
        EXPECT_TRUE(bitwise_equal(r.dv, rows(all.dv, b * p.Sk, p.Sk, p.Hkv * p.Dv))) << "dV";
      }
    }
}

// ---- varlen = per-sequence runs ---------------------------------------------------------------

TEST(Properties, VarlenEqualsPerSequenceRuns) {
  for (bool causal : {false, true})
    for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16})
      for (fa_algorithm alg : kAlgorithms) {
        Problem p = make("varlen", 6, 70, 81, 4, 1, 32, 16);
        p.causal = causal;
        p.lens_q = {37, 0, 15, 1, 70, 9};
        p.lens_k = {50, 20, 0, 1, 64, 81};
        const uint64_t seed = test_seed();
        SCOPED_TRACE(trace(seed, p, dt, alg));
        std::mt19937_64 rng(seed);
        const Inputs in = random_inputs(p, dt, rng);
        RunOpts o;
        o.dtype = dt;
        o.algorithm = alg;
        const Outputs all = run(p, in, o, true);
        if (HasFailure()) return;
        for (int64_t b = 0; b < p.B; ++b) {
          Problem one = p;
          one.lens_q.clear();
          one.lens_k.clear();
          one.B = 1;
          one.Sq = p.lens_q[b];
          one.Sk = p.lens_k[b];
          SCOPED_TRACE("sequence " + std::to_string(b) + ": " + one.str());
          Inputs r;
          r.q = rows(in.q, p.row0_q(b), one.Sq, p.Hq * p.D);
          r.k = rows(in.k, p.row0_k(b), one.Sk, p.Hkv * p.D);
          r.v = rows(in.v, p.row0_k(b), one.Sk, p.Hkv * p.Dv);
          r.dout = rows(in.dout, p.row0_q(b), one.Sq, p.Hq * p.Dv);
          const Outputs s = run(one, r, o, true);
          if (HasFailure()) return;
          EXPECT_TRUE(bitwise_equal(s.o, rows(all.o, p.row0_q(b), one.Sq, p.Hq * p.Dv))) << "O";
          for (int64_t h = 0; h < p.Hq; ++h)
            for (int64_t i = 0; i < one.Sq; ++i)
              ASSERT_EQ(std::memcmp(&s.lse[one.lse_index(0, h, i)], &all.lse[p.lse_index(b, h, i)], 4), 0)
                  << "LSE head " << h << " row " << i << ": " << s.lse[one.lse_index(0, h, i)]
                  << " vs " << all.lse[p.lse_index(b, h, i)];
          EXPECT_TRUE(bitwise_equal(s.dq, rows(all.dq, p.row0_q(b), one.Sq, p.Hq * p.D))) << "dQ";
          EXPECT_TRUE(bitwise_equal(s.dk, rows(all.dk, p.row0_k(b), one.Sk, p.Hkv * p.D))) << "dK";
          EXPECT_TRUE(bitwise_equal(s.dv, rows(all.dv, p.row0_k(b), one.Sk, p.Hkv * p.Dv))) << "dV";
        }
      }
}

// ---- dK sums to zero over keys ----------------------------------------------------------------

// Softmax rows sum to 1, so sum_j dS_ij = 0 and sum_j dK_j = scale * sum_i (sum_j dS_ij) Q_i = 0
// per (batch, kv head, dim), with any mask (not with softcap, whose chain factor differs per key).
TEST(Properties, KeyGradientsSumToZero) {
  for (int mask = 0; mask < 3; ++mask)
    for (fa_algorithm alg : kAlgorithms) {
      Problem p = make("dk_sum", 2, 33, 47, 4, 2, 16, 20);
      p.causal = mask == 1;
      if (mask == 2) {
        p.window_left = 9;
        p.window_right = 4;
      }
      const uint64_t seed = test_seed();
      SCOPED_TRACE(trace(seed, p, FA_DTYPE_FP32, alg));
      std::mt19937_64 rng(seed);
      const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
      RunOpts o;
      o.algorithm = alg;
      const Outputs g = run(p, in, o, true);
      if (HasFailure()) return;
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.Hkv; ++h)
          for (int64_t d = 0; d < p.D; ++d) {
            double sum = 0, mass = 0;
            for (int64_t j = 0; j < p.Sk; ++j) {
              const double x = g.dk[((b * p.Sk + j) * p.Hkv + h) * p.D + d];
              sum += x;
              mass += std::fabs(x);
            }
            ASSERT_LE(std::fabs(sum), 1e-4 * mass + 1e-6)
                << "sum_j dK[b=" << b << ", j, h=" << h << ", d=" << d << "] = " << sum
                << " (sum of |dK| " << mass << ")";
          }
    }
}

// ---- fully masked rows ------------------------------------------------------------------------

// Rows with no visible key: O = 0, LSE = -inf, dQ = 0; keys no row sees: dK = dV = 0.
void expect_masked_semantics(const Problem& p, const Outputs& out) {
  EXPECT_EQ(check_lse_pattern(p, out.lse), "");
  for (int64_t b = 0; b < p.B; ++b) {
    std::vector<bool> key_seen(static_cast<size_t>(p.len_k(b)), false);
    for (int64_t i = 0; i < p.len_q(b); ++i) {
      bool any = false;
      for (int64_t j = 0; j < p.len_k(b); ++j)
        if (p.visible(b, i, j)) any = key_seen[j] = true;
      if (any) continue;
      const int64_t r = p.row0_q(b) + i;
      for (int64_t h = 0; h < p.Hq; ++h) {
        for (int64_t d = 0; d < p.Dv; ++d)
          ASSERT_EQ(out.o[(r * p.Hq + h) * p.Dv + d], 0.f) << "O, b=" << b << " i=" << i;
        for (int64_t d = 0; d < p.D; ++d)
          ASSERT_EQ(out.dq[(r * p.Hq + h) * p.D + d], 0.f) << "dQ, b=" << b << " i=" << i;
      }
    }
    for (int64_t j = 0; j < p.len_k(b); ++j) {
      if (key_seen[j]) continue;
      const int64_t r = p.row0_k(b) + j;
      for (int64_t h = 0; h < p.Hkv; ++h) {
        for (int64_t d = 0; d < p.D; ++d)
          ASSERT_EQ(out.dk[(r * p.Hkv + h) * p.D + d], 0.f) << "dK of an unseen key, b=" << b << " j=" << j;
        for (int64_t d = 0; d < p.Dv; ++d)
          ASSERT_EQ(out.dv[(r * p.Hkv + h) * p.Dv + d], 0.f) << "dV of an unseen key, b=" << b << " j=" << j;
      }
    }
  }
}

std::vector<Problem> masked_problems() {
  std::vector<Problem> v;
  Problem a = make("diag_sq_gt_sk", 2, 20, 7, 2, 1, 16, 8);  // rows 0..12 see nothing
  a.window_left = 0;
  a.window_right = 0;
  v.push_back(a);
  Problem b = make("diag_sq_lt_sk", 1, 5, 9, 2, 2, 8, 8);  // keys 0..3 are never seen
  b.window_left = 0;
  b.window_right = 0;
  v.push_back(b);
  Problem c = make("causal_sq_gt_sk", 1, 40, 3, 3, 1, 32, 32);
  c.causal = true;
  v.push_back(c);
  Problem d = make("window_behind", 1, 30, 30, 2, 1, 8, 8);  // right side behind the diagonal
  d.window_left = 10;
  d.window_right = 0;
  d.causal = true;
  d.softcap = 1.f;
  v.push_back(d);
  v.push_back(make("no_keys", 2, 6, 0, 2, 1, 16, 16));     // Sk = 0
  v.push_back(make("no_queries", 2, 0, 5, 2, 1, 16, 16));  // Sq = 0: dK = dV = 0
  Problem e = make("varlen_empty", 4, 4, 3, 2, 1, 8, 12);
  e.lens_q = {4, 0, 2, 0};
  e.lens_k = {0, 3, 2, 0};
  v.push_back(e);
  return v;
}

TEST(Properties, FullyMaskedRows) {
  for (const Problem& p : masked_problems())
    for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16, FA_DTYPE_FP16})
      for (fa_algorithm alg : kAlgorithms) {
        const uint64_t seed = test_seed();
        SCOPED_TRACE(trace(seed, p, dt, alg));
        std::mt19937_64 rng(seed);
        const Inputs in = random_inputs(p, dt, rng);
        RunOpts o;
        o.dtype = dt;
        o.algorithm = alg;
        const Outputs out = run(p, in, o, true);
        if (HasFailure()) return;
        expect_masked_semantics(p, out);
        if (HasFailure()) return;
      }
}

// ---- strided layouts --------------------------------------------------------------------------

// Elements of the whole buffer that are not NaN (the slack of a padded layout stays NaN).
int64_t count_written(const Stored& t) {
  int64_t n = 0;
  const int64_t elems = static_cast<int64_t>(t.bytes.size() / (t.dtype == FA_DTYPE_FP32 ? 4 : 2));
  for (int64_t i = 0; i < elems; ++i) n += std::isnan(t.get(i)) ? 0 : 1;
  return n;
}

// BHSD and padded views give the same bits as contiguous BSHD; nothing is written outside them.
TEST(Properties, StridedLayouts) {
  for (bool varlen : {false, true})
    for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16})
      for (fa_algorithm alg : kAlgorithms) {
        Problem p = make("layout", 2, 29, 40, 4, 2, 24, 16);
        p.causal = true;
        if (varlen) {
          p.lens_q = {29, 11};
          p.lens_k = {17, 40};
        }
        const uint64_t seed = test_seed();
        SCOPED_TRACE(trace(seed, p, dt, alg));
        std::mt19937_64 rng(seed);
        const Inputs in = random_inputs(p, dt, rng);
        RunOpts o;
        o.dtype = dt;
        o.algorithm = alg;
        const Outputs base = run(p, in, o, true);
        if (HasFailure()) return;
        for (Layout l : {Layout::bhsd, Layout::padded}) {
          SCOPED_TRACE(l == Layout::bhsd ? "bhsd" : "padded");
          o.layout = l;
          Call c(p, in, o);
          ASSERT_EQ(c.run_fwd(), FA_STATUS_OK) << fa_last_error();
          ASSERT_EQ(c.run_bwd(), FA_STATUS_OK) << fa_last_error();
          EXPECT_TRUE(bitwise_equal(load(c.o), base.o)) << "O";
          EXPECT_TRUE(bitwise_equal(std::vector<float>(c.lse.begin(), c.lse.begin() + p.lse_count()), base.lse))
              << "LSE";
          EXPECT_TRUE(bitwise_equal(load(c.dq), base.dq)) << "dQ";
          EXPECT_TRUE(bitwise_equal(load(c.dk), base.dk)) << "dK";
          EXPECT_TRUE(bitwise_equal(load(c.dv), base.dv)) << "dV";
          EXPECT_EQ(count_written(c.o), p.o_dims().count()) << "O written outside its view";
          EXPECT_EQ(count_written(c.dq), p.q_dims().count()) << "dQ written outside its view";
          EXPECT_EQ(count_written(c.dk), p.k_dims().count()) << "dK written outside its view";
          EXPECT_EQ(count_written(c.dv), p.v_dims().count()) << "dV written outside its view";
        }
      }
}

}  // namespace
}  // namespace fat
