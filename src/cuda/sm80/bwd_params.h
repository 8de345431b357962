// CUDA backend, sm80/: the plain parameter block of the backward kernels (pre, main, post).
// Built once per call by launch/bwd.cu from a validated fa::Problem and passed by value as a
// __grid_constant__ kernel argument. Plain data only: no pointers to host memory, no logic.
#pragma once

#include <cstdint>

#include "common/mask.h"

namespace fa::cuda::sm80 {

// How dQ_accum holds dQ: each main kernel adds in its own order, the postprocess reads it back.
enum class DqAccumLayout : int {
  // sm90: row (head h, row q) at h·dq_accum_rows + q; within each group of 32 columns, column
  // 16J + 8h + 2t + e (J, h, e < 2, t < 4) at 8t + 4J + 2h + e, so that the thread of a wgmma
  // accumulator holding columns 2t, 2t + 1 of two neighbouring n8 chunks stores them as one
  // 16-byte vector.
  kPaired = 1,
  // sm80: q block qb of sequence b, head h, is one tile (sm80/dq_tile.h) of dq_tile_rows rows
  // from row h·dq_accum_rows + q_start + (b + qb)·dq_tile_rows (q_start: the sequence's first
  // packed row, b·Sq when dense): every q block whole, in the order the kernel's lanes add it.
  kTiled = 2,
  // sm90 (the transposed dQ GEMM's rows): row (head h, row q) at h·dq_accum_rows + q, column d
  // at d.
  kPlain = 3,
};

struct BwdParams {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  const float* lse;  // [B, Hq, Sq] (varlen [Hq, total_q]), natural log, -inf: row sees no key

  // Element strides; batch strides are unused with varlen (rows are packed).
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;

  int batch;
  int seqlen_q;  // varlen: maximum over sequences
  int seqlen_k;
  int heads_q;
  int heads_kv;
  int group;  // heads_q / heads_kv
  int head_dim;
  int head_dim_v;

  // Workspace (launch/bwd.cu lays it out):
  float* dq_accum;        // fp32 [Hq, dq_accum_rows, dq_accum_pitch], in the main kernel's layout
  int64_t dq_accum_rows;  // rows a head: rows_q (kPaired), rows_q + B·dq_tile_rows (kTiled)
  int dq_accum_pitch;     // floats a row: head_dim rounded up to 32 (kPaired), the kernel's D (kTiled)
  DqAccumLayout dq_accum_layout;
  int dq_tile_rows, dq_tile_warps_m;  // kTiled: sm80/dq_tile.h's rows and warps_m
  float* dsum;      // D = rowsum(dO∘O), fp32, laid out like lse
  int* locks;       // the ordered dQ reduction: [B, Hq, num_q_blocks] turn counters, zeroed; else null
  // The default mode's unordered reduction with each q block's first dQ tile stored (sm90, launch/bwd.cu
  // says where): [B, Hq, num_q_blocks] claim counters, zeroed (BwdKernel::dq_writer); else null.
  int* claims;
  // 1: an sm90 kernel stores the first dQ tile of each (query head, q block) and adds the later
  // ones, in the ordered reduction (its first turn) or by claims (the first to claim it):
  // dQ_accum is not zeroed, and the postprocess writes dQ = 0 where a block's lock or claim
  // counter is still 0 (no tile reached it).
  int dq_first_stored;
  int* tile_counter;  // persistent kernels (sm90): tiles claimed past the first wave, zeroed
  // The preprocess zeroes zero_ints ints from tile_counter: the counter, then the locks or the
  // claims where there are any (one region, launch/bwd.cu).
  int64_t zero_ints;
  int64_t rows_q;   // B·Sq, or total_q with varlen
  // GQA in tiles of one query head (sm90; launch/bwd.cu says where), 1: a tile per (kv block,
  // query head, batch), not per kv head, and the group's tiles of a kv block sum dK and dV in
  // query-head order: the first stores its part into dk_accum / dv_accum (fp32 [B·Sk or total_k,
  // Hkv, D] and [.., Dv]), each later one adds its own once dkv_turns ([B·Sk or total_k, Hkv],
  // zeroed with the counters; the entry of a kv block's first key row) counts the heads before
  // it, and the postprocess rounds the sums into dk and dv. 0: a tile runs the whole group and
  // holds the sums (dk_accum etc. unused).
  int head_tiles;
  float* dk_accum;
  float* dv_accum;
  int* dkv_turns;

  float scale;       // softmax scale; dS_raw = scale · dS_x multiplies dQ and dK
  float score_log2;  // scale·log2(e) without softcap; log2(e)·softcap with it
  float softcap;     // 0: none
  float softcap_in;  // scale / softcap

  fa::Mask mask;

  const int32_t* cu_seqlens_q;  // varlen when non-null
  const int32_t* cu_seqlens_k;
  int64_t total_q;  // varlen: LSE row pitch per head
  int64_t total_k;  // varlen: packed key rows (the sm90 tensor maps' extent)

  int num_kv_blocks;  // ceil(seqlen_k / kBlockN) of the main kernel
  int num_q_blocks;   // ceil(seqlen_q / kBlockM) of the main kernel (lock pitch)
};

}  // namespace fa::cuda::sm80
