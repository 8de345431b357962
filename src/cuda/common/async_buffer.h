// CUDA backend, common/: stream-ordered device scratch owned by one library call (host code):
// cudaMallocAsync on construction, cudaFreeAsync on destruction, both on the call's stream, so
// the memory lives exactly as long as the work queued between them and CUDA-graph capture
// records both as nodes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/common/check.h"

namespace fa::cuda {

class AsyncBuffer {
 public:
  AsyncBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    FA_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~AsyncBuffer() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  AsyncBuffer(const AsyncBuffer&) = delete;
  AsyncBuffer& operator=(const AsyncBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace fa::cuda
