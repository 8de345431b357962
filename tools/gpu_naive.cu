// Tools: the naive GPU attention the demo sets beside the library (see gpu.h).
// It materialises the [B, H, Sq, Sk] scores in fp32 through cuBLAS, as a plain PyTorch
// program would; its memory is measured, not computed. Not part of the library.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu.h"

namespace cli::gpu {

namespace {

constexpr int kRowThreads = 256;  // one block of this many threads per score row

struct Events {  // start and end of a timed run
  cudaEvent_t e[2] = {nullptr, nullptr};
  ~Events() {
    for (cudaEvent_t x : e)
      if (x) cudaEventDestroy(x);
  }
};

struct DevBuf {
  void* p = nullptr;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  float* f() const { return static_cast<float*>(p); }
};

__device__ float to_float(float x) { return x; }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }

template <class T>
__global__ void to_fp32_kernel(const T* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_float(in[i]);
}

__device__ void store_as(float* p, float v) { *p = v; }
__device__ void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ void store_as(__half* p, float v) { *p = __float2half(v); }

// out[i] = a standard normal value drawn from (seed, i): splitmix64, then Box-Muller.
template <class T>
__global__ void fill_normal_kernel(T* out, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + uint64_t(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u1 = (float(z >> 40) + 1.f) * 0x1.0p-24f, u2 = float(z & 0xffffffu) * 0x1.0p-24f;
    store_as(out + i, sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

// Reduces v over the block (kRowThreads threads); every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kRowThreads / 32; ++w) v = kMax ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// One row of S [rows, sk] (already scaled) becomes P = softmax(masked row) in place;
// lse[row] = log(sum(exp(S))). Row r is query i = r % sq; causal keeps j <= i + sk - sq.
__global__ void softmax_rows_kernel(float* s, float* lse, int64_t sq, int64_t sk, bool causal) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t r = blockIdx.x, i = r % sq;
  float* row = s + r * sk;
  const int64_t last = i + sk - sq + 1;
  const int64_t end = causal ? (last < sk ? last : sk) : sk;  // visible keys [0, end)
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < end; j += kRowThreads) m = fmaxf(m, row[j]);
  // m = rowmax(S), sum = rowsum(exp(S - m))
  m = block_reduce<true>(m, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < end; j += kRowThreads) sum += expf(row[j] - m);
  sum = block_reduce<false>(sum, scratch);
  const float inv = sum > 0 ? 1.f / sum : 0.f;
  for (int64_t j = threadIdx.x; j < sk; j += kRowThreads) row[j] = j < end ? expf(row[j] - m) * inv : 0.f;
  if (threadIdx.x == 0) lse[r] = end > 0 ? m + logf(sum) : -INFINITY;
}

// delta[r] = rowsum(dO ∘ O) for row r = (b, h, i) of BSHD tensors [B, S, H, D].
__global__ void delta_kernel(const float* dout, const float* o, float* delta, int64_t s, int64_t h, int64_t d) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t r = blockIdx.x, i = r % s, head = (r / s) % h, b = r / (s * h);
  const int64_t at = ((b * s + i) * h + head) * d;
  float acc = 0;
  for (int64_t x = threadIdx.x; x < d; x += kRowThreads) acc += dout[at + x] * o[at + x];
  acc = block_reduce<false>(acc, scratch);
  if (threadIdx.x == 0) delta[r] = acc;
}

// dS = P ∘ (dP − delta) in place over dP, row by row.
__global__ void dsoftmax_kernel(const float* p, float* dp, const float* delta, int64_t sk) {
  const int64_t r = blockIdx.x;
  const float dr = delta[r];
  for (int64_t j = threadIdx.x; j < sk; j += kRowThreads) dp[r * sk + j] = p[r * sk + j] * (dp[r * sk + j] - dr);
}

struct Failure {
  std::string what;
  bool oom;
};

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Failure{std::string(what) + ": " + cudaGetErrorString(e), e == cudaErrorMemoryAllocation};
  }
}

void blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Failure{std::string(what) + ": cuBLAS status " + std::to_string(int(s)), s == CUBLAS_STATUS_ALLOC_FAILED};
}

cudaDataType_t cuda_type(fa_dtype t) {
  return t == FA_DTYPE_BF16 ? CUDA_R_16BF : t == FA_DTYPE_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

void to_fp32(const void* in, fa_dtype t, float* out, int64_t n) {
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 65535));
  if (t == FA_DTYPE_BF16) to_fp32_kernel<<<blocks, 256>>>(static_cast<const __nv_bfloat16*>(in), out, n);
  else if (t == FA_DTYPE_FP16) to_fp32_kernel<<<blocks, 256>>>(static_cast<const __half*>(in), out, n);
  else to_fp32_kernel<<<blocks, 256>>>(static_cast<const float*>(in), out, n);
  cuda(cudaGetLastError(), "conversion kernel");
}

}  // namespace

bool fill_normal(void* p, fa_dtype t, size_t n, uint64_t seed) {
  if (n == 0) return true;
  const int blocks = int(std::min<size_t>((n + 255) / 256, 65535));
  if (t == FA_DTYPE_BF16) fill_normal_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(p), int64_t(n), seed);
  else if (t == FA_DTYPE_FP16) fill_normal_kernel<<<blocks, 256>>>(static_cast<__half*>(p), int64_t(n), seed);
  else fill_normal_kernel<<<blocks, 256>>>(static_cast<float*>(p), int64_t(n), seed);
  return cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
}

NaiveResult naive_attention(const NaiveProblem& p, float* o_host, float* dq_host, float* dk_host, float* dv_host) {
  NaiveResult res;
  static cublasHandle_t handle = nullptr;  // created once, outside the measurement
  MemWatch watch;
  try {
    cuda(cudaSetDevice(p.device), "cudaSetDevice");
    if (!handle) blas(cublasCreate(&handle), "cublasCreate");
    const int64_t B = p.batch, S = p.seqlen, H = p.heads, D = p.head_dim;
    const int64_t HD = H * D, n = B * S * HD, rows = B * H * S;
    const size_t scores = size_t(B * H) * S * S * sizeof(float);
    const float scale = 1.f / std::sqrt(float(D)), one = 1.f, zero = 0.f;
    const cudaDataType_t in_type = cuda_type(p.dtype);
    const int64_t esize = p.dtype == FA_DTYPE_FP32 ? 4 : 2;  // bytes of an input element
    Events events;
    cudaEvent_t* ev = events.e;
    for (int i = 0; i < 2; ++i) cuda(cudaEventCreate(&ev[i]), "cudaEventCreate");

    watch.begin();
    DevBuf s, lse, v32, o32, dp, delta, do32, q32, k32, dq32, dk32, dv32;
    auto get = [&](DevBuf& b, size_t bytes) {
      cuda(cudaMalloc(&b.p, bytes), "cudaMalloc");
      watch.sample();
    };
    auto forward = [&] {
      to_fp32(p.v, p.dtype, v32.f(), n);
      for (int64_t b = 0; b < B; ++b) {  // heads are the GEMM batch: stride D within a row
        const int64_t at = b * S * HD;
        // S_h = scale · Q_h K_hᵀ  (column-major: S_hᵀ = K_h Q_hᵀ)
        blas(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &scale,
                                        static_cast<const char*>(p.k) + at * esize, in_type, HD, D,
                                        static_cast<const char*>(p.q) + at * esize, in_type, HD, D, &zero,
                                        s.f() + b * H * S * S, CUDA_R_32F, S, S * S, H, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
             "S = QK^T");
      }
      softmax_rows_kernel<<<rows, kRowThreads>>>(s.f(), lse.f(), S, S, p.causal);
      cuda(cudaGetLastError(), "softmax kernel");
      for (int64_t b = 0; b < B; ++b) {
        // O_h = P_h V_h  (column-major: O_hᵀ = V_hᵀ P_hᵀ)
        blas(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, v32.f() + b * S * HD, HD, D,
                                       s.f() + b * H * S * S, S, S * S, &zero, o32.f() + b * S * HD, HD, D, H),
             "O = PV");
      }
    };
    auto backward = [&] {
      to_fp32(p.dout, p.dtype, do32.f(), n);
      to_fp32(p.q, p.dtype, q32.f(), n);
      to_fp32(p.k, p.dtype, k32.f(), n);
      delta_kernel<<<rows, kRowThreads>>>(do32.f(), o32.f(), delta.f(), S, H, D);  // δ = rowsum(dO ∘ O)
      cuda(cudaGetLastError(), "delta kernel");
      for (int64_t b = 0; b < B; ++b) {
        const int64_t at = b * S * HD;
        // dP_h = dO_h V_hᵀ
        blas(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one,
                                        static_cast<const char*>(p.v) + at * esize, in_type, HD, D,
                                        static_cast<const char*>(p.dout) + at * esize, in_type, HD, D, &zero,
                                        dp.f() + b * H * S * S, CUDA_R_32F, S, S * S, H, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
             "dP = dO V^T");
      }
      dsoftmax_kernel<<<rows, kRowThreads>>>(s.f(), dp.f(), delta.f(), S);  // dS = P ∘ (dP − δ)
      cuda(cudaGetLastError(), "dsoftmax kernel");
      for (int64_t b = 0; b < B; ++b) {
        const int64_t at = b * S * HD;
        const float* pb = s.f() + b * H * S * S;
        const float* dsb = dp.f() + b * H * S * S;
        // dV_h = P_hᵀ dO_h; dQ_h = scale · dS_h K_h; dK_h = scale · dS_hᵀ Q_h
        blas(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, D, S, S, &one, do32.f() + at, HD, D, pb, S,
                                       S * S, &zero, dv32.f() + at, HD, D, H),
             "dV = P^T dO");
        blas(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &scale, k32.f() + at, HD, D, dsb, S,
                                       S * S, &zero, dq32.f() + at, HD, D, H),
             "dQ = dS K");
        blas(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, D, S, S, &scale, q32.f() + at, HD, D, dsb, S,
                                       S * S, &zero, dk32.f() + at, HD, D, H),
             "dK = dS^T Q");
      }
    };
    // Each direction runs twice: the first run warms cuBLAS up, the second is timed.
    auto timed = [&](const auto& work) {
      float ms = 0;
      for (int run = 0; run < 2; ++run) {
        cuda(cudaEventRecord(ev[0], nullptr), "cudaEventRecord");
        work();
        cuda(cudaEventRecord(ev[1], nullptr), "cudaEventRecord");
        cuda(cudaEventSynchronize(ev[1]), "naive attention");
        cuda(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
      }
      watch.sample();
      return double(ms);
    };

    get(s, scores);
    get(lse, rows * sizeof(float));
    get(v32, n * sizeof(float));
    get(o32, n * sizeof(float));
    res.fwd_ms = timed(forward);
    res.fwd_peak_bytes = watch.peak();
    if (p.backward) {
      get(dp, scores);
      get(delta, rows * sizeof(float));
      for (DevBuf* b : {&do32, &q32, &k32, &dq32, &dk32, &dv32}) get(*b, n * sizeof(float));
      res.bwd_ms = timed(backward);
    }
    res.peak_bytes = watch.end();

    const size_t out_bytes = n * sizeof(float);
    if (o_host) cuda(cudaMemcpy(o_host, o32.p, out_bytes, cudaMemcpyDeviceToHost), "copy O");
    if (p.backward) {
      if (dq_host) cuda(cudaMemcpy(dq_host, dq32.p, out_bytes, cudaMemcpyDeviceToHost), "copy dQ");
      if (dk_host) cuda(cudaMemcpy(dk_host, dk32.p, out_bytes, cudaMemcpyDeviceToHost), "copy dK");
      if (dv_host) cuda(cudaMemcpy(dv_host, dv32.p, out_bytes, cudaMemcpyDeviceToHost), "copy dV");
    }
    res.ok = true;
  } catch (const Failure& f) {
    watch.end();
    res.error = f.what;
    res.out_of_memory = f.oom;
  }
  return res;
}

}  // namespace cli::gpu
