// CUDA backend, sm80/: forward kernels for head dim 256 (bf16 and fp16), one translation unit so
// that a developer build of one head dim compiles only this file. Instantiation only.
#include "cuda/sm80/fwd_launch.cuh"

namespace fa::cuda::sm80 {
FA_SM80_FWD_INSTANTIATE(256, false)
FA_SM80_FWD_INSTANTIATE(256, true)
}  // namespace fa::cuda::sm80
