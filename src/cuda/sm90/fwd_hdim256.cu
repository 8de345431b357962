// CUDA backend, sm90/: Hopper forward kernels for head dim 256 (bf16 and fp16), one translation
// unit compiled for sm_90a only (src/cuda/CMakeLists.txt, FA_SM90). Instantiation only.
#include "cuda/sm90/fwd_launch.cuh"

namespace fa::cuda::sm90 {
FA_SM90_FWD_INSTANTIATE(256, 0)
FA_SM90_FWD_INSTANTIATE(256, 1)
FA_SM90_FWD_INSTANTIATE(256, 2)
}  // namespace fa::cuda::sm90
