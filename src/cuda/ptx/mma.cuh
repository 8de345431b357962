// CUDA backend, ptx/: warp-level matrix multiply-accumulate (mma.sync).
// One instruction family; thin inline-asm wrappers, no tiling logic. Every lane of the warp
// must call these together (warp:: scope).
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// Fragment layouts of m16n8k16 (g = lane / 4, t = lane % 4), each register 2 x 16-bit:
//   A (16x16, row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8, col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16x8, f32):  c0 c1 (g, 2t..2t+1)   c2 c3 (g+8, 2t..2t+1)

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c;   (sm_80+)
__device__ __forceinline__ void warp_mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                       const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 d, a, b, c;     (sm_80+)
__device__ __forceinline__ void warp_mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4],
                                                      const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Dispatch on the 16-bit storage type (T = __nv_bfloat16 or __half): d += a * b.
template <bool kIsBf16>
__device__ __forceinline__ void warp_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  if constexpr (kIsBf16) {
    warp_mma_m16n8k16_bf16(d, a, b);
  } else {
    warp_mma_m16n8k16_f16(d, a, b);
  }
}

}  // namespace fa::cuda::ptx
