// Tools: the CUDA runtime and cuBLAS as the CLI needs them, behind plain C++ types.
// Memory, copies, event timing, a measured memory high-water mark, the cuBLAS ceiling and
// a naive (materialising) attention. Without FA_HAVE_CUDA every call reports "no CUDA".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "flashattn/flashattn.h"

namespace cli::gpu {

bool compiled();           // the tools were built with the CUDA runtime
std::string last_error();  // text of the last failed call here

void* alloc(int device, size_t bytes);  // nullptr on failure (see last_error)
void release(void* p);
bool upload(void* dst, const void* src, size_t bytes);
bool download(void* dst, const void* src, size_t bytes);
bool fill_ff(void* p, size_t bytes);  // 0xff bytes: NaN in every float type
// n standard normal values of type t, generated on the device from (seed, index).
bool fill_normal(void* p, fa_dtype t, size_t n, uint64_t seed);
bool sync();
bool set_device(int device);

// Median milliseconds of `repeats` runs of fn on the default stream, timed with CUDA events
// after `warmup` runs. fn returns false to stop (then the result is negative).
double time_ms(const std::function<bool()>& fn, int warmup, int repeats);

// Device memory in use, measured: cudaMemGetInfo before and after each sample, the minimum
// free memory seen is the high-water mark. The stream-ordered pool is told to keep what it
// reserves until end(), so the library's own stream-ordered allocations are seen too.
class MemWatch {
 public:
  void begin();
  void sample();
  double peak() const { return double(free0_ - min_free_); }  // so far, as of the last sample
  double end();  // peak bytes above begin(); returns the pool's memory to the device

 private:
  size_t free0_ = 0, min_free_ = 0;
};

// A warmed cuBLAS bf16 GEMM m = n = k = 8192 (fp32 accumulation), TFLOP/s; < 0 on failure.
double matmul_bf16_tflops();

// Naive attention on the GPU for the demo: S = scale·Q·Kᵀ with cuBLAS (bf16 or fp16 inputs,
// fp32 scores, [B, H, Sq, Sk]), a row softmax kernel with the causal mask writing P in place
// and the LSE, O = P·V in fp32; the backward materialises dP = dO·Vᵀ ([B, H, Sq, Sk] fp32),
// turns it into dS in place, then dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q in fp32. Inputs are BSHD
// on the device, Hq == Hkv, D == Dv. Every buffer it needs (scores, fp32 copies, outputs) is
// allocated inside, between MemWatch samples: the peaks are measured. Each direction runs
// twice and the second run is timed; the outputs come back to the host as fp32 (BSHD) when asked for.
struct NaiveProblem {
  int device = 0;
  fa_dtype dtype = FA_DTYPE_BF16;
  int64_t batch = 1, seqlen = 0, heads = 1, head_dim = 64;
  bool causal = false;
  bool backward = true;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;  // device, BSHD
};
struct NaiveResult {
  bool ok = false;
  bool out_of_memory = false;
  std::string error;
  double fwd_ms = 0, bwd_ms = 0;
  double fwd_peak_bytes = 0, peak_bytes = 0;  // through the forward; through both
};
// o, dq, dk, dv: host fp32 arrays of the problem's size, filled when non-null.
NaiveResult naive_attention(const NaiveProblem& p, float* o, float* dq, float* dk, float* dv);

bool mem_info(size_t* free_bytes, size_t* total_bytes);

}  // namespace cli::gpu
