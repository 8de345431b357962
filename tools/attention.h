// Tools: one attention problem with its buffers on one device, driven through the C ABI.
// Builds fa_fwd_params / fa_bwd_params for BSHD, BHSD (through strides) and varlen layouts;
// converts fp32 values to and from the storage dtype. Knows no kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace cli {

struct Shape {
  int64_t batch = 1, seqlen_q = 0, seqlen_k = 0, heads_q = 1, heads_kv = 1;
  int64_t head_dim = 64, head_dim_v = 64;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  float softcap = 0;
  bool bhsd = false;  // [B, H, S, D] memory order, passed through strides
  // Varlen when non-empty: the lengths of each sequence (batch = their count).
  std::vector<int32_t> lens_q, lens_k;

  bool varlen() const { return !lens_q.empty(); }
  int64_t rows_q() const;  // B*Sq, or total_q
  int64_t rows_k() const;
  size_t numel_q() const { return size_t(rows_q() * heads_q * head_dim); }
  size_t numel_k() const { return size_t(rows_k() * heads_kv * head_dim); }
  size_t numel_v() const { return size_t(rows_k() * heads_kv * head_dim_v); }
  size_t numel_o() const { return size_t(rows_q() * heads_q * head_dim_v); }
  size_t numel_lse() const { return size_t(rows_q() * heads_q); }

  std::string dims() const;      // "B=2 Sq=113 Sk=203 H=4/2 D=64/64"
  std::string features() const;  // "causal,gqa,bhsd" or "-"
  // fwd FLOPs per DESIGN.md: 4*B*Hq*Sq*Sk*D, counting only visible (query, key) pairs.
  double fwd_flops() const;
};

// Values already rounded to the dtype under test (so every run sees the same numbers).
struct Inputs {
  std::vector<float> q, k, v, dout;
};
Inputs random_inputs(const Shape& s, fa_dtype t, uint64_t seed);

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

// Memory on the CPU (device == FA_DEVICE_CPU) or on a CUDA device; freed on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(int device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return p_ != nullptr || bytes_ == 0; }
  void upload(const void* host);    // all bytes
  void download(void* host) const;  // all bytes
  void poison();                    // 0xff bytes: NaN in fp32, bf16 and fp16

 private:
  void release();
  int device_ = FA_DEVICE_CPU;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class Attention {
 public:
  Attention(const Shape& s, fa_dtype t, int device);
  // False (with the reason in error()) when a buffer could not be allocated.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void set_inputs(const Inputs& in);  // converts to the dtype and copies to the device
  // Fresh standard normal inputs made where they live (on a GPU: by a kernel, no copies).
  void randomize(uint64_t seed);
  // The outputs (o, lse, dq, dk, dv and a backward workspace) are allocated apart from the
  // inputs so a caller can measure the memory they take; poisoned with NaN. The forward's (o,
  // lse) and the backward's (gradients, workspace) can be allocated apart, in that order.
  bool alloc_outputs();
  bool alloc_forward_outputs();
  bool alloc_backward_outputs();
  void free_outputs();
  void poison_outputs();

  fa_fwd_params fwd_params(fa_algorithm a) const;
  fa_bwd_params bwd_params(fa_algorithm a) const;
  fa_status fwd(fa_algorithm a);  // returns after the device finished
  fa_status bwd(fa_algorithm a);
  Outputs outputs() const;

  // Device pointers of the inputs (for a naive implementation beside the library).
  const void* q() const { return q_.get(); }
  const void* k() const { return k_.get(); }
  const void* v() const { return v_.get(); }
  const void* dout() const { return dout_.get(); }
  const Shape& shape() const { return s_; }
  fa_dtype dtype() const { return t_; }
  int device() const { return device_; }
  int threads = 0;  // CPU thread count hint (0 = all cores)

 private:
  fa_tensor view(const Buffer& b, int64_t seqlen, int64_t heads, int64_t dim) const;
  Shape s_;
  fa_dtype t_;
  int device_;
  std::string error_;
  Buffer q_, k_, v_, dout_, cu_q_, cu_k_;
  Buffer o_, lse_, dq_, dk_, dv_, workspace_;
};

}  // namespace cli
