// CUDA backend, common/: applying fa::Mask (src/common/mask.h, the one definition) to an S tile
// held as mma accumulator fragments. Sets invisible scores to -inf; decides nothing else, and
// is called only for tiles that are not wholly visible.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mask.h"

namespace fa::cuda {

// Which passes over the scores a kernel instantiation compiles in: the softcap pass and any mask
// (kPassesAll), or, for instantiations launched only on problems without a softcap, just the
// keys' end (kPassesDense: no mask) or the causal mask (kPassesCausal). The general passes' code
// lengthens a key loop even where it does not run; these instantiations hold none of it.
inline constexpr int kPassesAll = 0, kPassesDense = 1, kPassesCausal = 2;

// The mask every problem of an instantiation of one mask has, as a compile-time constant.
template <int kPasses>
__host__ __device__ __forceinline__ Mask fixed_mask() {
  static_assert(kPasses == kPassesDense || kPasses == kPassesCausal, "an instantiation of one mask");
  Mask m;  // none: left and right unbounded
  if (kPasses == kPassesCausal) m.right = 0;
  return m;
}

// Do a problem's mask and softcap belong on an instantiation of passes `passes`?
inline bool passes_fit(int passes, const Mask& m, float softcap) {
  if (passes == kPassesAll) return true;
  return softcap == 0.f && m.left < 0 && (passes == kPassesDense ? m.right < 0 : m.right == 0);
}

// s[mt][nt] is the 16x8 C fragment at rows row0 + 16·mt (+ g, g + 8) and columns col0 + 8·nt
// (+ 2t, 2t + 1), where row0 already includes g = lane / 4 and col0 includes 2t.
// A key j of query row i stays iff key_begin(i) <= j < key_end(i) (key_end is clamped to sk).
template <int kMT, int kNT>
__device__ __forceinline__ void warp_mask_tile(float (&s)[kMT][kNT][4], const Mask& mask,
                                               int row0, int col0, int sq, int sk) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t i = row0 + 16 * mt + 8 * h;
      // Both bounds clamped to [0, sk], so the per-element test runs in 32-bit arithmetic.
      const int64_t b64 = mask.key_begin(i, sq, sk);
      const int begin = static_cast<int>(b64 < sk ? b64 : sk);
      const int end = static_cast<int>(mask.key_end(i, sq, sk));
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = col0 + 8 * nt + e;
          if (j < begin || j >= end) s[mt][nt][2 * h + e] = -INFINITY;
        }
      }
    }
  }
}

}  // namespace fa::cuda
