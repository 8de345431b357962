// CUDA backend, sm90/: definitions of bwd_can_implement / bwd_launch for one head dim, included
// by exactly one bwd_hdim*.cu each. Builds the TMA tensor maps of the backward; no dispatch and
// no workspace layout here (launch/bwd.cu owns both).
#pragma once

#include <string>

#include "cuda/common/check.h"
#include "cuda/common/kernel_entry.cuh"
#include "cuda/sm90/bwd_config.h"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace fa::cuda::sm90 {

// The kernel of a row: the unmasked passes where the row takes only unmasked problems, else the
// general ones, or those of kPasses (bwd_launch: the causal instantiation).
template <int kHeadDim, bool kIsBf16, int kRow, class C = BwdConfig<kHeadDim, kRow>,
          int kPasses = C::kUnmaskedOnly ? kPassesDense : kPassesAll>
using BwdKernelFor = BwdKernel<kHeadDim, C::kBlockN, C::kBlockM, C::kStages, C::kDkAcrossSteps, kIsBf16,
                               C::kDqArriveLate, kPasses>;

// The tensor maps of p (Q and dO boxes of kBlockM rows, K and V boxes of kBlockN rows, the dQ
// accumulator's box of kBlockM rows; dK and dV boxes of kDkdvStoreRows where they can be used).
template <int kHeadDim, bool kIsBf16, int kRow>
std::string make_bwd_params(const sm80::BwdParams& p, BwdParams* out) {
  using Kernel = BwdKernelFor<kHeadDim, kIsBf16, kRow>;
  out->prob = p;
  const MapExtents e = map_extents(p);
  std::string why = encode_bshd_map(&out->tm_q, kIsBf16, p.q, e.batch, e.rows_q, p.heads_q, p.head_dim,
                                    p.q_batch_stride, p.q_row_stride, p.q_head_stride, Kernel::kBlockM);
  if (why.empty())
    why = encode_bshd_map(&out->tm_do, kIsBf16, p.dout, e.batch, e.rows_q, p.heads_q, p.head_dim_v,
                          p.do_batch_stride, p.do_row_stride, p.do_head_stride, Kernel::kBlockM);
  if (why.empty())
    why = encode_bshd_map(&out->tm_k, kIsBf16, p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim,
                          p.k_batch_stride, p.k_row_stride, p.k_head_stride, Kernel::kBlockN);
  if (why.empty())
    why = encode_bshd_map(&out->tm_v, kIsBf16, p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim_v,
                          p.v_batch_stride, p.v_row_stride, p.v_head_stride, Kernel::kBlockN);
  if (why.empty())
    why = encode_dq_accum_map(&out->tm_dq, p.dq_accum, e.batch, e.rows_q, p.heads_q, p.dq_accum_pitch,
                              Kernel::kBlockM);
  // dK and dV by TMA stores where their layout allows it; otherwise plain stores, never a
  // refusal. Varlen keeps the plain stores (a box past a packed sequence would write into the
  // next one); head tiles sum them in turn from the registers (BwdKernel::add_dkdv_in_turn). FLASHATTN_SM90_DKDV_STORE=plain forces them (to compare the two epilogues in one
  // process).
  static const bool plain_forced = plain_stores_forced("FLASHATTN_SM90_DKDV_STORE");
  out->dkdv_by_tma = 0;
  if (why.empty() && p.cu_seqlens_q == nullptr && !p.head_tiles && !plain_forced &&
      encode_bshd_map(&out->tm_dk, kIsBf16, p.dk, e.batch, e.rows_k, p.heads_kv, p.head_dim, p.dk_batch_stride,
                      p.dk_row_stride, p.dk_head_stride, Kernel::kDkdvStoreRows)
          .empty() &&
      encode_bshd_map(&out->tm_dv, kIsBf16, p.dv, e.batch, e.rows_k, p.heads_kv, p.head_dim_v, p.dv_batch_stride,
                      p.dv_row_stride, p.dv_head_stride, Kernel::kDkdvStoreRows)
          .empty())
    out->dkdv_by_tma = 1;
  return why;
}

template <int kHeadDim, bool kIsBf16, int kRow>
std::string bwd_can_implement(const sm80::BwdParams& p, int smem_optin) {
  using C = BwdConfig<kHeadDim, kRow>;
  using Kernel = BwdKernelFor<kHeadDim, kIsBf16, kRow>;
  const bool causal_row = C::kCausalFromQueries > 0 && passes_fit(kPassesCausal, p.mask, p.softcap);
  if (C::kUnmaskedOnly && (!(p.mask.none() || causal_row) || p.softcap > 0.f || p.cu_seqlens_q != nullptr))
    return "sm90 backward row " + std::to_string(kRow) + ": masked, softcap or varlen (its next row)";
  if (C::kUnmaskedOnly && !p.mask.none() && p.seqlen_q < C::kCausalFromQueries)
    return "sm90 backward row " + std::to_string(kRow) + ": causal with fewer than " +
           std::to_string(C::kCausalFromQueries) + " query rows (its next row)";
  if (p.seqlen_q < C::kMinQueries)
    return "sm90 backward row " + std::to_string(kRow) + ": fewer than " + std::to_string(C::kMinQueries) +
           " query rows (its next row)";
  if (p.head_dim > kHeadDim || p.head_dim_v > kHeadDim)
    return "head dim above the compiled " + std::to_string(kHeadDim);
  if (p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0) return "head dims must be multiples of 8";
  // Every 64-column panel loaded must hold a column of the problem (as the sm90 forward).
  if (p.head_dim <= kHeadDim - Kernel::kPanelCols || p.head_dim_v <= kHeadDim - Kernel::kPanelCols)
    return "sm90 backward: D and Dv must both exceed " + std::to_string(kHeadDim - Kernel::kPanelCols);
  if (Kernel::kSmemBytes > smem_optin) return "sm90 backward: not enough shared memory per block";
  if (Kernel::num_tiles_of(p) > (int64_t{1} << 30))  // tile numbers drawn past the last stay in an int
    return "batch · kv heads · ceil(seqlen_k / " + std::to_string(Kernel::kBlockN) + ") exceeds 2^30 tiles";
  // What the tensor maps need (bwd_launch encodes them).
  const MapExtents e = map_extents(p);
  std::string why = bshd_map_limits(p.q, e.batch, e.rows_q, p.heads_q, p.q_batch_stride, p.q_row_stride,
                                    p.q_head_stride);
  if (why.empty())
    why = bshd_map_limits(p.dout, e.batch, e.rows_q, p.heads_q, p.do_batch_stride, p.do_row_stride,
                          p.do_head_stride);
  if (why.empty())
    why = bshd_map_limits(p.k, e.batch, e.rows_k, p.heads_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  if (why.empty())
    why = bshd_map_limits(p.v, e.batch, e.rows_k, p.heads_kv, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  // The dQ accumulator: the row's layout (paired columns for the consumers' 16-byte stores, plain
  // for the transposed dQ GEMM), rows of whole 32-column groups; one head of it below 2^40 bytes
  // (its map).
  if (why.empty() && (p.dq_accum_layout != kBwdDqLayout<kHeadDim, kRow> || p.dq_accum_rows != p.rows_q ||
                      p.dq_accum_pitch % 32 != 0 || p.dq_accum_pitch < p.head_dim))
    why = "sm90 backward: the dQ accumulator must be laid out in the row's 32-column groups";
  if (why.empty() && p.rows_q * p.dq_accum_pitch * 4 >= (int64_t{1} << 40))
    why = "sm90 backward: one head of the dQ accumulator must be below 2^40 bytes";
  if (why.empty() && encode_tiled_fn() == nullptr) why = "the driver has no cuTensorMapEncodeTiled";
  return why;
}

// One launch of kernel class K with full (its grid on sm_count multiprocessors); checked.
template <class K>
void launch_bwd_kernel(BwdParams full, int sm_count, cudaStream_t stream) {
  const auto entry = &kernel_entry<K>;
  const int smem = K::smem_bytes();
  set_smem_limit_once<K>(smem);
  full.rotated = K::rotated_order(full.prob, sm_count) ? 1 : 0;
  if (K::dealt_rounds(full)) {
    // The deterministic rotated order needs every CTA of the grid resident at once
    // (rotated_order): a cooperative launch guarantees that or is refused, and refused (fewer
    // multiprocessors free than the device has), the problem takes the descending order.
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = K::grid(full, sm_count);
    config.blockDim = K::block();
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    config.attrs = &cooperative;
    config.numAttrs = 1;
    const cudaError_t err = cudaLaunchKernelEx(&config, entry, full);
    if (err != cudaErrorCooperativeLaunchTooLarge) {
      check(err, "sm90 backward (cooperative launch)");
      check_launch("sm90 backward");
      return;
    }
    (void)cudaGetLastError();
    full.rotated = 0;
  }
  entry<<<K::grid(full, sm_count), K::block(), smem, stream>>>(full);
  check_launch("sm90 backward");
}

template <int kHeadDim, bool kIsBf16, int kRow>
void bwd_launch(const sm80::BwdParams& p, cudaStream_t stream) {
  using C = BwdConfig<kHeadDim, kRow>;
  BwdParams full;
  const std::string why = make_bwd_params<kHeadDim, kIsBf16, kRow>(p, &full);
  if (!why.empty()) fail(FA_STATUS_NOT_SUPPORTED, "CUDA backward (sm90): " + why);
  const int sm_count = multiprocessor_count();
  // Causal problems without a softcap: the instantiation with the causal mask as a constant
  // and no softcap pass (BwdKernel::kPasses; +2–3% at hdim 64, up to 2% at 128 and 256).
  if constexpr (!C::kUnmaskedOnly || C::kCausalFromQueries > 0) {
    if (passes_fit(kPassesCausal, p.mask, p.softcap))
      return launch_bwd_kernel<BwdKernelFor<kHeadDim, kIsBf16, kRow, C, kPassesCausal>>(full, sm_count, stream);
  }
  using Kernel = BwdKernelFor<kHeadDim, kIsBf16, kRow>;
  if (Kernel::kUnmasked && p.head_tiles)  // they come with a mask (BwdKernel::head_tiles)
    fail(FA_STATUS_INTERNAL_ERROR, "CUDA backward (sm90): head tiles on the unmasked kernel");
  launch_bwd_kernel<Kernel>(full, sm_count, stream);
}

}  // namespace fa::cuda::sm90

// Explicit instantiation of both 16-bit types for one row of a head dim.
#define FA_SM90_BWD_INSTANTIATE(D, R)                                                  \
  template std::string bwd_can_implement<D, true, R>(const sm80::BwdParams&, int);   \
  template std::string bwd_can_implement<D, false, R>(const sm80::BwdParams&, int);  \
  template void bwd_launch<D, true, R>(const sm80::BwdParams&, cudaStream_t);        \
  template void bwd_launch<D, false, R>(const sm80::BwdParams&, cudaStream_t);
