// CUDA backend, sm80/: the plain parameter block of the forward kernels (host and device).
// Built once per call by launch/fwd.cu from a validated fa::Problem and passed by value as a
// __grid_constant__ kernel argument. Plain data only: no pointers to host memory, no logic.
#pragma once

#include <cstdint>

#include "common/mask.h"

namespace fa::cuda::sm80 {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be null

  // Element strides; batch strides are unused with varlen (rows are packed).
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;

  int batch;
  int seqlen_q;  // varlen: maximum over sequences
  int seqlen_k;
  int heads_q;
  int heads_kv;
  int group;  // heads_q / heads_kv
  int head_dim;
  int head_dim_v;

  // Without softcap: exp2 argument = s * score_log2 - m * score_log2, score_log2 = scale·log2(e).
  // With softcap c: s is first replaced by c·tanh(s · softcap_in) (softcap_in = scale / c) and
  // score_log2 = log2(e).
  float score_log2;
  float softcap;     // 0: none
  float softcap_in;  // scale / softcap

  fa::Mask mask;

  const int32_t* cu_seqlens_q;  // varlen when non-null
  const int32_t* cu_seqlens_k;
  int64_t total_q;  // varlen: LSE row pitch per head
  int64_t total_k;  // varlen: packed key rows (the sm90 tensor maps' extent)

  int num_m_blocks;  // ceil(seqlen_q / kBlockM)
};

}  // namespace fa::cuda::sm80
