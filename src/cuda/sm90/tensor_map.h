// CUDA backend, sm90/: building TMA tensor maps on the host (cuTensorMapEncodeTiled).
// The driver entry point comes through the runtime (cudaGetDriverEntryPointByVersion), so the
// library does not link libcuda. Host code only; returns reasons, never throws or launches.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace fa::cuda::sm90 {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                   CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled (ABI of CUDA 12.0), looked up once; null if unavailable.
inline EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult res{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &res);
    if (err != cudaSuccess || res != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

// The tensor maps' batch and row extents for the problem fields of sm80::FwdParams or
// sm80::BwdParams: a varlen problem is one packed batch of total rows.
struct MapExtents {
  int64_t batch, rows_q, rows_k;
};
template <class Prob>
MapExtents map_extents(const Prob& p) {
  if (p.cu_seqlens_q != nullptr) return {1, p.total_q, p.total_k};
  return {p.batch, p.seqlen_q, p.seqlen_k};
}

// True when the environment variable `name` is "plain": the switch that sends a kernel's TMA-store
// epilogue back to plain stores (FLASHATTN_SM90_O_STORE, FLASHATTN_SM90_DKDV_STORE), for
// comparing the two in one process.
inline bool plain_stores_forced(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == "plain";
}

// What TMA needs of one strided [batch, row, head, dim] 16-bit tensor (strides in elements):
// a 16-byte aligned base and strides that are positive multiples of 16 bytes below 2^40. A
// stride of an extent-1 dimension is never followed and is not checked. Empty string if met.
inline std::string bshd_map_limits(const void* base, int64_t batch, int64_t rows, int64_t heads,
                                   int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "TMA needs 16-byte aligned base pointers";
  const int64_t extent[3] = {rows, heads, batch};
  const int64_t stride_el[3] = {row_stride, head_stride, batch_stride};
  for (int i = 0; i < 3; ++i) {
    const int64_t s = stride_el[i] * 2;
    if (extent[i] > 1 && (s <= 0 || s % 16 != 0 || s >= (int64_t{1} << 40)))
      return "TMA needs strides that are positive multiples of 16 bytes below 2^40";
  }
  return {};
}

// The tensor as a 4-D tiled map (dim innermost), box = 64 elements (128 bytes, the 128-byte
// swizzle span) x box_rows rows x 1 head x 1 batch. Empty string on success, else the reason.
inline std::string encode_bshd_map(CUtensorMap* map, bool is_bf16, const void* base, int64_t batch,
                                   int64_t rows, int64_t heads, int64_t dim, int64_t batch_stride,
                                   int64_t row_stride, int64_t head_stride, int box_rows) {
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return "the driver has no cuTensorMapEncodeTiled";
  std::string why = bshd_map_limits(base, batch, rows, heads, batch_stride, row_stride, head_stride);
  if (!why.empty()) return why;
  const int64_t extent[3] = {rows, heads, batch};
  const int64_t stride_el[3] = {row_stride, head_stride, batch_stride};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i)  // an extent-1 dimension gets a legal stride it never uses
    strides[i] = static_cast<cuuint64_t>(extent[i] <= 1 ? 16 : stride_el[i] * 2);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(rows > 0 ? rows : 1),
                              static_cast<cuuint64_t>(heads > 0 ? heads : 1),
                              static_cast<cuuint64_t>(batch > 0 ? batch : 1)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                            const_cast<void*>(base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")";
  return {};
}

// The backward's fp32 dQ accumulator, dense [heads, batch, rows, dim] (dim innermost, contiguous),
// as a 4-D tiled map {dim, rows, batch, heads} for reductions into it: 128-byte swizzle, box =
// 32 floats (128 bytes) x box_rows rows x 1 x 1; elements outside the tensor are not written.
// Empty string on success, else the reason.
inline std::string encode_dq_accum_map(CUtensorMap* map, float* base, int64_t batch, int64_t rows, int64_t heads,
                                       int64_t dim, int box_rows) {
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return "the driver has no cuTensorMapEncodeTiled";
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "TMA needs a 16-byte aligned dQ accumulator";
  if (dim % 4 != 0) return "TMA needs dQ accumulator rows of a multiple of 16 bytes (head dim a multiple of 4)";
  const int64_t row_bytes = dim * 4, batch_bytes = rows * row_bytes, head_bytes = batch * batch_bytes;
  if (head_bytes >= (int64_t{1} << 40)) return "TMA needs strides below 2^40 bytes";
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(rows > 0 ? rows : 1),
                              static_cast<cuuint64_t>(batch > 0 ? batch : 1),
                              static_cast<cuuint64_t>(heads > 0 ? heads : 1)};
  // An extent-1 dimension gets a legal stride it never uses.
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_bytes),
                                 static_cast<cuuint64_t>(batch_bytes > 0 ? batch_bytes : 16),
                                 static_cast<cuuint64_t>(head_bytes > 0 ? head_bytes : 16)};
  const cuuint32_t box[4] = {32, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")";
  return {};
}

}  // namespace fa::cuda::sm90
