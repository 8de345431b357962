// Tests of the API core's information entry points: version, backends, devices, struct sizes,
// status strings, kernel names and the thread-local error text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "flashattn/flashattn.h"

namespace {

TEST(Info, VersionMatchesHeader) {
  const char* v = fa_version();
  ASSERT_NE(v, nullptr);
  const std::string want = std::to_string(FA_VERSION_MAJOR) + "." + std::to_string(FA_VERSION_MINOR) +
                           "." + std::to_string(FA_VERSION_PATCH);
  EXPECT_EQ(std::string(v), want);
}

TEST(Info, CompiledBackendsHaveCpu) {
  const uint32_t b = fa_compiled_backends();
  EXPECT_TRUE(b & FA_BACKEND_CPU);
  EXPECT_EQ(b & ~uint32_t(FA_BACKEND_CPU | FA_BACKEND_CUDA), 0u) << "unknown backend bits";
}

TEST(Info, CudaDeviceCount) {
  const int32_t n = fa_cuda_device_count();
  EXPECT_GE(n, 0);
  if (!(fa_compiled_backends() & FA_BACKEND_CUDA)) {
    EXPECT_EQ(n, 0) << "no CUDA backend, yet devices";
  }
}

TEST(Info, StructSizesMatchHeader) {
  EXPECT_EQ(fa_sizeof_fwd_params(), sizeof(fa_fwd_params));
  EXPECT_EQ(fa_sizeof_bwd_params(), sizeof(fa_bwd_params));
}

TEST(Info, StatusStrings) {
  for (fa_status s : {FA_STATUS_OK, FA_STATUS_INVALID_ARGUMENT, FA_STATUS_NOT_SUPPORTED,
                      FA_STATUS_DEVICE_ERROR, FA_STATUS_OUT_OF_MEMORY, FA_STATUS_INTERNAL_ERROR}) {
    const char* t = fa_status_string(s);
    ASSERT_NE(t, nullptr);
    EXPECT_GT(std::strlen(t), 0u) << "status " << int(s);
  }
  const char* unknown = fa_status_string(static_cast<fa_status>(1234));
  ASSERT_NE(unknown, nullptr);
}

// "<build>: <features>": the build of the CPU kernels in use, then what it was compiled for.
TEST(Info, CpuFeatures) {
  const char* f = fa_cpu_features();
  ASSERT_NE(f, nullptr);
  const std::string text(f);
  const size_t colon = text.find(": ");
  ASSERT_NE(colon, std::string::npos) << text;
  const std::string build = text.substr(0, colon);
  for (const char* name : {"native", "avx512bf16", "avx512", "avx2", "base"})
    if (build == name) return;
  ADD_FAILURE() << "unknown build '" << build << "' in '" << text << "'";
}

// A portable build runs the build FLASHATTN_CPU_ISA names when this CPU can run it (ctest runs
// the CPU suites once per build name: tests/CMakeLists.txt).
TEST(Info, CpuBuildFollowsRequest) {
  const char* want = std::getenv("FLASHATTN_CPU_ISA");
  if (want == nullptr) GTEST_SKIP() << "FLASHATTN_CPU_ISA is not set";
  const std::string text(fa_cpu_features());
  if (text.rfind("native:", 0) == 0) GTEST_SKIP() << "a native build has one build of the kernels";
  const std::string w(want);
  bool runs = w == "base";
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  runs = runs || (w == "avx2" && avx2) || (w == "avx512" && avx512) ||
         (w == "avx512bf16" && avx512 && __builtin_cpu_supports("avx512bf16"));
#endif
  if (!runs) GTEST_SKIP() << "this CPU cannot run the " << w << " build";
  EXPECT_EQ(text.substr(0, w.size() + 1), w + ":") << text;
}

// The compiled-kernel listing: empty without the CUDA backend, else every direction has an sm80 row
// (the portable path every head dim falls back to) and, for GPUs with less shared memory, the
// compact rows the full-size ones hand those to.
TEST(Info, CudaKernels) {
  const char* k = fa_cuda_kernels();
  ASSERT_NE(k, nullptr);
  const std::string table(k);
  if (!(fa_compiled_backends() & FA_BACKEND_CUDA)) {
    EXPECT_EQ(table, "");
    return;
  }
  EXPECT_NE(table.find("fwd sm80 bf16 head dim"), std::string::npos) << table;
  EXPECT_NE(table.find("bwd sm80 bf16 head dim"), std::string::npos) << table;
  EXPECT_NE(table.find("bwd sm80_compact bf16 head dim"), std::string::npos) << table;
  EXPECT_NE(table.find("falls back for: more shared memory per block than the device has"), std::string::npos)
      << table;
}

TEST(Info, DeviceInfoValidation) {
  EXPECT_EQ(fa_get_device_info(0, nullptr), FA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("info"), std::string::npos) << fa_last_error();

  fa_device_info info{};
  info.struct_size = sizeof(info) - 4;
  EXPECT_EQ(fa_get_device_info(0, &info), FA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("info.struct_size"), std::string::npos) << fa_last_error();

  info.struct_size = sizeof(info);
  EXPECT_NE(fa_get_device_info(-1, &info), FA_STATUS_OK);
  EXPECT_NE(std::string(fa_last_error()).find("device"), std::string::npos) << fa_last_error();

  const int32_t n = fa_cuda_device_count();
  EXPECT_NE(fa_get_device_info(n, &info), FA_STATUS_OK) << "device " << n << " of " << n;
  EXPECT_NE(std::string(fa_last_error()).find("device"), std::string::npos) << fa_last_error();
  for (int32_t d = 0; d < n; ++d) {
    info = fa_device_info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(fa_get_device_info(d, &info), FA_STATUS_OK) << fa_last_error();
    EXPECT_GE(info.cc_major, 8);
    EXPECT_GT(info.sm_count, 0);
    EXPECT_GT(info.total_memory, 0);
    EXPECT_GT(std::strlen(info.name), 0u);
  }
}

TEST(Info, LastErrorIsPerThread) {
  EXPECT_EQ(fa_fwd(nullptr, nullptr), FA_STATUS_INVALID_ARGUMENT);
  const std::string here = fa_last_error();
  EXPECT_NE(here.find("params"), std::string::npos) << here;
  std::string there = "unset";
  std::thread t([&] { there = fa_last_error(); });
  t.join();
  EXPECT_EQ(there, "") << "a fresh thread sees another thread's error";
  EXPECT_EQ(std::string(fa_last_error()), here) << "the error text changed without a call";
}

}  // namespace
