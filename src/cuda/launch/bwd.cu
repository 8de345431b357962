// CUDA backend, launch/: backward dispatch: check_supported_bwd, bwd_workspace_size, bwd.
// Turns a validated fa::Problem into BwdParams, lays out the workspace, picks the row of
// launch/kernel_table.h and runs pre -> main -> post on the stream. Host code only.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/common/async_buffer.h"
#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/cuda_backend.h"
#include "cuda/launch/dispatch_common.h"
#include "cuda/launch/kernel_table.h"
#include "cuda/sm80/bwd_pre_post.h"

namespace fa::cuda {
namespace {

constexpr size_t kWorkspaceAlign = 256;  // each workspace region starts on this boundary

[[noreturn]] void unsupported(const std::string& why) {
  fail(FA_STATUS_NOT_SUPPORTED, "CUDA backward: " + why);
}

void check_alignment(const char* name, const Tensor& t, bool rows, bool heads, bool batches) {
  if (const std::string why = alignment_limits(name, t, rows, heads, batches); !why.empty()) unsupported(why);
}

// The first row at or after `from` that serves p's dtype and head dims on this device.
const BwdKernelRow& select_row(const Problem& p, const DeviceCaps& caps, const BwdKernelRow* from = kBwdKernels) {
  if (const std::string why = backend_limits(p, caps); !why.empty()) unsupported(why);
  const int64_t need = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  for (const BwdKernelRow* row = from; row->family != nullptr; ++row) {
    if (row->dtype == p.dtype && row->head_dim >= need && caps.cc >= row->min_cc && caps.cc <= row->max_cc)
      return *row;
  }
  unsupported("no compiled kernel serves head dim " + std::to_string(need) + " in " +
              dtype_name(p.dtype) + " (this build's FA_CUDA_HDIMS)");
}

size_t align_up(size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// Floats per dQ accumulator row: the head dim, padded to whole 32-column groups (the paired and
// plain layouts: the sm90 kernels' TMA boxes), or the kernel's compiled head dim (tiled: every
// tile whole).
int64_t dq_pitch(const Problem& p, const BwdKernelRow& row) {
  return row.dq_layout != sm80::DqAccumLayout::kTiled ? (p.head_dim + 31) / 32 * 32 : row.head_dim;
}

// Rows of a head in the dQ accumulator: the tiled layout pads every sequence by a q block.
int64_t dq_rows(const Problem& p, const BwdKernelRow& row) {
  const int64_t rows_q = p.varlen() ? p.total_q : p.batch * p.seqlen_q;
  return row.dq_layout == sm80::DqAccumLayout::kTiled ? rows_q + p.batch * row.block_m : rows_q;
}

// How the main kernel adds the dQ tiles into the fp32 accumulator (BwdParams::locks, claims,
// dq_first_stored), decided once a call.
// - ordered (locks): each q block's tiles in a fixed order. Always in the deterministic mode; in
//   the default mode on the sm90 kernels where that order's first tile stored outweighs its
//   turns' waits. Measured on the H200 against the unordered reduction (docs/PERF.md, sm90
//   backward section): dense causal problems of at most 512 queries and keys, +3% at head dim
//   128, +7% at 256, +14% at 64; at head dim 64 causal up to 1024 (+6%) and unmasked at 512
//   (+5%). Everywhere else it drew or lost, up to 16%. The default mode's dQ is then
//   reproducible too.
// - claims: the default mode's unordered reduction, the first writer to reach a q block storing
//   its tile, the others waiting until that is complete and adding theirs; on the sm90 kernels'
//   layouts, on dense problems under a causal mask, where the kv blocks of a head reach a q block
//   one after another from its diagonal, or with none (the rotated q-block order,
//   BwdKernel::rotated_order, staggers them the same way). It takes the zeroing out of the
//   preprocess (70 -> 42 µs a call) and costs a little every step (a claim, and a wait where a
//   store is not yet complete), so it pays on short problems only. Measured on the H200, in two
//   calls: +1.4 to +4.4% at head dim 64 unmasked 1k-4k and causal 2k, +1 to +3% at 128 and 256
//   causal 1k and unmasked 512-1k; a draw at causal 4k and hdim 128 unmasked 2k; longer, up to
//   10% lost (hdim 256 causal 16k).
// - first_stored: each q block's first tile stored rather than added into a zeroed accumulator,
//   which takes the zeroing's write out of the preprocess. Dense problems only, whose tensor map
//   clips a q block's tile at its sequence's end (a varlen tile would run into the next
//   sequence's rows, where adding zeros is harmless and storing them is not): with claims, or in
//   the ordered reduction on the sm90 kernels (the paired and plain layouts), whose order names
//   the first turn, of at most 1024 query rows: +2-12% there; from 2048 rows the turns'
//   hand-over waits on the stores and it lost 1-5%.
struct DqReduction {
  bool ordered = false, claims = false, first_stored = false;
};

DqReduction dq_reduction(const Problem& p, const BwdKernelRow& row) {
  DqReduction r;
  const bool sm90_dense = row.dq_layout != sm80::DqAccumLayout::kTiled && !p.varlen();
  const int64_t len = p.seqlen_q > p.seqlen_k ? p.seqlen_q : p.seqlen_k;
  const bool causal = p.mask.left < 0 && p.mask.right == 0;
  if (p.deterministic) {
    r.ordered = true;
  } else if (sm90_dense) {
    r.ordered = row.head_dim <= 64 ? (causal ? len <= 1024 : p.mask.none() && len <= 512) : causal && len <= 512;
    r.claims = !r.ordered && (causal ? len <= 4096 : p.mask.none() && len * row.head_dim <= 4096 * 64);
  }
  r.first_stored = r.claims || (r.ordered && sm90_dense && p.seqlen_q <= 1024);
  return r;
}

// GQA in tiles of one query head (BwdParams::head_tiles): the sm90 kernels, under a causal-like
// mask (no left window), in the default mode's unordered dQ reduction. A tile that runs the whole
// group reads the Q and dO of its Hq / Hkv query heads, and the tiles running at once, of unequal
// lengths under the mask, drift apart over those heads: at 64 query heads on 8 kv heads the L2
// held 47% (hdim 256) to 67% (128) of the reads, against 91% with 16 heads of their own, and the
// hdim-256 backward ran at half cuDNN's rate (docs/PERF.md, sm90 backward section). Tiles of one
// query head run head by head, as without GQA, and pay for it with a pass over dK and dV in fp32
// per tile.
// (Not past 2^30 tiles, the kernels' limit, where tiles of a kv head still fit.)
bool head_tiles(const Problem& p, const BwdKernelRow& row) {
  const bool causal_like = p.mask.right >= 0 && p.mask.left < 0;
  const int64_t tiles = (p.seqlen_k + row.block_n - 1) / row.block_n * p.heads_q * p.batch;
  return row.dq_layout != sm80::DqAccumLayout::kTiled && p.group() > 1 && causal_like &&
         !dq_reduction(p, row).ordered && tiles <= (int64_t{1} << 30);
}

// Workspace: dQ accumulator fp32 [Hq, dq_rows, dq_pitch] | D = rowsum(dO∘O) fp32 like LSE | with
// head tiles, the dK and dV accumulators fp32 [rows_k, Hkv, D] and [rows_k, Hkv, Dv] | int32
// counters, zeroed by the preprocess: the tile counter of persistent kernels, then, for the ordered
// reduction or claims (DqReduction), [B, Hq, q blocks], then with head tiles the dK / dV turns
// [rows_k, Hkv] (one a kv block's first key row). Each region 256-byte aligned.
struct Layout {
  size_t dq_accum = 0, dsum = 0, dk_accum = 0, dv_accum = 0, counters = 0, total = 0;
  int64_t counter_ints = 0, turns = 0;  // turns: the first dK / dV turn counter's index
};

Layout layout(const Problem& p, const BwdKernelRow& row, const DqReduction& dq) {
  const size_t rows_q = static_cast<size_t>(p.varlen() ? p.total_q : p.batch * p.seqlen_q);
  const size_t rows_k = static_cast<size_t>(p.varlen() ? p.total_k : p.batch * p.seqlen_k);
  const size_t hq = static_cast<size_t>(p.heads_q), hkv = static_cast<size_t>(p.heads_kv);
  const bool tiles = head_tiles(p, row);
  Layout l;
  l.dq_accum = 0;
  l.dsum = align_up(l.dq_accum + hq * static_cast<size_t>(dq_rows(p, row) * dq_pitch(p, row)) * sizeof(float));
  l.dk_accum = align_up(l.dsum + hq * rows_q * sizeof(float));
  l.dv_accum = align_up(l.dk_accum + (tiles ? rows_k * hkv * static_cast<size_t>(p.head_dim) * sizeof(float) : 0));
  l.counters = align_up(l.dv_accum + (tiles ? rows_k * hkv * static_cast<size_t>(p.head_dim_v) * sizeof(float) : 0));
  l.counter_ints = 1;
  if (dq.ordered || dq.claims) l.counter_ints += p.batch * p.heads_q * ((p.seqlen_q + row.block_m - 1) / row.block_m);
  l.turns = l.counter_ints;
  if (tiles) l.counter_ints += static_cast<int64_t>(rows_k * hkv);
  l.total = align_up(l.counters + static_cast<size_t>(l.counter_ints) * sizeof(int));
  return l;
}

sm80::BwdParams make_params(const Problem& p, const BwdKernelRow& row) {
  sm80::BwdParams f{};
  f.q = p.q.data, f.k = p.k.data, f.v = p.v.data, f.o = p.o.data, f.dout = p.dout.data;
  f.dq = p.dq.data, f.dk = p.dk.data, f.dv = p.dv.data;
  f.lse = p.lse;
  f.q_batch_stride = p.q.batch_stride, f.q_row_stride = p.q.row_stride, f.q_head_stride = p.q.head_stride;
  f.k_batch_stride = p.k.batch_stride, f.k_row_stride = p.k.row_stride, f.k_head_stride = p.k.head_stride;
  f.v_batch_stride = p.v.batch_stride, f.v_row_stride = p.v.row_stride, f.v_head_stride = p.v.head_stride;
  f.o_batch_stride = p.o.batch_stride, f.o_row_stride = p.o.row_stride, f.o_head_stride = p.o.head_stride;
  f.do_batch_stride = p.dout.batch_stride, f.do_row_stride = p.dout.row_stride;
  f.do_head_stride = p.dout.head_stride;
  f.dq_batch_stride = p.dq.batch_stride, f.dq_row_stride = p.dq.row_stride, f.dq_head_stride = p.dq.head_stride;
  f.dk_batch_stride = p.dk.batch_stride, f.dk_row_stride = p.dk.row_stride, f.dk_head_stride = p.dk.head_stride;
  f.dv_batch_stride = p.dv.batch_stride, f.dv_row_stride = p.dv.row_stride, f.dv_head_stride = p.dv.head_stride;
  f.batch = static_cast<int>(p.batch);
  f.seqlen_q = static_cast<int>(p.seqlen_q);
  f.seqlen_k = static_cast<int>(p.seqlen_k);
  f.heads_q = static_cast<int>(p.heads_q);
  f.heads_kv = static_cast<int>(p.heads_kv);
  f.group = static_cast<int>(p.group());
  f.head_dim = static_cast<int>(p.head_dim);
  f.head_dim_v = static_cast<int>(p.head_dim_v);
  f.dq_accum_rows = dq_rows(p, row);
  f.dq_accum_pitch = static_cast<int>(dq_pitch(p, row));
  f.dq_accum_layout = row.dq_layout;
  f.dq_tile_rows = row.block_m;
  f.dq_tile_warps_m = row.dq_warps_m;
  f.rows_q = p.varlen() ? p.total_q : p.batch * p.seqlen_q;
  f.scale = p.scale;
  if (p.softcap > 0.f) {
    f.softcap = p.softcap;
    f.softcap_in = p.scale / p.softcap;
    f.score_log2 = kLog2e * p.softcap;  // x = tanh(·)·c·log2e
  } else {
    f.score_log2 = p.scale * kLog2e;
  }
  f.mask = p.mask;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.num_kv_blocks = static_cast<int>((p.seqlen_k + row.block_n - 1) / row.block_n);
  f.num_q_blocks = static_cast<int>((p.seqlen_q + row.block_m - 1) / row.block_m);
  f.head_tiles = head_tiles(p, row) ? 1 : 0;
  return f;
}

// The row that runs p and its params (workspace pointers unset); throws NOT_SUPPORTED naming why.
const BwdKernelRow& prepare(const Problem& p, sm80::BwdParams* params) {
  const DeviceCaps caps = device_caps(p.device);
  const BwdKernelRow* row = &select_row(p, caps);
  constexpr int64_t kIntMax = INT32_MAX;
  if (p.seqlen_q > kIntMax || p.seqlen_k > kIntMax || p.batch > kIntMax || p.heads_q > kIntMax)
    unsupported("sequence lengths, batch and heads must each be below 2^31");
  const bool varlen = p.varlen();
  const bool vb = !varlen && p.batch > 1;
  check_alignment("q", p.q, varlen || p.seqlen_q > 1, p.heads_q > 1, vb);
  check_alignment("k", p.k, varlen || p.seqlen_k > 1, p.heads_kv > 1, vb);
  check_alignment("v", p.v, varlen || p.seqlen_k > 1, p.heads_kv > 1, vb);
  check_alignment("o", p.o, varlen || p.seqlen_q > 1, p.heads_q > 1, vb);
  check_alignment("dout", p.dout, varlen || p.seqlen_q > 1, p.heads_q > 1, vb);
  check_alignment("dq", p.dq, varlen || p.seqlen_q > 1, p.heads_q > 1, vb);
  check_alignment("dk", p.dk, varlen || p.seqlen_k > 1, p.heads_kv > 1, vb);
  check_alignment("dv", p.dv, varlen || p.seqlen_k > 1, p.heads_kv > 1, vb);
  // A row that may decline (sm90) hands a problem it does not run to the next eligible row.
  while (row->may_decline) {
    *params = make_params(p, *row);
    if (row->can_implement(*params, caps.smem_optin).empty()) return *row;
    row = &select_row(p, caps, row + 1);
  }
  *params = make_params(p, *row);
  const std::string why = row->can_implement(*params, caps.smem_optin);
  if (!why.empty()) unsupported(why);
  return *row;
}

}  // namespace

void check_supported_bwd(const Problem& p) {
  sm80::BwdParams params;
  (void)prepare(p, &params);
}

std::string bwd_kernel_table() {
  std::string s;
  for (const BwdKernelRow* r = kBwdKernels; r->family != nullptr; ++r)
    s += describe_row("bwd", r->family, r->dtype, r->head_dim, r->min_cc, r->max_cc, r->declines);
  return s;
}

const char* bwd_kernel_name(const Problem& p) {
  sm80::BwdParams params;
  return prepare(p, &params).family;
}

size_t bwd_workspace_size(const Problem& p) {
  DeviceGuard guard(p.device);
  sm80::BwdParams params;
  const BwdKernelRow& row = prepare(p, &params);
  return layout(p, row, dq_reduction(p, row)).total;
}

void bwd(const Problem& p, void* stream_ptr) {
  DeviceGuard guard(p.device);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  sm80::BwdParams params;
  const BwdKernelRow& row = prepare(p, &params);
  const DqReduction dq = dq_reduction(p, row);
  const Layout l = layout(p, row, dq);
  const bool bf16 = p.dtype == Dtype::bf16;
  const bool any_q = params.rows_q > 0;
  const bool any_kv = int64_t(params.num_kv_blocks) * params.heads_kv * params.batch > 0;
  if (!any_q && !any_kv) return;

  char* ws = static_cast<char*>(p.workspace);
  AsyncBuffer* owned = nullptr;
  if (ws == nullptr) {
    owned = new AsyncBuffer(l.total, stream);
    ws = static_cast<char*>(owned->get());
  } else {
    if (p.workspace_size < l.total)
      fail(FA_STATUS_INVALID_ARGUMENT, "workspace: " + std::to_string(p.workspace_size) +
                                           " bytes given, fa_bwd_workspace_size() asks for " +
                                           std::to_string(l.total));
    if (reinterpret_cast<uintptr_t>(ws) % 16 != 0)
      fail(FA_STATUS_INVALID_ARGUMENT, "workspace: must be 16-byte aligned");
  }
  struct Owner {  // frees the library's workspace (stream-ordered) however we leave
    AsyncBuffer* b;
    ~Owner() { delete b; }
  } owner{owned};

  params.dq_accum = reinterpret_cast<float*>(ws + l.dq_accum);
  params.dsum = reinterpret_cast<float*>(ws + l.dsum);
  params.tile_counter = reinterpret_cast<int*>(ws + l.counters);
  params.locks = dq.ordered ? params.tile_counter + 1 : nullptr;
  params.claims = dq.claims ? params.tile_counter + 1 : nullptr;
  params.dq_first_stored = dq.first_stored ? 1 : 0;
  params.zero_ints = l.counter_ints;
  if (params.head_tiles) {
    params.dk_accum = reinterpret_cast<float*>(ws + l.dk_accum);
    params.dv_accum = reinterpret_cast<float*>(ws + l.dv_accum);
    params.dkv_turns = params.tile_counter + l.turns;
  }

  // D = rowsum(dO∘O), the counters = 0 and dQ_accum = 0 (unless the main kernel stores first);
  // then dK, dV and dQ_accum; then dQ.
  if (any_q) {
    bwd_pre_launch(params, bf16, stream);
  } else {
    FA_CUDA_CHECK(cudaMemsetAsync(params.tile_counter, 0, static_cast<size_t>(l.counter_ints) * sizeof(int), stream));
  }
  if (any_kv) row.launch(params, stream);
  if (any_q) bwd_post_launch(params, bf16, stream);
  if (any_kv && params.head_tiles) bwd_dkdv_post_launch(params, bf16, stream);
}

}  // namespace fa::cuda
