// CUDA backend, sm80/: backward main kernels for head dim 128 (bf16 and fp16), one translation unit
// so that a developer build of one head dim compiles only this file. Instantiation only.
#include "cuda/sm80/bwd_launch.cuh"

namespace fa::cuda::sm80 {
FA_SM80_BWD_INSTANTIATE(128, false)
FA_SM80_BWD_INSTANTIATE(128, true)
}  // namespace fa::cuda::sm80
