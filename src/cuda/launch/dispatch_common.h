// CUDA backend, launch/: what the forward and backward dispatch share: the device's
// capabilities and the limits every kernel of this backend has. Host code only; each check
// returns its reason ("" when it passes) and the caller refuses in its own direction's words.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "api/problem.h"
#include "cuda/common/check.h"

namespace fa::cuda {

constexpr float kLog2e = 1.4426950408889634f;

inline const char* dtype_name(Dtype t) {
  return t == Dtype::bf16 ? "bf16" : t == Dtype::f16 ? "fp16" : "fp32";
}

struct DeviceCaps {
  int cc = 0;          // major·10 + minor
  int smem_optin = 0;  // bytes per block
};

inline DeviceCaps device_caps(int device) {
  DeviceCaps caps;
  int major = 0, minor = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&caps.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  caps.cc = major * 10 + minor;
  // FLASHATTN_SMEM_LIMIT (bytes) lowers the shared memory per block that dispatch counts on, so
  // that a large GPU runs the kernels a smaller one would (tests: 166912 is an A100's opt-in,
  // 101376 the 99 KiB of sm86, sm89 and sm120 GPUs). Read once per process.
  static const int limit = [] {
    const char* v = std::getenv("FLASHATTN_SMEM_LIMIT");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  if (limit > 0 && limit < caps.smem_optin) caps.smem_optin = limit;
  return caps;
}

// What no kernel of this backend runs: the reference algorithm, fp32, compute capability below
// 8.0, head dims that are not multiples of 8.
inline std::string backend_limits(const Problem& p, const DeviceCaps& caps) {
  if (p.algorithm == FA_ALGORITHM_REFERENCE) return "the reference algorithm runs on the CPU only";
  if (p.dtype != Dtype::bf16 && p.dtype != Dtype::f16)
    return std::string("dtype ") + dtype_name(p.dtype) + " is not supported (bf16 and fp16 are)";
  if (caps.cc < 80) return "needs compute capability 8.0 or newer";
  if (p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0)
    return "head dims must be multiples of 8 on the GPU (got D = " + std::to_string(p.head_dim) +
           ", Dv = " + std::to_string(p.head_dim_v) + ")";
  return "";
}

// 16-byte vector loads and stores: each tensor's pointer must be 16-byte aligned and each
// stride that moves between rows, heads or batches (where there is more than one) a multiple
// of 8 elements.
inline std::string alignment_limits(const char* name, const Tensor& t, bool rows, bool heads,
                                    bool batches) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return std::string(name) + " must be 16-byte aligned on the GPU";
  if ((rows && t.row_stride % 8 != 0) || (heads && t.head_stride % 8 != 0) ||
      (batches && t.batch_stride % 8 != 0))
    return std::string(name) +
           " strides (row, head, batch) must be multiples of 8 elements (16 bytes) on the GPU";
  return "";
}

// One line of the compiled-kernel listing (fa_cuda_kernels): direction, family, dtype, head
// dim, compute capabilities, and what the row hands on to the next one.
inline std::string describe_row(const char* direction, const char* family, Dtype t, int head_dim,
                                int min_cc, int max_cc, const char* declines) {
  auto cc = [](int c) { return std::to_string(c / 10) + "." + std::to_string(c % 10); };
  std::string s = std::string(direction) + " " + family + " " + dtype_name(t) + " head dim " +
                  std::to_string(head_dim) + ", compute capability " + cc(min_cc) +
                  (max_cc >= 1000 ? " and later" : max_cc == min_cc ? "" : " to " + cc(max_cc));
  if (declines != nullptr && *declines != '\0') s += "; falls back for: " + std::string(declines);
  return s + "\n";
}

}  // namespace fa::cuda
