// Tests, GPU: helpers of the standalone GPU check programs (no GoogleTest on the GPU machine).
// Host-side only: 16-bit rounding, random inputs, device buffers with canary margins, the
// awkward-shape list, CUDA error checks. Uses only the C ABI and the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace gpucheck {

#define GC_CUDA(expr)                                                                        \
  do {                                                                                       \
    cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

// ---- 16-bit storage, round to nearest even ----------------------------------------------------
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (ax < 0x38800000u) {  // subnormal or zero in fp16
    float a;
    std::memcpy(&a, &ax, 4);
    const float scaled = a * 16777216.f;  // 2^24: units of the smallest subnormal
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t m = ax + 0xfffu + ((ax >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((m - 0x38000000u) >> 13));
}
inline float from_fp16(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(static_cast<float>(m), -24);
    return sign ? -f : f;
  }
  uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_half(fa_dtype dt, float f) { return dt == FA_DTYPE_BF16 ? to_bf16(f) : to_fp16(f); }
inline float from_half(fa_dtype dt, uint16_t h) { return dt == FA_DTYPE_BF16 ? from_bf16(h) : from_fp16(h); }
inline float round_half(fa_dtype dt, float f) { return from_half(dt, to_half(dt, f)); }
// Rounding step of dtype at magnitude m.
inline double ulp_at(fa_dtype dt, double m) {
  const int mant = dt == FA_DTYPE_BF16 ? 7 : 10;
  if (m <= 0) return std::ldexp(1.0, -24);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(m))) - mant);
}
inline const char* dtype_name(fa_dtype dt) { return dt == FA_DTYPE_BF16 ? "bf16" : "fp16"; }

// ---- device buffers with canary margins -------------------------------------------------------
// `count` 16-bit elements between two margins; the whole allocation starts as `fill` and
// check_untouched() verifies that every element outside `written` kept it.
struct DeviceHalf {
  static constexpr size_t kMargin = 4096;  // elements each side (8 KiB; keeps 16-byte alignment)
  uint16_t* base = nullptr;
  size_t count = 0;
  uint16_t* data() const { return base + kMargin; }
  void alloc(size_t n, uint16_t fill) {
    count = n;
    GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&base), (n + 2 * kMargin) * 2));
    std::vector<uint16_t> h(n + 2 * kMargin, fill);
    GC_CUDA(cudaMemcpy(base, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<uint16_t>& h) {
    GC_CUDA(cudaMemcpy(data(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  std::vector<uint16_t> download_all() const {  // margins included
    std::vector<uint16_t> h(count + 2 * kMargin);
    GC_CUDA(cudaMemcpy(h.data(), base, h.size() * 2, cudaMemcpyDeviceToHost));
    return h;
  }
  void release() {
    if (base) GC_CUDA(cudaFree(base));
    base = nullptr;
  }
};

struct DeviceFloat {
  static constexpr size_t kMargin = 1024;
  float* base = nullptr;
  size_t count = 0;
  float* data() const { return base + kMargin; }
  void alloc(size_t n) {
    count = n;
    GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&base), (n + 2 * kMargin) * 4));
    std::vector<float> h(n + 2 * kMargin, std::nanf(""));
    GC_CUDA(cudaMemcpy(base, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<float> download_all() const {
    std::vector<float> h(count + 2 * kMargin);
    GC_CUDA(cudaMemcpy(h.data(), base, h.size() * 4, cudaMemcpyDeviceToHost));
    return h;
  }
  void release() {
    if (base) GC_CUDA(cudaFree(base));
    base = nullptr;
  }
};

// ---- the shared awkward-shape list (tests/awkward_shapes.txt) --------------------------------
struct Shape {
  std::string name;
  int64_t B, Sq, Sk, Hq, Hkv, D, Dv;
  std::vector<int32_t> lens_q, lens_k;  // empty: every sequence at full length
};

inline std::vector<Shape> read_shapes(const std::string& path) {
  std::vector<Shape> out;
  std::ifstream in(path);
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      header = true;
      continue;
    }
    std::istringstream ss(line);
    Shape s;
    std::string lens;
    ss >> s.name >> s.B >> s.Sq >> s.Sk >> s.Hq >> s.Hkv >> s.D >> s.Dv >> lens;
    if (lens != "-") {
      std::istringstream ls(lens);
      std::string pair;
      while (std::getline(ls, pair, ',')) {
        const size_t c = pair.find(':');
        s.lens_q.push_back(std::stoi(pair.substr(0, c)));
        s.lens_k.push_back(std::stoi(pair.substr(c + 1)));
      }
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace gpucheck
