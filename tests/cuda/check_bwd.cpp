// Tests, GPU: the CUDA backward (every dispatch path: sm80, sm90) against the CPU reference, C ABI only.
// Modes: `check` (awkward shapes x features x dtypes, canaries, NaN poison), `determinism [hdim]`,
// `small` (a short run for compute-sanitizer), `bench [hdim]` (the ANCHORS grid, TFLOP/s),
// `sm90` (shapes the Hopper path takes, failing unless fa_bwd_kernel_name says "sm90"),
// `bigbatch` (B·H > 65535 CTAs and heads), `bigoffset` (batch stride 2^31 + 1024 elements).
#include <cuda_runtime.h>  // templated cudaMalloc for common.h

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "flashattn/flashattn.h"

using namespace gpucheck;

namespace {

#ifndef FA_AWKWARD_SHAPES_FILE
#define FA_AWKWARD_SHAPES_FILE "tests/awkward_shapes.txt"
#endif

enum class Layout { bshd, bhsd, padded };
const char* layout_name(Layout l) { return l == Layout::bshd ? "bshd" : l == Layout::bhsd ? "bhsd" : "padded"; }

struct Case {
  std::string name;
  int64_t B, Sq, Sk, Hq, Hkv, D, Dv;
  std::vector<int32_t> lens_q, lens_k;  // varlen when non-empty
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0.f;
  bool deterministic = false;
  Layout layout = Layout::bshd;
  bool own_workspace = false;
  // Added to every q and taken from every k (then rounded to the dtype): the scores, and with
  // them each row's LSE, lie far below zero (−shift²·D·scale).
  float shift = 0.f;
  const char* expect_kernel = nullptr;  // when set, fa_bwd_kernel_name must say this
  bool varlen() const { return !lens_q.empty(); }
  int64_t rows_q() const { return varlen() ? total(lens_q) : B * Sq; }
  int64_t rows_k() const { return varlen() ? total(lens_k) : B * Sk; }
  static int64_t total(const std::vector<int32_t>& l) {
    int64_t t = 0;
    for (int32_t x : l) t += x;
    return t;
  }
  std::vector<int32_t> cu(const std::vector<int32_t>& l) const {
    std::vector<int32_t> c(1, 0);
    for (int32_t x : l) c.push_back(c.back() + x);
    return c;
  }
};

// Strides of a [B, S, H, D] tensor (varlen: B = 1, S = total rows) in a layout.
struct Strided {
  int64_t bs, rs, hs, count;
};
Strided strides_of(Layout l, int64_t B, int64_t S, int64_t H, int64_t D) {
  Strided s{};
  if (l == Layout::bshd) {
    s.hs = D, s.rs = H * D, s.bs = S * H * D;
  } else if (l == Layout::bhsd) {
    s.rs = D, s.hs = S * D, s.bs = H * S * D;
  } else {
    const int64_t dp = (D + 8 + 7) / 8 * 8;
    s.hs = dp, s.rs = H * dp + 8, s.bs = S * s.rs + 16;
  }
  s.count = (B - 1) * s.bs + (S - 1) * s.rs + (H - 1) * s.hs + D;
  if (B == 0 || S == 0) s.count = 0;
  return s;
}

// A device tensor whose logical values are [B·S][H][D] in host order.
struct DevTensor {
  Strided st{};
  int64_t B = 0, S = 0, H = 0, D = 0;
  DeviceHalf buf;
  fa_tensor view() const { return fa_tensor{buf.data(), st.bs, st.rs, st.hs, 1}; }
  int64_t off(int64_t row, int64_t h, int64_t d) const {
    const int64_t b = row / S, s = row % S;
    return b * st.bs + s * st.rs + h * st.hs + d;
  }
  void make(Layout l, int64_t b, int64_t s, int64_t h, int64_t d, fa_dtype dt, const std::vector<float>* values) {
    B = b, S = s, H = h, D = d;
    st = strides_of(l, B, S, H, D);
    buf.alloc(size_t(st.count), 0xFFFF);  // NaN in bf16 and fp16
    if (!values) return;
    std::vector<uint16_t> img(size_t(st.count), 0xFFFF);
    for (int64_t r = 0; r < B * S; ++r)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < D; ++j) img[size_t(off(r, i, j))] = to_half(dt, (*values)[size_t((r * H + i) * D + j)]);
    if (!img.empty()) buf.upload(img);
  }
  // Logical values; `untouched` false if any element outside the logical ones changed.
  std::vector<float> read(fa_dtype dt, bool* untouched) const {
    const std::vector<uint16_t> all = buf.download_all();
    std::vector<char> logical(all.size(), 0);
    std::vector<float> out(size_t(B * S * H * D));
    for (int64_t r = 0; r < B * S; ++r)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < D; ++j) {
          const size_t o = size_t(off(r, i, j)) + DeviceHalf::kMargin;
          logical[o] = 1;
          out[size_t((r * H + i) * D + j)] = from_half(dt, all[o]);
        }
    *untouched = true;
    for (size_t i = 0; i < all.size(); ++i)
      if (!logical[i] && all[i] != 0xFFFF) *untouched = false;
    return out;
  }
};

std::vector<float> randn(size_t n, fa_dtype dt, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = round_half(dt, nd(rng));
  return v;
}

fa_tensor host_view(std::vector<float>& v, int64_t S, int64_t H, int64_t D) {
  return fa_tensor{v.data(), S * H * D, H * D, D, 1};
}

void set_common(fa_fwd_params& f, const Case& c) {
  f.struct_size = sizeof(fa_fwd_params);
  f.batch = c.B, f.seqlen_q = c.Sq, f.seqlen_k = c.Sk, f.heads_q = c.Hq, f.heads_kv = c.Hkv;
  f.head_dim = c.D, f.head_dim_v = c.Dv;
  f.scale = 1.f / std::sqrt(float(c.D));
  f.softcap = c.softcap;
  f.causal = c.causal;
  f.window_left = c.wl, f.window_right = c.wr;
  f.deterministic = c.deterministic;
  f.total_q = c.rows_q(), f.total_k = c.rows_k();
}

struct Grads {
  std::vector<float> dq, dk, dv;
};

// CPU reference (fp64 accumulation) in dtype `dt` storage (FP32 = ref_hi).
Grads cpu_bwd(const Case& c, fa_dtype dt, std::vector<float> q, std::vector<float> k, std::vector<float> v,
              std::vector<float> o, std::vector<float> lse, std::vector<float> dout) {
  const bool vl = c.varlen();
  const int64_t Bq = vl ? 1 : c.B, Sq = vl ? c.rows_q() : c.Sq, Sk = vl ? c.rows_k() : c.Sk;
  std::vector<int32_t> cuq = c.cu(c.lens_q), cuk = c.cu(c.lens_k);
  Grads g;
  g.dq.assign(size_t(Bq * Sq * c.Hq * c.D), NAN);
  g.dk.assign(size_t(Bq * Sk * c.Hkv * c.D), NAN);
  g.dv.assign(size_t(Bq * Sk * c.Hkv * c.Dv), NAN);
  // 16-bit storage: convert the fp32 host arrays to packed halves.
  auto pack = [&](std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = to_half(dt, x[i]);
    return h;
  };
  std::vector<uint16_t> hq, hk, hv, ho, hdo, hdq(g.dq.size()), hdk(g.dk.size()), hdv(g.dv.size());
  fa_bwd_params bp{};
  bp.struct_size = sizeof(fa_bwd_params);
  fa_fwd_params& f = bp.fwd;
  set_common(f, c);
  f.device = FA_DEVICE_CPU, f.dtype = dt, f.algorithm = FA_ALGORITHM_REFERENCE;
  if (vl) f.cu_seqlens_q = cuq.data(), f.cu_seqlens_k = cuk.data();
  auto view = [&](void* p, int64_t S, int64_t H, int64_t D) { return fa_tensor{p, S * H * D, H * D, D, 1}; };
  if (dt == FA_DTYPE_FP32) {
    f.q = view(q.data(), Sq, c.Hq, c.D), f.k = view(k.data(), Sk, c.Hkv, c.D), f.v = view(v.data(), Sk, c.Hkv, c.Dv);
    f.o = view(o.data(), Sq, c.Hq, c.Dv), bp.dout = view(dout.data(), Sq, c.Hq, c.Dv);
    bp.dq = view(g.dq.data(), Sq, c.Hq, c.D), bp.dk = view(g.dk.data(), Sk, c.Hkv, c.D);
    bp.dv = view(g.dv.data(), Sk, c.Hkv, c.Dv);
  } else {
    hq = pack(q), hk = pack(k), hv = pack(v), ho = pack(o), hdo = pack(dout);
    f.q = view(hq.data(), Sq, c.Hq, c.D), f.k = view(hk.data(), Sk, c.Hkv, c.D), f.v = view(hv.data(), Sk, c.Hkv, c.Dv);
    f.o = view(ho.data(), Sq, c.Hq, c.Dv), bp.dout = view(hdo.data(), Sq, c.Hq, c.Dv);
    bp.dq = view(hdq.data(), Sq, c.Hq, c.D), bp.dk = view(hdk.data(), Sk, c.Hkv, c.D);
    bp.dv = view(hdv.data(), Sk, c.Hkv, c.Dv);
  }
  f.lse = lse.data();
  if (fa_bwd(&bp, nullptr) != FA_STATUS_OK) {
    std::fprintf(stderr, "CPU reference backward failed: %s\n", fa_last_error());
    std::exit(2);
  }
  if (dt != FA_DTYPE_FP32) {
    for (size_t i = 0; i < hdq.size(); ++i) g.dq[i] = from_half(dt, hdq[i]);
    for (size_t i = 0; i < hdk.size(); ++i) g.dk[i] = from_half(dt, hdk[i]);
    for (size_t i = 0; i < hdv.size(); ++i) g.dv[i] = from_half(dt, hdv[i]);
  }
  return g;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::fabs(x)));
  return m;
}
double max_err(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  }
  return m;
}

// DESIGN.md's rule for gradients: err_impl <= 3·err_low + atol.
bool close(const char* what, fa_dtype dt, const std::vector<float>& impl, const std::vector<float>& low,
           const std::vector<float>& hi, std::string* msg) {
  // atol: the output's rounding step, floored at 1e-5: gradients that cancel to ~0 (a single
  // visible key makes dS = P(dP - D) vanish) keep the fp32 rounding of dP - D, ~1e-7 x |dP|.
  const double ei = max_err(impl, hi), el = max_err(low, hi), atol = std::max(ulp_at(dt, max_abs(hi)), 1e-5);
  const bool ok = std::isfinite(ei) && ei <= 3 * el + atol;
  char b[256];
  std::snprintf(b, sizeof b, " %s %.3g/%.3g", what, ei, 3 * el + atol);
  *msg += b;
  return ok;
}

int g_failures = 0;

// A caller's workspace is filled with this byte before a call: 0x7F7F7F7F is 3.4e38 as fp32, so a
// read of an accumulator value nothing wrote overflows dQ; as a counter or lock it is 2139062143.
constexpr int kDirtyByte = 0x7F;
// FA_CHECK_OWN_WORKSPACE=1: every case runs on a dirtied workspace of the caller's (by default
// one in four), the library's own buffer untried.
bool every_case_own_workspace() {
  const char* v = std::getenv("FA_CHECK_OWN_WORKSPACE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// One case end to end. Returns false on failure (printed).
bool run_case(const Case& c, fa_dtype dt, uint64_t seed, bool quiet) {
  std::mt19937_64 rng(seed);
  const bool vl = c.varlen();
  const int64_t rq = c.rows_q(), rk = c.rows_k();
  std::vector<float> q = randn(size_t(rq * c.Hq * c.D), dt, rng), k = randn(size_t(rk * c.Hkv * c.D), dt, rng),
                     v = randn(size_t(rk * c.Hkv * c.Dv), dt, rng), dout = randn(size_t(rq * c.Hq * c.Dv), dt, rng);
  if (c.shift != 0.f) {
    for (float& x : q) x = round_half(dt, x + c.shift);
    for (float& x : k) x = round_half(dt, x - c.shift);
  }
  // Forward on the CPU reference (fp32 storage): O (then rounded to dtype) and LSE.
  std::vector<float> o(size_t(rq * c.Hq * c.Dv), NAN), lse(size_t(rq * c.Hq), NAN);
  std::vector<int32_t> cuq = c.cu(c.lens_q), cuk = c.cu(c.lens_k);
  {
    fa_fwd_params f{};
    set_common(f, c);
    f.device = FA_DEVICE_CPU, f.dtype = FA_DTYPE_FP32, f.algorithm = FA_ALGORITHM_REFERENCE;
    const int64_t Sq = vl ? rq : c.Sq, Sk = vl ? rk : c.Sk;
    f.q = host_view(q, Sq, c.Hq, c.D), f.k = host_view(k, Sk, c.Hkv, c.D), f.v = host_view(v, Sk, c.Hkv, c.Dv);
    f.o = host_view(o, Sq, c.Hq, c.Dv), f.lse = lse.data();
    if (vl) f.cu_seqlens_q = cuq.data(), f.cu_seqlens_k = cuk.data();
    if (fa_fwd(&f, nullptr) != FA_STATUS_OK) {
      std::fprintf(stderr, "CPU reference forward failed: %s\n", fa_last_error());
      std::exit(2);
    }
    for (float& x : o) x = round_half(dt, x);
  }

  // GPU backward.
  const int64_t Bt = vl ? 1 : c.B, Sqt = vl ? rq : c.Sq, Skt = vl ? rk : c.Sk;
  DevTensor dq_t, dk_t, dv_t, q_t, k_t, v_t, o_t, do_t;
  q_t.make(c.layout, Bt, Sqt, c.Hq, c.D, dt, &q);
  k_t.make(c.layout, Bt, Skt, c.Hkv, c.D, dt, &k);
  v_t.make(c.layout, Bt, Skt, c.Hkv, c.Dv, dt, &v);
  o_t.make(c.layout, Bt, Sqt, c.Hq, c.Dv, dt, &o);
  do_t.make(c.layout, Bt, Sqt, c.Hq, c.Dv, dt, &dout);
  dq_t.make(c.layout, Bt, Sqt, c.Hq, c.D, dt, nullptr);
  dk_t.make(c.layout, Bt, Skt, c.Hkv, c.D, dt, nullptr);
  dv_t.make(c.layout, Bt, Skt, c.Hkv, c.Dv, dt, nullptr);
  // LSE is [B, Hq, Sq] (varlen [Hq, total_q]); the host array is the same order.
  DeviceFloat lse_d;
  lse_d.alloc(lse.size());
  if (!lse.empty()) GC_CUDA(cudaMemcpy(lse_d.data(), lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  int32_t *cuq_d = nullptr, *cuk_d = nullptr;
  if (vl) {
    GC_CUDA(cudaMalloc(&cuq_d, cuq.size() * 4));
    GC_CUDA(cudaMalloc(&cuk_d, cuk.size() * 4));
    GC_CUDA(cudaMemcpy(cuq_d, cuq.data(), cuq.size() * 4, cudaMemcpyHostToDevice));
    GC_CUDA(cudaMemcpy(cuk_d, cuk.data(), cuk.size() * 4, cudaMemcpyHostToDevice));
  }
  fa_bwd_params bp{};
  bp.struct_size = sizeof(fa_bwd_params);
  set_common(bp.fwd, c);
  bp.fwd.device = 0, bp.fwd.dtype = dt, bp.fwd.algorithm = FA_ALGORITHM_AUTO;
  bp.fwd.q = q_t.view(), bp.fwd.k = k_t.view(), bp.fwd.v = v_t.view(), bp.fwd.o = o_t.view();
  bp.fwd.lse = lse_d.data();
  bp.fwd.cu_seqlens_q = cuq_d, bp.fwd.cu_seqlens_k = cuk_d;
  bp.dout = do_t.view(), bp.dq = dq_t.view(), bp.dk = dk_t.view(), bp.dv = dv_t.view();

  std::string label = c.name + " " + dtype_name(dt) + " " + layout_name(c.layout) + (c.causal ? " causal" : "") +
                      (c.wl >= 0 || c.wr >= 0 ? " window(" + std::to_string(c.wl) + "," + std::to_string(c.wr) + ")" : "") +
                      (c.softcap > 0 ? " softcap" : "") + (vl ? " varlen" : "") + (c.deterministic ? " det" : "");
  bool ok = true;
  std::string msg;
  void* ws = nullptr;
  const fa_status can = fa_can_implement_bwd(&bp);
  if (c.D % 8 != 0 || c.Dv % 8 != 0) {
    // Head dims off the 16-byte grid: the GPU refuses with a reason, never runs.
    ok = can == FA_STATUS_NOT_SUPPORTED && std::strlen(fa_last_error()) > 0;
    msg = ok ? " refused as expected" : " expected NOT_SUPPORTED";
  } else if (can != FA_STATUS_OK) {
    ok = false;
    msg = std::string(" refused: ") + fa_last_error();
  } else if (const char* kn = fa_bwd_kernel_name(&bp);
             c.expect_kernel != nullptr && (kn == nullptr || std::strcmp(kn, c.expect_kernel) != 0)) {
    ok = false;
    msg = std::string(" ran on ") + (kn ? kn : "?") + ", expected " + c.expect_kernel;
  } else {
    label += std::string(" [") + (kn ? kn : "?") + "]";  // the kernel that ran, for the logs
    if (c.own_workspace || every_case_own_workspace()) {
      size_t bytes = 0;
      if (fa_bwd_workspace_size(&bp, &bytes) != FA_STATUS_OK) std::exit(3);
      GC_CUDA(cudaMalloc(&ws, bytes ? bytes : 1));
      // A caller's workspace comes dirty: the library must zero what it counts on (the tile
      // counter, the ordered reduction's locks or the claims, the dQ accumulator where it adds
      // into it) and never read fp32 it has not written (kDirtyByte makes such a read show).
      GC_CUDA(cudaMemset(ws, kDirtyByte, bytes));
      bp.workspace = ws, bp.workspace_size = bytes;
    }
    const fa_status st = fa_bwd(&bp, nullptr);
    const cudaError_t sync = cudaDeviceSynchronize();
    if (st != FA_STATUS_OK || sync != cudaSuccess || cudaGetLastError() != cudaSuccess) {
      ok = false;
      msg = std::string(" fa_bwd: ") + fa_last_error() + " / " + cudaGetErrorString(sync);
    } else {
      bool u1, u2, u3;
      const std::vector<float> dq = dq_t.read(dt, &u1), dk = dk_t.read(dt, &u2), dv = dv_t.read(dt, &u3);
      if (!(u1 && u2 && u3)) ok = false, msg += " WROTE-OUTSIDE";
      const Grads hi = cpu_bwd(c, FA_DTYPE_FP32, q, k, v, o, lse, dout);
      const Grads low = cpu_bwd(c, dt, q, k, v, o, lse, dout);
      ok &= close("dQ", dt, dq, low.dq, hi.dq, &msg);
      ok &= close("dK", dt, dk, low.dk, hi.dk, &msg);
      ok &= close("dV", dt, dv, low.dv, hi.dv, &msg);
    }
  }
  if (!ok || !quiet) std::printf("%s %s:%s\n", ok ? "ok  " : "FAIL", label.c_str(), msg.c_str());
  if (ws) GC_CUDA(cudaFree(ws));
  if (cuq_d) {
    GC_CUDA(cudaFree(cuq_d));
    GC_CUDA(cudaFree(cuk_d));
  }
  for (DevTensor* t : {&q_t, &k_t, &v_t, &o_t, &do_t, &dq_t, &dk_t, &dv_t}) t->buf.release();
  lse_d.release();
  if (!ok) ++g_failures;
  return ok;
}

// Awkward shapes x features; each case gets one layout, and alternates workspace ownership and
// deterministic mode, so every combination is covered across the list.
std::vector<Case> awkward_cases(bool small) {
  std::vector<Case> out;
  int n = 0;
  const char* path = std::getenv("FA_AWKWARD_SHAPES");  // overrides the build-time path
  for (const Shape& s : read_shapes(path ? path : FA_AWKWARD_SHAPES_FILE)) {
    // FA_CHECK_SHAPE: shapes by name, comma-separated (sanitizer runs), whatever their size;
    // else `small` takes those of at most 64 x 64.
    const char* only = std::getenv("FA_CHECK_SHAPE");
    if (only ? ("," + std::string(only) + ",").find("," + s.name + ",") == std::string::npos
             : small && s.Sq * s.Sk > 64 * 64)
      continue;
    for (int feature = 0; feature < 6; ++feature) {
      Case c;
      c.name = s.name;
      c.B = s.B, c.Sq = s.Sq, c.Sk = s.Sk, c.Hq = s.Hq, c.Hkv = s.Hkv, c.D = s.D, c.Dv = s.Dv;
      if (feature == 1) c.causal = true;
      if (feature == 2) c.wl = 7, c.wr = 3;
      if (feature == 3) c.softcap = 2.f, c.causal = true;
      if (feature == 4 || feature == 5) {
        c.lens_q = s.lens_q, c.lens_k = s.lens_k;
        if (c.lens_q.empty()) c.lens_q.assign(size_t(s.B), int32_t(s.Sq)), c.lens_k.assign(size_t(s.B), int32_t(s.Sk));
        c.causal = feature == 5;
      }
      c.layout = Layout(n % 3);
      c.deterministic = n % 2 == 1;
      c.own_workspace = n % 4 == 2;
      ++n;
      out.push_back(c);
    }
  }
  return out;
}

// FA_CHECK_MAX_HDIM: leave out the cases whose D or Dv is above it (a device that refuses them,
// e.g. the backward above 128 under FLASHATTN_SMEM_LIMIT=101376), counted and printed.
bool above_max_hdim(const Case& c, int* skipped) {
  const char* v = std::getenv("FA_CHECK_MAX_HDIM");
  const bool out = v != nullptr && std::max(c.D, c.Dv) > std::atoll(v);
  *skipped += out;
  return out;
}

int mode_check(bool small) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", (unsigned long long)seed);
  int n = 0, skipped = 0;
  for (fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (const Case& c : awkward_cases(small))
      if (!above_max_hdim(c, &skipped)) run_case(c, dt, seed + n++, !small);
  // Larger shapes: full tiles, many q blocks, GQA with a group of 4, D < compiled D.
  std::vector<Case> big = {
      {"b2_s1000_h4_d128", 2, 1000, 1000, 4, 4, 128, 128, {}, {}, false},
      {"b2_s1000_h4_d128_causal", 2, 1000, 1000, 4, 4, 128, 128, {}, {}, true},
      {"gqa4_s777_d64", 1, 777, 640, 8, 2, 64, 64, {}, {}, true},
      {"d96_s300", 2, 300, 333, 2, 2, 96, 96, {}, {}, false},
      {"d256_s257", 1, 257, 300, 2, 1, 256, 256, {}, {}, true},
  };
  if (!small)
    for (Case& c : big) {
      for (bool det : {false, true}) {
        c.deterministic = det;
        if (!above_max_hdim(c, &skipped)) run_case(c, FA_DTYPE_BF16, seed + n++, false);
      }
    }
  if (skipped > 0) std::printf("left out: %d case(s) above FA_CHECK_MAX_HDIM\n", skipped);
  std::printf("%s: %d failure(s) of %d cases\n", g_failures ? "FAILED" : "PASSED", g_failures, n);
  return g_failures ? 1 : 0;
}

// Same inputs 100 times: dK and dV bitwise always; dQ bitwise in deterministic mode (there on a
// caller's workspace dirtied before each call), and in the default mode where it takes the
// ordered reduction too (sm90, causal at 512: launch/bwd.cu's dq_reduction). Causal at
// 512 tokens (4 to 8 kv blocks add into each q block, in an order the deterministic mode fixes)
// and unmasked at 1024 (8 kv blocks each; at 128 the 80-row q blocks); GQA (4 query heads on
// one kv head) causal at 2048; at 128 also causal at 4096 (the 80-row kernel's causal
// instantiation).
int mode_determinism(int64_t D) {
  const int64_t H = 4;
  std::mt19937_64 rng(1234);
  const fa_dtype dt = FA_DTYPE_BF16;
  int bad = 0;
  struct Shape {
    bool causal;
    int64_t B, S, Hkv;
  };
  // GQA under a causal mask past 1024 rows: tiles of one query head in the default mode, dK and
  // dV summed over the group in turn.
  std::vector<Shape> shapes = {{true, 64, 512, H}, {false, 32, 1024, H}, {true, 4, 2048, 1}};
  if (D == 128) shapes.push_back({true, 2, 4096, H});
  for (size_t run = 0; run < 2 * shapes.size(); ++run) {
    const bool det = run % 2 == 1, causal = shapes[run / 2].causal;
    const int64_t B = shapes[run / 2].B, S = shapes[run / 2].S, Hkv = shapes[run / 2].Hkv;
    Case c{"determinism", B, S, S, H, Hkv, D, D, {}, {}, causal};
    c.deterministic = det;
    const int64_t n = B * S * H * D, nkv = B * S * Hkv * D;
    std::vector<float> q = randn(size_t(n), dt, rng), k = randn(size_t(nkv), dt, rng), v = randn(size_t(nkv), dt, rng),
                       dout = randn(size_t(n), dt, rng), o = randn(size_t(n), dt, rng);
    std::vector<float> lse(size_t(B * H * S));
    for (float& x : lse) x = 3.f + float(rng() % 100) / 100.f;
    DevTensor t[8];
    std::vector<float>* vals[8] = {&q, &k, &v, &o, &dout, nullptr, nullptr, nullptr};
    for (int i = 0; i < 8; ++i) {
      const bool kv = i == 1 || i == 2 || i == 6 || i == 7;  // k, v, dk, dv
      t[i].make(Layout::bshd, B, S, kv ? Hkv : H, D, dt, vals[i]);
    }
    DeviceFloat lse_d;
    lse_d.alloc(lse.size());
    GC_CUDA(cudaMemcpy(lse_d.data(), lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
    fa_bwd_params bp{};
    bp.struct_size = sizeof(fa_bwd_params);
    set_common(bp.fwd, c);
    bp.fwd.device = 0, bp.fwd.dtype = dt;
    bp.fwd.q = t[0].view(), bp.fwd.k = t[1].view(), bp.fwd.v = t[2].view(), bp.fwd.o = t[3].view();
    bp.fwd.lse = lse_d.data();
    bp.dout = t[4].view(), bp.dq = t[5].view(), bp.dk = t[6].view(), bp.dv = t[7].view();
    // The deterministic runs on a workspace of the caller's, dirtied before every call: each must
    // still add in the fixed order (the locks are zeroed by the library, not found zero). GQA in
    // both modes: the default mode's tiles of one query head sum dK and dV in the workspace, so
    // a row no tile wrote would read as the dirt.
    void* ws = nullptr;
    if (det || Hkv != H) {
      size_t bytes = 0;
      if (fa_bwd_workspace_size(&bp, &bytes) != FA_STATUS_OK) return 1;
      GC_CUDA(cudaMalloc(&ws, bytes));
      bp.workspace = ws, bp.workspace_size = bytes;
    }
    std::vector<uint16_t> first[3];
    int diff[3] = {0, 0, 0};
    for (int it = 0; it < 100; ++it) {
      if (ws != nullptr) GC_CUDA(cudaMemset(ws, kDirtyByte, bp.workspace_size));
      if (fa_bwd(&bp, nullptr) != FA_STATUS_OK) {
        std::printf("fa_bwd failed: %s\n", fa_last_error());
        return 1;
      }
      GC_CUDA(cudaDeviceSynchronize());
      for (int j = 0; j < 3; ++j) {
        std::vector<uint16_t> now = t[5 + j].buf.download_all();
        if (it == 0) first[j] = now;
        else if (now != first[j]) ++diff[j];
      }
    }
    std::printf("determinism (%s, D %lld, %s, S %lld, Hkv %lld, %s): runs differing from the first of 100: dQ %d, dK %d, dV %d\n",
                det ? "deterministic" : "default", (long long)D, causal ? "causal" : "unmasked", (long long)S, (long long)Hkv,
                fa_bwd_kernel_name(&bp), diff[0], diff[1], diff[2]);
    const bool ordered = det || (causal && S <= 512 && std::string(fa_bwd_kernel_name(&bp)) == "sm90");
    if (diff[1] || diff[2] || (ordered && diff[0])) ++bad;
    if (ws != nullptr) GC_CUDA(cudaFree(ws));
    for (DevTensor& x : t) x.buf.release();
    lse_d.release();
  }
  std::printf("%s\n", bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}

// A case with shift 5 (Case::shift).
Case far(Case c) {
  c.shift = 5.f;
  return c;
}

// The Hopper backward's cases (dense, D and Dv in (64, 128] or (0, 64] per compiled kernel):
// partial tiles in q and kv, causal with Sq < Sk and Sq > Sk, windows, softcap, GQA and MQA,
// D < compiled D, deterministic mode, both dtypes and all layouts. Each must run on "sm90".
int mode_sm90() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::vector<Case> base = {
      {"s128_d128", 1, 128, 128, 2, 2, 128, 128, {}, {}, false},
      {"s1_d128", 2, 1, 1, 2, 2, 128, 128, {}, {}, false},
      {"q113_k203_d128", 1, 113, 203, 2, 1, 128, 128, {}, {}, false},
      {"q203_k113_d64", 1, 203, 113, 2, 2, 64, 64, {}, {}, false},
      {"b2_s1000_d128", 2, 1000, 1000, 4, 4, 128, 128, {}, {}, false},
      {"gqa4_s777_k640_d64", 1, 777, 640, 8, 2, 64, 64, {}, {}, false},
      {"mqa_s300_d128", 2, 300, 257, 4, 1, 128, 128, {}, {}, false},
      {"d96_s300_k333", 2, 300, 333, 2, 2, 96, 96, {}, {}, false},
      {"d128_dv72_s200", 1, 200, 190, 2, 2, 128, 72, {}, {}, false},
      {"d64_s1024_k1023", 1, 1024, 1023, 1, 1, 64, 64, {}, {}, false},
      // unmasked from 1024 query rows at 128: the 80-row q blocks (partial in q and kv; GQA,
      // D and Dv below the compiled 128, Dv != D)
      {"q1100_k1050_d128", 1, 1100, 1050, 2, 2, 128, 128, {}, {}, false},
      {"gqa_q1024_k999_d112", 2, 1024, 999, 4, 2, 112, 104, {}, {}, false},
      {"s130_d256", 1, 130, 130, 2, 2, 256, 256, {}, {}, false},
      {"gqa_q77_k200_d256", 1, 77, 200, 4, 2, 256, 256, {}, {}, false},
      {"mqa_d200_s300_k257", 2, 300, 257, 2, 1, 200, 200, {}, {}, false},
      {"d256_dv224_s150", 1, 150, 190, 2, 2, 256, 224, {}, {}, false},
      // varlen: empty sequences, a query with no key, sequences shorter than a block
      {"varlen_d128", 4, 300, 333, 4, 2, 128, 128, {300, 1, 0, 177}, {333, 17, 40, 0}, false},
      {"varlen_d64", 3, 257, 260, 2, 2, 64, 64, {257, 64, 129}, {200, 260, 1}, false},
      {"varlen_d256", 3, 150, 170, 2, 1, 256, 256, {150, 65, 3}, {170, 64, 90}, false},
      // GQA past 4096 rows: causal there without claims or the ordered reduction in the default
      // mode (the unordered adds into a zeroed accumulator); 80-row q blocks at 128
      {"gqa_q4200_k300_d64", 1, 4200, 300, 4, 1, 64, 64, {}, {}, false},
      {"gqa_q4200_k300_d128", 1, 4200, 300, 4, 2, 128, 128, {}, {}, false},
      {"gqa_q300_k4200_d256", 1, 300, 4200, 4, 2, 256, 256, {}, {}, false},
      // head dim 256 from 1024 query rows, each feature in both modes over the two dtypes (an
      // odd count of cases): GQA (head tiles in the default mode's causal runs, none in the
      // deterministic one), Sq > Sk (rows and q blocks that see no key), partial blocks
      {"gqa_q1200_k700_d200", 1, 1200, 700, 4, 2, 200, 200, {}, {}, false},
      {"q1100_k1300_d256", 1, 1100, 1300, 2, 2, 256, 256, {}, {}, false},
      {"q1500_k700_d256", 1, 1500, 700, 2, 2, 256, 256, {}, {}, false},
      // LSE far below zero (shift 5: scores about −200 at D 64, −400 at 256) with a partial last
      // kv block, on every row of each head dim: the zero-filled keys past Sk have S = 0, and
      // exp(0 − LSE) overflows unless they are masked out
      far(Case{"far_q200_k150_d64", 1, 200, 150, 2, 2, 64, 64, {}, {}, false}),
      far(Case{"far_q1100_k333_d128", 1, 1100, 333, 2, 1, 128, 128, {}, {}, false}),
      far(Case{"far_q300_k333_d128", 1, 300, 333, 2, 2, 128, 128, {}, {}, false}),
      far(Case{"far_q300_k270_d256", 1, 300, 270, 2, 2, 256, 256, {}, {}, false}),
  };
  int n = 0;
  for (fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (const Case& b : base)
      for (int feature = 0; feature < 4; ++feature) {
        Case c = b;
        c.expect_kernel = "sm90";
        if (feature == 1) c.causal = true;
        if (feature == 2) c.wl = 100, c.wr = 37;
        if (feature == 3) c.softcap = 2.f, c.causal = true;
        c.layout = Layout(n % 3);
        c.deterministic = (n / 4 + feature) % 2 == 1;  // every feature with and without
        c.own_workspace = n % 4 == 2;
        run_case(c, dt, seed + n++, false);
      }
  std::printf("%s: %d failure(s) of %d cases\n", g_failures ? "FAILED" : "PASSED", g_failures, n);
  return g_failures ? 1 : 0;
}

// ---- big grids and big offsets -------------------------------------------------------------
// A dense [B, S, H, D] device tensor (16-bit) whose batches lie `bstride` elements apart
// (bstride >= S·H·D); one allocation spans what the layout touches, gaps included.
struct BatchedTensor {
  int64_t B = 0, S = 0, H = 0, D = 0, bstride = 0;
  uint16_t* data = nullptr;
  int64_t per_batch() const { return S * H * D; }
  size_t count() const { return size_t((B - 1) * bstride + per_batch()); }
  fa_tensor view() const { return fa_tensor{data, bstride, H * D, D, 1}; }
  void alloc(int64_t b, int64_t s, int64_t h, int64_t d, int64_t bs) {
    B = b, S = s, H = h, D = d, bstride = bs > 0 ? bs : s * h * d;
    GC_CUDA(cudaMalloc(&data, count() * 2));
    poison();
  }
  void poison() const { GC_CUDA(cudaMemset(data, 0xFF, count() * 2)); }  // 0xFFFF: NaN in bf16 and fp16
  void upload(int64_t b, const std::vector<float>& x, fa_dtype dt) const {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = to_half(dt, x[i]);
    GC_CUDA(cudaMemcpy(data + b * bstride, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  std::vector<float> download(int64_t b, fa_dtype dt) const {
    std::vector<uint16_t> h(static_cast<size_t>(per_batch()));
    GC_CUDA(cudaMemcpy(h.data(), data + b * bstride, h.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> x(h.size());
    for (size_t i = 0; i < h.size(); ++i) x[i] = from_half(dt, h[i]);
    return x;
  }
  void release() {
    if (data) GC_CUDA(cudaFree(data));
    data = nullptr;
  }
};

// Dense bf16 case c in BatchedTensors of batch stride `bstride` (0: packed). Forward on the GPU;
// backward on the GPU in default then deterministic mode, dQ/dK/dV NaN-poisoned before each.
// Every batch must be fully written; the batches in `sampled` are compared with the CPU
// reference, run per batch (B = 1) on the same rounded q, k, v, dO and the GPU's O and LSE.
// Prints one line for the forward and one per backward mode; counts failures in g_failures.
void run_batched(const char* mode, const Case& c, int64_t bstride, std::vector<int64_t> sampled, uint64_t seed) {
  const fa_dtype dt = FA_DTYPE_BF16;
  std::sort(sampled.begin(), sampled.end());
  sampled.erase(std::unique(sampled.begin(), sampled.end()), sampled.end());
  auto is_sampled = [&](int64_t b) { return std::binary_search(sampled.begin(), sampled.end(), b); };
  char label[192];
  std::snprintf(label, sizeof label, "%s B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld %s%s", mode, (long long)c.B,
                (long long)c.Sq, (long long)c.Sk, (long long)c.Hq, (long long)c.Hkv, (long long)c.D, dtype_name(dt),
                c.causal ? " causal" : "");
  std::string batches;
  for (int64_t b : sampled) batches += (batches.empty() ? "" : ",") + std::to_string(b);

  BatchedTensor q, k, v, o, dout, dq, dk, dv;
  q.alloc(c.B, c.Sq, c.Hq, c.D, bstride), k.alloc(c.B, c.Sk, c.Hkv, c.D, bstride);
  v.alloc(c.B, c.Sk, c.Hkv, c.Dv, bstride), o.alloc(c.B, c.Sq, c.Hq, c.Dv, bstride);
  dout.alloc(c.B, c.Sq, c.Hq, c.Dv, bstride), dq.alloc(c.B, c.Sq, c.Hq, c.D, bstride);
  dk.alloc(c.B, c.Sk, c.Hkv, c.D, bstride), dv.alloc(c.B, c.Sk, c.Hkv, c.Dv, bstride);
  DeviceFloat lse_d;  // [B, Hq, Sq], NaN-poisoned
  lse_d.alloc(size_t(c.B * c.Hq * c.Sq));

  // Fresh inputs batch by batch; the sampled batches' values are kept for the reference.
  struct Sample {
    std::vector<float> in[4];  // q, k, v, dO
    std::vector<float> o, lse;
  };
  std::vector<Sample> samples(sampled.size());
  std::mt19937_64 rng(seed);
  const BatchedTensor* inputs[4] = {&q, &k, &v, &dout};
  for (int t = 0; t < 4; ++t)
    for (int64_t b = 0; b < c.B; ++b) {
      std::vector<float> x = randn(size_t(inputs[t]->per_batch()), dt, rng);
      inputs[t]->upload(b, x, dt);
      if (is_sampled(b)) {
        const auto at = std::lower_bound(sampled.begin(), sampled.end(), b) - sampled.begin();
        samples[size_t(at)].in[t] = std::move(x);
      }
    }

  fa_fwd_params f{};
  set_common(f, c);
  f.device = 0, f.dtype = dt, f.algorithm = FA_ALGORITHM_AUTO;
  f.q = q.view(), f.k = k.view(), f.v = v.view(), f.o = o.view(), f.lse = lse_d.data();
  const fa_status fst = fa_fwd(&f, nullptr);
  const cudaError_t fsync = cudaDeviceSynchronize();
  if (fst != FA_STATUS_OK || fsync != cudaSuccess) {
    std::printf("FAIL %s forward: %s / %s\n", label, fst != FA_STATUS_OK ? fa_last_error() : "",
                cudaGetErrorString(fsync));
    if (fsync != cudaSuccess) std::exit(3);
    ++g_failures;
  } else {
    // Forward of the sampled batches against the CPU reference (fp32 storage): O within a few
    // bf16 ulps of |O|max (as check_fwd bigoffset), LSE within 1e-4 relative (as check_fwd).
    const std::vector<float> lse_all = lse_d.download_all();
    const int64_t lse_per = c.Hq * c.Sq;
    Case cb = c;
    cb.B = 1;
    Grads hi, low;
    double ferr = 0, fmax = 0, lse_rel = 0;
    bool lse_bad = false;
    for (size_t i = 0; i < sampled.size(); ++i) {
      Sample& s = samples[i];
      s.o = o.download(sampled[i], dt);
      const size_t l0 = DeviceFloat::kMargin + size_t(sampled[i] * lse_per);
      s.lse.assign(lse_all.begin() + int64_t(l0), lse_all.begin() + int64_t(l0) + lse_per);
      std::vector<float> oref(s.o.size(), NAN), lref(size_t(lse_per), NAN);
      fa_fwd_params r{};
      set_common(r, cb);
      r.device = FA_DEVICE_CPU, r.dtype = FA_DTYPE_FP32, r.algorithm = FA_ALGORITHM_REFERENCE;
      r.q = host_view(s.in[0], c.Sq, c.Hq, c.D), r.k = host_view(s.in[1], c.Sk, c.Hkv, c.D);
      r.v = host_view(s.in[2], c.Sk, c.Hkv, c.Dv), r.o = host_view(oref, c.Sq, c.Hq, c.Dv), r.lse = lref.data();
      if (fa_fwd(&r, nullptr) != FA_STATUS_OK) {
        std::fprintf(stderr, "CPU reference forward failed: %s\n", fa_last_error());
        std::exit(2);
      }
      ferr = std::max(ferr, max_err(s.o, oref));
      fmax = std::max(fmax, max_abs(oref));
      for (size_t j = 0; j < lref.size(); ++j) {
        const double g = s.lse[j], rf = lref[j];
        if (std::isnan(g) || ((std::isinf(g) || std::isinf(rf)) && g != rf)) {
          lse_bad = true;
          continue;
        }
        if (std::isinf(rf)) continue;
        const double rel = std::fabs(g - rf) / std::max(1.0, std::fabs(rf));
        lse_rel = std::max(lse_rel, rel);
        if (rel > 1e-4) lse_bad = true;
      }
      // Backward reference on the GPU's O and LSE: ref_hi (fp32 storage) and ref_low (bf16).
      const Grads h = cpu_bwd(cb, FA_DTYPE_FP32, s.in[0], s.in[1], s.in[2], s.o, s.lse, s.in[3]);
      const Grads l = cpu_bwd(cb, dt, s.in[0], s.in[1], s.in[2], s.o, s.lse, s.in[3]);
      for (auto [to, from] : {std::pair{&hi, &h}, std::pair{&low, &l}}) {
        to->dq.insert(to->dq.end(), from->dq.begin(), from->dq.end());
        to->dk.insert(to->dk.end(), from->dk.begin(), from->dk.end());
        to->dv.insert(to->dv.end(), from->dv.begin(), from->dv.end());
      }
    }
    const double fbound = 8 * ulp_at(dt, fmax);
    const bool fok = std::isfinite(ferr) && ferr <= fbound && !lse_bad;
    std::printf("%s %s forward: batches %s: O err %.3g (bound %.3g), LSE rel %.2g%s\n", fok ? "ok  " : "FAIL", label,
                batches.c_str(), ferr, fbound, lse_rel, lse_bad ? " LSE" : "");
    if (!fok) ++g_failures;

    for (bool det : {false, true}) {
      for (const BatchedTensor* g : {&dq, &dk, &dv}) g->poison();
      fa_bwd_params bp{};
      bp.struct_size = sizeof(fa_bwd_params);
      bp.fwd = f;
      bp.fwd.deterministic = det;
      bp.dout = dout.view(), bp.dq = dq.view(), bp.dk = dk.view(), bp.dv = dv.view();
      const char* kn = fa_bwd_kernel_name(&bp);
      const std::string kname = kn ? kn : "?";
      const fa_status st = fa_bwd(&bp, nullptr);
      const cudaError_t sync = cudaDeviceSynchronize();
      if (st != FA_STATUS_OK || sync != cudaSuccess) {
        std::printf("FAIL %s backward (%s): %s / %s\n", label, det ? "deterministic" : "default",
                    st != FA_STATUS_OK ? fa_last_error() : "", cudaGetErrorString(sync));
        if (sync != cudaSuccess) std::exit(3);
        ++g_failures;
        continue;
      }
      // Every batch fully written (no NaN left); the sampled batches' values, in sample order.
      Grads got;
      const BatchedTensor* gt[3] = {&dq, &dk, &dv};
      std::vector<float>* gv[3] = {&got.dq, &got.dk, &got.dv};
      int64_t nan_left = 0, total = 0;
      for (int64_t b = 0; b < c.B; ++b)
        for (int t = 0; t < 3; ++t) {
          const std::vector<float> x = gt[t]->download(b, dt);
          for (float e : x)
            if (std::isnan(e)) ++nan_left;
          total += int64_t(x.size());
          if (is_sampled(b)) gv[t]->insert(gv[t]->end(), x.begin(), x.end());
        }
      std::string msg;
      bool ok = nan_left == 0;
      ok &= close("dQ", dt, got.dq, low.dq, hi.dq, &msg);
      ok &= close("dK", dt, got.dk, low.dk, hi.dk, &msg);
      ok &= close("dV", dt, got.dv, low.dv, hi.dv, &msg);
      std::printf("%s %s backward (%s, %s): batches %s:%s; NaN left %lld of %lld\n", ok ? "ok  " : "FAIL", label,
                  det ? "deterministic" : "default", kname.c_str(), batches.c_str(), msg.c_str(),
                  (long long)nan_left, (long long)total);
      if (!ok) ++g_failures;
    }
  }
  for (BatchedTensor* t : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) t->release();
  lse_d.release();
}

// A grid past 65535 in every kernel: B·Hkv = 70400 main-kernel CTAs (one kv block each),
// B·Hq = 140800 (head, batch) pairs of the pre/post kernels (GQA group 2). Sampled: the first
// and the last batch, and the batches on either side of b·Hq = 2^16 and of b·Hkv = 2^16.
int mode_bigbatch() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", (unsigned long long)seed);
  const Case c{"bigbatch", 1100, 17, 40, 128, 64, 64, 64, {}, {}, false};
  const int64_t cross_q = (int64_t{1} << 16) / c.Hq, cross_kv = (int64_t{1} << 16) / c.Hkv;  // 512, 1024
  run_batched("bigbatch", c, 0, {0, cross_q - 1, cross_q, cross_kv - 1, cross_kv, c.B - 1}, seed);
  std::printf("bigbatch %s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}

// Tensors over 2^31 elements: every tensor the backward reads or writes (q, k, v, O, dO, dQ,
// dK, dV) has batch stride 2^31 + 1024 elements, so batch 1 starts past element 2^31.
int mode_bigoffset() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", (unsigned long long)seed);
  const Case c{"bigoffset", 2, 200, 200, 4, 2, 128, 128, {}, {}, true};
  const int64_t bstride = (int64_t{1} << 31) + 1024;
  run_batched("bigoffset", c, bstride, {0, c.B - 1}, seed);
  std::printf("bigoffset %s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}

// ANCHORS grid: bf16, 16k tokens, heads = 2048 / hdim, causal and not; median of cudaEvent times.
int mode_bench(int only_hdim) {
  const fa_dtype dt = FA_DTYPE_BF16;
  std::printf("| hdim | causal | seqlen | batch | heads | kernel | ms | TFLOP/s |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int hd : {64, 128, 256}) {
    if (only_hdim && hd != only_hdim) continue;
    // B·S·H·hd = 16384·2048 in every cell of the grid: one random tensor serves them all.
    std::mt19937_64 rng(hd);
    const std::vector<float> x = randn(size_t(16384) * 2048, dt, rng);
    for (bool causal : {false, true})
      for (int64_t S : {512, 1024, 2048, 4096, 8192, 16384}) {
        // FA_BENCH_SEQLENS="1024,16384" times only those columns of the grid.
        const char* only_s = std::getenv("FA_BENCH_SEQLENS");
        if (only_s != nullptr && ("," + std::string(only_s) + ",").find("," + std::to_string(S) + ",") ==
                                     std::string::npos)
          continue;
        const int64_t B = 16384 / S, H = 2048 / hd;
        DevTensor t[8];
        for (int i = 0; i < 8; ++i) t[i].make(Layout::bshd, B, S, H, hd, dt, i < 5 && i != 3 ? &x : nullptr);
        DeviceFloat lse_d;
        lse_d.alloc(size_t(B * H * S));
        Case c{"bench", B, S, S, H, H, hd, hd, {}, {}, causal};
        fa_fwd_params f{};
        set_common(f, c);
        f.device = 0, f.dtype = dt;
        f.q = t[0].view(), f.k = t[1].view(), f.v = t[2].view(), f.o = t[3].view(), f.lse = lse_d.data();
        if (fa_fwd(&f, nullptr) != FA_STATUS_OK) {
          std::printf("forward failed: %s\n", fa_last_error());
          return 1;
        }
        fa_bwd_params bp{};
        bp.struct_size = sizeof(fa_bwd_params);
        bp.fwd = f;
        bp.dout = t[4].view(), bp.dq = t[5].view(), bp.dk = t[6].view(), bp.dv = t[7].view();
        size_t bytes = 0;
        fa_bwd_workspace_size(&bp, &bytes);
        void* ws = nullptr;
        GC_CUDA(cudaMalloc(&ws, bytes));
        bp.workspace = ws, bp.workspace_size = bytes;
        cudaEvent_t e0, e1;
        GC_CUDA(cudaEventCreate(&e0));
        GC_CUDA(cudaEventCreate(&e1));
        std::vector<float> ms;
        for (int it = 0; it < 23; ++it) {
          GC_CUDA(cudaEventRecord(e0));
          if (fa_bwd(&bp, nullptr) != FA_STATUS_OK) {
            std::printf("bwd failed: %s\n", fa_last_error());
            return 1;
          }
          GC_CUDA(cudaEventRecord(e1));
          GC_CUDA(cudaEventSynchronize(e1));
          float m = 0;
          GC_CUDA(cudaEventElapsedTime(&m, e0, e1));
          if (it >= 3) ms.push_back(m);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double flops = 2.5 * 4.0 * double(B) * H * double(S) * S * hd / (causal ? 2 : 1);
        std::printf("| %d | %s | %lld | %lld | %lld | %s | %.3f | %.1f |\n", hd, causal ? "yes" : "no", (long long)S,
                    (long long)B, (long long)H, fa_bwd_kernel_name(&bp), med, flops / med / 1e9);
        std::fflush(stdout);
        GC_CUDA(cudaFree(ws));
        for (DevTensor& d : t) d.buf.release();
        lse_d.release();
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (fa_cuda_device_count() < 1) {
    std::printf("no CUDA device\n");
    return 2;
  }
  if (mode == "check") return mode_check(false);
  if (mode == "small") return mode_check(true);
  if (mode == "determinism") {
    if (argc > 2) return mode_determinism(std::atoi(argv[2]));
    int rc = 0;
    for (int64_t d : {64, 128, 256}) rc |= mode_determinism(d);
    return rc;
  }
  if (mode == "bench") return mode_bench(argc > 2 ? std::atoi(argv[2]) : 0);
  if (mode == "sm90") return mode_sm90();
  if (mode == "bigbatch") return mode_bigbatch();
  if (mode == "bigoffset") return mode_bigoffset();
  std::printf("usage: check_bwd [check|small|determinism [hdim, else 64, 128, 256]|bench [hdim]|sm90|bigbatch|bigoffset]\n");
  return 2;
}
