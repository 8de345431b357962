// CUDA backend, sm80/: the backward's preprocess (D = rowsum(dO∘O), zeroed fp32 dQ accumulator)
// and postprocess (dQ = scale · dQ_accum in the storage type and the caller's strides). Memory-
// bound row kernels, one (row, head) per group of lanes; no attention math, no dispatch here.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/fast_div.h"
#include "cuda/sm80/bwd_pre_post.h"
#include "cuda/sm80/dq_tile.h"

namespace fa::cuda {

namespace {

using sm80::DqAccumLayout;

constexpr int kRowThreads = 256;  // a memory-bound kernel: any full-occupancy block size

// One task = one (row, head). Lanes of a row: a power of two covering the row's 8-element
// chunks (at most 32, since D <= 256). Rows and heads are visited head-fastest, so neighbouring
// groups read neighbouring memory in the BSHD layout.
struct RowTask {
  int64_t row;  // packed row: b·Sq + s, or the varlen row
  int h;
  int64_t b, s;  // dense: the row's sequence and position in it (varlen: 0, row)
  int64_t lse_index;
};

// The divisors of a task index, fixed at launch: a 64-bit `/` is a call of some 70 instructions,
// which bound the preprocess by issue where it only reads, with no zeroing (docs/PERF.md, sm90
// backward section).
struct RowDivs {
  FastDiv heads;   // task -> (row, h)
  FastDiv seqlen;  // dense row -> (b, s)
};

RowDivs row_divs(const sm80::BwdParams& p) {
  return {FastDiv(uint64_t(p.heads_q)), FastDiv(uint64_t(p.seqlen_q > 0 ? p.seqlen_q : 1))};
}

__device__ __forceinline__ RowTask row_task(const sm80::BwdParams& p, const RowDivs& divs, int64_t task) {
  RowTask t;
  int64_t h;
  t.row = divs.heads.divmod(task, &h);
  t.h = static_cast<int>(h);
  if (p.cu_seqlens_q != nullptr) {
    t.b = 0;
    t.s = t.row;
    t.lse_index = h * p.total_q + t.row;
  } else {
    t.b = divs.seqlen.divmod(t.row, &t.s);
    t.lse_index = (t.b * p.heads_q + h) * p.seqlen_q + t.s;
  }
  return t;
}

// Element offset of task t's (row, head) in a [B, S, H, D] tensor with batch stride bs.
__device__ __forceinline__ int64_t row_offset(const sm80::BwdParams& p, const RowTask& t,
                                              int64_t bs, int64_t rs, int64_t hs) {
  if (p.cu_seqlens_q != nullptr) return t.row * rs + t.h * hs;
  return t.b * bs + t.s * rs + t.h * hs;
}

// Both row kernels take kGroupsInFlight groups of rows_per_block tasks a block at a time, every
// load of them issued before the first sum or store: one group a block (a lane's one or two
// 16-byte loads, then the shuffles or the store) left the passes latency-bound, the rows being
// many and short (docs/PERF.md, sm90 backward section, the end).
constexpr int kGroupsInFlight = 4;

// D[row, h] = sum_d dO[row, h, d] · O[row, h, d] (fp32); the workspace's counters (p.zero_ints
// from the tile counter: it, then the locks) = 0, and all of dQ_accum (whatever its layout)
// unless the main kernel stores each q block's first tile (p.dq_first_stored).
template <bool kIsBf16>
__global__ void __launch_bounds__(kRowThreads) bwd_pre_kernel(const __grid_constant__ sm80::BwdParams p,
                                                              const RowDivs divs, int lanes_per_row) {
  using T = typename Storage<kIsBf16>::type;
  const int lane_in_row = threadIdx.x % lanes_per_row;
  const int rows_per_block = kRowThreads / lanes_per_row;
  const int64_t tasks = p.rows_q * p.heads_q;
  const int col = lane_in_row * 8;
  for (int64_t i = int64_t(blockIdx.x) * kRowThreads + threadIdx.x; i < p.zero_ints; i += int64_t(gridDim.x) * kRowThreads)
    p.tile_counter[i] = 0;
  const int64_t accum4 =
      p.dq_first_stored ? 0 : int64_t(p.heads_q) * p.dq_accum_rows * p.dq_accum_pitch / 4;  // pitch % 4 == 0
  for (int64_t i = int64_t(blockIdx.x) * kRowThreads + threadIdx.x; i < accum4; i += int64_t(gridDim.x) * kRowThreads)
    reinterpret_cast<float4*>(p.dq_accum)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  // The loop bound is block-uniform so that every lane reaches the shuffles below.
  const int64_t span = int64_t(rows_per_block) * kGroupsInFlight;
  for (int64_t base = int64_t(blockIdx.x) * span; base < tasks; base += int64_t(gridDim.x) * span) {
    uint4 ov[kGroupsInFlight], dv[kGroupsInFlight];
    int64_t at[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int64_t task = base + u * rows_per_block + threadIdx.x / lanes_per_row;
      const RowTask t = row_task(p, divs, task < tasks ? task : 0);
      at[u] = task < tasks ? t.lse_index : -1;
      ov[u] = dv[u] = make_uint4(0, 0, 0, 0);
      if (task < tasks && col < p.head_dim_v) {
        ov[u] = *reinterpret_cast<const uint4*>(
            static_cast<const T*>(p.o) + row_offset(p, t, p.o_batch_stride, p.o_row_stride, p.o_head_stride) +
            col);
        dv[u] = *reinterpret_cast<const uint4*>(
            static_cast<const T*>(p.dout) + row_offset(p, t, p.do_batch_stride, p.do_row_stride, p.do_head_stride) +
            col);
      }
    }
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const uint32_t* o2 = reinterpret_cast<const uint32_t*>(&ov[u]);
      const uint32_t* d2 = reinterpret_cast<const uint32_t*>(&dv[u]);
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 a = unpack2<kIsBf16>(o2[i]), b = unpack2<kIsBf16>(d2[i]);
        acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
      }
      // D = rowsum over the row's lanes (a power-of-two group inside the warp)
      for (int off = lanes_per_row / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (at[u] >= 0 && lane_in_row == 0) p.dsum[at[u]] = acc;
    }
  }
}

// dQ[row, h, :] = scale · dQ_accum of (row, h) (0 where p.dq_first_stored and no tile stored its
// q block), rounded to the storage type, from either layout
// (BwdParams::dq_accum_layout). Each lane reads 8 columns: kPaired, columns 16J + 8h + 2t + e of
// a 32-column group as 4 float2 from 8t + 4J + 2h (the 4 lanes of a group read its 128 bytes
// together); kPlain, its 32 bytes; kTiled, 32 contiguous bytes of the row's q-block tile
// (sm80/dq_tile.h).
template <bool kIsBf16, DqAccumLayout kLayout>
__global__ void __launch_bounds__(kRowThreads) bwd_post_kernel(const __grid_constant__ sm80::BwdParams p,
                                                               const RowDivs divs, int lanes_per_row) {
  using T = typename Storage<kIsBf16>::type;
  const int lane_in_row = threadIdx.x % lanes_per_row;
  const int rows_per_block = kRowThreads / lanes_per_row;
  const int64_t tasks = p.rows_q * p.heads_q;
  const int col = lane_in_row * 8;
  if (col >= p.head_dim) return;  // no shuffles below: idle lanes may leave
  const sm80::DqTile tile{p.dq_tile_rows, p.dq_accum_pitch, p.dq_tile_warps_m};
  const int64_t span = int64_t(rows_per_block) * kGroupsInFlight;
  for (int64_t base = int64_t(blockIdx.x) * span; base < tasks; base += int64_t(gridDim.x) * span) {
    float4 xs[kGroupsInFlight], ys[kGroupsInFlight];
    int64_t dq_at[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int64_t task = base + u * rows_per_block + threadIdx.x / lanes_per_row;
      dq_at[u] = -1;
      if (task >= tasks) continue;
      const RowTask t = row_task(p, divs, task);
      dq_at[u] = row_offset(p, t, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride) + col;
      const float* head = p.dq_accum + int64_t(t.h) * p.dq_accum_rows * p.dq_accum_pitch;
      float4& x = xs[u];
      float4& y = ys[u];
      if (p.dq_first_stored) {  // dense: a q block no tile reached holds no stored value
        const int qb = static_cast<int>(t.s) / p.dq_tile_rows;
        const int* counts = p.locks != nullptr ? p.locks : p.claims;
        if (counts[(t.b * p.heads_q + t.h) * p.num_q_blocks + qb] == 0) {
          x = y = make_float4(0.f, 0.f, 0.f, 0.f);
          continue;
        }
      }
      if constexpr (kLayout == DqAccumLayout::kPaired) {
        const float* g = head + t.row * p.dq_accum_pitch + col / 32 * 32 + (col % 32) / 8 % 2 * 2 + (col % 32) / 16 * 4;
        const float2 a0 = *reinterpret_cast<const float2*>(g), a1 = *reinterpret_cast<const float2*>(g + 8);
        const float2 a2 = *reinterpret_cast<const float2*>(g + 16), a3 = *reinterpret_cast<const float2*>(g + 24);
        x = make_float4(a0.x, a0.y, a1.x, a1.y);
        y = make_float4(a2.x, a2.y, a3.x, a3.y);
      } else if constexpr (kLayout == DqAccumLayout::kPlain) {
        const float4* a = reinterpret_cast<const float4*>(head + t.row * p.dq_accum_pitch + col);
        x = a[0];
        y = a[1];
      } else {
        // The row's sequence b and position s; its tile starts s % rows before it, b tiles on.
        int64_t b, s;
        if (p.cu_seqlens_q != nullptr) {
          int lo = 0, hi = p.batch - 1;  // the last b with cu_seqlens_q[b] <= row
          while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (p.cu_seqlens_q[mid] <= t.row) lo = mid; else hi = mid - 1;
          }
          b = lo;
          s = t.row - p.cu_seqlens_q[lo];
        } else {
          b = t.b;
          s = t.s;
        }
        const int r = static_cast<int>(s) % tile.rows;
        const float4* a = reinterpret_cast<const float4*>(head + (t.row - r + b * tile.rows) * p.dq_accum_pitch +
                                                          tile.offset(r, col));
        x = a[0];
        y = a[1];
      }
    }
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      if (dq_at[u] < 0) continue;
      const float4 x = xs[u], y = ys[u];
      uint4 out;
      out.x = pack2<kIsBf16>(x.x * p.scale, x.y * p.scale);
      out.y = pack2<kIsBf16>(x.z * p.scale, x.w * p.scale);
      out.z = pack2<kIsBf16>(y.x * p.scale, y.y * p.scale);
      out.w = pack2<kIsBf16>(y.z * p.scale, y.w * p.scale);
      *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + dq_at[u]) = out;
    }
  }
}

// dK and dV from their fp32 sums (BwdParams::head_tiles: dk_accum [rows_k, Hkv, D], dv_accum
// [rows_k, Hkv, Dv]), rounded to the storage type in the caller's strides: one thread per 8
// columns (D and Dv are multiples of 8 on the sm90 kernels), dK's chunks then dV's of a row.
template <bool kIsBf16>
__global__ void __launch_bounds__(kRowThreads) bwd_dkdv_post_kernel(const __grid_constant__ sm80::BwdParams p,
                                                                    int64_t rows_k) {
  using T = typename Storage<kIsBf16>::type;
  const int chunks_k = p.head_dim / 8, chunks = chunks_k + p.head_dim_v / 8;
  const int64_t per_row = int64_t(p.heads_kv) * chunks, tasks = rows_k * per_row;
  for (int64_t i = int64_t(blockIdx.x) * kRowThreads + threadIdx.x; i < tasks; i += int64_t(gridDim.x) * kRowThreads) {
    const int64_t row = i / per_row;
    const int rest = static_cast<int>(i - row * per_row);
    const int h = rest / chunks, c = rest % chunks;
    const bool is_v = c >= chunks_k;
    const int col = 8 * (is_v ? c - chunks_k : c);
    const int dim = is_v ? p.head_dim_v : p.head_dim;
    const float* sum = (is_v ? p.dv_accum : p.dk_accum) + (row * p.heads_kv + h) * dim + col;
    const float4 x = reinterpret_cast<const float4*>(sum)[0], y = reinterpret_cast<const float4*>(sum)[1];
    int64_t b = 0, s = row;  // varlen: the packed row
    if (p.cu_seqlens_k == nullptr) {
      b = row / p.seqlen_k;
      s = row - b * p.seqlen_k;
    }
    T* out = static_cast<T*>(is_v ? p.dv : p.dk) + b * (is_v ? p.dv_batch_stride : p.dk_batch_stride) +
             s * (is_v ? p.dv_row_stride : p.dk_row_stride) + h * (is_v ? p.dv_head_stride : p.dk_head_stride) + col;
    uint4 o;
    o.x = pack2<kIsBf16>(x.x, x.y);
    o.y = pack2<kIsBf16>(x.z, x.w);
    o.z = pack2<kIsBf16>(y.x, y.y);
    o.w = pack2<kIsBf16>(y.z, y.w);
    *reinterpret_cast<uint4*>(out) = o;
  }
}

int lanes_per_row(int dim) {
  int n = 1;
  while (n * 8 < dim) n *= 2;
  return n;
}

// Blocks for kGroupsInFlight groups of rows_per_block tasks each.
unsigned row_blocks(const sm80::BwdParams& p, int lanes) {
  const int64_t tasks = p.rows_q * p.heads_q;
  const int64_t rows_per_block = int64_t(kRowThreads / lanes) * kGroupsInFlight;
  const int64_t want = (tasks + rows_per_block - 1) / rows_per_block;
  const int64_t cap = int64_t(1) << 20;  // grid-stride beyond this
  return static_cast<unsigned>(want < cap ? want : cap);
}

}  // namespace

void bwd_pre_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream) {
  const int lanes = lanes_per_row(p.head_dim_v);
  const unsigned blocks = row_blocks(p, lanes);
  if (blocks == 0) return;
  if (bf16)
    bwd_pre_kernel<true><<<blocks, kRowThreads, 0, stream>>>(p, row_divs(p), lanes);
  else
    bwd_pre_kernel<false><<<blocks, kRowThreads, 0, stream>>>(p, row_divs(p), lanes);
  check_launch("bwd_pre_kernel");
}

void bwd_post_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream) {
  const int lanes = lanes_per_row(p.head_dim);
  const unsigned blocks = row_blocks(p, lanes);
  if (blocks == 0) return;
  constexpr auto kPaired = DqAccumLayout::kPaired, kTiled = DqAccumLayout::kTiled, kPlain = DqAccumLayout::kPlain;
  const auto kernel = p.dq_accum_layout == kPaired  ? (bf16 ? &bwd_post_kernel<true, kPaired> : &bwd_post_kernel<false, kPaired>)
                      : p.dq_accum_layout == kPlain ? (bf16 ? &bwd_post_kernel<true, kPlain> : &bwd_post_kernel<false, kPlain>)
                                                    : (bf16 ? &bwd_post_kernel<true, kTiled> : &bwd_post_kernel<false, kTiled>);
  kernel<<<blocks, kRowThreads, 0, stream>>>(p, row_divs(p), lanes);
  check_launch("bwd_post_kernel");
}

void bwd_dkdv_post_launch(const sm80::BwdParams& p, bool bf16, cudaStream_t stream) {
  const int64_t rows_k = p.cu_seqlens_k != nullptr ? p.total_k : int64_t(p.batch) * p.seqlen_k;
  const int64_t tasks = rows_k * p.heads_kv * ((p.head_dim + p.head_dim_v) / 8);
  if (tasks == 0) return;
  const int64_t want = (tasks + kRowThreads - 1) / kRowThreads, cap = int64_t(1) << 20;  // grid-stride beyond
  const unsigned blocks = static_cast<unsigned>(want < cap ? want : cap);
  if (bf16)
    bwd_dkdv_post_kernel<true><<<blocks, kRowThreads, 0, stream>>>(p, rows_k);
  else
    bwd_dkdv_post_kernel<false><<<blocks, kRowThreads, 0, stream>>>(p, rows_k);
  check_launch("bwd_dkdv_post_kernel");
}

}  // namespace fa::cuda
