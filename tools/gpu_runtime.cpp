// Tools: the CUDA runtime and cuBLAS for the CLI (see gpu.h).
// With FA_HAVE_CUDA the real calls; without it, stubs that report "no CUDA". The naive
// attention's kernels are in gpu_naive.cu.
#include "gpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.h"

#if FA_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace cli::gpu {

namespace {
thread_local std::string g_error;
}  // namespace

std::string last_error() { return g_error; }

#if FA_HAVE_CUDA

static bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  g_error = std::string(what) + ": " + cudaGetErrorString(e);
  cudaGetLastError();  // leave no error behind for the next call
  return false;
}

bool compiled() { return true; }

bool set_device(int device) { return check(cudaSetDevice(device), "cudaSetDevice"); }

void* alloc(int device, size_t bytes) {
  void* p = nullptr;
  if (!set_device(device) || !check(cudaMalloc(&p, bytes), "cudaMalloc")) return nullptr;
  return p;
}

void release(void* p) { cudaFree(p); }

bool upload(void* dst, const void* src, size_t bytes) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

bool download(void* dst, const void* src, size_t bytes) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

bool fill_ff(void* p, size_t bytes) { return check(cudaMemset(p, 0xff, bytes), "cudaMemset"); }

bool sync() { return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

bool mem_info(size_t* free_bytes, size_t* total_bytes) {
  return check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

double time_ms(const std::function<bool()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i)
    if (!fn()) return -1;
  if (!sync()) return -1;
  cudaEvent_t start, stop;
  if (!check(cudaEventCreate(&start), "cudaEventCreate") ||
      !check(cudaEventCreate(&stop), "cudaEventCreate"))
    return -1;
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start, nullptr);
    const bool ran = fn();
    cudaEventRecord(stop, nullptr);
    float t = 0;
    if (!ran || !check(cudaEventSynchronize(stop), "kernel") ||
        !check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime")) {
      ms.clear();
      break;
    }
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms.empty() ? -1 : median(ms);
}

static cudaMemPool_t default_pool() {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  cudaGetDevice(&dev);
  if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return pool;
}

void MemWatch::begin() {
  cudaDeviceSynchronize();
  if (cudaMemPool_t pool = default_pool()) {
    cudaMemPoolTrimTo(pool, 0);
    uint64_t keep = UINT64_MAX;  // keep what the pool reserves, so a sample after a call sees it
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  size_t total = 0;
  cudaMemGetInfo(&free0_, &total);
  min_free_ = free0_;
}

void MemWatch::sample() {
  cudaDeviceSynchronize();
  size_t f = 0, total = 0;
  if (cudaMemGetInfo(&f, &total) == cudaSuccess) min_free_ = std::min(min_free_, f);
  cudaGetLastError();
}

double MemWatch::end() {
  sample();
  if (cudaMemPool_t pool = default_pool()) {
    uint64_t keep = 0;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaMemPoolTrimTo(pool, 0);
  }
  return double(free0_ - min_free_);
}

double matmul_bf16_tflops() {
  constexpr int n = 8192;
  constexpr size_t bytes = size_t(n) * n * 2;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t h = nullptr;
  double tflops = -1;
  if (check(cudaMalloc(&a, bytes), "cudaMalloc") && check(cudaMalloc(&b, bytes), "cudaMalloc") &&
      check(cudaMalloc(&c, bytes), "cudaMalloc") && cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    cudaMemset(a, 0x3c, bytes);  // bf16 0x3c3c ~ 0.0115: finite, no overflow in the sums
    cudaMemset(b, 0x3c, bytes);
    const float alpha = 1, beta = 0;
    auto gemm = [&] {
      return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                          CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    };
    const double ms = time_ms(gemm, 5, 20);
    if (ms > 0) tflops = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
  }
  if (h) cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return tflops;
}

#else  // no CUDA runtime in this build

static bool none() {
  g_error = "this flashattn tool was built without CUDA";
  return false;
}

bool compiled() { return false; }
bool set_device(int) { return none(); }
void* alloc(int, size_t) { return none(), nullptr; }
void release(void*) {}
bool upload(void*, const void*, size_t) { return none(); }
bool download(void*, const void*, size_t) { return none(); }
bool fill_ff(void*, size_t) { return none(); }
bool fill_normal(void*, fa_dtype, size_t, uint64_t) { return none(); }
bool sync() { return none(); }
bool mem_info(size_t*, size_t*) { return none(); }
double time_ms(const std::function<bool()>&, int, int) { return none(), -1; }
void MemWatch::begin() {}
void MemWatch::sample() {}
double MemWatch::end() { return 0; }
double matmul_bf16_tflops() { return none(), -1; }
NaiveResult naive_attention(const NaiveProblem&, float*, float*, float*, float*) {
  none();
  NaiveResult r;
  r.error = g_error;
  return r;
}

#endif

}  // namespace cli::gpu
