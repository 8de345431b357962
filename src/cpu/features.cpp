// CPU backend: which vector instruction sets this build of the CPU kernels was compiled for.
// Reports compile-time macros only (the kernels use what they were built with); the run-time
// choice between builds is cpu/dispatch.cpp's.
#include "cpu/kernels.h"

FA_CPU_BEGIN

const char* kernel_features() {
  static const char* const text = ""
#if defined(__AVX512F__)
                                  " avx512f"
#endif
#if defined(__AVX512BW__)
                                  " avx512bw"
#endif
#if defined(__AVX512VL__)
                                  " avx512vl"
#endif
#if defined(__AVX512BF16__)
                                  " avx512bf16"
#endif
#if defined(__AVX512FP16__)
                                  " avx512fp16"
#endif
#if defined(__AVX2__)
                                  " avx2"
#endif
#if defined(__AVX__)
                                  " avx"
#endif
#if defined(__FMA__)
                                  " fma"
#endif
#if defined(__F16C__)
                                  " f16c"
#endif
#if defined(__SSE4_2__)
                                  " sse4.2"
#endif
#if defined(__SSE2__) && !defined(__SSE4_2__)
                                  " sse2"
#endif
#if defined(__ARM_NEON)
                                  " neon"
#endif
#if defined(__ARM_FEATURE_SVE)
                                  " sve"
#endif
#if defined(__ARM_FEATURE_BF16)
                                  " arm-bf16"
#endif
      ;
  // Drop the leading space; "" when built for the baseline ISA only.
  return text[0] == ' ' ? text + 1 : text;
}

FA_CPU_END
