// CUDA backend, common/: tile counter pairs per (device, stream) (tile_counter.h). Host code.
#include "cuda/common/tile_counter.h"

#include <mutex>
#include <unordered_map>

#include "cuda/common/check.h"

namespace fa::cuda {

namespace {

// Pairs a device keeps: one per stream that launched on it, by the stream's id (unique for the
// life of the process, so a destroyed stream's handle reused by a new one gets a pair of its
// own). A slab of device memory, never freed: launches queued at exit may still use it.
constexpr int kPairsPerDevice = 1024;

struct DevicePairs {
  int* slab = nullptr;
  std::unordered_map<unsigned long long, int> index;  // stream id -> pair
};

}  // namespace

int* stream_tile_counter(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  unsigned long long id = 0;
  FA_CUDA_CHECK(cudaStreamGetId(stream, &id));
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));

  static std::mutex mutex;
  static std::unordered_map<int, DevicePairs> devices;
  const std::lock_guard<std::mutex> lock(mutex);
  DevicePairs& d = devices[device];
  if (d.slab == nullptr)
    FA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d.slab), sizeof(int) * 2 * kPairsPerDevice));
  const auto found = d.index.find(id);
  if (found != d.index.end()) return d.slab + 2 * found->second;
  if (d.index.size() >= kPairsPerDevice) return nullptr;
  int* pair = d.slab + 2 * d.index.size();
  FA_CUDA_CHECK(cudaMemsetAsync(pair, 0, 2 * sizeof(int), stream));  // ordered before its first launch
  d.index.emplace(id, static_cast<int>(d.index.size()));
  return pair;
}

}  // namespace fa::cuda
