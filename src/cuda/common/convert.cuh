// CUDA backend, common/: conversions between fp32 and the 16-bit storage types.
// Packs/unpacks pairs as one 32-bit register (the mma fragment element), round-to-nearest;
// zero_acc clears an mma accumulator array.
// No memory access and no layout logic here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fa::cuda {

// Storage type of a Dtype tag: bf16 -> __nv_bfloat16, f16 -> __half.
template <bool kIsBf16>
struct Storage;
template <>
struct Storage<true> {
  using type = __nv_bfloat16;
  using type2 = __nv_bfloat162;
};
template <>
struct Storage<false> {
  using type = __half;
  using type2 = __half2;
};

// An mma accumulator array (m tiles x n tiles x the 4 fp32 of a C fragment) set to zero.
template <int kM, int kN>
__device__ __forceinline__ void zero_acc(float (&acc)[kM][kN][4]) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int j = 0; j < kN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// (lo, hi) fp32 -> one register holding {lo, hi} in the 16-bit type (lo in the low half).
template <bool kIsBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kIsBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// One register holding two 16-bit values -> (lo, hi) fp32.
template <bool kIsBf16>
__device__ __forceinline__ float2 unpack2(uint32_t r) {
  if constexpr (kIsBf16) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&r));
  } else {
    return __half22float2(*reinterpret_cast<__half2*>(&r));
  }
}

// Scalar conversions, for epilogues and checks.
template <bool kIsBf16>
__device__ __forceinline__ float to_float(typename Storage<kIsBf16>::type x) {
  if constexpr (kIsBf16) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}
template <bool kIsBf16>
__device__ __forceinline__ typename Storage<kIsBf16>::type from_float(float x) {
  if constexpr (kIsBf16) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

}  // namespace fa::cuda
