// Tests of the CPU backend's determinism: any thread count, any repetition and the
// deterministic flag give bitwise equal O, LSE, dQ, dK and dV.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace fat {
namespace {

std::vector<Problem> problems() {
  std::vector<Problem> v;
  Problem a;
  a.name = "causal_gqa";
  a.B = 2;
  a.Sq = 150;
  a.Sk = 190;
  a.Hq = 4;
  a.Hkv = 2;
  a.D = 64;
  a.Dv = 64;
  a.causal = true;
  v.push_back(a);
  Problem b = a;
  b.name = "varlen_window_softcap";
  b.B = 3;
  b.Hkv = 1;
  b.D = 40;
  b.Dv = 24;
  b.causal = false;
  b.window_left = 30;
  b.window_right = 11;
  b.softcap = 2.f;
  b.lens_q = {150, 0, 77};
  b.lens_k = {120, 13, 190};
  v.push_back(b);
  return v;
}

void expect_bitwise(const Outputs& a, const Outputs& b, const std::string& what) {
  EXPECT_TRUE(bitwise_equal(a.o, b.o)) << "O differs: " << what;
  EXPECT_TRUE(bitwise_equal(a.lse, b.lse)) << "LSE differs: " << what;
  EXPECT_TRUE(bitwise_equal(a.dq, b.dq)) << "dQ differs: " << what;
  EXPECT_TRUE(bitwise_equal(a.dk, b.dk)) << "dK differs: " << what;
  EXPECT_TRUE(bitwise_equal(a.dv, b.dv)) << "dV differs: " << what;
}

TEST(Determinism, ThreadCountsGiveTheSameBits) {
  for (const Problem& p : problems())
    for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16})
      for (fa_algorithm alg : {FA_ALGORITHM_FLASH, FA_ALGORITHM_REFERENCE}) {
        const uint64_t seed = test_seed();
        SCOPED_TRACE("seed " + std::to_string(seed) + "; " + p.str() + " " + dtype_name(dt) +
                     (alg == FA_ALGORITHM_FLASH ? " flash" : " reference"));
        std::mt19937_64 rng(seed);
        const Inputs in = random_inputs(p, dt, rng);
        RunOpts o;
        o.dtype = dt;
        o.algorithm = alg;
        o.num_threads = 1;
        const Outputs one = run(p, in, o, true);
        if (HasFailure()) return;
        for (int32_t threads : {0, 2, 3, 4}) {
          o.num_threads = threads;
          expect_bitwise(one, run(p, in, o, true), "1 thread vs " + std::to_string(threads));
        }
        // Again, with the deterministic flag (the CPU is always deterministic).
        o.num_threads = 4;
        Call c(p, in, o);
        c.fwd.deterministic = 1;
        ASSERT_EQ(c.run_fwd(), FA_STATUS_OK) << fa_last_error();
        ASSERT_EQ(c.run_bwd(), FA_STATUS_OK) << fa_last_error();
        Outputs det;
        det.o = load(c.o);
        det.lse.assign(c.lse.begin(), c.lse.begin() + p.lse_count());
        det.dq = load(c.dq);
        det.dk = load(c.dk);
        det.dv = load(c.dv);
        expect_bitwise(one, det, "deterministic = 1");
      }
}

}  // namespace
}  // namespace fat
