// Tests of the CPU backend's reference path, the yardstick of every other test:
// its forward against attention written out in double here, and its backward against central
// finite differences of the loss L = sum(O * W), on tiny shapes with every feature.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace fat {
namespace {

// Attention in double, straight from the header's definition.
void naive_fwd(const Problem& p, const Inputs& in, std::vector<double>& o, std::vector<double>& lse) {
  const int64_t group = p.Hq / p.Hkv;
  const double scale = p.effective_scale();
  o.assign(static_cast<size_t>(p.o_dims().count()), 0.0);
  lse.assign(static_cast<size_t>(p.lse_count()), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < p.len_q(b); ++i) {
        const int64_t qrow = p.row0_q(b) + i;
        std::vector<double> s(static_cast<size_t>(p.len_k(b)), -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < p.len_k(b); ++j) {
          if (!p.visible(b, i, j)) continue;
          const int64_t krow = p.row0_k(b) + j;
          double dot = 0;
          for (int64_t d = 0; d < p.D; ++d)
            dot += double(in.q[(qrow * p.Hq + h) * p.D + d]) * in.k[(krow * p.Hkv + kh) * p.D + d];
          double x = scale * dot;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          s[j] = x;
          m = std::max(m, x);
        }
        const int64_t li = p.lse_index(b, h, i);
        if (m == -INFINITY) {
          lse[li] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        lse[li] = m + std::log(sum);
        for (int64_t j = 0; j < p.len_k(b); ++j) {
          if (s[j] == -INFINITY) continue;
          const double w = std::exp(s[j] - lse[li]);
          const int64_t krow = p.row0_k(b) + j;
          for (int64_t d = 0; d < p.Dv; ++d)
            o[(qrow * p.Hq + h) * p.Dv + d] += w * in.v[(krow * p.Hkv + kh) * p.Dv + d];
        }
      }
    }
}

Problem tiny(const char* name) {
  Problem p;
  p.name = name;
  p.B = 2;
  p.Sq = 3;
  p.Sk = 5;
  p.Hq = 2;
  p.Hkv = 1;
  p.D = 4;
  p.Dv = 3;
  return p;
}

std::vector<Problem> tiny_problems() {
  std::vector<Problem> out;
  out.push_back(tiny("dense"));
  Problem c = tiny("causal");
  c.causal = true;
  out.push_back(c);
  Problem cm = tiny("causal_sq_gt_sk");  // rows 0..2 of Sq=6, Sk=3 see no key
  cm.Sq = 6;
  cm.Sk = 3;
  cm.causal = true;
  out.push_back(cm);
  Problem w = tiny("window");
  w.window_left = 1;
  w.window_right = 1;
  out.push_back(w);
  Problem wl = tiny("window_left_only");
  wl.window_left = 0;
  out.push_back(wl);
  Problem wr = tiny("window_right_only");
  wr.window_right = 0;
  wr.Sq = 5;
  wr.Sk = 3;
  out.push_back(wr);
  Problem s = tiny("softcap");
  s.softcap = 0.8f;
  s.scale = 1.3f;
  out.push_back(s);
  Problem m = tiny("mqa_d_ne_dv");
  m.Hq = 3;
  m.D = 7;
  m.Dv = 2;
  out.push_back(m);
  Problem v = tiny("varlen");
  v.B = 3;
  v.lens_q = {3, 0, 2};
  v.lens_k = {2, 4, 0};
  out.push_back(v);
  Problem vc = tiny("varlen_causal_gqa");
  vc.B = 2;
  vc.Hq = 4;
  vc.Hkv = 2;
  vc.causal = true;
  vc.lens_q = {3, 1};
  vc.lens_k = {2, 5};
  out.push_back(vc);
  return out;
}

std::string problem_name(const testing::TestParamInfo<Problem>& info) { return info.param.name; }

class ReferenceTiny : public testing::TestWithParam<Problem> {};

TEST_P(ReferenceTiny, ForwardMatchesDoubleAttention) {
  const Problem& p = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + "; " + p.str());
  std::mt19937_64 rng(seed);
  const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
  RunOpts ref;
  ref.algorithm = FA_ALGORITHM_REFERENCE;
  const Outputs out = run(p, in, ref, false);
  if (HasFailure()) return;
  std::vector<double> o, lse;
  naive_fwd(p, in, o, lse);
  for (size_t i = 0; i < o.size(); ++i)
    ASSERT_NEAR(out.o[i], o[i], 1e-6 * (1 + std::fabs(o[i]))) << "O at flat index " << i;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse[i])) {
      ASSERT_TRUE(std::isinf(out.lse[i]) && out.lse[i] < 0) << "LSE at " << i << " should be -inf";
      continue;
    }
    ASSERT_NEAR(out.lse[i], lse[i], 1e-6 * (1 + std::fabs(lse[i]))) << "LSE at flat index " << i;
  }
}

// L = sum(O * W) from the reference forward, W = the dout of the inputs.
double loss(const Problem& p, const Inputs& in) {
  RunOpts ref;
  ref.algorithm = FA_ALGORITHM_REFERENCE;
  const Outputs out = run(p, in, ref, false);
  double l = 0;
  for (size_t i = 0; i < out.o.size(); ++i) l += double(out.o[i]) * in.dout[i];
  return l;
}

TEST_P(ReferenceTiny, BackwardMatchesFiniteDifferences) {
  const Problem& p = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + "; " + p.str());
  std::mt19937_64 rng(seed);
  const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
  RunOpts ref;
  ref.algorithm = FA_ALGORITHM_REFERENCE;
  const Outputs g = run(p, in, ref, true);
  if (HasFailure()) return;

  const double h = 1e-2;  // inputs are N(0, 1): a step of 1% of their scale
  std::normal_distribution<double> n(0, 1);
  struct Arg {
    const char* name;
    std::vector<float> Inputs::*field;
    const std::vector<float>* grad;
  };
  const Arg args[] = {{"q", &Inputs::q, &g.dq}, {"k", &Inputs::k, &g.dk}, {"v", &Inputs::v, &g.dv}};
  for (const Arg& a : args) {
    for (int dir = 0; dir < 3; ++dir) {
      Inputs plus = in, minus = in;
      double analytic = 0, mass = 0;
      std::vector<float>& xp = plus.*a.field;
      std::vector<float>& xm = minus.*a.field;
      for (size_t i = 0; i < xp.size(); ++i) {
        const double u = n(rng);
        xp[i] = static_cast<float>(xp[i] + h * u);
        xm[i] = static_cast<float>(xm[i] - h * u);
        // The step actually taken, after rounding to fp32, over 2h.
        const double step = (double(xp[i]) - double(xm[i])) / (2 * h);
        analytic += double((*a.grad)[i]) * step;
        mass += std::fabs(double((*a.grad)[i]) * step);
      }
      const double fd = (loss(p, plus) - loss(p, minus)) / (2 * h);
      EXPECT_NEAR(fd, analytic, 1e-2 * mass + 1e-6)
          << "d" << a.name << " along random direction " << dir << ": finite difference " << fd
          << ", reference backward " << analytic;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ReferenceTiny, testing::ValuesIn(tiny_problems()), problem_name);

// ulp_at, the bound of the test below, is the spacing of each type's values, subnormals included
// (fp16's from 6.1e-5 down: an output of 3e-6 is rounded in steps of 2^-24).
TEST(Reference, UlpIsTheSpacingOfValues) {
  EXPECT_EQ(ulp_at(FA_DTYPE_FP32, 1.0), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_at(FA_DTYPE_BF16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp_at(FA_DTYPE_FP16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_at(FA_DTYPE_FP16, 3e-6), std::ldexp(1.0, -24));
  for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (double m : {3e-6, 7e-5, 0.3, 1.0, 5.5, 300.0}) {
      const float x = round_to(dt, static_cast<float>(m));
      const double u = ulp_at(dt, x);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " at " + std::to_string(m));
      EXPECT_EQ(round_to(dt, static_cast<float>(x + u)), static_cast<float>(x + u));  // the next value
      EXPECT_EQ(round_to(dt, static_cast<float>(x + 0.25 * u)), x);                 // nothing between
    }
}

// The reference in bf16/fp16 storage equals the fp32 reference on the same inputs, rounded once.
TEST(Reference, LowPrecisionIsRoundedFp32) {
  Problem p = tiny("dense");
  p.Sq = 9;
  p.Sk = 11;
  for (fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + dtype_name(dt));
    std::mt19937_64 rng(seed);
    const Inputs in = random_inputs(p, dt, rng);
    RunOpts hi;
    hi.algorithm = FA_ALGORITHM_REFERENCE;
    RunOpts low = hi;
    low.dtype = dt;
    const Outputs a = run(p, in, hi, false), b = run(p, in, low, false);
    if (HasFailure()) return;
    for (size_t i = 0; i < a.o.size(); ++i)
      ASSERT_LE(std::fabs(double(b.o[i]) - a.o[i]), ulp_at(dt, std::fabs(a.o[i])))
          << "O at flat index " << i << " is more than one rounding step from the fp32 reference";
    EXPECT_LE(max_err(a.lse, b.lse), 1e-6 * std::max(1.0, max_abs(a.lse)));
  }
}

}  // namespace
}  // namespace fat
