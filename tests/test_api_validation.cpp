// Tests of the API core's validation: every rejected argument returns its status and a message
// naming the argument, through fa_can_implement_*, fa_fwd, fa_bwd and fa_bwd_workspace_size,
// never crashes, and leaves the outputs untouched. Also the edges that are valid.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace fat {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kHuge = std::numeric_limits<int64_t>::max() / 2;

Problem small_problem() {
  Problem p;
  p.name = "small";
  p.B = 2;
  p.Sq = 4;
  p.Sk = 5;
  p.Hq = 2;
  p.Hkv = 1;
  p.D = 8;
  p.Dv = 8;
  return p;
}

Problem small_varlen() {
  Problem p = small_problem();
  p.lens_q = {4, 1};
  p.lens_k = {2, 5};
  return p;
}

bool all_nan(const Stored& t) {
  for (float x : load(t))
    if (!std::isnan(x)) return false;
  return true;
}

// A mutation of valid params, and what it must produce.
struct Bad {
  std::string label;        // test name
  bool varlen;              // start from the varlen problem
  std::function<void(fa_fwd_params&)> fwd;   // applied to the forward params (also inside bwd)
  std::function<void(fa_bwd_params&)> bwd;   // backward-only mutation (forward entries skipped)
  fa_status status;
  std::string needle;  // the message must contain it
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.label; }

class Rejects : public testing::TestWithParam<Bad> {};

void expect_message(const char* entry, const std::string& needle) {
  const std::string msg = fa_last_error();
  EXPECT_NE(msg.find(needle), std::string::npos)
      << entry << ": message \"" << msg << "\" does not name \"" << needle << "\"";
}

TEST_P(Rejects, WithStatusAndMessage) {
  const Bad& bad = GetParam();
  const Problem p = bad.varlen ? small_varlen() : small_problem();
  std::mt19937_64 rng(test_seed());
  const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
  Call c(p, in, RunOpts{});
  // The backward needs a forward's LSE: give it finite values.
  for (float& l : c.lse) l = 1.f;

  if (bad.fwd) {
    fa_fwd_params f = c.fwd;
    bad.fwd(f);
    const fa_status can = fa_can_implement_fwd(&f);
    EXPECT_EQ(can, bad.status) << "fa_can_implement_fwd: " << fa_last_error();
    expect_message("fa_can_implement_fwd", bad.needle);
    EXPECT_EQ(fa_fwd_kernel_name(&f), nullptr);
    expect_message("fa_fwd_kernel_name", bad.needle);
    if (can != FA_STATUS_OK) {  // never run what validation let through by mistake
      EXPECT_EQ(fa_fwd(&f, nullptr), bad.status);
      expect_message("fa_fwd", bad.needle);
      EXPECT_TRUE(all_nan(c.o)) << "a rejected fa_fwd wrote O";
    }
  }

  fa_bwd_params b = c.bwd;
  b.fwd = c.fwd;
  if (bad.fwd) bad.fwd(b.fwd);
  if (bad.bwd) bad.bwd(b);
  const fa_status can = fa_can_implement_bwd(&b);
  EXPECT_EQ(can, bad.status) << "fa_can_implement_bwd: " << fa_last_error();
  expect_message("fa_can_implement_bwd", bad.needle);
  EXPECT_EQ(fa_bwd_kernel_name(&b), nullptr);
  expect_message("fa_bwd_kernel_name", bad.needle);
  size_t bytes = 12345;
  EXPECT_EQ(fa_bwd_workspace_size(&b, &bytes), bad.status);
  expect_message("fa_bwd_workspace_size", bad.needle);
  if (can != FA_STATUS_OK) {
    EXPECT_EQ(fa_bwd(&b, nullptr), bad.status);
    expect_message("fa_bwd", bad.needle);
    EXPECT_TRUE(all_nan(c.dq) && all_nan(c.dk) && all_nan(c.dv)) << "a rejected fa_bwd wrote a gradient";
  }
}

using F = fa_fwd_params;
using Bw = fa_bwd_params;
constexpr fa_status INV = FA_STATUS_INVALID_ARGUMENT;

std::vector<Bad> bad_cases() {
  std::vector<Bad> v;
  auto fwd = [&](std::string label, std::function<void(F&)> f, std::string needle, fa_status s = INV) {
    v.push_back({std::move(label), false, std::move(f), nullptr, s, std::move(needle)});
  };
  auto var = [&](std::string label, std::function<void(F&)> f, std::string needle) {
    v.push_back({std::move(label), true, std::move(f), nullptr, INV, std::move(needle)});
  };
  auto bwd = [&](std::string label, std::function<void(Bw&)> f, std::string needle) {
    v.push_back({std::move(label), false, nullptr, std::move(f), INV, std::move(needle)});
  };

  fwd("StructSizeSmaller", [](F& f) { f.struct_size -= 8; }, "struct_size");
  fwd("StructSizeLarger", [](F& f) { f.struct_size += 8; }, "struct_size");
  fwd("StructSizeZero", [](F& f) { f.struct_size = 0; }, "struct_size");
  bwd("BwdStructSize", [](Bw& b) { b.struct_size = sizeof(fa_bwd_params) - 8; }, "struct_size");

  fwd("NullQ", [](F& f) { f.q.data = nullptr; }, "q.data");
  fwd("NullK", [](F& f) { f.k.data = nullptr; }, "k.data");
  fwd("NullV", [](F& f) { f.v.data = nullptr; }, "v.data");
  fwd("NullO", [](F& f) { f.o.data = nullptr; }, "o.data");
  bwd("NullDout", [](Bw& b) { b.dout.data = nullptr; }, "dout.data");
  bwd("NullDq", [](Bw& b) { b.dq.data = nullptr; }, "dq.data");
  bwd("NullDk", [](Bw& b) { b.dk.data = nullptr; }, "dk.data");
  bwd("NullDv", [](Bw& b) { b.dv.data = nullptr; }, "dv.data");
  bwd("BwdWithoutLse", [](Bw& b) { b.fwd.lse = nullptr; }, "lse");

  fwd("DtypeUnknown", [](F& f) { f.dtype = 7; }, "dtype");
  fwd("DtypeNegative", [](F& f) { f.dtype = -1; }, "dtype");
  fwd("AlgorithmUnknown", [](F& f) { f.algorithm = 3; }, "algorithm");
  fwd("AlgorithmNegative", [](F& f) { f.algorithm = -1; }, "algorithm");
  fwd("DeviceNegative", [](F& f) { f.device = -2; }, "device");
  fwd("DeviceAbsent", [](F& f) { f.device = fa_cuda_device_count(); }, "device", FA_STATUS_NOT_SUPPORTED);

  fwd("BatchNegative", [](F& f) { f.batch = -1; }, "batch");
  fwd("SeqlenQNegative", [](F& f) { f.seqlen_q = -1; }, "seqlen_q");
  fwd("SeqlenKNegative", [](F& f) { f.seqlen_k = -3; }, "seqlen_k");
  fwd("HeadsQZero", [](F& f) { f.heads_q = 0; }, "heads_q");
  fwd("HeadsKvZero", [](F& f) { f.heads_kv = 0; }, "heads_kv");
  fwd("HeadsKvNegative", [](F& f) { f.heads_kv = -2; }, "heads_kv");
  fwd("HeadsNotMultiple", [](F& f) { f.heads_kv = 3; }, "heads_kv");
  fwd("HeadDimZero", [](F& f) { f.head_dim = 0; }, "head_dim");
  fwd("HeadDim257", [](F& f) { f.head_dim = 257; }, "head_dim");
  fwd("HeadDimVZero", [](F& f) { f.head_dim_v = 0; }, "head_dim_v");
  fwd("HeadDimV257", [](F& f) { f.head_dim_v = 257; }, "head_dim_v");

  fwd("QDimStride2", [](F& f) { f.q.dim_stride = 2; }, "q.dim_stride");
  fwd("KDimStride0", [](F& f) { f.k.dim_stride = 0; }, "k.dim_stride");
  fwd("VDimStrideNegative", [](F& f) { f.v.dim_stride = -1; }, "v.dim_stride");
  fwd("ODimStride2", [](F& f) { f.o.dim_stride = 2; }, "o.dim_stride");
  bwd("DoutDimStride", [](Bw& b) { b.dout.dim_stride = 2; }, "dout.dim_stride");
  bwd("DqDimStride", [](Bw& b) { b.dq.dim_stride = 3; }, "dq.dim_stride");
  bwd("DkDimStride", [](Bw& b) { b.dk.dim_stride = 0; }, "dk.dim_stride");
  bwd("DvDimStride", [](Bw& b) { b.dv.dim_stride = 2; }, "dv.dim_stride");

  fwd("QRowStrideNegative", [](F& f) { f.q.row_stride = -f.q.row_stride; }, "q: strides");
  fwd("KHeadStrideNegative", [](F& f) { f.k.head_stride = -1; }, "k: strides");
  fwd("VBatchStrideNegative", [](F& f) { f.v.batch_stride = -1; }, "v: strides");
  fwd("ORowStrideNegative", [](F& f) { f.o.row_stride = -8; }, "o: strides");
  bwd("DqRowStrideNegative", [](Bw& b) { b.dq.row_stride = -1; }, "dq: strides");

  fwd("QRowStrideOverflow", [](F& f) { f.q.row_stride = kHuge; }, "q: sizes and strides overflow");
  fwd("KBatchStrideOverflow", [](F& f) { f.k.batch_stride = kHuge; }, "k: sizes and strides overflow");
  fwd("VRowStrideOverflow", [](F& f) { f.v.row_stride = std::numeric_limits<int64_t>::max(); },
      "v: sizes and strides overflow");
  // The last element fits in int64 elements but not in int64 bytes.
  fwd("OByteOffsetOverflow", [](F& f) { f.o.batch_stride = std::numeric_limits<int64_t>::max() / 3; },
      "o: sizes and strides overflow");
  fwd("SeqlenOverflow",
      [](F& f) {
        f.seqlen_q = kHuge;
        f.seqlen_k = kHuge;
      },
      "overflow");
  // Zero strides (broadcast) keep every tensor in range; only the LSE's size overflows.
  fwd("LseSizeOverflow",
      [](F& f) {
        f.seqlen_q = kHuge;
        for (fa_tensor* t : {&f.q, &f.o}) t->batch_stride = t->row_stride = t->head_stride = 0;
      },
      "lse");
  bwd("DkStrideOverflow", [](Bw& b) { b.dk.row_stride = kHuge; }, "dk: sizes and strides overflow");

  fwd("ScaleZero", [](F& f) { f.scale = 0.f; }, "scale");
  fwd("ScaleNegative", [](F& f) { f.scale = -0.5f; }, "scale");
  fwd("ScaleNaN", [](F& f) { f.scale = kNaN; }, "scale");
  fwd("ScaleInf", [](F& f) { f.scale = kInf; }, "scale");
  fwd("SoftcapNegative", [](F& f) { f.softcap = -1.f; }, "softcap");
  fwd("SoftcapNaN", [](F& f) { f.softcap = kNaN; }, "softcap");
  fwd("SoftcapInf", [](F& f) { f.softcap = kInf; }, "softcap");
  fwd("WindowLeftBelowMinus1", [](F& f) { f.window_left = -2; }, "window_left");
  fwd("WindowRightBelowMinus1", [](F& f) { f.window_right = -7; }, "window_right");
  fwd("NumThreadsNegative", [](F& f) { f.num_threads = -1; }, "num_threads");

  fwd("CuSeqlensQOnly",
      [](F& f) {
        static const int32_t cu[3] = {0, 4, 8};
        f.cu_seqlens_q = cu;
      },
      "cu_seqlens");
  fwd("CuSeqlensKOnly",
      [](F& f) {
        static const int32_t cu[3] = {0, 5, 10};
        f.cu_seqlens_k = cu;
      },
      "cu_seqlens");
  var("CuSeqlensQNotFromZero",
      [](F& f) {
        static const int32_t cu[3] = {1, 4, 5};
        f.cu_seqlens_q = cu;
      },
      "cu_seqlens_q");
  var("CuSeqlensKNotFromZero",
      [](F& f) {
        static const int32_t cu[3] = {2, 2, 7};
        f.cu_seqlens_k = cu;
      },
      "cu_seqlens_k");
  var("CuSeqlensQDecreasing",
      [](F& f) {
        static const int32_t dec[3] = {0, 4, 3};
        f.cu_seqlens_q = dec;
        f.total_q = 3;
      },
      "cu_seqlens_q");
  var("CuSeqlensKDecreasing",
      [](F& f) {
        static const int32_t dec[3] = {0, 5, 4};
        f.cu_seqlens_k = dec;
        f.total_k = 4;
      },
      "cu_seqlens_k");
  var("CuSeqlensQEndNotTotal", [](F& f) { f.total_q -= 1; }, "cu_seqlens_q");
  var("CuSeqlensKEndNotTotal", [](F& f) { f.total_k += 1; }, "cu_seqlens_k");
  var("SequenceLongerThanSeqlenQ", [](F& f) { f.seqlen_q = 3; }, "seqlen_q");
  var("SequenceLongerThanSeqlenK", [](F& f) { f.seqlen_k = 4; }, "seqlen_k");
  var("TotalQNegative", [](F& f) { f.total_q = -1; }, "total_q");
  var("TotalKNegative", [](F& f) { f.total_k = -1; }, "total_k");
  var("VarlenQRowStrideOverflow", [](F& f) { f.q.row_stride = kHuge; }, "q: sizes and strides overflow");
  return v;
}

INSTANTIATE_TEST_SUITE_P(Api, Rejects, testing::ValuesIn(bad_cases()),
                         [](const testing::TestParamInfo<Bad>& i) { return i.param.label; });

TEST(Api, NullParams) {
  EXPECT_EQ(fa_can_implement_fwd(nullptr), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_can_implement_fwd", "params");
  EXPECT_EQ(fa_fwd(nullptr, nullptr), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_fwd", "params");
  EXPECT_EQ(fa_fwd_kernel_name(nullptr), nullptr);
  expect_message("fa_fwd_kernel_name", "params");
  EXPECT_EQ(fa_bwd_kernel_name(nullptr), nullptr);
  expect_message("fa_bwd_kernel_name", "params");
  EXPECT_EQ(fa_can_implement_bwd(nullptr), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_can_implement_bwd", "params");
  EXPECT_EQ(fa_bwd(nullptr, nullptr), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_bwd", "params");
  size_t bytes = 0;
  EXPECT_EQ(fa_bwd_workspace_size(nullptr, &bytes), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_bwd_workspace_size", "params");
}

TEST(Api, WorkspaceSizeNeedsOutPointer) {
  const Problem p = small_problem();
  std::mt19937_64 rng(test_seed());
  Call c(p, random_inputs(p, FA_DTYPE_FP32, rng), RunOpts{});
  c.bwd.fwd = c.fwd;
  EXPECT_EQ(fa_bwd_workspace_size(&c.bwd, nullptr), FA_STATUS_INVALID_ARGUMENT);
  expect_message("fa_bwd_workspace_size", "bytes");
  size_t bytes = 12345;
  EXPECT_EQ(fa_bwd_workspace_size(&c.bwd, &bytes), FA_STATUS_OK) << fa_last_error();
  EXPECT_EQ(bytes, 0u) << "the CPU backend needs no workspace";
}

TEST(Api, ValidParamsAccepted) {
  for (const Problem& p : {small_problem(), small_varlen()}) {
    for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16, FA_DTYPE_FP16}) {
      std::mt19937_64 rng(test_seed());
      Call c(p, random_inputs(p, dt, rng), RunOpts{dt});
      EXPECT_EQ(fa_can_implement_fwd(&c.fwd), FA_STATUS_OK) << fa_last_error();
      c.bwd.fwd = c.fwd;
      EXPECT_EQ(fa_can_implement_bwd(&c.bwd), FA_STATUS_OK) << fa_last_error();
    }
  }
}

TEST(Api, KernelNames) {
  const Problem p = small_problem();
  std::mt19937_64 rng(test_seed());
  Call c(p, random_inputs(p, FA_DTYPE_FP32, rng), RunOpts{});
  const struct {
    fa_algorithm alg;
    const char* name;
  } want[] = {{FA_ALGORITHM_AUTO, "cpu_flash"}, {FA_ALGORITHM_FLASH, "cpu_flash"},
              {FA_ALGORITHM_REFERENCE, "cpu_reference"}};
  for (const auto& w : want) {
    c.fwd.algorithm = w.alg;
    const char* n = fa_fwd_kernel_name(&c.fwd);
    ASSERT_NE(n, nullptr) << fa_last_error();
    EXPECT_STREQ(n, w.name) << "algorithm " << w.alg;
    fa_bwd_params b = c.bwd;
    b.fwd = c.fwd;
    const char* nb = fa_bwd_kernel_name(&b);
    ASSERT_NE(nb, nullptr) << fa_last_error();
    EXPECT_STREQ(nb, w.name) << "backward, algorithm " << w.alg;
  }
}

// The forward's LSE output is optional.
TEST(Api, ForwardWithoutLse) {
  const Problem p = small_problem();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Inputs in = random_inputs(p, FA_DTYPE_FP32, rng);
  for (fa_algorithm alg : {FA_ALGORITHM_FLASH, FA_ALGORITHM_REFERENCE}) {
    RunOpts o;
    o.algorithm = alg;
    const Outputs with = run(p, in, o, false);
    Call c(p, in, o);
    c.fwd.lse = nullptr;
    ASSERT_EQ(c.run_fwd(), FA_STATUS_OK) << fa_last_error();
    EXPECT_TRUE(bitwise_equal(load(c.o), with.o)) << "O depends on whether LSE is written";
  }
}

// Empty problems are valid and touch nothing: batch 0 (even with null data), seqlen_q 0.
TEST(Api, EmptyProblems) {
  Problem p = small_problem();
  std::mt19937_64 rng(test_seed());
  for (fa_algorithm alg : {FA_ALGORITHM_FLASH, FA_ALGORITHM_REFERENCE}) {
    RunOpts o;
    o.algorithm = alg;
    Call c(p, random_inputs(p, FA_DTYPE_FP32, rng), o);
    fa_fwd_params f = c.fwd;
    f.batch = 0;
    f.q.data = f.k.data = f.v.data = f.o.data = nullptr;
    f.lse = nullptr;
    EXPECT_EQ(fa_fwd(&f, nullptr), FA_STATUS_OK) << fa_last_error();
    fa_bwd_params b = c.bwd;
    b.fwd = f;
    b.dout.data = b.dq.data = b.dk.data = b.dv.data = nullptr;
    EXPECT_EQ(fa_bwd(&b, nullptr), FA_STATUS_OK) << fa_last_error();

    f = c.fwd;
    f.seqlen_q = 0;
    EXPECT_EQ(fa_fwd(&f, nullptr), FA_STATUS_OK) << fa_last_error();
    EXPECT_TRUE(all_nan(c.o)) << "seqlen_q = 0 wrote O";
  }
}

}  // namespace
}  // namespace fat
