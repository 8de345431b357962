// CUDA backend, ptx/: shared-memory matrix loads for mma fragments (ldmatrix).
// One instruction family; thin inline-asm wrappers taking 32-bit shared-space addresses.
// Every lane of the warp must call these together (warp:: scope); no layout logic here.
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// 32-bit shared-window address of a generic pointer into shared memory.
// cvta.to.shared.u32 (via __cvta_generic_to_shared)                     (sm_20+)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Each 8x8 matrix of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i
// (16 bytes each); lane l receives row l/4, elements 2(l%4)..2(l%4)+1 of each matrix.
// With .trans, lane l receives column l/4, rows 2(l%4)..2(l%4)+1 instead.

// ldmatrix.sync.aligned.m8n8.x1.shared.b16 {d0}, [addr];               (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x1(uint32_t (&d)[1], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x2.shared.b16 {d0, d1}, [addr];           (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x2(uint32_t (&d)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {d0, d1, d2, d3}, [addr];   (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x4(uint32_t (&d)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {d0}, [addr];         (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x1_trans(uint32_t (&d)[1], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(d[0])
               : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {d0, d1}, [addr];     (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x2_trans(uint32_t (&d)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {d0, d1, d2, d3}, [addr]; (sm_75+)
__device__ __forceinline__ void warp_ldmatrix_x4_trans(uint32_t (&d)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

}  // namespace fa::cuda::ptx
