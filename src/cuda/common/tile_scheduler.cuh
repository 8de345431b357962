// CUDA backend, common/: maps a CTA to its (q-block, head, batch) tile of a forward launch.
// One-dimensional grid (no 65535 limit on batch·heads); within each (batch, head) the last
// q-blocks, which see the most keys under a causal mask, start first. No memory access.
#pragma once

#include <cstdint>

namespace fa::cuda {

struct FwdTile {
  int m_block;
  int head;
  int batch;
};

struct LongestFirstScheduler {
  // Number of CTAs; callers check it is at most INT32_MAX (grid.x limit 2^31 - 1).
  static int64_t num_tiles(int num_m_blocks, int heads, int batch) {
    return static_cast<int64_t>(num_m_blocks) * heads * batch;
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ static FwdTile tile(int num_m_blocks, int heads) {
    const int idx = static_cast<int>(blockIdx.x);
    const int bh = idx / num_m_blocks;
    return FwdTile{num_m_blocks - 1 - (idx - bh * num_m_blocks), bh % heads, bh / heads};
  }
#endif
};

}  // namespace fa::cuda
