// CUDA backend, sm90/: tile shapes of the Hopper backward main kernel per compiled head dim, and
// the launch entry each bwd_hdim*.cu instantiates. Only constants and declarations: no kernel
// code, no dispatch (launch/kernel_table.h holds the rows).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm90 {

// Per head dim: kv rows per CTA (64 per consumer warpgroup, stationary), query rows per streamed
// step, Q/dO stages, whether a step's dK GEMM runs on into the next step, and whether the dQ
// tile is handed to the writer in the next step (BwdKernel::kDqArriveLate). Registers per
// consumer thread (240 after setmaxnreg) hold dK and dV (2·kHeadDim/2 fp32) plus Sᵀ and dPᵀ
// (2·kBlockM/2) for the warpgroup's 64 kv rows; the dQ tile (64 x 64, 32 fp32) comes after
// Sᵀ/dPᵀ are dead. Running dK on needs the dSᵀ fragments (kBlockM/4) beside Sᵀ and dPᵀ: fits at
// D 128, BM 64; at D 64, BM 128 and at D 128, BM 80 ptxas serialises the wgmma for want of
// registers. Shared memory = (2·BN + 2·stages·BM)·D·2 (K, V, Q, dO) + 2·BM·BN·2 (dS,
// double-buffered) + BM·D·4 (the fp32 dQ tile) + stages·BM·8. Shapes follow the
// FlashAttention-3 design (BN 128; BM 128 at D 64; at D 128 80 on unmasked problems, else 64).
// D 256 (dK + dV would be 256 fp32 a thread) runs split-D: BN = BM = 64, the two warpgroups
// halve the head dim (BwdKernel::kSplitD).
// Rows: each head dim has two kernels (kRow 0, 1); row 0 hands the problems it declines to row
// 1 (kernel_table.h), which takes what reaches it. kUnmaskedOnly (row 0): the row declines
// masks, softcap and varlen, and is compiled without the mask and softcap passes
// (BwdKernel::kUnmasked): +4–10% at 64, +1–4% at 256 on those problems (docs/PERF.md). At 128
// row 0 also runs 80-row q blocks (a fifth more work a step for the same per-step hand-overs;
// its dQ GEMM transposed, dQᵀ = Kᵀ·dSᵀ, since 80 rows are no m64 extent) from kMinQueries
// query rows (80-row blocks pad 512 rows by 9%); the passes' registers are what lets its
// 80-row Sᵀ and dPᵀ fit (with them ptxas serialises its wgmma). Row 1 at 128 has 64-row blocks.
// Row 1 runs causal problems without a softcap on an instantiation with the causal mask a
// constant and no softcap pass (bwd_launch). kCausalFromQueries (row 0 at 128; 0: never): an
// unmasked row also takes those from that many query rows, on its own causal instantiation (80-row q blocks:
// +1 / +4 / +4% at causal 4k / 8k / 16k, +3 to +8% in the deterministic mode; −6% at 1k, where
// 80-row blocks cut the diagonal coarsely; docs/PERF.md).
template <int kHeadDim, int kRow = 0>
struct BwdConfig;
template <int kRow>
struct BwdConfig<64, kRow> {  // 195 KiB (199,888 B with alignment, work slots and barriers)
  static_assert(kRow == 0 || kRow == 1, "two rows at 64");
  static constexpr int kBlockN = 128, kBlockM = 128, kStages = 2;
  static constexpr bool kDkAcrossSteps = false;
  static constexpr bool kDqArriveLate = true;  // +1..4% here; at 128 −3..+1%
  static constexpr bool kUnmaskedOnly = kRow == 0;
  static constexpr int kMinQueries = 0;
  static constexpr int kCausalFromQueries = 0;
};
template <int kRow>
struct BwdConfig<128, kRow> {  // row 0: 227 KiB (231,888 B); row 1: 194 KiB (198,864 B)
  static_assert(kRow == 0 || kRow == 1, "two rows at 128");
  static constexpr int kBlockN = 128, kBlockM = kRow == 0 ? 80 : 64, kStages = 2;
  static constexpr bool kDkAcrossSteps = kRow == 1;  // at BM 80 ptxas serialises the wgmma (registers)
  static constexpr bool kDqArriveLate = false;
  static constexpr bool kUnmaskedOnly = kRow == 0;
  static constexpr int kMinQueries = kRow == 0 ? 1024 : 0;
  static constexpr int kCausalFromQueries = kRow == 0 ? 4096 : 0;
};

template <int kRow>
struct BwdConfig<256, kRow> {  // 226 KiB (231,648 B)
  static_assert(kRow == 0 || kRow == 1, "two rows at 256");
  static constexpr int kBlockN = 64, kBlockM = 64, kStages = 2;
  static constexpr bool kDkAcrossSteps = false;
  static constexpr bool kDqArriveLate = false;  // split-D: the dQ tile goes over the Q/dO stage
  static constexpr bool kUnmaskedOnly = kRow == 0;
  static constexpr int kMinQueries = 0;
  static constexpr int kCausalFromQueries = 0;
};

template <int kHeadDim, int kRow = 0>
inline constexpr int kBwdBlockN = BwdConfig<kHeadDim, kRow>::kBlockN;
template <int kHeadDim, int kRow = 0>
inline constexpr int kBwdBlockM = BwdConfig<kHeadDim, kRow>::kBlockM;
// The dQ accumulator layout a row adds into: plain where its dQ GEMM is transposed (its
// accumulator holds single columns), else paired (sm80/bwd_params.h).
template <int kHeadDim, int kRow = 0>
inline constexpr sm80::DqAccumLayout kBwdDqLayout =
    kBwdBlockM<kHeadDim, kRow> % 64 != 0 ? sm80::DqAccumLayout::kPlain : sm80::DqAccumLayout::kPaired;

// Empty string when the kernel can run p on a device with smem_optin bytes per block (checks the
// problem fields and builds the tensor maps to validate them); else the reason (dispatch then
// falls back to sm80).
template <int kHeadDim, bool kIsBf16, int kRow = 0>
std::string bwd_can_implement(const sm80::BwdParams& p, int smem_optin);
// Builds the tensor maps, launches the main kernel on `stream` and checks the launch.
template <int kHeadDim, bool kIsBf16, int kRow = 0>
void bwd_launch(const sm80::BwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm90
