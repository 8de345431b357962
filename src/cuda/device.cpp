// CUDA backend: device enumeration and properties for the C ABI (fa_cuda_device_count,
// fa_get_device_info). Host code only; errors become fa::Error; launches nothing.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "cuda/common/check.h"
#include "cuda/cuda_backend.h"

namespace fa::cuda {

int device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: report none, leave no error behind
    return 0;
  }
  return n;
}

void device_info(int device, fa_device_info* info) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    fail(FA_STATUS_INVALID_ARGUMENT, "device " + std::to_string(device) + " does not exist (" +
                                         std::to_string(n) + " CUDA devices)");
  }
  cudaDeviceProp prop;
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int smem_optin = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  info->total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  info->smem_per_block = smem_optin;
  std::snprintf(info->name, sizeof(info->name), "%s", prop.name);
}

}  // namespace fa::cuda
