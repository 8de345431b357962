// CUDA backend, sm90/: definitions of fwd_can_implement / fwd_launch for one head dim, included
// by exactly one fwd_hdim*.cu each. Builds the TMA tensor maps; no dispatch here.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "cuda/common/async_buffer.h"
#include "cuda/common/check.h"
#include "cuda/common/kernel_entry.cuh"
#include "cuda/common/tile_counter.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace fa::cuda::sm90 {

template <int kHeadDim, bool kIsBf16, int kRow, bool kVarlen = false, int kPasses = kPassesAll,
          class C = FwdConfig<kHeadDim, kRow>>
using FwdKernelFor = FwdKernel<kHeadDim, C::kBlockM, C::kBlockN, C::kStages, C::kOverlap, C::kPingPong, kVarlen,
                               kIsBf16, C::kUniformGroup, C::kNextS,
                               kVarlen ? C::kVarlenRowsUnderPv : C::kRowsUnderPv,
                               C::kSplitProducer, C::kTail, kPasses>;

// Does row kRow of a head dim receive problems of kind `passes` (kPassesDense: no mask;
// kPassesCausal: causal), for which kFwdOwnPasses gives it an instantiation of their own?
// Row 0 receives both unless it hands every masked problem on; a later row receives what the row
// before hands it: masked problems below kNextRowMaskedBelow query rows, any below
// kNextRowKeysBelow keys.
template <int kHeadDim, int kRow>
constexpr bool row_receives(int passes) {
  if constexpr (kRow == 0) {
    return passes == kPassesDense || FwdConfig<kHeadDim, 0>::kNextRowMaskedBelow != kEveryMasked;
  } else {
    using Before = FwdConfig<kHeadDim, kRow - 1>;
    return Before::kNextRowKeysBelow > 0 || (passes == kPassesCausal && Before::kNextRowMaskedBelow > 0);
  }
}
template <int kHeadDim, int kRow, int kPasses>
inline constexpr bool kRowOwnPasses = kFwdOwnPasses<kHeadDim> && row_receives<kHeadDim, kRow>(kPasses);

// The three tensor maps of p (Q boxes of kBlockM rows, K and V boxes of kBlockN rows).
// sm_count: the device's multiprocessors (the persistent grid's bound).
template <int kHeadDim, bool kIsBf16, int kRow>
std::string make_fwd_params(const sm80::FwdParams& p, int sm_count, FwdParams* out) {
  using Kernel = FwdKernelFor<kHeadDim, kIsBf16, kRow>;
  out->prob = p;
  // Causal tile sections: as many (batch, head) pairs as keep their K and V within 24 MiB, about
  // half the H100/H200 L2 (the rest holds Q, O and the other sections' stragglers).
  const int64_t kv_bytes = int64_t{2} * p.seqlen_k * (p.head_dim + p.head_dim_v) / p.group;
  const int64_t bh_count = int64_t{p.batch} * p.heads_q;  // at most the whole grid
  const int64_t per_section = std::min(bh_count, (int64_t{24} << 20) / std::max<int64_t>(kv_bytes, 1));
  out->section_bh = static_cast<int>(std::max<int64_t>(per_section, 1));
  const int ctas = static_cast<int>(Kernel::grid(*out, sm_count).x);
  out->tail_bh = LongestFirstScheduler::tail_fwd_pairs(static_cast<int>(bh_count), out->section_bh,
                                                       std::max(p.num_m_blocks, 1), std::max(ctas, 1));
  const MapExtents e = map_extents(p);
  std::string why = encode_bshd_map(&out->tm_q, kIsBf16, p.q, e.batch, e.rows_q, p.heads_q, p.head_dim,
                                    p.q_batch_stride, p.q_row_stride, p.q_head_stride, Kernel::kBlockM);
  if (why.empty())
    why = encode_bshd_map(&out->tm_k, kIsBf16, p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim,
                          p.k_batch_stride, p.k_row_stride, p.k_head_stride, Kernel::kBlockN);
  if (why.empty())
    why = encode_bshd_map(&out->tm_v, kIsBf16, p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim_v,
                          p.v_batch_stride, p.v_row_stride, p.v_head_stride, Kernel::kBlockN);
  // O by TMA stores where the kernel can (its finished tile's Q buffer holds O) and O's layout
  // allows it; otherwise plain stores, never a refusal. FLASHATTN_SM90_O_STORE=plain forces the
  // plain stores (to compare the two epilogues in one process).
  static const bool plain_forced = plain_stores_forced("FLASHATTN_SM90_O_STORE");
  out->o_by_tma = 0;
  if (why.empty() && Kernel::kTmaStoreO && p.cu_seqlens_q == nullptr && !plain_forced &&
      encode_bshd_map(&out->tm_o, kIsBf16, p.o, e.batch, e.rows_q, p.heads_q, p.head_dim_v, p.o_batch_stride,
                      p.o_row_stride, p.o_head_stride, Kernel::kOStoreRows)
          .empty())
    out->o_by_tma = 1;
  return why;
}

template <int kHeadDim, bool kIsBf16, int kRow>
std::string fwd_can_implement(const sm80::FwdParams& p, int smem_optin) {
  using Kernel = FwdKernelFor<kHeadDim, kIsBf16, kRow>;
  using C = FwdConfig<kHeadDim, kRow>;
  if (p.cu_seqlens_q != nullptr && !kSm90FwdVarlen) return "sm90 forward: varlen not enabled in this build";
  if (!p.mask.none() && p.seqlen_q < C::kNextRowMaskedBelow)
    return C::kNextRowMaskedBelow == kEveryMasked
               ? std::string("sm90 forward: masked problems take the next row")
               : "sm90 forward: masked problems below " + std::to_string(C::kNextRowMaskedBelow) +
                     " query rows take the next row";
  if (p.seqlen_k < C::kNextRowKeysBelow)
    return "sm90 forward: fewer than " + std::to_string(C::kNextRowKeysBelow) + " keys take the next row";
  if (p.head_dim > kHeadDim || p.head_dim_v > kHeadDim)
    return "head dim above the compiled " + std::to_string(kHeadDim);
  if (p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0) return "head dims must be multiples of 8";
  // Every 64-column panel the kernel loads must hold a column of the problem: this version does
  // not issue TMA boxes wholly past the end of dim (d64_dv128 and the like run on sm80).
  if (p.head_dim <= kHeadDim - Kernel::kPanelCols || p.head_dim_v <= kHeadDim - Kernel::kPanelCols)
    return "sm90 forward: D and Dv must both exceed " + std::to_string(kHeadDim - Kernel::kPanelCols);
  if (Kernel::kSmemBytes > smem_optin) return "sm90 forward: not enough shared memory per block";
  if (LongestFirstScheduler::num_tiles(p.num_m_blocks, p.heads_q, p.batch) > INT32_MAX)
    return "batch · heads · ceil(seqlen_q / " + std::to_string(Kernel::kBlockM) + ") exceeds 2^31 - 1 CTAs";
  // What the tensor maps need (checked here so that fwd_launch, which encodes them, only fails
  // for reasons the driver alone knows).
  const MapExtents e = map_extents(p);
  std::string why = bshd_map_limits(p.q, e.batch, e.rows_q, p.heads_q, p.q_batch_stride, p.q_row_stride,
                                    p.q_head_stride);
  if (why.empty())
    why = bshd_map_limits(p.k, e.batch, e.rows_k, p.heads_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  if (why.empty())
    why = bshd_map_limits(p.v, e.batch, e.rows_k, p.heads_kv, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  if (why.empty() && encode_tiled_fn() == nullptr) why = "the driver has no cuTensorMapEncodeTiled";
  return why;
}

// One launch of kernel class K on its persistent grid; checked.
template <class K>
void launch_kernel(const FwdParams& full, int sm_count, cudaStream_t stream) {
  const int smem = K::smem_bytes();
  set_smem_limit_once<K>(smem);
  kernel_entry<K><<<K::grid(full, sm_count), K::block(), smem, stream>>>(full);
  check_launch("sm90 forward");
}

// Problems without a softcap, dense or causal, on the instantiations of their own passes where
// the row has them; the others on the one with every pass.
template <int kHeadDim, bool kIsBf16, int kRow, bool kVarlen>
void launch_for_passes(const sm80::FwdParams& p, const FwdParams& full, int sm_count, cudaStream_t stream) {
  if constexpr (kRowOwnPasses<kHeadDim, kRow, kPassesDense>) {
    if (passes_fit(kPassesDense, p.mask, p.softcap))
      return launch_kernel<FwdKernelFor<kHeadDim, kIsBf16, kRow, kVarlen, kPassesDense>>(full, sm_count, stream);
  }
  if constexpr (kRowOwnPasses<kHeadDim, kRow, kPassesCausal>) {
    if (passes_fit(kPassesCausal, p.mask, p.softcap))
      return launch_kernel<FwdKernelFor<kHeadDim, kIsBf16, kRow, kVarlen, kPassesCausal>>(full, sm_count, stream);
  }
  launch_kernel<FwdKernelFor<kHeadDim, kIsBf16, kRow, kVarlen>>(full, sm_count, stream);
}

template <int kHeadDim, bool kIsBf16, int kRow>
void fwd_launch(const sm80::FwdParams& p, cudaStream_t stream) {
  using Kernel = FwdKernelFor<kHeadDim, kIsBf16, kRow>;
  FwdParams full;
  const int sm_count = multiprocessor_count();
  const std::string why = make_fwd_params<kHeadDim, kIsBf16, kRow>(p, sm_count, &full);
  if (!why.empty()) fail(FA_STATUS_NOT_SUPPORTED, "CUDA forward (sm90): " + why);
  // Tiles of different costs: CTAs draw them from the stream's counter pair (zero, and left
  // zero by the kernel), or from a pair zeroed on the stream for this launch.
  std::unique_ptr<AsyncBuffer> counter;
  full.tile_counter = nullptr;
  if (Kernel::draws_tiles(p)) {
    full.tile_counter = stream_tile_counter(stream);
    if (full.tile_counter == nullptr) {
      counter = std::make_unique<AsyncBuffer>(2 * sizeof(int), stream);
      full.tile_counter = static_cast<int*>(counter->get());
      FA_CUDA_CHECK(cudaMemsetAsync(full.tile_counter, 0, 2 * sizeof(int), stream));
    }
  }
  if constexpr (kSm90FwdVarlen) {
    if (p.cu_seqlens_q != nullptr)
      return launch_for_passes<kHeadDim, kIsBf16, kRow, true>(p, full, sm_count, stream);
  }
  launch_for_passes<kHeadDim, kIsBf16, kRow, false>(p, full, sm_count, stream);
}

}  // namespace fa::cuda::sm90

// Explicit instantiation of both 16-bit types for one head dim and row (R: kRow).
#define FA_SM90_FWD_INSTANTIATE(D, R)                                                  \
  template std::string fwd_can_implement<D, true, R>(const sm80::FwdParams&, int);   \
  template std::string fwd_can_implement<D, false, R>(const sm80::FwdParams&, int);  \
  template void fwd_launch<D, true, R>(const sm80::FwdParams&, cudaStream_t);        \
  template void fwd_launch<D, false, R>(const sm80::FwdParams&, cudaStream_t);
