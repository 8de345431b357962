// Tests, GPU: standalone check and timing program of the CUDA forward (no GoogleTest there).
// Calls the C ABI on GPU buffers and compares with the library's CPU reference (fp64) on the
// same rounded inputs, by docs/DESIGN.md's rule. Modes: correct [shapes file] [seed],
// determinism, bigoffset, sanitize, bench [json|-] [hdims]. Exit 0 only if every check passed.
#include <chrono>
#include <map>

#include "common.h"

using namespace gpucheck;

namespace {

// The kernel family a problem runs on, for the logs ("?" if the library names none).
const char* kernel_or(const char* name) { return name != nullptr ? name : "?"; }

std::mt19937_64 g_rng;
int g_failures = 0;
// Cases run per (dense / varlen, kernel), printed by the correct mode: proof of which path ran.
std::map<std::string, int> g_kernels;

enum class Layout { bshd, bhsd, padded };
const char* layout_name(Layout l) { return l == Layout::bshd ? "bshd" : l == Layout::bhsd ? "bhsd" : "padded"; }

struct Case {
  Shape s;
  bool varlen = false;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0.f;
  fa_dtype dt = FA_DTYPE_BF16;
  Layout layout = Layout::bshd;
  std::string label() const {
    char b[256];
    std::snprintf(b, sizeof b, "%-12s %s %-6s%s%s%s w(%lld,%lld) cap %.0f", s.name.c_str(), dtype_name(dt),
                  layout_name(layout), varlen ? " varlen" : "", causal ? " causal" : "", "",
                  static_cast<long long>(wl), static_cast<long long>(wr), softcap);
    return b;
  }
};

// A [n0, rows, heads, dim] tensor's strides in a layout; returns the element count spanned.
struct Strides {
  int64_t batch, row, head;
  size_t span;
};
Strides strides_for(Layout l, int64_t n0, int64_t rows, int64_t heads, int64_t dim) {
  Strides s{};
  if (l == Layout::bshd) {
    s = {rows * heads * dim, heads * dim, dim, 0};
  } else if (l == Layout::bhsd) {
    s = {heads * rows * dim, dim, rows * dim, 0};
  } else {  // slack after each dim vector, each row and each batch (multiples of 8 elements)
    const int64_t hs = dim + 8, rs = heads * hs + 16;
    s = {rows * rs + 24, rs, hs, 0};
  }
  s.span = static_cast<size_t>(n0 == 0 ? 0 : (n0 - 1) * s.batch + (rows - 1) * s.row + (heads - 1) * s.head + dim);
  if (rows == 0 || heads == 0) s.span = 0;
  return s;
}

float randn() {
  static std::normal_distribution<float> nd(0.f, 1.f);
  return nd(g_rng);
}

bool visible(int64_t i, int64_t j, int64_t sq, int64_t sk, int64_t wl, int64_t wr) {
  const int64_t d = j - (i + sk - sq);
  return (wl < 0 || d >= -wl) && (wr < 0 || d <= wr);
}

// Low-precision model of the computation: fp32 scores and softmax, P rounded to the storage type
// before P·V, O rounded at the end (as flash-attn's tests compute ref_low in the input dtype).
void reference_low(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<int32_t>& cuq,
                   const std::vector<int32_t>& cuk, std::vector<float>& o) {
  const Shape& s = c.s;
  const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
  const int64_t group = s.Hq / s.Hkv;
  std::vector<float> sc, p;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t sq = c.varlen ? cuq[b + 1] - cuq[b] : s.Sq, sk = c.varlen ? cuk[b + 1] - cuk[b] : s.Sk;
    const int64_t q0 = c.varlen ? cuq[b] : b * s.Sq, k0 = c.varlen ? cuk[b] : b * s.Sk;
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        sc.assign(sk, -INFINITY);
        float m = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          if (!visible(i, j, sq, sk, c.causal ? c.wl : c.wl, c.causal ? 0 : c.wr)) continue;
          float acc = 0.f;
          for (int64_t d = 0; d < s.D; ++d)
            acc += q[((q0 + i) * s.Hq + h) * s.D + d] * k[((k0 + j) * s.Hkv + hk) * s.D + d];
          acc *= scale;
          if (c.softcap > 0.f) acc = c.softcap * std::tanh(acc / c.softcap);
          sc[j] = acc;
          m = std::max(m, acc);
        }
        float l = 0.f;
        p.assign(sk, 0.f);
        for (int64_t j = 0; j < sk; ++j) {
          if (sc[j] == -INFINITY) continue;
          p[j] = std::exp(sc[j] - m);
          l += p[j];
        }
        for (int64_t d = 0; d < s.Dv; ++d) {
          float acc = 0.f;
          for (int64_t j = 0; j < sk; ++j)
            if (p[j] != 0.f) acc += round_half(c.dt, p[j]) * v[((k0 + j) * s.Hkv + hk) * s.Dv + d];
          o[((q0 + i) * s.Hq + h) * s.Dv + d] = l > 0.f ? round_half(c.dt, acc / l) : 0.f;
        }
      }
    }
  }
}

struct Tensors {  // one problem's inputs: compact fp32 (rounded) and strided 16-bit host images
  std::vector<float> q, k, v;
  std::vector<uint16_t> qh, kh, vh;
  Strides qs, ks, vs, os;
};

void fill_strided(const std::vector<float>& compact, std::vector<uint16_t>& img, const Strides& st,
                  int64_t n0, int64_t rows, int64_t heads, int64_t dim, fa_dtype dt) {
  img.assign(st.span, to_half(dt, std::nanf("")));
  for (int64_t b = 0; b < n0; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d)
          img[b * st.batch + r * st.row + h * st.head + d] =
              to_half(dt, compact[((b * rows + r) * heads + h) * dim + d]);
}

// Runs one case on the GPU and against the CPU reference; prints one line; returns pass.
bool run_case(const Case& c, bool quiet = false) {
  const Shape& s = c.s;
  std::vector<int32_t> cuq(1, 0), cuk(1, 0);
  if (c.varlen) {
    for (int64_t b = 0; b < s.B; ++b) {
      cuq.push_back(cuq.back() + (s.lens_q.empty() ? static_cast<int32_t>(s.Sq) : s.lens_q[b]));
      cuk.push_back(cuk.back() + (s.lens_k.empty() ? static_cast<int32_t>(s.Sk) : s.lens_k[b]));
    }
  }
  const int64_t n0 = c.varlen ? 1 : s.B;
  const int64_t rq = c.varlen ? cuq.back() : s.Sq, rk = c.varlen ? cuk.back() : s.Sk;
  Tensors t;
  auto gen = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = round_half(c.dt, randn());
  };
  gen(t.q, n0 * rq * s.Hq * s.D);
  gen(t.k, n0 * rk * s.Hkv * s.D);
  gen(t.v, n0 * rk * s.Hkv * s.Dv);
  const Layout lay = c.varlen && c.layout == Layout::bhsd ? Layout::padded : c.layout;
  t.qs = strides_for(lay, n0, rq, s.Hq, s.D);
  t.ks = strides_for(lay, n0, rk, s.Hkv, s.D);
  t.vs = strides_for(lay, n0, rk, s.Hkv, s.Dv);
  t.os = strides_for(lay, n0, rq, s.Hq, s.Dv);
  fill_strided(t.q, t.qh, t.qs, n0, rq, s.Hq, s.D, c.dt);
  fill_strided(t.k, t.kh, t.ks, n0, rk, s.Hkv, s.D, c.dt);
  fill_strided(t.v, t.vh, t.vs, n0, rk, s.Hkv, s.Dv, c.dt);

  const uint16_t nan16 = to_half(c.dt, std::nanf(""));
  DeviceHalf dq, dk, dv, dout;
  dq.alloc(t.qs.span, nan16), dq.upload(t.qh);
  dk.alloc(t.ks.span, nan16), dk.upload(t.kh);
  dv.alloc(t.vs.span, nan16), dv.upload(t.vh);
  dout.alloc(t.os.span, nan16);
  const size_t lse_n = static_cast<size_t>(c.varlen ? s.Hq * rq : s.B * s.Hq * s.Sq);
  DeviceFloat dlse;
  dlse.alloc(lse_n);
  int32_t *dcuq = nullptr, *dcuk = nullptr;
  if (c.varlen) {
    GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&dcuq), cuq.size() * 4));
    GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&dcuk), cuk.size() * 4));
    GC_CUDA(cudaMemcpy(dcuq, cuq.data(), cuq.size() * 4, cudaMemcpyHostToDevice));
    GC_CUDA(cudaMemcpy(dcuk, cuk.data(), cuk.size() * 4, cudaMemcpyHostToDevice));
  }

  fa_fwd_params p{};
  p.struct_size = sizeof p;
  p.device = 0;
  p.dtype = c.dt;
  p.algorithm = FA_ALGORITHM_AUTO;
  p.batch = s.B, p.seqlen_q = s.Sq, p.seqlen_k = s.Sk, p.heads_q = s.Hq, p.heads_kv = s.Hkv;
  p.head_dim = s.D, p.head_dim_v = s.Dv;
  auto view = [](void* d, const Strides& st) { return fa_tensor{d, st.batch, st.row, st.head, 1}; };
  p.q = view(dq.data(), t.qs), p.k = view(dk.data(), t.ks), p.v = view(dv.data(), t.vs);
  p.o = view(dout.data(), t.os);
  p.lse = dlse.data();
  p.scale = 1.f / std::sqrt(static_cast<float>(s.D));
  p.softcap = c.softcap;
  p.causal = c.causal;
  p.window_left = c.wl, p.window_right = c.wr;
  if (c.varlen) p.cu_seqlens_q = dcuq, p.cu_seqlens_k = dcuk, p.total_q = rq, p.total_k = rk;

  const fa_status st = fa_fwd(&p, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  bool pass = true;
  std::string msg;
  if (sync != cudaSuccess) {
    std::printf("FAIL %s: device error %s\n", c.label().c_str(), cudaGetErrorString(sync));
    std::exit(3);
  }
  if (st == FA_STATUS_NOT_SUPPORTED && (s.D % 8 != 0 || s.Dv % 8 != 0)) {
    if (!quiet) std::printf("ok   %s: not supported as stated (%s)\n", c.label().c_str(), fa_last_error());
  } else if (st != FA_STATUS_OK) {
    std::printf("FAIL %s: status %d %s\n", c.label().c_str(), st, fa_last_error());
    pass = false;
  } else {
    // Reference (fp64, CPU) on the same rounded inputs, compact BSHD fp32.
    std::vector<float> oref(static_cast<size_t>(n0 * rq * s.Hq * s.Dv)), lref(lse_n);
    fa_fwd_params r = p;
    r.device = FA_DEVICE_CPU, r.dtype = FA_DTYPE_FP32, r.algorithm = FA_ALGORITHM_REFERENCE;
    auto cview = [](void* d, int64_t rows, int64_t heads, int64_t dim) {
      return fa_tensor{d, rows * heads * dim, heads * dim, dim, 1};
    };
    r.q = cview(t.q.data(), rq, s.Hq, s.D), r.k = cview(t.k.data(), rk, s.Hkv, s.D);
    r.v = cview(t.v.data(), rk, s.Hkv, s.Dv), r.o = cview(oref.data(), rq, s.Hq, s.Dv);
    r.lse = lref.data();
    if (c.varlen) r.cu_seqlens_q = cuq.data(), r.cu_seqlens_k = cuk.data();
    if (fa_fwd(&r, nullptr) != FA_STATUS_OK) {
      std::printf("FAIL %s: CPU reference: %s\n", c.label().c_str(), fa_last_error());
      std::exit(4);
    }
    std::vector<float> olow(oref.size());
    reference_low(c, t.q, t.k, t.v, cuq, cuk, olow);

    const std::vector<uint16_t> og = dout.download_all();
    const std::vector<float> lg = dlse.download_all();
    double err = 0, err_low = 0, maxref = 0, lse_err = 0;
    bool nan = false, canary = true, lse_bad = false;
    std::vector<char> written(og.size(), 0);
    for (int64_t b = 0; b < n0; ++b)
      for (int64_t i = 0; i < rq; ++i)
        for (int64_t h = 0; h < s.Hq; ++h)
          for (int64_t d = 0; d < s.Dv; ++d) {
            const size_t off = DeviceHalf::kMargin + b * t.os.batch + i * t.os.row + h * t.os.head + d;
            written[off] = 1;
            const float g = from_half(c.dt, og[off]);
            const size_t ci = static_cast<size_t>(((b * rq + i) * s.Hq + h) * s.Dv + d);
            if (std::isnan(g)) nan = true;
            err = std::max(err, std::fabs(static_cast<double>(g) - oref[ci]));
            err_low = std::max(err_low, std::fabs(static_cast<double>(olow[ci]) - oref[ci]));
            maxref = std::max(maxref, std::fabs(static_cast<double>(oref[ci])));
          }
    for (size_t i = 0; i < og.size(); ++i)
      if (!written[i] && og[i] != nan16) canary = false;
    for (size_t i = 0; i < lg.size(); ++i) {
      const bool in = i >= DeviceFloat::kMargin && i < DeviceFloat::kMargin + lse_n;
      if (!in) {
        if (!std::isnan(lg[i])) canary = false;
        continue;
      }
      const float g = lg[i], rf = lref[i - DeviceFloat::kMargin];
      if (std::isnan(g)) { lse_bad = true; continue; }
      if (std::isinf(rf) || std::isinf(g)) {
        if (g != rf) lse_bad = true;
        continue;
      }
      // fp32 scores from exact products: error ~ D·2^-24·|s|; 1e-4 relative leaves a wide margin.
      const double e = std::fabs(static_cast<double>(g) - rf);
      lse_err = std::max(lse_err, e / std::max(1.0, std::fabs(static_cast<double>(rf))));
      if (e > 1e-4 * std::max(1.0, std::fabs(static_cast<double>(rf)))) lse_bad = true;
    }
    const double atol = ulp_at(c.dt, maxref);
    ++g_kernels[std::string(c.varlen ? "varlen " : "dense ") + kernel_or(fa_fwd_kernel_name(&p))];
    pass = !nan && canary && !lse_bad && err <= 2 * err_low + atol;
    if (!pass || !quiet)
      std::printf("%s %s [%s]: err %.3g  2*err_low+atol %.3g  lse_rel %.2g%s%s%s\n", pass ? "ok  " : "FAIL",
                  c.label().c_str(), kernel_or(fa_fwd_kernel_name(&p)), err, 2 * err_low + atol, lse_err,
                  nan ? " NaN" : "", canary ? "" : " CANARY", lse_bad ? " LSE" : "");
  }
  dq.release(), dk.release(), dv.release(), dout.release(), dlse.release();
  if (dcuq) {
    GC_CUDA(cudaFree(dcuq));
    GC_CUDA(cudaFree(dcuk));
  }
  if (!pass) ++g_failures;
  return pass;
}

Shape shape(const char* name, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
            int64_t Dv) {
  return Shape{name, B, Sq, Sk, Hq, Hkv, D, Dv, {}, {}};
}

void mode_correct(const std::string& shapes_file) {
  std::vector<Shape> shapes = read_shapes(shapes_file);
  if (shapes.empty()) {
    std::printf("FAIL: no shapes read from %s\n", shapes_file.c_str());
    ++g_failures;
  }
  shapes.push_back(shape("gqa", 2, 257, 257, 8, 2, 128, 128));
  shapes.push_back(shape("mqa_d96", 1, 130, 300, 6, 1, 96, 96));
  shapes.push_back(shape("decode", 3, 1, 1000, 4, 2, 128, 128));
  shapes.push_back(shape("d64_dv128", 2, 77, 150, 2, 2, 64, 128));
  shapes.push_back(shape("d200", 1, 190, 260, 2, 1, 200, 200));
  shapes.push_back(shape("bh_over_64k", 2, 2, 3, 40000, 40000, 64, 64));
  // Masked hdim-64 problems from 2048 query rows run the 192-row tiles: 4096 = 21·192 + 64, so
  // the last (the diagonal's longest) tile splits its keys over the warpgroups (consumer_split).
  shapes.push_back(shape("tail_d64", 1, 4096, 4096, 1, 1, 64, 64));
  // From 2048 query rows too: 2048 = 10·192 + 128, so the last tile has two slices in the
  // sequence and its third lies wholly past it (sm90/fwd_config.h, kTail), under every mask.
  shapes.push_back(shape("tail2_d64", 1, 2048, 2048, 1, 1, 64, 64));
  // Masked rows whose tiles a diagonal cuts past the first slices: hdim 256 above 1024 keys
  // (80-key blocks under 128 rows), hdim 64's 192-row tiles with Sq != Sk.
  shapes.push_back(shape("mid_d256", 1, 1300, 1300, 2, 1, 256, 256));
  shapes.push_back(shape("sq_gt_sk_d64", 1, 2200, 1900, 2, 1, 64, 64));
  // Packed hdim-64 problems of 2048 query rows and more: the 192-row varlen kernels, softcapped
  // and windowed ones on the kernel with every pass (sequences of 2300, 700 / 900 and 2049 rows).
  Shape vl64 = shape("varlen_d64_long", 3, 2300, 2300, 2, 1, 64, 64);
  vl64.lens_q = {2300, 700, 2049}, vl64.lens_k = {2300, 900, 2049};
  shapes.push_back(vl64);
  struct Feature {
    bool causal;
    int64_t wl, wr;
    float cap;
  };
  const Feature features[] = {{false, -1, -1, 0.f}, {true, -1, -1, 0.f}, {false, 16, 0, 0.f},
                              {false, 3, 7, 0.f},   {true, 20, -1, 0.f}, {false, -1, -1, 5.f},
                              {true, -1, -1, 30.f}};
  int idx = 0, n = 0;
  for (const Shape& s : shapes) {
    for (const Feature& f : features) {
      for (fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
        Case c;
        c.s = s, c.causal = f.causal, c.wl = f.wl, c.wr = f.wr, c.softcap = f.cap, c.dt = dt;
        c.layout = static_cast<Layout>(idx++ % 3);
        const bool big = s.Hq * s.B > 1000;
        if (big && (f.wl >= 0 || f.cap > 0 || dt == FA_DTYPE_FP16)) continue;
        run_case(c, true), ++n;
        if (!s.lens_q.empty() || s.name == "gqa") {
          c.varlen = true;
          run_case(c, true), ++n;
        }
      }
    }
  }
  std::printf("correct: %d cases, %d failures\n", n, g_failures);
  for (const auto& [name, count] : g_kernels) std::printf("  %s: %d cases\n", name.c_str(), count);
}

// Same inputs 100 times with B >= 60: O and LSE must be bitwise equal every time.
void mode_determinism() {
  for (int64_t D : {64, 128, 256}) {
    const int64_t B = 64, S = 256, H = 2;
    const size_t nq = B * S * H * D;
    std::vector<uint16_t> h(nq);
    DeviceHalf q, k, v, o;
    for (DeviceHalf* t : {&q, &k, &v}) {
      for (auto& e : h) e = to_bf16(randn());
      t->alloc(nq, 0), t->upload(h);
    }
    o.alloc(nq, 0xffff);
    DeviceFloat lse;
    lse.alloc(B * H * S);
    fa_fwd_params p{};
    p.struct_size = sizeof p, p.device = 0, p.dtype = FA_DTYPE_BF16;
    p.batch = B, p.seqlen_q = S, p.seqlen_k = S, p.heads_q = H, p.heads_kv = H, p.head_dim = D, p.head_dim_v = D;
    const fa_tensor tv{nullptr, S * H * D, H * D, D, 1};
    p.q = tv, p.k = tv, p.v = tv, p.o = tv;
    p.q.data = q.data(), p.k.data = k.data(), p.v.data = v.data(), p.o.data = o.data(), p.lse = lse.data();
    p.scale = 1.f / std::sqrt(static_cast<float>(D)), p.causal = 1, p.window_left = -1, p.window_right = -1;
    std::vector<uint16_t> o0;
    std::vector<float> l0;
    bool same = true;
    for (int it = 0; it < 100; ++it) {
      if (fa_fwd(&p, nullptr) != FA_STATUS_OK) {
        std::printf("FAIL determinism D=%lld: %s\n", static_cast<long long>(D), fa_last_error());
        ++g_failures;
        break;
      }
      GC_CUDA(cudaDeviceSynchronize());
      auto oh = o.download_all();
      auto lh = lse.download_all();
      if (it == 0) o0 = oh, l0 = lh;
      else if (std::memcmp(oh.data(), o0.data(), oh.size() * 2) != 0 ||
               std::memcmp(lh.data(), l0.data(), lh.size() * 4) != 0)
        same = false;
    }
    std::printf("%s determinism D=%lld B=%lld: 100 runs bitwise %s\n", same ? "ok  " : "FAIL",
                static_cast<long long>(D), static_cast<long long>(B), same ? "equal" : "DIFFERENT");
    if (!same) ++g_failures;
    q.release(), k.release(), v.release(), o.release(), lse.release();
  }
}

// Tensors over 2^31 elements: batch 1 of q, k, v, o starts past element 2^31.
void mode_bigoffset() {
  const int64_t B = 2, S = 200, H = 2, D = 128;
  const int64_t bstride = (int64_t{1} << 31) + 1024;
  const size_t n = static_cast<size_t>(bstride + S * H * D);
  const size_t per = S * H * D;
  std::vector<float> host[3];
  uint16_t* dev[4];
  for (int i = 0; i < 4; ++i) {
    GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev[i]), n * 2));
    GC_CUDA(cudaMemset(dev[i], 0xff, n * 2));
  }
  for (int i = 0; i < 3; ++i) {
    host[i].resize(B * per);
    std::vector<uint16_t> h(per);
    for (int64_t b = 0; b < B; ++b) {
      for (size_t e = 0; e < per; ++e) {
        h[e] = to_bf16(randn());
        host[i][b * per + e] = from_bf16(h[e]);
      }
      GC_CUDA(cudaMemcpy(dev[i] + b * bstride, h.data(), per * 2, cudaMemcpyHostToDevice));
    }
  }
  float* lse;
  GC_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse), B * H * S * 4));
  fa_fwd_params p{};
  p.struct_size = sizeof p, p.device = 0, p.dtype = FA_DTYPE_BF16;
  p.batch = B, p.seqlen_q = S, p.seqlen_k = S, p.heads_q = H, p.heads_kv = H, p.head_dim = D, p.head_dim_v = D;
  const fa_tensor tv{nullptr, bstride, H * D, D, 1};
  p.q = tv, p.k = tv, p.v = tv, p.o = tv;
  p.q.data = dev[0], p.k.data = dev[1], p.v.data = dev[2], p.o.data = dev[3], p.lse = lse;
  p.scale = 1.f / std::sqrt(static_cast<float>(D)), p.causal = 1, p.window_left = -1, p.window_right = -1;
  const fa_status st = fa_fwd(&p, nullptr);
  GC_CUDA(cudaDeviceSynchronize());
  std::vector<float> oref(B * per), lref(B * H * S);
  fa_fwd_params r = p;
  r.device = FA_DEVICE_CPU, r.dtype = FA_DTYPE_FP32, r.algorithm = FA_ALGORITHM_REFERENCE;
  const fa_tensor cv{nullptr, S * H * D, H * D, D, 1};
  r.q = cv, r.k = cv, r.v = cv, r.o = cv;
  r.q.data = host[0].data(), r.k.data = host[1].data(), r.v.data = host[2].data(), r.o.data = oref.data();
  r.lse = lref.data();
  double err = 0, maxref = 0;
  bool ok = st == FA_STATUS_OK && fa_fwd(&r, nullptr) == FA_STATUS_OK;
  if (ok) {
    std::vector<uint16_t> h(per);
    for (int64_t b = 0; b < B; ++b) {
      GC_CUDA(cudaMemcpy(h.data(), dev[3] + b * bstride, per * 2, cudaMemcpyDeviceToHost));
      for (size_t e = 0; e < per; ++e) {
        const float g = from_bf16(h[e]);
        if (std::isnan(g)) ok = false;
        err = std::max(err, std::fabs(static_cast<double>(g) - oref[b * per + e]));
        maxref = std::max(maxref, std::fabs(static_cast<double>(oref[b * per + e])));
      }
    }
  }
  // No low-precision reference here: bound by bf16 rounding of P and O (a few ulps of |O|max).
  ok = ok && err <= 8 * ulp_at(FA_DTYPE_BF16, maxref);
  std::printf("%s bigoffset (batch stride 2^31+1024 elements): err %.3g (bound %.3g)%s\n", ok ? "ok  " : "FAIL",
              err, 8 * ulp_at(FA_DTYPE_BF16, maxref), st == FA_STATUS_OK ? "" : fa_last_error());
  if (!ok) ++g_failures;
  for (auto* d : dev) GC_CUDA(cudaFree(d));
  GC_CUDA(cudaFree(lse));
}

// A few small awkward cases, for compute-sanitizer (memcheck, racecheck).
void mode_sanitize() {
  Shape v = shape("san_varlen", 3, 70, 90, 2, 1, 64, 64);
  v.lens_q = {70, 0, 33}, v.lens_k = {5, 90, 77};
  Case c;
  c.s = v, c.varlen = true, c.causal = true;
  run_case(c);
  c.s = shape("san_d200", 1, 131, 67, 2, 2, 200, 200), c.varlen = false, c.causal = false, c.wl = 9, c.wr = 4;
  c.layout = Layout::padded;
  run_case(c);
  c.s = shape("san_d128", 2, 129, 200, 4, 2, 128, 128), c.wl = -1, c.wr = -1, c.causal = true, c.dt = FA_DTYPE_FP16;
  run_case(c);
  // More tiles than multiprocessors: persistent CTAs run several tiles, so the Q buffers, the
  // tile slots and (sm90) the O stores through a finished tile's Q buffer are reused.
  c.s = shape("san_rounds_d128", 2, 520, 300, 16, 4, 128, 128), c.causal = false, c.dt = FA_DTYPE_BF16;
  run_case(c);
  c.s = shape("san_rounds_d256", 2, 300, 200, 24, 8, 256, 256), c.causal = true;
  run_case(c);
  // 1000 = 5·192 + 40 query rows: the last q block of the 192-row hdim-64 tiles has one slice in
  // the sequence, its three key blocks split over the warpgroups (consumer_split), on CTAs that
  // run several tiles.
  c.s = shape("san_split_d64", 2, 1000, 300, 16, 4, 64, 64), c.causal = false;
  run_case(c);
  // 1060 = 5·192 + 100 and 2048 = 10·192 + 128: the last q block has two slices in the sequence
  // (kTail's other case), on CTAs that run several tiles; causal from 2048 query rows, where
  // masked problems take the 192-row kernel.
  c.s = shape("san_split2_d64", 2, 1060, 300, 16, 4, 64, 64);
  run_case(c);
  c.s = shape("san_split2_causal_d64", 1, 2048, 400, 4, 2, 64, 64), c.causal = true;
  run_case(c);
  // The cases above run the last sm90 row of their head dim (sm90/fwd_config.h, kRow). Unmasked
  // and long enough for the first row at 128 and 256 (part of the softmax under the P·V in
  // flight); masked with more than 1024 keys for the second row at 256 (80-key blocks).
  c.s = shape("san_long_d128", 1, 150, 4100, 2, 1, 128, 128), c.causal = false;
  run_case(c);
  c.s = shape("san_long_d256", 1, 150, 2100, 2, 2, 256, 256), c.dt = FA_DTYPE_FP16;
  run_case(c);
  c.s = shape("san_mid_d256", 1, 300, 1100, 2, 1, 256, 256), c.causal = true, c.dt = FA_DTYPE_BF16;
  run_case(c);
  // At most 1024 keys at 256 run 64-key blocks with O staged in one 64-row buffer that the two
  // warpgroups take in turn (kOHalf): 320 tiles, so CTAs hand that buffer over for several rounds.
  c.s = shape("san_ohalf_d256", 1, 640, 300, 64, 8, 256, 256), c.causal = false;
  run_case(c);
}

// The ANCHORS grid: bf16, 16k tokens, heads = 2048 / hdim; median of CUDA-event timings.
void mode_bench(const char* json_path, const char* hdim_list) {
  const int64_t tokens = 16384, width = 2048;
  const size_t n = tokens * width;
  std::vector<uint16_t> h(n);
  DeviceHalf q, k, v, o;
  for (DeviceHalf* t : {&q, &k, &v}) {
    for (auto& e : h) e = to_bf16(randn());
    t->alloc(n, 0), t->upload(h);
  }
  o.alloc(n, 0);
  std::vector<cudaEvent_t> ev(60);
  for (auto& e : ev) GC_CUDA(cudaEventCreate(&e));
  constexpr size_t kFlushBytes = size_t{256} << 20;
  void* flush = nullptr;
  GC_CUDA(cudaMalloc(&flush, kFlushBytes));
  std::vector<int64_t> hdims;
  for (const char* c = hdim_list; c && *c;) {
    hdims.push_back(std::strtoll(c, nullptr, 10));
    c = std::strchr(c, ',');
    if (c) ++c;
  }
  if (hdims.empty()) hdims = {64, 128, 256};
  FILE* js = json_path ? std::fopen(json_path, "w") : nullptr;
  if (js) std::fprintf(js, "[\n");
  bool first = true;
  std::printf("%5s %6s %6s %8s %8s\n", "hdim", "causal", "seqlen", "ms", "TFLOP/s");
  for (int64_t D : hdims) {
    for (int causal = 0; causal < 2; ++causal) {
      for (int64_t S : {512, 1024, 2048, 4096, 8192, 16384}) {
        const int64_t B = tokens / S, H = width / D;
        fa_fwd_params p{};
        p.struct_size = sizeof p, p.device = 0, p.dtype = FA_DTYPE_BF16;
        p.batch = B, p.seqlen_q = S, p.seqlen_k = S, p.heads_q = H, p.heads_kv = H, p.head_dim = D, p.head_dim_v = D;
        const fa_tensor tv{nullptr, S * H * D, H * D, D, 1};
        p.q = tv, p.k = tv, p.v = tv, p.o = tv;
        p.q.data = q.data(), p.k.data = k.data(), p.v.data = v.data(), p.o.data = o.data(), p.lse = nullptr;
        p.scale = 1.f / std::sqrt(static_cast<float>(D)), p.causal = causal, p.window_left = -1, p.window_right = -1;
        if (fa_can_implement_fwd(&p) != FA_STATUS_OK) continue;
        for (int i = 0; i < 5; ++i) fa_fwd(&p, nullptr);
        // As triton.testing.do_bench: launches queued back to back (host overhead hidden), the
        // L2 flushed by a 256 MiB memset before each timed run, outside its events.
        constexpr int kReps = 30;
        std::vector<float> ms;
        for (int i = 0; i < kReps; ++i) {
          GC_CUDA(cudaMemsetAsync(flush, 0, kFlushBytes));
          GC_CUDA(cudaEventRecord(ev[2 * i]));
          if (fa_fwd(&p, nullptr) != FA_STATUS_OK) {
            std::printf("FAIL bench: %s\n", fa_last_error());
            ++g_failures;
            break;
          }
          GC_CUDA(cudaEventRecord(ev[2 * i + 1]));
        }
        GC_CUDA(cudaDeviceSynchronize());
        for (int i = 0; i < kReps; ++i) {
          float t = 0;
          GC_CUDA(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
          ms.push_back(t);
        }
        if (ms.empty()) continue;
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double flops = 4.0 * B * H * S * S * D / (causal ? 2 : 1);
        const double tf = flops / (med * 1e-3) / 1e12;
        std::printf("%5lld %6d %6lld %8.3f %8.1f\n", static_cast<long long>(D), causal,
                    static_cast<long long>(S), med, tf);
        if (js)
          std::fprintf(js,
                       "%s  {\"op\": \"fwd\", \"dtype\": \"bf16\", \"hdim\": %lld, \"causal\": %s, \"seqlen\": %lld, "
                       "\"batch\": %lld, \"heads\": %lld, \"impl\": \"flashattn\", \"kernel\": \"%s\", \"ms\": %.4f, "
                       "\"tflops\": %.1f}",
                       first ? "" : ",\n", static_cast<long long>(D), causal ? "true" : "false",
                       static_cast<long long>(S), static_cast<long long>(B), static_cast<long long>(H),
                       fa_fwd_kernel_name(&p), med, tf);
        first = false;
      }
    }
  }
  if (js) std::fprintf(js, "\n]\n"), std::fclose(js);
  q.release(), k.release(), v.release(), o.release();
  GC_CUDA(cudaFree(flush));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  const uint64_t seed = argc > 3 && mode != "bench" ? std::strtoull(argv[3], nullptr, 10)
                                 : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  g_rng.seed(seed);
  std::printf("check_fwd %s, seed %llu, %d CUDA device(s)\n", mode.c_str(), static_cast<unsigned long long>(seed),
              fa_cuda_device_count());
  if (fa_cuda_device_count() < 1) {
    std::printf("FAIL: no CUDA device\n");
    return 1;
  }
  if (mode == "correct" || mode == "all") mode_correct(argc > 2 ? argv[2] : FA_AWKWARD_SHAPES_FILE);
  if (mode == "determinism" || mode == "all") mode_determinism();
  if (mode == "bigoffset" || mode == "all") mode_bigoffset();
  if (mode == "sanitize") mode_sanitize();
  // bench [json path or -] [head dims, e.g. 64,256]
  if (mode == "bench")
    mode_bench(argc > 2 && std::strcmp(argv[2], "-") != 0 ? argv[2] : nullptr, argc > 3 ? argv[3] : nullptr);
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
