/* flashattn: the C ABI.
 * The one public interface of libflashattn: plain C types, one versioned params struct
 * per direction, a status per call and a thread-local error text. No C++ and no torch. */
#ifndef FLASHATTN_FLASHATTN_H
#define FLASHATTN_FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA_API __declspec(dllexport)
#else
#define FA_API __attribute__((visibility("default")))
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* Every entry point returns a status; the message is in fa_last_error(). */
typedef enum fa_status {
  FA_STATUS_OK = 0,
  FA_STATUS_INVALID_ARGUMENT = 1, /* the arguments break the contract below */
  FA_STATUS_NOT_SUPPORTED = 2,    /* valid, but this build or device cannot run it */
  FA_STATUS_DEVICE_ERROR = 3,     /* a CUDA call failed; the text names it */
  FA_STATUS_OUT_OF_MEMORY = 4,
  FA_STATUS_INTERNAL_ERROR = 5
} fa_status;

/* Storage type of q, k, v, o (and dout, dq, dk, dv). Accumulation is always fp32. */
typedef enum fa_dtype { FA_DTYPE_FP32 = 0, FA_DTYPE_FP16 = 1, FA_DTYPE_BF16 = 2 } fa_dtype;

/* Bits of fa_compiled_backends(). */
typedef enum fa_backend { FA_BACKEND_CPU = 1, FA_BACKEND_CUDA = 2 } fa_backend;

/* Which algorithm runs. AUTO is the fastest exact one the device has (FlashAttention);
 * REFERENCE materialises S and P and accumulates in fp64 (CPU only, for checking). */
typedef enum fa_algorithm {
  FA_ALGORITHM_AUTO = 0,
  FA_ALGORITHM_FLASH = 1,
  FA_ALGORITHM_REFERENCE = 2
} fa_algorithm;

/* fa_fwd_params.device: FA_DEVICE_CPU, or a CUDA device ordinal (0, 1, ...). */
#define FA_DEVICE_CPU (-1)

/* A strided view of a 4-d tensor [batch, row, head, dim]; strides count elements.
 * dim_stride must be 1. Varlen tensors are [total, head, dim]: batch_stride is unused. */
typedef struct fa_tensor {
  void* data;
  int64_t batch_stride;
  int64_t row_stride;
  int64_t head_stride;
  int64_t dim_stride;
} fa_tensor;

/* The forward problem O = softmax(mask(softcap(scale * Q K^T))) V and LSE.
 *   q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv], o [B, Sq, Hq, Dv]
 *   lse fp32 contiguous [B, Hq, Sq] (varlen: [Hq, total_q]); natural log; -inf for a row
 *   that sees no key (its O row is 0). lse may be NULL in the forward.
 * Masks: query i sees key j iff  i + Sk - Sq - window_left <= j <= i + Sk - Sq + window_right,
 * a negative window side being unbounded; causal sets window_right = 0 (bottom-right aligned).
 * Varlen: cu_seqlens_q/k (int32, batch + 1 entries, non-decreasing from 0 to total_q/k) in the
 * memory of `device`; then seqlen_q/k are the maximum lengths and q, k, v, o are packed. */
typedef struct fa_fwd_params {
  uint32_t struct_size; /* sizeof(fa_fwd_params) as the caller was compiled */
  int32_t device;       /* FA_DEVICE_CPU or a CUDA device ordinal */
  int32_t dtype;        /* fa_dtype */
  int32_t algorithm;    /* fa_algorithm */

  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t heads_q;
  int64_t heads_kv; /* heads_q % heads_kv == 0; query head h reads kv head h / (Hq / Hkv) */
  int64_t head_dim;   /* D of q and k, 1..256 */
  int64_t head_dim_v; /* Dv of v and o, 1..256 */

  fa_tensor q, k, v;
  fa_tensor o; /* output of the forward, input of the backward */
  float* lse;  /* output of the forward, input of the backward */

  float scale;   /* finite and > 0; flash-attn's default is 1/sqrt(D) */
  float softcap; /* 0 for none, else c > 0: s <- c * tanh(s / c) before masking */
  int32_t causal;
  int32_t deterministic; /* backward: bitwise reproducible dQ (GPU); CPU is always */
  int64_t window_left;   /* -1: unbounded */
  int64_t window_right;  /* -1: unbounded */

  const int32_t* cu_seqlens_q; /* NULL unless varlen; then both are set */
  const int32_t* cu_seqlens_k;
  int64_t total_q; /* varlen: rows of q and o */
  int64_t total_k; /* varlen: rows of k and v */

  int32_t num_threads; /* CPU thread count hint; 0 = all cores (capped at 8 a core) */
  int32_t reserved0;
} fa_fwd_params;

/* The backward of the forward problem in `fwd` (whose o and lse are inputs here):
 *   dout like o; dq like q; dk like k; dv like v. dq, dk, dv are overwritten.
 * workspace: device scratch of fa_bwd_workspace_size() bytes; NULL lets the library allocate
 * (stream-ordered on CUDA). Unused on the CPU. */
typedef struct fa_bwd_params {
  uint32_t struct_size; /* sizeof(fa_bwd_params) as the caller was compiled */
  uint32_t reserved0;
  fa_fwd_params fwd;
  fa_tensor dout, dq, dk, dv;
  void* workspace;
  size_t workspace_size;
} fa_bwd_params;

typedef struct fa_device_info {
  uint32_t struct_size;
  int32_t cc_major;
  int32_t cc_minor;
  int32_t sm_count;
  int64_t total_memory;     /* bytes */
  int64_t smem_per_block;   /* bytes, opt-in maximum */
  char name[256];
} fa_device_info;

/* Version text, e.g. "0.1.0". */
FA_API const char* fa_version(void);
/* Text of the last failure on this thread ("" if none). */
FA_API const char* fa_last_error(void);
FA_API const char* fa_status_string(fa_status status);

/* Bitmask of fa_backend compiled into this library. */
FA_API uint32_t fa_compiled_backends(void);
/* CUDA devices present (0 without the CUDA backend or a device). */
FA_API int32_t fa_cuda_device_count(void);
FA_API fa_status fa_get_device_info(int32_t device, fa_device_info* info);
/* The compiled CUDA kernels, one line each: direction, family, dtype, head dim, compute
 * capabilities, and what a kernel hands on to the next one ("" without the CUDA backend). */
FA_API const char* fa_cuda_kernels(void);
/* The build of the CPU kernels in use and the vector features it was compiled for, as
 * "<build>: <features>": "native: avx512f avx512bf16 fma ..." (built for the build machine), or in
 * a portable x86-64 library the build chosen for this CPU, e.g. "avx2: avx2 avx fma sse4.2". */
FA_API const char* fa_cpu_features(void);
/* Sizes of the structs as this library was compiled (for bindings to check their layout). */
FA_API size_t fa_sizeof_fwd_params(void);
FA_API size_t fa_sizeof_bwd_params(void);

/* OK if the call with these params would run; else the status it would return and why. */
FA_API fa_status fa_can_implement_fwd(const fa_fwd_params* params);
FA_API fa_status fa_can_implement_bwd(const fa_bwd_params* params);
/* Name of the kernel family that runs these params ("cpu_flash", "cpu_reference", "sm80",
 * ...), or NULL with the reason in fa_last_error(). */
FA_API const char* fa_fwd_kernel_name(const fa_fwd_params* params);
FA_API const char* fa_bwd_kernel_name(const fa_bwd_params* params);

/* stream: a cudaStream_t on CUDA (NULL = legacy default stream); ignored on the CPU. */
FA_API fa_status fa_fwd(const fa_fwd_params* params, void* stream);
FA_API fa_status fa_bwd_workspace_size(const fa_bwd_params* params, size_t* bytes);
FA_API fa_status fa_bwd(const fa_bwd_params* params, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_FLASHATTN_H */
