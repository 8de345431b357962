// CUDA backend, sm80/: launch entries of the backward's pre- and postprocess row kernels
// (sm80/bwd_pre_post.cu). Declarations only; they check their launches and throw fa::Error.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda {

// D = rowsum(dO∘O) into p.dsum; p.dq_accum and the p.zero_ints counters from p.tile_counter zeroed.
void bwd_pre_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream);
// p.dq = p.scale · p.dq_accum, rounded to the storage type.
void bwd_post_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream);
// With head tiles (sm90): p.dk = p.dk_accum and p.dv = p.dv_accum, rounded to the storage type.
void bwd_dkdv_post_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream);

}  // namespace fa::cuda
