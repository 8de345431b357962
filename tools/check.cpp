// Tools: `flashattn check`: random shapes, the FlashAttention path against the reference.
// One line per case; the tolerance is DESIGN.md's correctness rule; exit 1 on any failure.
// Talks to the library only through the C ABI (attention.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention.h"
#include "commands.h"
#include "common.h"

namespace cli {

namespace {

// Work per case is kept under this many multiply-adds (B*Hq*Sq*Sk*(D+Dv)) so the whole
// default sweep runs in a few seconds on two cores (the reference is the slow part).
constexpr double kMaxCaseWork = 1.5e8;

struct Case {
  int index;
  int device;
  fa_dtype dtype;
  Shape shape;
  uint64_t seed;
};

int64_t pick_len(Rng& rng) {
  static const std::vector<int64_t> awkward = {1, 17, 64, 113, 128, 203, 256, 1023, 1024};
  return rng.uniform() < 0.6 ? rng.pick(awkward) : rng.range(1, 300);
}

Case make_case(int index, uint64_t seed, const std::vector<int>& devices,
               const std::vector<fa_dtype>& dtypes) {
  Rng rng(seed * 1000003ull + uint64_t(index));
  Case c{index, rng.pick(devices), rng.pick(dtypes), Shape{}, rng.next()};
  if (c.device != FA_DEVICE_CPU && c.dtype == FA_DTYPE_FP32) c.dtype = FA_DTYPE_BF16;  // GPU: 16-bit only
  Shape& s = c.shape;
  s.batch = rng.range(1, 3);
  s.seqlen_q = pick_len(rng);
  s.seqlen_k = rng.uniform() < 0.4 ? s.seqlen_q : pick_len(rng);
  s.heads_kv = rng.pick(std::vector<int64_t>{1, 2, 3});
  s.heads_q = s.heads_kv * rng.pick(std::vector<int64_t>{1, 1, 2, 4});
  s.head_dim = rng.pick(std::vector<int64_t>{32, 40, 64, 64, 72, 96, 128, 128, 192, 256});
  s.head_dim_v = rng.uniform() < 0.15 ? rng.pick(std::vector<int64_t>{32, 64, 128}) : s.head_dim;
  s.causal = rng.uniform() < 0.4;
  if (rng.uniform() < 0.15) {
    s.window_left = rng.range(0, 64);
    s.window_right = s.causal ? -1 : rng.range(-1, 32);
  }
  if (rng.uniform() < 0.15) s.softcap = rng.uniform() < 0.5 ? 5.f : 30.f;
  if (rng.uniform() < 0.2) {  // varlen, zero-length sequences included
    for (int64_t b = 0; b < s.batch; ++b) {
      s.lens_q.push_back(int32_t(rng.uniform() < 0.15 ? 0 : rng.range(1, s.seqlen_q)));
      s.lens_k.push_back(int32_t(rng.uniform() < 0.15 ? 0 : rng.range(1, s.seqlen_k)));
    }
    s.seqlen_q = *std::max_element(s.lens_q.begin(), s.lens_q.end());
    s.seqlen_k = *std::max_element(s.lens_k.begin(), s.lens_k.end());
  } else {
    s.bhsd = rng.uniform() < 0.25;
  }
  // Keep the case small: fewer heads, then a smaller batch, then shorter sequences.
  auto work = [&] {
    return double(s.rows_q() > 0 ? s.rows_q() : 1) * double(std::max<int64_t>(s.seqlen_k, 1)) *
           double(s.heads_q) * double(s.head_dim + s.head_dim_v);
  };
  while (work() > kMaxCaseWork && s.heads_q > s.heads_kv) s.heads_q -= s.heads_kv;
  while (work() > kMaxCaseWork && s.heads_kv > 1) s.heads_q = --s.heads_kv;
  while (work() > kMaxCaseWork && !s.varlen() && s.batch > 1) --s.batch;
  while (work() > kMaxCaseWork && !s.varlen() && s.seqlen_q > 1 && s.seqlen_k > 1) {
    s.seqlen_q = (s.seqlen_q + 1) / 2;
    s.seqlen_k = (s.seqlen_k + 1) / 2;
  }
  return c;
}

struct Verdict {
  double err = 0, tol = 0;
  const char* name = "";
  bool pass() const { return err <= tol; }  // NaN errors arrive as +inf and fail
  double ratio() const { return tol > 0 ? err / tol : (err > 0 ? INFINITY : 0); }
};

// DESIGN.md: fp32 against fp64: err <= 1e-5 max|ref|; bf16/fp16: err <= k*err_low + atol,
// atol the rounding step at max|ref|. `magnitude` is max|ref| over the direction's outputs
// (O; or dQ, dK and dV together), so a gradient that cancels to exactly zero (Sk = 1) is
// judged on the scale of the terms that cancel, not held to a tolerance of zero.
Verdict judge(const char* name, fa_dtype t, double factor, double magnitude, const std::vector<float>& impl,
              const std::vector<float>& hi, const std::vector<float>* low) {
  Verdict v;
  v.name = name;
  v.err = max_abs_diff(impl, hi);
  const double ref_max = magnitude;
  if (t == FA_DTYPE_FP32) v.tol = 1e-5 * ref_max;
  else v.tol = factor * max_abs_diff(*low, hi) + ulp_at(t, ref_max);
  return v;
}

// LSE is fp32 in every dtype: within 1e-5 of its magnitude (and k*err_low for 16-bit inputs).
Verdict judge_lse(const std::vector<float>& impl, const std::vector<float>& hi, const std::vector<float>* low) {
  Verdict v;
  v.name = "lse";
  v.err = max_abs_diff(impl, hi);
  v.tol = 1e-5 * std::max(1.0, max_abs(hi)) + (low ? 2 * max_abs_diff(*low, hi) : 0);
  return v;
}

// Runs one algorithm on one device: forward, then backward. Empty error on success.
std::string run(const Case& c, fa_dtype t, int device, fa_algorithm alg, const Inputs& in, int threads,
                Outputs* out, bool* unsupported) {
  Attention a(c.shape, t, device);
  if (!a.ok()) return a.error();
  a.threads = threads;
  a.set_inputs(in);
  if (!a.alloc_outputs()) return a.error();
  const fa_fwd_params fp = a.fwd_params(alg);
  const fa_bwd_params bp = a.bwd_params(alg);
  for (fa_status s : {fa_can_implement_fwd(&fp), fa_can_implement_bwd(&bp)})
    if (s != FA_STATUS_OK) {
      if (unsupported) *unsupported = s == FA_STATUS_NOT_SUPPORTED;
      return std::string(fa_status_string(s)) + ": " + fa_last_error();
    }
  if (fa_status s = a.fwd(alg); s != FA_STATUS_OK) return std::string("fwd: ") + fa_last_error();
  if (fa_status s = a.bwd(alg); s != FA_STATUS_OK) return std::string("bwd: ") + fa_last_error();
  *out = a.outputs();
  return "";
}

}  // namespace

int check_main(int argc, char** argv) {
  Args args("check",
            "Random shapes (awkward lengths, GQA, causal, windows, softcap, varlen, BHSD strides):\n"
            "the FlashAttention path against the reference on the same rounded inputs, forward\n"
            "and backward. fp32: err <= 1e-5 max|ref|; bf16/fp16: err <= 2 err_low + atol (3x for\n"
            "dQ, dK, dV), err_low being the reference's own error in the input precision.\n"
            "Exit status 1 if any case fails.",
            {{"cases", "N", "number of random cases (default 40)"},
             {"seed", "S", "random seed (default: from the clock; printed)"},
             {"device", "DEV", "cpu, cuda or all (default: all present)"},
             {"dtype", "LIST", "dtypes to draw from (default fp32,bf16,fp16; cuda: bf16,fp16)"},
             {"only", "K", "run case K of the seed alone"},
             {"threads", "N", "CPU threads (default: all cores)"}},
            argc, argv);
  const int cases = int(args.integer("cases", 40));
  const uint64_t seed = uint64_t(args.integer("seed", int64_t(seed_from_time())));
  const int only = int(args.integer("only", 0));
  const int threads = int(args.integer("threads", 0));
  if (cases < 1) args.usage_error("--cases must be at least 1");
  if (only < 0 || only > cases) args.usage_error("--only must be within 1..--cases");

  std::vector<int> devices;
  const std::string dev = args.str("device", "all");
  const int gpus = fa_cuda_device_count();
  if (dev == "cpu" || dev == "all") devices.push_back(FA_DEVICE_CPU);
  if (dev == "cuda" || (dev == "all" && gpus > 0)) {
    if (gpus == 0) {
      std::fprintf(stderr, "flashattn check: no CUDA device%s\n",
                   (fa_compiled_backends() & FA_BACKEND_CUDA) ? "" : " (CUDA not compiled in)");
      return kExitFail;
    }
    devices.push_back(0);
  }
  if (devices.empty()) args.usage_error("--device must be cpu, cuda or all, not '" + dev + "'");
  std::vector<fa_dtype> dtypes;
  for (const std::string& s : args.str_list("dtype", {"fp32", "bf16", "fp16"})) {
    fa_dtype t;
    if (!parse_dtype(s, &t)) args.usage_error("unknown dtype '" + s + "'");
    dtypes.push_back(t);
  }

  std::printf("flashattn check: %d case%s, seed %llu\n", only ? 1 : cases, cases == 1 ? "" : "s",
              static_cast<unsigned long long>(seed));
  std::printf("%4s  %-4s  %-4s  %-38s  %-30s  %8s %8s  %-3s %8s %8s  %s\n", "case", "dev", "type", "shape",
              "features", "fwd err", "tol", "", "bwd err", "tol", "result");
  int passed = 0, failed = 0, skipped = 0;
  const double t0 = now_seconds();
  for (int i = 1; i <= cases; ++i) {
    if (only && i != only) continue;
    const Case c = make_case(i, seed, devices, dtypes);
    const Inputs in = random_inputs(c.shape, c.dtype, c.seed);
    const bool low_precision = c.dtype != FA_DTYPE_FP32;
    Outputs hi, low, impl;
    std::string err = run(c, FA_DTYPE_FP32, FA_DEVICE_CPU, FA_ALGORITHM_REFERENCE, in, threads, &hi, nullptr);
    if (err.empty() && low_precision)
      err = run(c, c.dtype, FA_DEVICE_CPU, FA_ALGORITHM_REFERENCE, in, threads, &low, nullptr);
    if (!err.empty()) err = "reference: " + err;
    bool unsupported = false;
    if (err.empty()) err = run(c, c.dtype, c.device, FA_ALGORITHM_FLASH, in, threads, &impl, &unsupported);

    std::string line = fmt("%4d  %-4s  %-4s  %-38s  %-30s  ", i, c.device == FA_DEVICE_CPU ? "cpu" : "cuda",
                           dtype_name(c.dtype), c.shape.dims().c_str(), c.shape.features().c_str());
    if (!err.empty()) {
      ++(unsupported ? skipped : failed);
      std::printf("%s%s (%s)\n", line.c_str(), unsupported ? "SKIP" : "FAIL", err.c_str());
      continue;
    }
    const Verdict o = judge("o", c.dtype, 2, max_abs(hi.o), impl.o, hi.o, low_precision ? &low.o : nullptr);
    const double grads = std::max({max_abs(hi.dq), max_abs(hi.dk), max_abs(hi.dv)});
    const Verdict lse = judge_lse(impl.lse, hi.lse, low_precision ? &low.lse : nullptr);
    Verdict worst;
    for (const Verdict& v : {judge("dq", c.dtype, 3, grads, impl.dq, hi.dq, low_precision ? &low.dq : nullptr),
                             judge("dk", c.dtype, 3, grads, impl.dk, hi.dk, low_precision ? &low.dk : nullptr),
                             judge("dv", c.dtype, 3, grads, impl.dv, hi.dv, low_precision ? &low.dv : nullptr)})
      if (v.ratio() > worst.ratio() || !*worst.name) worst = v;
    const bool pass = o.pass() && lse.pass() && worst.pass();
    ++(pass ? passed : failed);
    std::printf("%s%8.1e %8.1e  %-3s %8.1e %8.1e  %s%s\n", line.c_str(), o.err, o.tol, worst.name, worst.err,
                worst.tol, pass ? "PASS" : "FAIL",
                lse.pass() ? "" : fmt(" (lse err %.1e > %.1e)", lse.err, lse.tol).c_str());
    std::fflush(stdout);
  }
  std::printf("\n%d passed, %d failed, %d skipped (not supported) in %.1f s; seed %llu\n", passed, failed,
              skipped, now_seconds() - t0, static_cast<unsigned long long>(seed));
  if (failed) std::printf("rerun a case alone with: flashattn check --seed %llu --only K\n",
                          static_cast<unsigned long long>(seed));
  return failed ? kExitFail : 0;
}

}  // namespace cli
