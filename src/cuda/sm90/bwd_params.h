// CUDA backend, sm90/: the parameter block of the Hopper backward main kernel (host and device).
// The problem fields are sm80::BwdParams (launch/bwd.cu builds them once for either path; the
// workspace, pre and post kernels are shared); the TMA tensor maps are added by
// bwd_launch.cuh. Plain data only: no logic.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the library does not link libcuda)

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm90 {

struct BwdParams {
  sm80::BwdParams prob;  // pointers, strides, sizes, scale, mask, workspace (dense batch only)
  // 4-D maps over [batch, row, head, dim] (innermost first: dim, row, head, batch), 128-byte
  // swizzle, box = 64 elements of dim x block rows; rows past the end read as zeros.
  CUtensorMap tm_q;   // box rows kBlockM
  CUtensorMap tm_do;  // box rows kBlockM
  CUtensorMap tm_k;   // box rows kBlockN
  CUtensorMap tm_v;   // box rows kBlockN
  // The fp32 dQ accumulator {dim, row, batch, head}, box 32 floats x kBlockM rows, 128-byte
  // swizzle: the dQ tiles are added into it by bulk tensor reductions.
  CUtensorMap tm_dq;
  // dK and dV: maps of the tm_k kind with boxes of 64 rows (one consumer warpgroup's rows),
  // written by TMA stores from shared memory (staged where BwdKernel's kOffDk / kOffDv say: over
  // K and V at hdim 256, else over the dS buffers or the dQ tile) when dkdv_by_tma is 1
  // (dense batch, strides TMA can describe); else dK and dV leave the accumulators by plain
  // stores.
  CUtensorMap tm_dk;
  CUtensorMap tm_dv;
  int dkdv_by_tma;
  // 1: the q blocks of every tile go in RotatedQOrder (BwdKernel::rotated_order); in the
  // deterministic mode the tiles are then dealt out in rounds of whole heads, not drawn.
  int rotated;
};

}  // namespace fa::cuda::sm90
