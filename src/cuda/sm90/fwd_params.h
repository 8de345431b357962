// CUDA backend, sm90/: the parameter block of the Hopper forward kernels (host and device).
// The problem fields are sm80::FwdParams (one conversion from fa::Problem serves both paths);
// the three TMA tensor maps are added by fwd_launch.cuh. Plain data only: no logic.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the library does not link libcuda)

#include "cuda/sm80/fwd_params.h"

namespace fa::cuda::sm90 {

struct FwdParams {
  sm80::FwdParams prob;  // pointers, strides, sizes, scale, mask (dense batch only here)
  // 4-D maps over [batch, row, head, dim] (innermost first: dim, row, head, batch), 128-byte
  // swizzle, box = 64 elements of dim x block rows; rows past the end read as zeros.
  CUtensorMap tm_q;
  CUtensorMap tm_k;
  CUtensorMap tm_v;
  // O: the same kind of map (box 64 x 64 rows, one consumer warpgroup's rows), written by TMA
  // stores from shared memory when o_by_tma is 1 (dense batch, strides TMA can describe, a
  // kernel with two Q buffers); else O leaves the accumulators by plain stores.
  CUtensorMap tm_o;
  int o_by_tma;
  // Causal-like masks: (batch, head) pairs per section of the longest-first tile order (their
  // K and V sized to stay in L2) and in its last group (LongestFirstScheduler::tile_by_length).
  int section_bh;
  int tail_bh;
  // Dynamic tile order (FwdKernel::draws_tiles): {draws, exits}, zero at the launch and left zero
  // (common/tile_counter.h); a CTA's first tile is blockIdx.x, each next one gridDim.x +
  // atomicAdd(&tile_counter[0], 1). Null: static order.
  int* tile_counter;
};

}  // namespace fa::cuda::sm90
