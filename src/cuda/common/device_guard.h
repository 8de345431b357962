// CUDA backend, common/: makes a device current for a scope and restores the caller's.
// Host code only; every failure becomes fa::Error through check(). No kernels here.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/check.h"

namespace fa::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FA_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace fa::cuda
