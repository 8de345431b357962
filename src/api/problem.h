// API core: the validated problem every backend receives.
// Built once from the C params by src/api/api.cpp; backends read it and never re-validate.
// Plain data only: no arithmetic, no CUDA, no torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/mask.h"
#include "flashattn/flashattn.h"

namespace fa {

enum class Dtype { f32 = FA_DTYPE_FP32, f16 = FA_DTYPE_FP16, bf16 = FA_DTYPE_BF16 };

inline size_t dtype_size(Dtype t) { return t == Dtype::f32 ? 4 : 2; }

// A strided [batch, row, head, dim] view; strides in elements, the dim stride is 1.
struct Tensor {
  void* data = nullptr;
  int64_t batch_stride = 0;  // unused for varlen (rows are packed)
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

struct Problem {
  int device = FA_DEVICE_CPU;
  Dtype dtype = Dtype::f32;
  fa_algorithm algorithm = FA_ALGORITHM_AUTO;

  int64_t batch = 0;
  int64_t seqlen_q = 0;  // varlen: maximum over sequences
  int64_t seqlen_k = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;

  Tensor q, k, v, o;
  float* lse = nullptr;  // [B, Hq, Sq] or varlen [Hq, total_q]; may be null in the forward

  float scale = 1.f;
  float softcap = 0.f;  // 0: none
  Mask mask;            // causal and window folded together
  bool deterministic = false;
  int num_threads = 0;

  const int32_t* cu_seqlens_q = nullptr;  // varlen when non-null (both are then)
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0;
  int64_t total_k = 0;

  // Backward only.
  Tensor dout, dq, dk, dv;
  void* workspace = nullptr;
  size_t workspace_size = 0;

  bool varlen() const { return cu_seqlens_q != nullptr; }
  int64_t group() const { return heads_q / heads_kv; }  // query heads per kv head
};

// Thrown inside the library, turned into a status and fa_last_error() at the C boundary.
struct Error : std::runtime_error {
  fa_status status;
  Error(fa_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

[[noreturn]] inline void fail(fa_status s, const std::string& what) { throw Error(s, what); }

}  // namespace fa
