// Tests, CPU: division by a launch-time divisor as a multiply and a shift
// (src/cuda/common/fast_div.h), against the `/` and `%` it replaces in the backward's row kernels.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/fast_div.h"

namespace {

using fa::cuda::FastDiv;

void expect_exact(const FastDiv& f, int64_t n) {
  int64_t rem = -1;
  const int64_t q = f.divmod(n, &rem);
  const int64_t d = static_cast<int64_t>(f.d);
  ASSERT_EQ(q, n / d) << n << " / " << d;
  ASSERT_EQ(rem, n % d) << n << " % " << d;
}

// Every divisor up to 1500 (head counts, short sequences): every dividend below 5000, and each
// side of the last three multiples of d at or below 2^31, 2^32, 2^62 and the top of the range.
TEST(FastDiv, SmallDivisorsAndRangeEdges) {
  for (int64_t d = 1; d <= 1500; ++d) {
    const FastDiv f(static_cast<uint64_t>(d));
    for (int64_t n = 0; n < 5000; ++n) expect_exact(f, n);
    for (int64_t top : {int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 62, INT64_MAX}) {
      for (int64_t back = 2; back >= 0; --back)
        for (int64_t j = -1; j <= 1; ++j) {
          const int64_t q = top / d - back;
          if (j == 1 && q * d == INT64_MAX) continue;
          expect_exact(f, q * d + j);
        }
      expect_exact(f, top);
    }
  }
}

// Divisors of every bit length (powers of two, their neighbours, the largest) against random
// dividends of every bit length.
TEST(FastDiv, RandomPairs) {
  std::mt19937_64 rng(20261204);
  std::vector<uint64_t> divisors;
  for (int b = 0; b < 32; ++b) {
    const uint64_t p = uint64_t(1) << b;
    divisors.insert(divisors.end(), {p, p + 1, 2 * p - 1});
  }
  divisors.push_back(UINT32_MAX);
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % UINT32_MAX);
  for (uint64_t d : divisors) {
    const FastDiv f(d);
    for (int i = 0; i < 8000; ++i) {
      const int bits = 1 + static_cast<int>(rng() % 63);
      expect_exact(f, static_cast<int64_t>(rng() >> (64 - bits)));
    }
  }
}

}  // namespace
