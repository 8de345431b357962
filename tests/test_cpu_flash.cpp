// Tests of the CPU backend: the FlashAttention path against the reference, forward and backward,
// over the shared awkward-shape list crossed with every feature and every CPU dtype.
// fp32 against the fp64-accumulating reference; bf16/fp16 by the correctness rule of DESIGN.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace fat {
namespace {

enum class Feature {
  none,
  causal,
  window,        // both sides bounded
  window_left,   // left bounded, right unbounded
  window_right,  // left unbounded, right bounded
  causal_local,  // causal with a bounded left side
  softcap,
  gqa,
  mqa,
  varlen,
  varlen_causal,
};

const Feature kFeatures[] = {Feature::none,          Feature::causal,      Feature::window,
                             Feature::window_left,   Feature::window_right, Feature::causal_local,
                             Feature::softcap,       Feature::gqa,         Feature::mqa,
                             Feature::varlen,        Feature::varlen_causal};

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::none: return "none";
    case Feature::causal: return "causal";
    case Feature::window: return "window";
    case Feature::window_left: return "window_left";
    case Feature::window_right: return "window_right";
    case Feature::causal_local: return "causal_local";
    case Feature::softcap: return "softcap";
    case Feature::gqa: return "gqa";
    case Feature::mqa: return "mqa";
    case Feature::varlen: return "varlen";
    case Feature::varlen_causal: return "varlen_causal";
  }
  return "?";
}

// The problem of one shape with one feature. Window sides scale with Sk so that short and long
// keys both see partly masked rows (and, with Sq > Sk, fully masked ones).
Problem with_feature(const Shape& s, Feature f) {
  Problem p = s.p;
  switch (f) {
    case Feature::none: break;
    case Feature::causal: p.causal = true; break;
    case Feature::window:
      p.window_left = p.Sk / 4;
      p.window_right = p.Sk / 8;
      break;
    case Feature::window_left: p.window_left = p.Sk / 3; break;
    case Feature::window_right: p.window_right = p.Sk / 5; break;
    case Feature::causal_local:
      p.causal = true;
      p.window_left = p.Sk / 6 + 1;
      break;
    case Feature::softcap:
      p.softcap = 1.5f;
      p.scale = 2.f / std::sqrt(static_cast<float>(p.D));  // scores reach the cap's bend
      break;
    case Feature::gqa:
      if (!(p.Hkv >= 2 && p.Hq / p.Hkv >= 2)) {
        p.Hq = 4;
        p.Hkv = 2;
      }
      break;
    case Feature::mqa:
      p.Hkv = 1;
      if (p.Hq < 2) p.Hq = 3;
      break;
    case Feature::varlen_causal: p.causal = true; [[fallthrough]];
    case Feature::varlen:
      p.lens_q = s.lens_q;
      p.lens_k = s.lens_k;
      break;
  }
  return p;
}

struct Case {
  Shape shape;
  Feature feature;
  fa_dtype dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.p.name << " " << feature_name(c.feature) << " " << dtype_name(c.dtype);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const Shape& s : awkward_shapes())
    for (Feature f : kFeatures)
      for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16, FA_DTYPE_FP16}) out.push_back({s, f, dt});
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.shape.p.name + "_" + feature_name(info.param.feature) + "_" +
         dtype_name(info.param.dtype);
}

// Where two tensors differ most, for the failure text.
std::string worst(const std::vector<float>& impl, const std::vector<float>& ref) {
  size_t at = 0;
  double m = -1;
  for (size_t i = 0; i < impl.size() && i < ref.size(); ++i) {
    const double d = std::isnan(impl[i]) || std::isnan(ref[i])
                         ? INFINITY
                         : std::fabs(double(impl[i]) - double(ref[i]));
    if (d > m) {
      m = d;
      at = i;
    }
  }
  std::ostringstream s;
  if (m >= 0) s << " (worst at flat index " << at << ": got " << impl[at] << ", want " << ref[at] << ")";
  return s.str();
}

// fp32: max error within 1e-5 * max|ref|. `scale` replaces max|ref| when larger: the gradients
// of one problem share the largest of their magnitudes, because a gradient can be exactly 0 by
// cancellation (dQ and dK with a single visible key: dS = P (dP - rowsum(dO o O)) = 0) while its
// computed value carries the rounding of the terms that cancel.
void expect_close_fp32(const char* what, const std::vector<float>& impl, const std::vector<float>& ref,
                       double scale = 0) {
  const double err = max_err(impl, ref);
  const double tol = 1e-5 * std::max(max_abs(ref), scale);
  EXPECT_LE(err, tol) << what << ": max error " << err << " > 1e-5 * max|ref| = " << tol
                      << worst(impl, ref);
}

// bf16/fp16: err_impl <= factor * err_low + atol, atol the rounding step at max|ref_hi|, or at
// `scale` when larger (the gradients of one problem share their largest magnitude, as above).
void expect_close_low(const char* what, fa_dtype dt, double factor, const std::vector<float>& impl,
                      const std::vector<float>& ref_low, const std::vector<float>& ref_hi,
                      double scale = 0) {
  const double err_impl = max_err(impl, ref_hi);
  const double err_low = max_err(ref_low, ref_hi);
  const double atol = ulp_at(dt, std::max(max_abs(ref_hi), scale));
  EXPECT_TRUE(std::isfinite(err_impl)) << what << ": NaN or mismatched infinity" << worst(impl, ref_hi);
  EXPECT_TRUE(std::isfinite(err_low)) << what << ": reference in " << dtype_name(dt) << " has NaN";
  EXPECT_LE(err_impl, factor * err_low + atol)
      << what << ": err_impl " << err_impl << " > " << factor << " * err_low " << err_low
      << " + atol " << atol << worst(impl, ref_hi);
}

// LSE is fp32 in every dtype; both references compute it in fp64 from the same inputs.
void expect_close_lse(const Problem& p, const std::vector<float>& impl, const std::vector<float>& ref) {
  const std::string pattern = check_lse_pattern(p, impl);
  EXPECT_EQ(pattern, "") << "LSE of the flash path";
  const double err = max_err(impl, ref);
  const double tol = 1e-5 * std::max(1.0, max_abs(ref));
  EXPECT_LE(err, tol) << "LSE: max error " << err << " > " << tol << worst(impl, ref);
}

// Rows that see no key: O and dQ exactly 0.
void expect_masked_rows_zero(const Problem& p, const Outputs& out) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.len_q(b); ++i) {
      bool any = false;
      for (int64_t j = 0; j < p.len_k(b) && !any; ++j) any = p.visible(b, i, j);
      if (any) continue;
      const int64_t row = p.row0_q(b) + i;
      for (int64_t h = 0; h < p.Hq; ++h) {
        for (int64_t d = 0; d < p.Dv; ++d)
          ASSERT_EQ(out.o[(row * p.Hq + h) * p.Dv + d], 0.f) << "O of a fully masked row, b=" << b << " i=" << i;
        if (out.dq.empty()) continue;
        for (int64_t d = 0; d < p.D; ++d)
          ASSERT_EQ(out.dq[(row * p.Hq + h) * p.D + d], 0.f) << "dQ of a fully masked row, b=" << b << " i=" << i;
      }
    }
}

class FlashVsReference : public testing::TestWithParam<Case> {};

TEST_P(FlashVsReference, ForwardBackward) {
  const Case& c = GetParam();
  const Problem p = with_feature(c.shape, c.feature);
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FA_TEST_SEED reruns it); " + p.str() + " " +
               dtype_name(c.dtype));
  std::mt19937_64 rng(seed);
  const Inputs in = random_inputs(p, c.dtype, rng);

  RunOpts ref_opts;
  ref_opts.dtype = FA_DTYPE_FP32;
  ref_opts.algorithm = FA_ALGORITHM_REFERENCE;
  RunOpts impl_opts;
  impl_opts.dtype = c.dtype;
  impl_opts.algorithm = FA_ALGORITHM_FLASH;

  // ref_hi: the fp64-accumulating reference, fp32 storage, on the (already rounded) inputs.
  const Outputs hi = run(p, in, ref_opts, true);
  const Outputs impl = run(p, in, impl_opts, true);
  if (HasFailure()) return;
  EXPECT_EQ(check_lse_pattern(p, hi.lse), "") << "LSE of the reference";
  expect_masked_rows_zero(p, impl);
  expect_close_lse(p, impl.lse, hi.lse);

  const double grad_scale = std::max({max_abs(hi.dq), max_abs(hi.dk), max_abs(hi.dv)});
  if (c.dtype == FA_DTYPE_FP32) {
    expect_close_fp32("O", impl.o, hi.o);
    expect_close_fp32("dQ", impl.dq, hi.dq, grad_scale);
    expect_close_fp32("dK", impl.dk, hi.dk, grad_scale);
    expect_close_fp32("dV", impl.dv, hi.dv, grad_scale);
    return;
  }
  RunOpts low_opts = ref_opts;
  low_opts.dtype = c.dtype;
  const Outputs low = run(p, in, low_opts, true);
  if (HasFailure()) return;
  expect_close_low("O", c.dtype, 2, impl.o, low.o, hi.o);
  expect_close_low("dQ", c.dtype, 3, impl.dq, low.dq, hi.dq, grad_scale);
  expect_close_low("dK", c.dtype, 3, impl.dk, low.dk, hi.dk, grad_scale);
  expect_close_low("dV", c.dtype, 3, impl.dv, low.dv, hi.dv, grad_scale);
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, FlashVsReference, testing::ValuesIn(all_cases()), case_name);

TEST(AwkwardShapes, ListParses) {
  std::string error;
  const std::vector<Shape> shapes = awkward_shapes(&error);
  ASSERT_FALSE(shapes.empty()) << error;
  bool len1 = false, len17 = false, len1k = false, sq_ne_sk = false, d_ne_dv = false, d256 = false,
       zero_len = false;
  for (const Shape& s : shapes) {
    len1 |= s.p.Sq == 1 || s.p.Sk == 1;
    len17 |= s.p.Sq == 17 || s.p.Sk == 17;
    len1k |= s.p.Sq >= 1023 || s.p.Sk >= 1023;
    sq_ne_sk |= s.p.Sq != s.p.Sk;
    d_ne_dv |= s.p.D != s.p.Dv;
    d256 |= s.p.D == 256;
    for (size_t b = 0; b < s.lens_q.size(); ++b) zero_len |= s.lens_q[b] == 0 || s.lens_k[b] == 0;
  }
  EXPECT_TRUE(len1 && len17 && len1k && sq_ne_sk && d_ne_dv && d256 && zero_len)
      << "the awkward-shape list lost one of: length 1, 17, ~1024, Sq != Sk, D != Dv, D = 256, "
         "a zero-length varlen sequence";
}

}  // namespace
}  // namespace fat
