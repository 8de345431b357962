// CUDA backend, launch/: forward dispatch: check_supported_fwd, fwd_kernel_name, fwd.
// Turns a validated fa::Problem into FwdParams, picks the row of launch/kernel_table.h and
// launches it. Host code only: no kernel code, no re-validation of what the API core checked.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device_guard.h"
#include "cuda/cuda_backend.h"
#include "cuda/launch/dispatch_common.h"
#include "cuda/launch/kernel_table.h"

namespace fa::cuda {
namespace {

[[noreturn]] void unsupported(const std::string& why) {
  fail(FA_STATUS_NOT_SUPPORTED, "CUDA forward: " + why);
}

void check_alignment(const char* name, const Tensor& t, bool rows, bool heads, bool batches) {
  if (const std::string why = alignment_limits(name, t, rows, heads, batches); !why.empty()) unsupported(why);
}

// The first row at or after `from` that serves p's dtype and head dims on this device; null if none.
const FwdKernelRow* next_row(const Problem& p, const DeviceCaps& caps, const FwdKernelRow* from) {
  const int64_t need = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  for (const FwdKernelRow* row = from; row->family != nullptr; ++row) {
    if (row->dtype == p.dtype && row->head_dim >= need && caps.cc >= row->min_cc && caps.cc <= row->max_cc)
      return row;
  }
  return nullptr;
}

const FwdKernelRow& select_row(const Problem& p, const DeviceCaps& caps) {
  if (const std::string why = backend_limits(p, caps); !why.empty()) unsupported(why);
  if (const FwdKernelRow* row = next_row(p, caps, kFwdKernels)) return *row;
  const int64_t need = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  unsupported("no compiled kernel serves head dim " + std::to_string(need) + " in " +
              dtype_name(p.dtype) + " (this build's FA_CUDA_HDIMS)");
}

sm80::FwdParams make_params(const Problem& p, int block_m) {
  sm80::FwdParams f{};
  f.q = p.q.data;
  f.k = p.k.data;
  f.v = p.v.data;
  f.o = p.o.data;
  f.lse = p.lse;
  f.q_batch_stride = p.q.batch_stride, f.q_row_stride = p.q.row_stride, f.q_head_stride = p.q.head_stride;
  f.k_batch_stride = p.k.batch_stride, f.k_row_stride = p.k.row_stride, f.k_head_stride = p.k.head_stride;
  f.v_batch_stride = p.v.batch_stride, f.v_row_stride = p.v.row_stride, f.v_head_stride = p.v.head_stride;
  f.o_batch_stride = p.o.batch_stride, f.o_row_stride = p.o.row_stride, f.o_head_stride = p.o.head_stride;
  f.batch = static_cast<int>(p.batch);
  f.seqlen_q = static_cast<int>(p.seqlen_q);
  f.seqlen_k = static_cast<int>(p.seqlen_k);
  f.heads_q = static_cast<int>(p.heads_q);
  f.heads_kv = static_cast<int>(p.heads_kv);
  f.group = static_cast<int>(p.group());
  f.head_dim = static_cast<int>(p.head_dim);
  f.head_dim_v = static_cast<int>(p.head_dim_v);
  if (p.softcap > 0.f) {
    f.softcap = p.softcap;
    f.softcap_in = p.scale / p.softcap;
    f.score_log2 = kLog2e;
  } else {
    f.score_log2 = p.scale * kLog2e;
  }
  f.mask = p.mask;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.num_m_blocks = static_cast<int>((p.seqlen_q + block_m - 1) / block_m);
  return f;
}

// The row that runs p and its params; throws NOT_SUPPORTED naming the reason.
const FwdKernelRow& prepare(const Problem& p, sm80::FwdParams* params) {
  const DeviceCaps caps = device_caps(p.device);
  const FwdKernelRow& row = select_row(p, caps);
  constexpr int64_t kIntMax = INT32_MAX;
  if (p.seqlen_q > kIntMax || p.seqlen_k > kIntMax || p.batch > kIntMax || p.heads_q > kIntMax)
    unsupported("sequence lengths, batch and heads must each be below 2^31");
  const bool varlen = p.varlen();
  check_alignment("q", p.q, varlen || p.seqlen_q > 1, p.heads_q > 1, !varlen && p.batch > 1);
  check_alignment("k", p.k, varlen || p.seqlen_k > 1, p.heads_kv > 1, !varlen && p.batch > 1);
  check_alignment("v", p.v, varlen || p.seqlen_k > 1, p.heads_kv > 1, !varlen && p.batch > 1);
  check_alignment("o", p.o, varlen || p.seqlen_q > 1, p.heads_q > 1, !varlen && p.batch > 1);
  // The first row whose kernel can run p (an sm90 row declines TMA-illegal strides, and varlen
  // in a build with FA_SM90_FWD_VARLEN=0; the sm80 row of the same head dim serves those); the
  // last reason is reported.
  std::string why;
  for (const FwdKernelRow* r = &row; r != nullptr; r = next_row(p, caps, r + 1)) {
    *params = make_params(p, r->block_m);
    why = r->can_implement(*params, caps.smem_optin);
    if (why.empty()) return *r;
  }
  unsupported(why);
}

}  // namespace

void check_supported_fwd(const Problem& p) {
  sm80::FwdParams params;
  (void)prepare(p, &params);
}

std::string fwd_kernel_table() {
  std::string s;
  for (const FwdKernelRow* r = kFwdKernels; r->family != nullptr; ++r)
    s += describe_row("fwd", r->family, r->dtype, r->head_dim, r->min_cc, r->max_cc, r->declines);
  return s;
}

const char* fwd_kernel_name(const Problem& p) {
  sm80::FwdParams params;
  return prepare(p, &params).family;
}

void fwd(const Problem& p, void* stream) {
  DeviceGuard guard(p.device);
  sm80::FwdParams params;
  const FwdKernelRow& row = prepare(p, &params);
  if (static_cast<int64_t>(params.num_m_blocks) * params.heads_q * params.batch == 0) return;
  row.launch(params, static_cast<cudaStream_t>(stream));
}

}  // namespace fa::cuda
