// API core: the C ABI of include/flashattn/flashattn.h.
// Validates every argument, builds the fa::Problem the backends receive, picks the backend
// and turns failures into a status plus fa_last_error() text. No arithmetic of attention here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <string>

#include "api/problem.h"
#include "cpu/cpu_backend.h"
#include "flashattn/flashattn.h"
#if FA_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace fa {
namespace {

thread_local std::string g_last_error;

// Runs f; converts what it throws into a status and the thread's error text.
template <class F>
fa_status guarded(const char* entry, F&& f) {
  try {
    f();
    return FA_STATUS_OK;
  } catch (const Error& e) {
    g_last_error = std::string(entry) + ": " + e.what();
    return e.status;
  } catch (const std::bad_alloc&) {
    g_last_error = std::string(entry) + ": out of host memory";
    return FA_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_last_error = std::string(entry) + ": internal error: " + e.what();
    return FA_STATUS_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = std::string(entry) + ": internal error";
    return FA_STATUS_INTERNAL_ERROR;
  }
}

template <class... Ts>
std::string cat(const Ts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

// FA_REQUIRE(ok, message): INVALID_ARGUMENT with the message when ok is false. A macro so that
// the message (often a cat(...)) is only built when the check fails: every call validates
// dozens of fields, and formatting each message up front cost microseconds a call.
#define FA_REQUIRE(ok, what)                                      \
  do {                                                            \
    if (!(ok)) ::fa::fail(FA_STATUS_INVALID_ARGUMENT, (what));    \
  } while (0)

// a * b + c in int64, or fail naming `what` when it overflows.
int64_t mul_add(int64_t a, int64_t b, int64_t c, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    fail(FA_STATUS_INVALID_ARGUMENT, std::string(what) + ": sizes and strides overflow 64-bit offsets");
  return r;
}

// Checks one strided tensor of logical shape [batch, rows, heads, dim] and returns its view.
// Varlen tensors pass batch = 1 (rows are packed, batch_stride unused).
Tensor check_tensor(const fa_tensor& t, const char* name, int64_t batch, int64_t rows,
                    int64_t heads, int64_t dim, size_t elem_bytes, bool varlen) {
  const bool empty = batch == 0 || rows == 0 || heads == 0 || dim == 0;
  FA_REQUIRE(empty || t.data != nullptr, cat(name, ".data: null pointer"));
  FA_REQUIRE(t.dim_stride == 1,
          cat(name, ".dim_stride: the last dimension must be contiguous (got ", t.dim_stride, ")"));
  FA_REQUIRE((varlen || t.batch_stride >= 0) && t.row_stride >= 0 && t.head_stride >= 0,
          cat(name, ": strides must be non-negative (batch ", t.batch_stride, ", row ",
              t.row_stride, ", head ", t.head_stride, ")"));
  if (!empty) {
    // The largest element offset any kernel forms, and its byte offset, must fit in int64.
    int64_t last = dim - 1;
    if (!varlen) last = mul_add(batch - 1, t.batch_stride, last, name);
    last = mul_add(rows - 1, t.row_stride, last, name);
    last = mul_add(heads - 1, t.head_stride, last, name);
    mul_add(last + 1, static_cast<int64_t>(elem_bytes), 0, name);
  }
  Tensor v;
  v.data = t.data;
  v.batch_stride = varlen ? 0 : t.batch_stride;
  v.row_stride = t.row_stride;
  v.head_stride = t.head_stride;
  return v;
}

void check_cu_seqlens(const int32_t* cu, const char* name, int64_t batch, int64_t total,
                      int64_t max_len, const char* max_name) {
  FA_REQUIRE(cu[0] == 0, cat(name, "[0] must be 0 (got ", cu[0], ")"));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = int64_t(cu[b + 1]) - cu[b];
    FA_REQUIRE(len >= 0, cat(name, " must be non-decreasing (", name, "[", b + 1, "] = ", cu[b + 1],
                          " < ", name, "[", b, "] = ", cu[b], ")"));
    FA_REQUIRE(len <= max_len, cat(name, ": sequence ", b, " has length ", len, ", more than ",
                                max_name, " (", max_len, ")"));
  }
  FA_REQUIRE(cu[batch] == total,
          cat(name, "[batch] must equal the total rows (", cu[batch], " != ", total, ")"));
}

// Builds the problem of a forward params struct; `backward` tightens what must be present.
Problem make_problem(const fa_fwd_params* fp, bool backward) {
  FA_REQUIRE(fp != nullptr, "params: null pointer");
  FA_REQUIRE(fp->struct_size == sizeof(fa_fwd_params),
          cat("params.struct_size: ", fp->struct_size, " is not sizeof(fa_fwd_params) = ",
              sizeof(fa_fwd_params), " of this library (rebuild against its header)"));
  const fa_fwd_params& a = *fp;
  Problem p;

  if (a.device != FA_DEVICE_CPU) {
    FA_REQUIRE(a.device >= 0, cat("device: ", a.device, " is neither FA_DEVICE_CPU (-1) nor a CUDA ordinal"));
#if FA_HAVE_CUDA
    const int n = cuda::device_count();
    if (a.device >= n)
      fail(FA_STATUS_NOT_SUPPORTED, cat("device: CUDA device ", a.device, " requested but ", n,
                                        " present"));
#else
    fail(FA_STATUS_NOT_SUPPORTED,
         cat("device: CUDA device ", a.device, " requested but this library was built without CUDA"));
#endif
  }
  p.device = a.device;

  FA_REQUIRE(a.dtype == FA_DTYPE_FP32 || a.dtype == FA_DTYPE_FP16 || a.dtype == FA_DTYPE_BF16,
          cat("dtype: unknown value ", a.dtype));
  p.dtype = static_cast<Dtype>(a.dtype);
  FA_REQUIRE(a.algorithm == FA_ALGORITHM_AUTO || a.algorithm == FA_ALGORITHM_FLASH ||
              a.algorithm == FA_ALGORITHM_REFERENCE,
          cat("algorithm: unknown value ", a.algorithm));
  p.algorithm = static_cast<fa_algorithm>(a.algorithm);

  FA_REQUIRE(a.batch >= 0, cat("batch: must be >= 0 (got ", a.batch, ")"));
  FA_REQUIRE(a.seqlen_q >= 0, cat("seqlen_q: must be >= 0 (got ", a.seqlen_q, ")"));
  FA_REQUIRE(a.seqlen_k >= 0, cat("seqlen_k: must be >= 0 (got ", a.seqlen_k, ")"));
  FA_REQUIRE(a.heads_q >= 1, cat("heads_q: must be >= 1 (got ", a.heads_q, ")"));
  FA_REQUIRE(a.heads_kv >= 1, cat("heads_kv: must be >= 1 (got ", a.heads_kv, ")"));
  FA_REQUIRE(a.heads_q % a.heads_kv == 0,
          cat("heads_kv: heads_q (", a.heads_q, ") must be a multiple of heads_kv (", a.heads_kv, ")"));
  FA_REQUIRE(a.head_dim >= 1 && a.head_dim <= 256,
          cat("head_dim: must be in [1, 256] (got ", a.head_dim, ")"));
  FA_REQUIRE(a.head_dim_v >= 1 && a.head_dim_v <= 256,
          cat("head_dim_v: must be in [1, 256] (got ", a.head_dim_v, ")"));
  p.batch = a.batch;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_kv;
  p.head_dim = a.head_dim;
  p.head_dim_v = a.head_dim_v;

  FA_REQUIRE(std::isfinite(a.scale) && a.scale > 0.f, cat("scale: must be finite and > 0 (got ", a.scale, ")"));
  FA_REQUIRE(std::isfinite(a.softcap) && a.softcap >= 0.f,
          cat("softcap: must be finite and >= 0 (got ", a.softcap, ")"));
  FA_REQUIRE(a.window_left >= -1, cat("window_left: must be >= -1 (got ", a.window_left, ")"));
  FA_REQUIRE(a.window_right >= -1, cat("window_right: must be >= -1 (got ", a.window_right, ")"));
  FA_REQUIRE(a.num_threads >= 0, cat("num_threads: must be >= 0 (got ", a.num_threads, ")"));
  p.scale = a.scale;
  p.softcap = a.softcap;
  // A window side at least max(Sq, Sk) (varlen: the stated maxima) hides nothing: it is
  // unbounded, and folding it to -1 keeps the mask's offset arithmetic far from int64 overflow.
  const int64_t reach = std::max(a.seqlen_q, a.seqlen_k);
  auto side = [reach](int64_t w) { return w >= reach ? int64_t(-1) : w; };
  p.mask = make_mask(a.causal != 0, side(a.window_left), side(a.window_right));
  p.deterministic = a.deterministic != 0;
  p.num_threads = a.num_threads;

  FA_REQUIRE((a.cu_seqlens_q == nullptr) == (a.cu_seqlens_k == nullptr),
          a.cu_seqlens_q ? "cu_seqlens_k: null while cu_seqlens_q is set (varlen needs both)"
                         : "cu_seqlens_q: null while cu_seqlens_k is set (varlen needs both)");
  const bool varlen = a.cu_seqlens_q != nullptr;
  int64_t rows_q = a.seqlen_q, rows_k = a.seqlen_k, tensor_batch = a.batch;
  if (varlen) {
    FA_REQUIRE(a.total_q >= 0, cat("total_q: must be >= 0 (got ", a.total_q, ")"));
    FA_REQUIRE(a.total_k >= 0, cat("total_k: must be >= 0 (got ", a.total_k, ")"));
    FA_REQUIRE(a.total_q <= std::numeric_limits<int32_t>::max() &&
                a.total_k <= std::numeric_limits<int32_t>::max(),
            "total_q: varlen totals must fit the int32 cu_seqlens");
    if (a.device == FA_DEVICE_CPU) {  // device-resident offsets are the caller's to keep right
      check_cu_seqlens(a.cu_seqlens_q, "cu_seqlens_q", a.batch, a.total_q, a.seqlen_q, "seqlen_q");
      check_cu_seqlens(a.cu_seqlens_k, "cu_seqlens_k", a.batch, a.total_k, a.seqlen_k, "seqlen_k");
    }
    p.cu_seqlens_q = a.cu_seqlens_q;
    p.cu_seqlens_k = a.cu_seqlens_k;
    p.total_q = a.total_q;
    p.total_k = a.total_k;
    rows_q = a.total_q;
    rows_k = a.total_k;
    tensor_batch = 1;
  }

  const size_t eb = dtype_size(p.dtype);
  const int64_t B = tensor_batch;
  p.q = check_tensor(a.q, "q", B, rows_q, a.heads_q, a.head_dim, eb, varlen);
  p.k = check_tensor(a.k, "k", B, rows_k, a.heads_kv, a.head_dim, eb, varlen);
  p.v = check_tensor(a.v, "v", B, rows_k, a.heads_kv, a.head_dim_v, eb, varlen);
  p.o = check_tensor(a.o, "o", B, rows_q, a.heads_q, a.head_dim_v, eb, varlen);

  // LSE is contiguous [B, Hq, Sq] (varlen [Hq, total_q]) fp32.
  const int64_t lse_rows = mul_add(mul_add(B, a.heads_q, 0, "lse"), rows_q, 0, "lse");
  mul_add(lse_rows, int64_t(sizeof(float)), 0, "lse");
  if (backward)
    FA_REQUIRE(lse_rows == 0 || a.lse != nullptr, "lse: null pointer (the backward needs the forward's LSE)");
  p.lse = a.lse;
  return p;
}

Problem make_bwd_problem(const fa_bwd_params* bp) {
  FA_REQUIRE(bp != nullptr, "params: null pointer");
  FA_REQUIRE(bp->struct_size == sizeof(fa_bwd_params),
          cat("params.struct_size: ", bp->struct_size, " is not sizeof(fa_bwd_params) = ",
              sizeof(fa_bwd_params), " of this library (rebuild against its header)"));
  Problem p = make_problem(&bp->fwd, /*backward=*/true);
  const fa_fwd_params& a = bp->fwd;
  const bool varlen = p.varlen();
  const int64_t B = varlen ? 1 : a.batch;
  const int64_t rows_q = varlen ? a.total_q : a.seqlen_q;
  const int64_t rows_k = varlen ? a.total_k : a.seqlen_k;
  const size_t eb = dtype_size(p.dtype);
  p.dout = check_tensor(bp->dout, "dout", B, rows_q, a.heads_q, a.head_dim_v, eb, varlen);
  p.dq = check_tensor(bp->dq, "dq", B, rows_q, a.heads_q, a.head_dim, eb, varlen);
  p.dk = check_tensor(bp->dk, "dk", B, rows_k, a.heads_kv, a.head_dim, eb, varlen);
  p.dv = check_tensor(bp->dv, "dv", B, rows_k, a.heads_kv, a.head_dim_v, eb, varlen);
  p.workspace = bp->workspace;
  p.workspace_size = bp->workspace_size;
  return p;
}

// The backend checks beyond the shared contract: what this build and device can run.
void check_supported(const Problem& p, bool backward) {
  if (p.device == FA_DEVICE_CPU) return;  // the CPU backend runs every valid problem
#if FA_HAVE_CUDA
  if (p.algorithm == FA_ALGORITHM_REFERENCE)
    fail(FA_STATUS_NOT_SUPPORTED, "algorithm: the reference path runs on the CPU only");
  if (backward)
    cuda::check_supported_bwd(p);
  else
    cuda::check_supported_fwd(p);
#else
  (void)backward;
#endif
}

bool use_reference(const Problem& p) { return p.algorithm == FA_ALGORITHM_REFERENCE; }

// The kernel family that runs a checked problem in one direction.
const char* kernel_family(const Problem& p, bool backward) {
  check_supported(p, backward);
  if (p.device == FA_DEVICE_CPU) return use_reference(p) ? "cpu_reference" : "cpu_flash";
#if FA_HAVE_CUDA
  return backward ? cuda::bwd_kernel_name(p) : cuda::fwd_kernel_name(p);
#else
  return nullptr;  // unreachable: check_supported refuses CUDA devices without the backend
#endif
}

}  // namespace
}  // namespace fa

using namespace fa;

extern "C" {

const char* fa_version(void) { return "0.1.0"; }

const char* fa_last_error(void) { return g_last_error.c_str(); }

const char* fa_status_string(fa_status status) {
  switch (status) {
    case FA_STATUS_OK: return "ok";
    case FA_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case FA_STATUS_NOT_SUPPORTED: return "not supported";
    case FA_STATUS_DEVICE_ERROR: return "device error";
    case FA_STATUS_OUT_OF_MEMORY: return "out of memory";
    case FA_STATUS_INTERNAL_ERROR: return "internal error";
  }
  return "unknown status";
}

uint32_t fa_compiled_backends(void) {
  uint32_t b = FA_BACKEND_CPU;
#if FA_HAVE_CUDA
  b |= FA_BACKEND_CUDA;
#endif
  return b;
}

int32_t fa_cuda_device_count(void) {
#if FA_HAVE_CUDA
  int32_t n = 0;
  if (guarded("fa_cuda_device_count", [&] { n = cuda::device_count(); }) != FA_STATUS_OK) return 0;
  return n;
#else
  return 0;
#endif
}

fa_status fa_get_device_info(int32_t device, fa_device_info* info) {
  return guarded("fa_get_device_info", [&] {
    FA_REQUIRE(info != nullptr, "info: null pointer");
    FA_REQUIRE(info->struct_size == sizeof(fa_device_info),
            cat("info.struct_size: ", info->struct_size, " is not sizeof(fa_device_info) = ",
                sizeof(fa_device_info)));
    FA_REQUIRE(device >= 0, cat("device: ", device, " is not a CUDA ordinal"));
#if FA_HAVE_CUDA
    const int n = cuda::device_count();
    if (device >= n) fail(FA_STATUS_INVALID_ARGUMENT, cat("device: ", device, " but ", n, " present"));
    cuda::device_info(device, info);
#else
    fail(FA_STATUS_NOT_SUPPORTED, "device: this library was built without CUDA");
#endif
  });
}

const char* fa_cpu_features(void) { return cpu::features(); }

const char* fa_cuda_kernels(void) {
#if FA_HAVE_CUDA
  static const std::string table = cuda::fwd_kernel_table() + cuda::bwd_kernel_table();
  return table.c_str();
#else
  return "";
#endif
}

size_t fa_sizeof_fwd_params(void) { return sizeof(fa_fwd_params); }
size_t fa_sizeof_bwd_params(void) { return sizeof(fa_bwd_params); }

fa_status fa_can_implement_fwd(const fa_fwd_params* params) {
  return guarded("fa_can_implement_fwd", [&] { check_supported(make_problem(params, false), false); });
}

fa_status fa_can_implement_bwd(const fa_bwd_params* params) {
  return guarded("fa_can_implement_bwd", [&] { check_supported(make_bwd_problem(params), true); });
}

const char* fa_fwd_kernel_name(const fa_fwd_params* params) {
  const char* name = nullptr;
  guarded("fa_fwd_kernel_name", [&] { name = kernel_family(make_problem(params, false), false); });
  return name;
}

const char* fa_bwd_kernel_name(const fa_bwd_params* params) {
  const char* name = nullptr;
  guarded("fa_bwd_kernel_name", [&] { name = kernel_family(make_bwd_problem(params), true); });
  return name;
}

fa_status fa_fwd(const fa_fwd_params* params, void* stream) {
  return guarded("fa_fwd", [&] {
    const Problem p = make_problem(params, false);
    if (p.device == FA_DEVICE_CPU) {
      if (p.batch > 0) use_reference(p) ? cpu::reference_fwd(p) : cpu::flash_fwd(p);
      return;
    }
#if FA_HAVE_CUDA
    cuda::fwd(p, stream);  // refuses what check_supported would, while choosing its kernel
#else
    (void)stream;
#endif
  });
}

fa_status fa_bwd_workspace_size(const fa_bwd_params* params, size_t* bytes) {
  return guarded("fa_bwd_workspace_size", [&] {
    FA_REQUIRE(bytes != nullptr, "bytes: null pointer");
    const Problem p = make_bwd_problem(params);
    check_supported(p, true);
    *bytes = 0;
#if FA_HAVE_CUDA
    if (p.device != FA_DEVICE_CPU) *bytes = cuda::bwd_workspace_size(p);
#endif
  });
}

fa_status fa_bwd(const fa_bwd_params* params, void* stream) {
  return guarded("fa_bwd", [&] {
    const Problem p = make_bwd_problem(params);
    if (p.device == FA_DEVICE_CPU) {
      if (p.batch > 0) use_reference(p) ? cpu::reference_bwd(p) : cpu::flash_bwd(p);
      return;
    }
#if FA_HAVE_CUDA
    cuda::bwd(p, stream);  // refuses what check_supported would, while choosing its kernel
#else
    (void)stream;
#endif
  });
}

}  // extern "C"
