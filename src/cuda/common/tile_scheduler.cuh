// CUDA backend, common/: maps a tile index to its (q-block, head, batch) tile of a forward
// launch. One-dimensional grid (no 65535 limit on batch·heads); within each (batch, head) the
// last q-blocks, which see the most keys under a causal mask, come first. A CTA runs tile
// blockIdx.x (sm80) or, persistent (sm90), a sequence of tiles. No memory access. The index
// maps are host-callable too, so that tests/test_tile_order.cpp checks them on the CPU.
#pragma once

#include <cstdint>

#include "common/mask.h"  // FA_HOST_DEVICE

namespace fa::cuda {

struct FwdTile {
  int m_block;
  int head;
  int batch;
};

struct LongestFirstScheduler {
  // Masks under which later q-blocks see more keys (causal, or a bounded right side only):
  // their tiles go longest first over the grid (tile_by_length), else (batch, head)-major.
  template <class Mask>
  FA_HOST_DEVICE static bool by_length(const Mask& m) {
    return m.right >= 0 && m.left < 0;
  }

  // Number of CTAs; callers check it is at most INT32_MAX (grid.x limit 2^31 - 1).
  static int64_t num_tiles(int num_m_blocks, int heads, int batch) {
    return static_cast<int64_t>(num_m_blocks) * heads * batch;
  }

  // (batch, head)-major, the last q-block of each first.
  FA_HOST_DEVICE static FwdTile tile(int idx, int num_m_blocks, int heads) {
    const int bh = idx / num_m_blocks;
    return FwdTile{num_m_blocks - 1 - (idx - bh * num_m_blocks), bh % heads, bh / heads};
  }

  // Longest first within sections of `section_bh` (batch, head) pairs, for masks under which
  // later q-blocks see more keys (causal): q-block descending, then (batch, head) within the
  // section. The caller sizes sections so that their K and V stay in L2 while the CTAs sweep
  // them, and caps section_bh at heads·batch (so section_bh·num_m_blocks fits an int).
  FA_HOST_DEVICE static FwdTile tile_by_length(int idx, int num_m_blocks, int heads, int batch,
                                               int section_bh) {
    const int bh_count = heads * batch;
    const int per_section = section_bh * num_m_blocks;
    const int section = idx / per_section;
    const int local = idx - section * per_section;
    const int first_bh = section * section_bh;
    const int rest = bh_count - first_bh;
    const int width = rest < section_bh ? rest : section_bh;  // the last section may be narrower
    const int m = local / width;
    const int bh = first_bh + (local - m * width);
    return FwdTile{num_m_blocks - 1 - m, bh % heads, bh / heads};
  }

  // Persistent grids with a static order: the tile of CTA c's round r among g CTAs, r·g + c in
  // even rounds and r·g + g − 1 − c in odd ones. Callers stop at the first index past the last
  // tile (only the last round is partial). Tiles of unequal length are better served by a
  // dynamic order (a counter each CTA draws its next tile from).
  FA_HOST_DEVICE static int64_t persistent_index(int64_t round, int64_t g, int64_t c) {
    return round * g + ((round & 1) != 0 ? g - 1 - c : c);
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ static FwdTile tile(int num_m_blocks, int heads) {
    return tile(static_cast<int>(blockIdx.x), num_m_blocks, heads);
  }
  __device__ __forceinline__ static int64_t persistent_index(int64_t round) {
    return persistent_index(round, gridDim.x, blockIdx.x);
  }
#endif
};

}  // namespace fa::cuda
