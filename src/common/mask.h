// Common (CPU and CUDA): the one mask definition.
// Query row i of a sequence pair (Sq, Sk) sees key j iff
//   i + Sk - Sq - left <= j <= i + Sk - Sq + right   (a negative side is unbounded).
// Causal is the window (left, -) with right = 0, bottom-right aligned. No arithmetic beyond it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FA_HOST_DEVICE inline
#endif

namespace fa {

struct Mask {
  int64_t left = -1;   // -1: unbounded
  int64_t right = -1;  // -1: unbounded

  FA_HOST_DEVICE bool none() const { return left < 0 && right < 0; }

  // Does query row i see key j, for a sequence pair of lengths (sq, sk)?
  FA_HOST_DEVICE bool visible(int64_t i, int64_t j, int64_t sq, int64_t sk) const {
    const int64_t d = j - (i + sk - sq);  // distance from the aligned diagonal
    return (left < 0 || d >= -left) && (right < 0 || d <= right);
  }

  // First visible key of row i (may exceed key_end when the row is fully masked).
  FA_HOST_DEVICE int64_t key_begin(int64_t i, int64_t sq, int64_t sk) const {
    if (left < 0) return 0;
    const int64_t b = i + sk - sq - left;
    return b < 0 ? 0 : b;
  }

  // One past the last visible key of row i, clamped to [0, sk].
  FA_HOST_DEVICE int64_t key_end(int64_t i, int64_t sq, int64_t sk) const {
    if (right < 0) return sk;
    const int64_t e = i + sk - sq + right + 1;
    return e < 0 ? 0 : (e > sk ? sk : e);
  }

  // The same mask seen from a key: the rows that see key j (0 <= j < sk) are [query_begin,
  // query_end), both in [0, sq]; empty (begin >= end) when none does. In 32-bit without
  // overflow for any lengths below 2^31 (the kernels' per-key test): with d0 = j − sk + sq,
  // row i sees j iff d0 − right <= i < d0 + left + 1, and sides past sq or sk bound nothing.
  FA_HOST_DEVICE int query_begin(int j, int sq, int sk) const {
    const int d0 = (j - sk) + sq;  // in [sq − sk, sq)
    if (right < 0 || d0 <= 0) return 0;
    const int r = right < d0 ? static_cast<int>(right) : d0;
    return d0 - r;
  }
  FA_HOST_DEVICE int query_end(int j, int sq, int sk) const {
    const int d0 = (j - sk) + sq;
    const int room = sk - j;  // d0 + room = sq
    if (left < 0) return sq;
    const int l1 = left < room ? static_cast<int>(left) + 1 : room;
    const int e = d0 + l1;
    return e < 0 ? 0 : e;
  }
};

// Folds flash-attn's (causal, window_left, window_right) into one Mask.
inline Mask make_mask(bool causal, int64_t window_left, int64_t window_right) {
  Mask m;
  m.left = window_left < 0 ? -1 : window_left;
  m.right = causal ? 0 : (window_right < 0 ? -1 : window_right);
  return m;
}

}  // namespace fa
