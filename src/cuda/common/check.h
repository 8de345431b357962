// CUDA backend, common/: turning CUDA runtime errors into fa::Error (host code).
// Every runtime call and every launch goes through these; a non-sticky error is cleared so
// that none is left behind for the caller. Never prints, never aborts.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "api/problem.h"

namespace fa::cuda {

// Throws fa::Error for a failed runtime call: OUT_OF_MEMORY for allocation failures, else
// DEVICE_ERROR with the call and CUDA's text. Clears the per-thread last error first.
inline void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error; a sticky one stays and is named
  const fa_status s =
      err == cudaErrorMemoryAllocation ? FA_STATUS_OUT_OF_MEMORY : FA_STATUS_DEVICE_ERROR;
  fail(s, std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// After a <<<>>> launch: a bad configuration surfaces here, not at the launch.
inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    fail(FA_STATUS_DEVICE_ERROR, std::string("launch of ") + kernel + " failed: " +
                                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

}  // namespace fa::cuda

// FA_CUDA_CHECK(cudaMemsetAsync(...)): throws fa::Error naming the call when it fails.
#define FA_CUDA_CHECK(expr) ::fa::cuda::check((expr), #expr)
