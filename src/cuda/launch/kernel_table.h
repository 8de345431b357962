// CUDA backend, launch/: THE one table of compiled kernels (arch × dtype × head dim × direction).
// Rows exist only for head dims in FA_CUDA_HDIMS (compile definitions FA_CUDA_HDIM_<D>); dispatch
// picks the smallest compiled head dim >= max(D, Dv). Declarations and data only: no logic.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "api/problem.h"
#include "cuda/sm80/bwd_config.h"
#include "cuda/sm80/fwd_config.h"
#if defined(FA_HAVE_SM90)
#include "cuda/sm90/fwd_config.h"
#endif
#if defined(FA_HAVE_SM90_BWD)
#include "cuda/sm90/bwd_config.h"
#endif

namespace fa::cuda {

enum class Direction { fwd, bwd };

// What the sm90 rows decline, and dispatch then hands to the sm80 row of the same head dim.
#if defined(FA_SM90_FWD_VARLEN) && !FA_SM90_FWD_VARLEN
#define FA_SM90_FWD_DECLINES "varlen; strides TMA cannot describe; D or Dv at most head dim - 64"
#else
#define FA_SM90_FWD_DECLINES "strides TMA cannot describe; D or Dv at most head dim - 64"
#endif
inline constexpr const char* kSm90FwdDeclines = FA_SM90_FWD_DECLINES;
// The first sm90 row of a head dim also hands some problems to its next row (sm90/fwd_config.h,
// kRow): at 64 masked ones below 2048 query rows (128-row tiles), at 128 and 256 masked ones and
// those with fewer keys than 4096 / 2048 (the softmax wholly after the P·V's wait); the second
// row at 256 those of at most 1024 keys (64-key blocks).
inline constexpr const char* kSm90Fwd64Declines = FA_SM90_FWD_DECLINES "; masked, below 2048 query rows";
inline constexpr const char* kSm90Fwd128Declines = FA_SM90_FWD_DECLINES "; masked; fewer than 4096 keys";
inline constexpr const char* kSm90Fwd256Declines = FA_SM90_FWD_DECLINES "; masked; fewer than 2048 keys";
inline constexpr const char* kSm90Fwd256Row1Declines = FA_SM90_FWD_DECLINES "; at most 1024 keys";
#if defined(FA_HAVE_SM90)
static_assert(sm90::FwdConfig<64>::kNextRowMaskedBelow == 2048 && sm90::FwdConfig<64>::kNextRowKeysBelow == 0,
              "kSm90Fwd64Declines names the thresholds");
static_assert(sm90::FwdConfig<128>::kNextRowMaskedBelow == sm90::kEveryMasked &&
                  sm90::FwdConfig<128>::kNextRowKeysBelow == 4096,
              "kSm90Fwd128Declines names the thresholds");
static_assert(sm90::FwdConfig<256>::kNextRowMaskedBelow == sm90::kEveryMasked &&
                  sm90::FwdConfig<256>::kNextRowKeysBelow == 2048,
              "kSm90Fwd256Declines names the thresholds");
static_assert(sm90::FwdConfig<256, 1>::kNextRowMaskedBelow == 0 && sm90::FwdConfig<256, 1>::kNextRowKeysBelow == 1025,
              "kSm90Fwd256Row1Declines names the thresholds");
static_assert(sm90::FwdConfig<64, 1>::kNextRowMaskedBelow == 0 && sm90::FwdConfig<64, 1>::kNextRowKeysBelow == 0 &&
                  sm90::FwdConfig<128, 1>::kNextRowMaskedBelow == 0 && sm90::FwdConfig<128, 1>::kNextRowKeysBelow == 0 &&
                  sm90::FwdConfig<256, 2>::kNextRowMaskedBelow == 0 && sm90::FwdConfig<256, 2>::kNextRowKeysBelow == 0,
              "the last sm90 row of a head dim declines only kSm90FwdDeclines");
#endif
// What a full-size sm80 row declines for the compact row of its head dim (sm80/*_config.h,
// kCompact: tiles for the 163 KiB of an A100 or the 99 KiB of sm86/89/120 GPUs).
inline constexpr const char* kSm80Declines = "more shared memory per block than the device has";
// What every sm90 backward row declines (to the sm80 rows). The first sm90 row of each head dim
// (compiled unmasked, sm90/bwd_config.h) also hands masked, softcap and varlen problems to its
// second; at 128 (80-row q blocks) it keeps causal problems without a softcap from 4096 query
// rows (its causal instantiation) and hands on those of fewer than 1024 query rows too (the
// second has 64-row blocks).
#define FA_SM90_BWD_DECLINES "strides TMA cannot describe; D or Dv at most head dim - 64"
inline constexpr const char* kSm90BwdDeclines = FA_SM90_BWD_DECLINES;
inline constexpr const char* kSm90BwdUnmaskedDeclines = FA_SM90_BWD_DECLINES "; masked, softcap or varlen";
inline constexpr const char* kSm90Bwd128Declines =
    FA_SM90_BWD_DECLINES "; masked but causal from 4096 query rows, softcap or varlen; fewer than 1024 query rows";
#if defined(FA_HAVE_SM90_BWD)
static_assert(sm90::BwdConfig<128>::kUnmaskedOnly && sm90::BwdConfig<128>::kMinQueries == 1024 &&
                  sm90::BwdConfig<128>::kCausalFromQueries == 4096,
              "kSm90Bwd128Declines names the thresholds");
static_assert(sm90::BwdConfig<64>::kUnmaskedOnly && sm90::BwdConfig<64>::kMinQueries == 0 &&
                  sm90::BwdConfig<64>::kCausalFromQueries == 0 && sm90::BwdConfig<256>::kUnmaskedOnly &&
                  sm90::BwdConfig<256>::kMinQueries == 0 && sm90::BwdConfig<256>::kCausalFromQueries == 0,
              "kSm90BwdUnmaskedDeclines names the thresholds");
static_assert(!sm90::BwdConfig<64, 1>::kUnmaskedOnly && sm90::BwdConfig<64, 1>::kMinQueries == 0 &&
                  !sm90::BwdConfig<128, 1>::kUnmaskedOnly && sm90::BwdConfig<128, 1>::kMinQueries == 0 &&
                  !sm90::BwdConfig<256, 1>::kUnmaskedOnly && sm90::BwdConfig<256, 1>::kMinQueries == 0,
              "the last sm90 backward row of a head dim declines only kSm90BwdDeclines");
#endif

struct FwdKernelRow {
  const char* family;  // fwd_kernel_name(): "sm80", "sm90"
  int min_cc;          // lowest compute capability (major·10 + minor) it runs on
  int max_cc;          // highest (sm_90a code runs on 9.0 alone)
  Dtype dtype;
  int head_dim;  // serves D, Dv <= head_dim
  int block_m;   // query rows per CTA (sizes FwdParams::num_m_blocks)
  const char* declines;  // what its can_implement hands on to the next row ("" for nothing)
  std::string (*can_implement)(const sm80::FwdParams&, int smem_optin);
  void (*launch)(const sm80::FwdParams&, cudaStream_t);
};

// sm80 rows: full-size tiles (C false, family "sm80") or compact ones (C true, "sm80_compact").
#define FA_SM80_FWD_ROWS_OF(D, C, family, declines)                                             \
  FwdKernelRow{family, 80, 1000, Dtype::bf16, D, sm80::kFwdBlockM<D, C>, declines,              \
               &sm80::fwd_can_implement<D, true, C>, &sm80::fwd_launch<D, true, C>},            \
      FwdKernelRow{family, 80, 1000, Dtype::f16, D, sm80::kFwdBlockM<D, C>, declines,           \
                   &sm80::fwd_can_implement<D, false, C>, &sm80::fwd_launch<D, false, C>},
#define FA_SM80_FWD_ROWS(D) FA_SM80_FWD_ROWS_OF(D, false, "sm80", "")

// Hopper rows (FA_SM90 builds): same signatures; the launch builds the TMA tensor maps.
#define FA_SM90_FWD_ROWS_OF(D, R, declines)                                                     \
  FwdKernelRow{"sm90", 90, 90, Dtype::bf16, D, sm90::kFwdBlockM<D, R>, declines,                 \
               &sm90::fwd_can_implement<D, true, R>, &sm90::fwd_launch<D, true, R>},            \
      FwdKernelRow{"sm90", 90, 90, Dtype::f16, D, sm90::kFwdBlockM<D, R>, declines,              \
                   &sm90::fwd_can_implement<D, false, R>, &sm90::fwd_launch<D, false, R>},

// Forward rows, ascending head dim within each family; dispatch takes the first row that runs
// the problem, so the sm90 rows (when built) come first and the sm80 rows serve the rest (the
// compact one where the device's shared memory is too small for the full-size tiles).
inline const FwdKernelRow kFwdKernels[] = {
#if defined(FA_HAVE_SM90)
#if defined(FA_CUDA_HDIM_64)
    FA_SM90_FWD_ROWS_OF(64, 0, kSm90Fwd64Declines)
    FA_SM90_FWD_ROWS_OF(64, 1, kSm90FwdDeclines)
#endif
#if defined(FA_CUDA_HDIM_128)
    FA_SM90_FWD_ROWS_OF(128, 0, kSm90Fwd128Declines)
    FA_SM90_FWD_ROWS_OF(128, 1, kSm90FwdDeclines)
#endif
#if defined(FA_CUDA_HDIM_256)
    FA_SM90_FWD_ROWS_OF(256, 0, kSm90Fwd256Declines)
    FA_SM90_FWD_ROWS_OF(256, 1, kSm90Fwd256Row1Declines)
    FA_SM90_FWD_ROWS_OF(256, 2, kSm90FwdDeclines)
#endif
#endif
#if defined(FA_CUDA_HDIM_64)
    FA_SM80_FWD_ROWS(64)
#endif
#if defined(FA_CUDA_HDIM_128)
    FA_SM80_FWD_ROWS(128)
#endif
#if defined(FA_CUDA_HDIM_256)
    FA_SM80_FWD_ROWS_OF(256, false, "sm80", kSm80Declines)
    FA_SM80_FWD_ROWS_OF(256, true, "sm80_compact", "")
#endif
    FwdKernelRow{nullptr, 0, 0, Dtype::f32, 0, 0, nullptr, nullptr, nullptr}  // end marker
};

struct BwdKernelRow {
  const char* family;  // bwd_kernel_name(): "sm80", "sm90"
  int min_cc;          // lowest compute capability (major·10 + minor) it runs on
  int max_cc;          // highest (sm_90a code runs on 9.0 alone)
  bool may_decline;    // true: when can_implement rejects a problem, dispatch tries the next row
  Dtype dtype;
  int head_dim;  // serves D, Dv <= head_dim
  int block_n;   // kv rows per CTA (sizes BwdParams::num_kv_blocks)
  int block_m;   // q rows per inner step (sizes BwdParams::num_q_blocks)
  sm80::DqAccumLayout dq_layout;  // how its main kernel adds into the dQ accumulator
  int dq_warps_m;                 // kTiled: the q-side warps of its dQ warp grid (sm80/dq_tile.h)
  const char* declines;  // what may_decline rows hand on to the next row ("" for nothing)
  std::string (*can_implement)(const sm80::BwdParams&, int smem_optin);
  void (*launch)(const sm80::BwdParams&, cudaStream_t);
};

// sm80 rows: full-size tiles (they decline for shared memory, and the compact rows after every
// other row serve that) or compact ones (C true, family "sm80_compact", the last word).
#define FA_SM80_BWD_ROWS_OF(D, C, family, declines)                                                 \
  BwdKernelRow{family, 80, 1000, !C, Dtype::bf16, D, sm80::kBwdBlockN<D, C>, sm80::kBwdBlockM<D, C>,  \
               sm80::DqAccumLayout::kTiled, sm80::kBwdDqWarpsM<D, C>, declines,                       \
               &sm80::bwd_can_implement<D, true, C>, &sm80::bwd_launch<D, true, C>},                  \
      BwdKernelRow{family, 80, 1000, !C, Dtype::f16, D, sm80::kBwdBlockN<D, C>,                       \
                   sm80::kBwdBlockM<D, C>, sm80::DqAccumLayout::kTiled, sm80::kBwdDqWarpsM<D, C>,     \
                   declines, &sm80::bwd_can_implement<D, false, C>, &sm80::bwd_launch<D, false, C>},
#define FA_SM80_BWD_ROWS(D) FA_SM80_BWD_ROWS_OF(D, false, "sm80", kSm80Declines)
#define FA_SM80C_BWD_ROWS(D) FA_SM80_BWD_ROWS_OF(D, true, "sm80_compact", "")

// Hopper rows (FA_SM90_BWD builds, head dims 64, 128 and 256, two rows each): they decline
// what they do not run (varlen, TMA-incompatible strides, ...), which then goes to the next row.
#define FA_SM90_BWD_ROWS_OF(D, R, declines)                                                                 \
  BwdKernelRow{"sm90", 90, 90, true, Dtype::bf16, D, sm90::kBwdBlockN<D, R>, sm90::kBwdBlockM<D, R>,         \
               sm90::kBwdDqLayout<D, R>, 0, declines, &sm90::bwd_can_implement<D, true, R>,                  \
               &sm90::bwd_launch<D, true, R>},                                                              \
      BwdKernelRow{"sm90", 90, 90, true, Dtype::f16, D, sm90::kBwdBlockN<D, R>, sm90::kBwdBlockM<D, R>,      \
                   sm90::kBwdDqLayout<D, R>, 0, declines, &sm90::bwd_can_implement<D, false, R>,             \
                   &sm90::bwd_launch<D, false, R>},

// Backward rows (main kernel; pre/post are shared), ascending head dim within each family;
// the sm90 rows (when built) come first, the compact sm80 rows last.
inline const BwdKernelRow kBwdKernels[] = {
#if defined(FA_HAVE_SM90_BWD)
#if defined(FA_SM90_BWD_HDIM_64)
    FA_SM90_BWD_ROWS_OF(64, 0, kSm90BwdUnmaskedDeclines)
    FA_SM90_BWD_ROWS_OF(64, 1, kSm90BwdDeclines)
#endif
#if defined(FA_SM90_BWD_HDIM_128)
    FA_SM90_BWD_ROWS_OF(128, 0, kSm90Bwd128Declines)
    FA_SM90_BWD_ROWS_OF(128, 1, kSm90BwdDeclines)
#endif
#if defined(FA_SM90_BWD_HDIM_256)
    FA_SM90_BWD_ROWS_OF(256, 0, kSm90BwdUnmaskedDeclines)
    FA_SM90_BWD_ROWS_OF(256, 1, kSm90BwdDeclines)
#endif
#endif
#if defined(FA_CUDA_HDIM_64)
    FA_SM80_BWD_ROWS(64)
#endif
#if defined(FA_CUDA_HDIM_128)
    FA_SM80_BWD_ROWS(128)
#endif
#if defined(FA_CUDA_HDIM_256)
    FA_SM80_BWD_ROWS(256)
#endif
#if defined(FA_CUDA_HDIM_64)
    FA_SM80C_BWD_ROWS(64)
#endif
#if defined(FA_CUDA_HDIM_128)
    FA_SM80C_BWD_ROWS(128)
#endif
#if defined(FA_CUDA_HDIM_256)
    FA_SM80C_BWD_ROWS(256)
#endif
    BwdKernelRow{nullptr, 0, 0, false, Dtype::f32, 0, 0, 0, sm80::DqAccumLayout::kTiled, 0, nullptr, nullptr,
                 nullptr}  // end marker
};

}  // namespace fa::cuda
