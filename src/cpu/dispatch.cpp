// CPU backend: the build of the vector kernels to run. A native build (CMake FA_NATIVE=ON, the
// default) compiles them once for the build machine ("native"); a portable x86-64 build
// compiles them for AVX-512 with BF16 dot products, for AVX-512 (F, BW, DQ, VL with AVX2 and
// FMA), for AVX2 with FMA, and for the x86-64 baseline, and takes the best one this CPU and its
// OS support, once per process. FLASHATTN_CPU_ISA=avx512bf16|avx512|avx2|base asks for another
// (tests, comparisons); a build this CPU cannot run, or an unknown name, is ignored. Forwards
// cpu_backend.h's entry points.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu/cpu_backend.h"

namespace fa::cpu {

// The builds compiled into this library (CMake defines FA_CPU_HAVE_<NAME> for each).
#define FA_CPU_DECLARE_BUILD(ns)                 \
  namespace ns {                                 \
  void flash_fwd_kernel(const Problem& p);       \
  void flash_bwd_kernel(const Problem& p);       \
  const char* kernel_features();                 \
  }
#if defined(FA_CPU_HAVE_AVX512BF16)
FA_CPU_DECLARE_BUILD(avx512bf16)
#endif
#if defined(FA_CPU_HAVE_AVX512)
FA_CPU_DECLARE_BUILD(avx512)
#endif
#if defined(FA_CPU_HAVE_AVX2)
FA_CPU_DECLARE_BUILD(avx2)
#endif
#if defined(FA_CPU_HAVE_BASE)
FA_CPU_DECLARE_BUILD(base)
#endif
#if defined(FA_CPU_HAVE_NATIVE)
FA_CPU_DECLARE_BUILD(native)
#endif
#undef FA_CPU_DECLARE_BUILD

namespace {

struct Build {
  const char* name;
  bool (*runs_here)();
  void (*fwd)(const Problem&);
  void (*bwd)(const Problem&);
  const char* (*features)();
};

bool always() { return true; }
#if defined(__x86_64__) && (defined(FA_CPU_HAVE_AVX512) || defined(FA_CPU_HAVE_AVX2))
// __builtin_cpu_supports also checks that the OS saves the vector state (XCR0).
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
bool has_avx512bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }
#endif

// Best first.
const Build kBuilds[] = {
#if defined(FA_CPU_HAVE_AVX512BF16)
    {"avx512bf16", &has_avx512bf16, &avx512bf16::flash_fwd_kernel, &avx512bf16::flash_bwd_kernel,
     &avx512bf16::kernel_features},
#endif
#if defined(FA_CPU_HAVE_AVX512)
    {"avx512", &has_avx512, &avx512::flash_fwd_kernel, &avx512::flash_bwd_kernel, &avx512::kernel_features},
#endif
#if defined(FA_CPU_HAVE_AVX2)
    {"avx2", &has_avx2, &avx2::flash_fwd_kernel, &avx2::flash_bwd_kernel, &avx2::kernel_features},
#endif
#if defined(FA_CPU_HAVE_BASE)
    {"base", &always, &base::flash_fwd_kernel, &base::flash_bwd_kernel, &base::kernel_features},
#endif
#if defined(FA_CPU_HAVE_NATIVE)
    {"native", &always, &native::flash_fwd_kernel, &native::flash_bwd_kernel, &native::kernel_features},
#endif
};

const Build& chosen() {
  static const Build& build = []() -> const Build& {
    const char* want = std::getenv("FLASHATTN_CPU_ISA");
    const Build* best = nullptr;
    for (const Build& b : kBuilds) {
      if (!b.runs_here()) continue;
      if (best == nullptr) best = &b;
      if (want != nullptr && std::strcmp(want, b.name) == 0) return b;
    }
    return *best;  // the last build (base or native) runs everywhere
  }();
  return build;
}

}  // namespace

void flash_fwd(const Problem& p) { chosen().fwd(p); }
void flash_bwd(const Problem& p) { chosen().bwd(p); }

const char* features() {
  static const std::string text = std::string(chosen().name) + ": " + chosen().features();
  return text.c_str();
}

}  // namespace fa::cpu
