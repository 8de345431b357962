// CUDA backend, common/: the tile counter of kernels that draw their tiles (host code). A
// counter pair {draws, exits} per (device, stream), zero when a launch on that stream runs and
// left zero by it: each CTA counts itself out past its last draw and the last one out resets
// both (sm90 forward, FwdKernel::leave_tile_counter). So a launch queues no memset of its own.
#pragma once

#include <cuda_runtime_api.h>

namespace fa::cuda {

// The counter pair for a launch on `stream` on the current device. nullptr while `stream` is
// captured into a CUDA graph (a graph's launches may replay on any stream, beside this one's)
// and past the streams a device keeps pairs for: the caller then zeroes a pair of its own on
// the stream. A stream's pair is zeroed on that stream at its first use.
int* stream_tile_counter(cudaStream_t stream);

}  // namespace fa::cuda
