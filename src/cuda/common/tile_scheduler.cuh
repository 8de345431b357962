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

  // Longest first within groups of (batch, head) pairs, for masks under which later q-blocks see
  // more keys (causal): q-block descending, then (batch, head) within the group. The groups, in
  // order: the pairs the others leave (fewer than section_bh, possibly none), sections of
  // section_bh, and the last tail_bh pairs. Sections are sized by the caller so that their K and
  // V stay in L2 while the CTAs sweep them; the tail so that its work covers the grid while its
  // longest tiles run (tail_fwd_pairs), since a dynamic order leaves CTAs idle only at its end.
  // The caller keeps tail_bh <= heads·batch and the tile count within an int.
  FA_HOST_DEVICE static FwdTile tile_by_length(int idx, int num_m_blocks, int heads, int batch,
                                               int section_bh, int tail_bh) {
    const int rest = heads * batch - tail_bh;  // pairs before the tail
    const int lead = rest % section_bh;         // the first, narrower group's pairs
    int first_bh, width, local;
    if (idx >= rest * num_m_blocks) {
      first_bh = rest, width = tail_bh, local = idx - rest * num_m_blocks;
    } else if (idx < lead * num_m_blocks) {
      first_bh = 0, width = lead, local = idx;
    } else {
      const int j = idx - lead * num_m_blocks, per_section = section_bh * num_m_blocks;
      const int section = j / per_section;
      first_bh = lead + section * section_bh, width = section_bh, local = j - section * per_section;
    }
    const int m = local / width;
    const int bh = first_bh + (local - m * width);
    return FwdTile{num_m_blocks - 1 - m, bh % heads, bh / heads};
  }

  // The tail group's pairs for tile_by_length on a grid of `ctas` CTAs: under a causal mask a
  // pair's tiles hold about num_m_blocks / 2 times its longest one, so 2·ctas / num_m_blocks
  // pairs give each CTA a longest tile's worth of work. At least one section; at most two
  // (their K and V then still about fit L2) and all the pairs.
  FA_HOST_DEVICE static int tail_fwd_pairs(int bh_count, int section_bh, int num_m_blocks, int ctas) {
    const int cover = (2 * ctas + num_m_blocks - 1) / num_m_blocks;
    int t = cover < 2 * section_bh ? cover : 2 * section_bh;
    if (t < section_bh) t = section_bh;
    return t < bh_count ? t : bh_count;
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
