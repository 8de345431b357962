// Tools: `flashattn info`: version, compiled backends and kernels, devices, CPU model and features.
// Reads everything through the C ABI, /proc/cpuinfo and the CUDA runtime.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "common.h"

namespace cli {

int info_main(int argc, char** argv) {
  Args args("info", "Prints the library version, its compiled backends, the CUDA devices it sees,\n"
                    "the CPU model and the CPU vector features the CPU backend uses.",
            {}, argc, argv);
  (void)args;
  const uint32_t backends = fa_compiled_backends();
  std::printf("flashattn %s\n", fa_version());
  std::printf("backends:   %s%s\n", (backends & FA_BACKEND_CPU) ? "cpu" : "",
              (backends & FA_BACKEND_CUDA) ? " cuda" : "");
  std::printf("cpu:        %s, %d cores\n", cpu_model().c_str(), cpu_cores());
  std::printf("cpu vector: %s\n", fa_cpu_features());
  if (!(backends & FA_BACKEND_CUDA)) {
    std::printf("cuda:       not compiled in\n");
    return 0;
  }
  std::printf("cuda kernels (dispatch takes the first that runs a problem):\n");
  for (const char* line = fa_cuda_kernels(); *line != '\0';) {
    const char* end = std::strchr(line, '\n');
    const int len = end ? static_cast<int>(end - line) : static_cast<int>(std::strlen(line));
    std::printf("  %.*s\n", len, line);
    line += end ? len + 1 : len;
  }
  const int n = fa_cuda_device_count();
  std::printf("cuda:       %d device%s\n", n, n == 1 ? "" : "s");
  for (int d = 0; d < n; ++d) {
    fa_device_info info{};
    info.struct_size = sizeof info;
    if (!ok(fa_get_device_info(d, &info), "fa_get_device_info")) return kExitFail;
    std::printf("  %d: %s, sm_%d%d, %d SMs, %.1f GiB, %lld KiB shared memory per block\n", d, info.name,
                info.cc_major, info.cc_minor, info.sm_count, info.total_memory / (1024.0 * 1024 * 1024),
                static_cast<long long>(info.smem_per_block / 1024));
  }
  return 0;
}

}  // namespace cli
