// CUDA backend, sm90/: Hopper backward main kernels for head dim 256 (bf16 and fp16), one
// translation unit compiled for sm_90a only (src/cuda/CMakeLists.txt, FA_SM90_BWD). Instantiation only.
#include "cuda/sm90/bwd_launch.cuh"

namespace fa::cuda::sm90 {
FA_SM90_BWD_INSTANTIATE(256, 0)
FA_SM90_BWD_INSTANTIATE(256, 1)
}  // namespace fa::cuda::sm90
