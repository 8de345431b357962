// CUDA backend, ptx/: shared-memory matrix stores from mma fragments (stmatrix).
// One instruction family; thin inline-asm wrappers taking 32-bit shared-space addresses.
// Every lane of the warp must call these together (warp:: scope); no layout logic here.
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// Each 8x8 matrix i of 16-bit elements: lanes 8i..8i+7 give the addresses of its 8 stored rows
// (16 bytes each); lane l holds, in register i, row l/4, elements 2(l%4)..2(l%4)+1 (the mma
// C/A fragment of one 8x8 block). With .trans the block is stored transposed: that pair goes
// to stored rows 2(l%4) and 2(l%4)+1, column l/4.

// stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [addr], {r0, r1, r2, r3};   (sm_90+)
__device__ __forceinline__ void warp_stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// stmatrix.sync.aligned.m8n8.x4.shared.b16 [addr], {r0, r1, r2, r3};         (sm_90+)
__device__ __forceinline__ void warp_stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace fa::cuda::ptx
