// CUDA backend, common/: division by a divisor fixed at launch, as a multiply and a shift.
// A 64-bit `/` or `%` on the GPU is a call to a software routine of some 70 instructions; the
// row kernels of the backward divide every task index by the head count and the sequence
// length, which bound the preprocess by issue where it only reads (docs/PERF.md, sm90 backward
// section). Built on the host, used on both (tests/test_fast_div.cpp checks it against `/` and
// `%`).
#pragma once

#include <cstdint>

#include "common/mask.h"  // FA_HOST_DEVICE

namespace fa::cuda {

// n / d and n % d for 0 <= n < 2^63 and 1 <= d < 2^32. With l = ceil(log2 d) and
// m = floor(2^64 · (2^l − d) / d) + 1, n / d = (mulhi(m, n) + n) >> l: the round-up reciprocal
// 2^(64+l) / d less its top bit 2^64, which the add of n puts back. mulhi(m, n) <= n, so the sum
// stays below 2^64 for n < 2^63.
struct FastDiv {
  uint64_t d = 1, m = 1;
  int shift = 0;

  FastDiv() = default;
  explicit FastDiv(uint64_t divisor) : d(divisor) {
    while ((uint64_t(1) << shift) < d) ++shift;  // l = ceil(log2 d), at most 32
    const unsigned __int128 r = static_cast<unsigned __int128>((uint64_t(1) << shift) - d) << 64;
    m = static_cast<uint64_t>(r / d) + 1;
  }

  FA_HOST_DEVICE int64_t div(int64_t n) const {
    const uint64_t u = static_cast<uint64_t>(n);
#if defined(__CUDA_ARCH__)
    const uint64_t hi = __umul64hi(m, u);
#else
    const uint64_t hi = static_cast<uint64_t>((static_cast<unsigned __int128>(m) * u) >> 64);
#endif
    return static_cast<int64_t>((hi + u) >> shift);
  }

  // Quotient and remainder together.
  FA_HOST_DEVICE int64_t divmod(int64_t n, int64_t* rem) const {
    const int64_t q = div(n);
    *rem = n - q * static_cast<int64_t>(d);
    return q;
  }
};

}  // namespace fa::cuda
