// Tests: shared helpers of the GoogleTest suite (see test_util.h).
// Only the C ABI is used; the mask and the dtype rounding are written out again here on purpose,
// so that the tests do not inherit the library's mistakes.
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace fat {

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

// ---- dtype rounding --------------------------------------------------------------------------

uint16_t float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x0040);
  // Round to nearest even on the 16 bits dropped.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_fp16(float f) {
  uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf (65504 is odd)
  if (x < 0x38800000u) {
    // Below 2^-14: a subnormal half, an integer multiple of 2^-24 (1024 is the first normal).
    const float a = float_of(x) * 16777216.f;  // exact: a power-of-two scale
    return sign | static_cast<uint16_t>(std::nearbyint(a));
  }
  x += 0x0fffu + ((x >> 13) & 1u);              // round to nearest even on 13 dropped bits
  return sign | static_cast<uint16_t>((x - 0x38000000u) >> 13);  // exponent bias 127 -> 15
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

float round_to(fa_dtype dt, float f) {
  switch (dt) {
    case FA_DTYPE_BF16: return bf16_to_float(float_to_bf16(f));
    case FA_DTYPE_FP16: return fp16_to_float(float_to_fp16(f));
    default: return f;
  }
}

double ulp_at(fa_dtype dt, double m) {
  const int mant = dt == FA_DTYPE_BF16 ? 7 : dt == FA_DTYPE_FP16 ? 10 : 23;
  // Below the smallest normal the step stays that of the subnormals: 2^-24 in fp16 (from 6.1e-5
  // down), 2^-133 in bf16, 2^-149 in fp32.
  const int min_exp = dt == FA_DTYPE_BF16 ? -133 : dt == FA_DTYPE_FP16 ? -24 : -149;
  if (!(m > 0)) m = 1e-30;
  int e = 0;
  std::frexp(m, &e);  // m = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1 - mant, min_exp));
}

const char* dtype_name(fa_dtype dt) {
  switch (dt) {
    case FA_DTYPE_FP32: return "fp32";
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
  }
  return "?";
}

// ---- strided host tensors --------------------------------------------------------------------

fa_tensor Stored::view() {
  fa_tensor t;
  t.data = bytes.data();
  t.batch_stride = s0;
  t.row_stride = s1;
  t.head_stride = s2;
  t.dim_stride = 1;
  return t;
}

float Stored::get(int64_t off) const {
  if (dtype == FA_DTYPE_FP32) {
    float f;
    std::memcpy(&f, bytes.data() + off * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + off * 2, 2);
  return dtype == FA_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

void Stored::set(int64_t off, float f) {
  if (dtype == FA_DTYPE_FP32) {
    std::memcpy(bytes.data() + off * 4, &f, 4);
    return;
  }
  const uint16_t h = dtype == FA_DTYPE_BF16 ? float_to_bf16(f) : float_to_fp16(f);
  std::memcpy(bytes.data() + off * 2, &h, 2);
}

Stored poisoned(Dims d, fa_dtype dt, Layout layout) {
  Stored t;
  t.dtype = dt;
  t.dims = d;
  int64_t elems = 0;
  switch (layout) {
    case Layout::bshd:
      t.s2 = d.n3;
      t.s1 = d.n2 * d.n3;
      t.s0 = d.n1 * t.s1;
      elems = d.n0 * t.s0;
      break;
    case Layout::bhsd:
      t.s1 = d.n3;
      t.s2 = d.n1 * d.n3;
      t.s0 = d.n2 * t.s2;
      elems = d.n0 * t.s0;
      break;
    case Layout::padded:
      t.s2 = d.n3 + 3;
      t.s1 = d.n2 * t.s2 + 5;
      t.s0 = d.n1 * t.s1 + 7;
      elems = d.n0 * t.s0;
      break;
  }
  const size_t esize = dt == FA_DTYPE_FP32 ? 4 : 2;
  t.bytes.resize(static_cast<size_t>(std::max<int64_t>(elems, 1)) * esize);
  for (int64_t i = 0; i < std::max<int64_t>(elems, 1); ++i) t.set(i, kNaN);
  return t;
}

Stored store(const std::vector<float>& values, Dims d, fa_dtype dt, Layout layout) {
  Stored t = poisoned(d, dt, layout);
  int64_t n = 0;
  for (int64_t a = 0; a < d.n0; ++a)
    for (int64_t b = 0; b < d.n1; ++b)
      for (int64_t c = 0; c < d.n2; ++c)
        for (int64_t e = 0; e < d.n3; ++e) t.set(t.offset(a, b, c, e), values[n++]);
  return t;
}

std::vector<float> load(const Stored& t) {
  const Dims& d = t.dims;
  std::vector<float> out;
  out.reserve(d.count());
  for (int64_t a = 0; a < d.n0; ++a)
    for (int64_t b = 0; b < d.n1; ++b)
      for (int64_t c = 0; c < d.n2; ++c)
        for (int64_t e = 0; e < d.n3; ++e) out.push_back(t.get(t.offset(a, b, c, e)));
  return out;
}

// ---- problems --------------------------------------------------------------------------------

float Problem::effective_scale() const {
  return scale > 0.f ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
}

int64_t Problem::total_q() const {
  if (!varlen()) return B * Sq;
  int64_t t = 0;
  for (int32_t l : lens_q) t += l;
  return t;
}

int64_t Problem::total_k() const {
  if (!varlen()) return B * Sk;
  int64_t t = 0;
  for (int32_t l : lens_k) t += l;
  return t;
}

static std::vector<int32_t> prefix(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(1, 0);
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

std::vector<int32_t> Problem::cu_q() const { return prefix(lens_q); }
std::vector<int32_t> Problem::cu_k() const { return prefix(lens_k); }

Dims Problem::q_dims() const {
  return varlen() ? Dims{1, total_q(), Hq, D} : Dims{B, Sq, Hq, D};
}
Dims Problem::k_dims() const {
  return varlen() ? Dims{1, total_k(), Hkv, D} : Dims{B, Sk, Hkv, D};
}
Dims Problem::v_dims() const {
  return varlen() ? Dims{1, total_k(), Hkv, Dv} : Dims{B, Sk, Hkv, Dv};
}
Dims Problem::o_dims() const {
  return varlen() ? Dims{1, total_q(), Hq, Dv} : Dims{B, Sq, Hq, Dv};
}

int64_t Problem::row0_q(int64_t b) const {
  if (!varlen()) return b * Sq;
  int64_t r = 0;
  for (int64_t i = 0; i < b; ++i) r += lens_q[i];
  return r;
}

int64_t Problem::row0_k(int64_t b) const {
  if (!varlen()) return b * Sk;
  int64_t r = 0;
  for (int64_t i = 0; i < b; ++i) r += lens_k[i];
  return r;
}

int64_t Problem::lse_index(int64_t b, int64_t h, int64_t i) const {
  if (!varlen()) return (b * Hq + h) * Sq + i;
  return h * total_q() + row0_q(b) + i;
}

bool Problem::visible(int64_t b, int64_t i, int64_t j) const {
  const int64_t sq = len_q(b), sk = len_k(b);
  const int64_t left = window_left < 0 ? -1 : window_left;
  const int64_t right = causal ? 0 : (window_right < 0 ? -1 : window_right);
  const int64_t lo = i + sk - sq;  // the aligned diagonal
  return (left < 0 || j >= lo - left) && (right < 0 || j <= lo + right);
}

std::string Problem::str() const {
  std::ostringstream s;
  s << (name.empty() ? "problem" : name) << " B=" << B << " Sq=" << Sq << " Sk=" << Sk
    << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D << " Dv=" << Dv << " causal=" << causal
    << " window=(" << window_left << "," << window_right << ") softcap=" << softcap
    << " scale=" << effective_scale();
  if (varlen()) {
    s << " varlen=";
    for (size_t b = 0; b < lens_q.size(); ++b) s << (b ? "," : "") << lens_q[b] << ":" << lens_k[b];
  }
  return s.str();
}

void PrintTo(const Problem& p, std::ostream* os) { *os << p.str(); }

Inputs random_inputs(const Problem& p, fa_dtype dt, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.f, 1.f);
  auto fill = [&](Dims d) {
    std::vector<float> v(static_cast<size_t>(d.count()));
    for (float& x : v) x = round_to(dt, n(rng));
    return v;
  };
  Inputs in;
  in.q = fill(p.q_dims());
  in.k = fill(p.k_dims());
  in.v = fill(p.v_dims());
  in.dout = fill(p.o_dims());
  return in;
}

Call::Call(const Problem& pr, const Inputs& in, RunOpts options) : p(pr), opts(options) {
  const fa_dtype dt = opts.dtype;
  q = store(in.q, p.q_dims(), dt, opts.layout);
  k = store(in.k, p.k_dims(), dt, opts.layout);
  v = store(in.v, p.v_dims(), dt, opts.layout);
  o = poisoned(p.o_dims(), dt, opts.layout);
  if (!in.dout.empty()) dout = store(in.dout, p.o_dims(), dt, opts.layout);
  else dout = poisoned(p.o_dims(), dt, opts.layout);
  dq = poisoned(p.q_dims(), dt, opts.layout);
  dk = poisoned(p.k_dims(), dt, opts.layout);
  dv = poisoned(p.v_dims(), dt, opts.layout);
  lse.assign(static_cast<size_t>(std::max<int64_t>(p.lse_count(), 1)), kNaN);
  if (p.varlen()) {
    cu_q = p.cu_q();
    cu_k = p.cu_k();
  }

  fwd.struct_size = sizeof(fa_fwd_params);
  fwd.device = FA_DEVICE_CPU;
  fwd.dtype = dt;
  fwd.algorithm = opts.algorithm;
  fwd.batch = p.B;
  fwd.seqlen_q = p.Sq;
  fwd.seqlen_k = p.Sk;
  fwd.heads_q = p.Hq;
  fwd.heads_kv = p.Hkv;
  fwd.head_dim = p.D;
  fwd.head_dim_v = p.Dv;
  fwd.q = q.view();
  fwd.k = k.view();
  fwd.v = v.view();
  fwd.o = o.view();
  fwd.lse = lse.data();
  fwd.scale = p.effective_scale();
  fwd.softcap = p.softcap;
  fwd.causal = p.causal ? 1 : 0;
  fwd.deterministic = 0;
  fwd.window_left = p.window_left;
  fwd.window_right = p.window_right;
  if (p.varlen()) {
    fwd.cu_seqlens_q = cu_q.data();
    fwd.cu_seqlens_k = cu_k.data();
    fwd.total_q = p.total_q();
    fwd.total_k = p.total_k();
  }
  fwd.num_threads = opts.num_threads;

  bwd.struct_size = sizeof(fa_bwd_params);
  bwd.dout = dout.view();
  bwd.dq = dq.view();
  bwd.dk = dk.view();
  bwd.dv = dv.view();
}

void Call::set_forward_result(const Outputs& f) {
  o = store(f.o, p.o_dims(), opts.dtype, opts.layout);
  fwd.o = o.view();
  lse = f.lse;
  if (lse.empty()) lse.assign(1, kNaN);
  fwd.lse = lse.data();
}

fa_status Call::run_fwd() { return fa_fwd(&fwd, nullptr); }

fa_status Call::run_bwd() {
  bwd.fwd = fwd;
  return fa_bwd(&bwd, nullptr);
}

namespace {
void expect_written(const char* what, const std::vector<float>& t) {
  const int64_t n = count_nan(t);
  EXPECT_EQ(n, 0) << what << ": " << n << " of " << t.size() << " elements NaN (unwritten or NaN)";
}

std::string run_label(const RunOpts& o) {
  std::ostringstream s;
  s << dtype_name(o.dtype) << " "
    << (o.algorithm == FA_ALGORITHM_REFERENCE ? "reference"
        : o.algorithm == FA_ALGORITHM_FLASH   ? "flash"
                                              : "auto")
    << " threads=" << o.num_threads;
  return s.str();
}
}  // namespace

Outputs run(const Problem& p, const Inputs& in, const RunOpts& opts, bool backward) {
  Outputs out;
  Call c(p, in, opts);
  const fa_status s = c.run_fwd();
  EXPECT_EQ(s, FA_STATUS_OK) << "fa_fwd (" << run_label(opts) << "): " << fa_last_error();
  if (s != FA_STATUS_OK) return out;
  out.o = load(c.o);
  out.lse.assign(c.lse.begin(), c.lse.begin() + p.lse_count());
  expect_written("O", out.o);
  expect_written("LSE", out.lse);
  if (!backward) return out;
  const fa_status sb = c.run_bwd();
  EXPECT_EQ(sb, FA_STATUS_OK) << "fa_bwd (" << run_label(opts) << "): " << fa_last_error();
  if (sb != FA_STATUS_OK) return out;
  out.dq = load(c.dq);
  out.dk = load(c.dk);
  out.dv = load(c.dv);
  expect_written("dQ", out.dq);
  expect_written("dK", out.dk);
  expect_written("dV", out.dv);
  return out;
}

Outputs run_bwd(const Problem& p, const Inputs& in, const RunOpts& opts, const Outputs& f) {
  Outputs out = f;
  Call c(p, in, opts);
  c.set_forward_result(f);
  const fa_status sb = c.run_bwd();
  EXPECT_EQ(sb, FA_STATUS_OK) << "fa_bwd (" << run_label(opts) << "): " << fa_last_error();
  if (sb != FA_STATUS_OK) return out;
  out.dq = load(c.dq);
  out.dk = load(c.dk);
  out.dv = load(c.dv);
  expect_written("dQ", out.dq);
  expect_written("dK", out.dk);
  expect_written("dV", out.dv);
  return out;
}

// ---- checks ----------------------------------------------------------------------------------

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double max_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    m = std::max(m, std::fabs(static_cast<double>(x) - static_cast<double>(y)));
  }
  return m;
}

int64_t count_nan(const std::vector<float>& a) {
  int64_t n = 0;
  for (float x : a) n += std::isnan(x) ? 1 : 0;
  return n;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

std::string check_lse_pattern(const Problem& p, const std::vector<float>& lse) {
  if (static_cast<int64_t>(lse.size()) != p.lse_count()) return "LSE has the wrong size";
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t i = 0; i < p.len_q(b); ++i) {
      bool any = false;
      for (int64_t j = 0; j < p.len_k(b) && !any; ++j) any = p.visible(b, i, j);
      for (int64_t h = 0; h < p.Hq; ++h) {
        const float l = lse[p.lse_index(b, h, i)];
        if (any ? !std::isfinite(l) : !(std::isinf(l) && l < 0)) {
          std::ostringstream s;
          s << "LSE[b=" << b << ", h=" << h << ", i=" << i << "] = " << l << " but the row "
            << (any ? "sees keys (want finite)" : "sees no key (want -inf)");
          return s.str();
        }
      }
    }
  }
  return "";
}

uint64_t test_seed() {
  if (const char* e = std::getenv("FA_TEST_SEED")) return std::strtoull(e, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

#ifndef FA_AWKWARD_SHAPES_FILE
#define FA_AWKWARD_SHAPES_FILE "awkward_shapes.txt"
#endif

std::vector<Shape> awkward_shapes(std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = std::string(FA_AWKWARD_SHAPES_FILE) + ": " + why;
    return std::vector<Shape>{};
  };
  std::ifstream f(FA_AWKWARD_SHAPES_FILE);
  if (!f) return fail("cannot open");
  std::vector<std::string> header;
  std::vector<Shape> out;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream ls(line);
    std::vector<std::string> cols;
    for (std::string w; ls >> w;) cols.push_back(w);
    if (header.empty()) {
      header = cols;
      continue;
    }
    if (cols.size() != header.size())
      return fail("line " + std::to_string(lineno) + ": column count differs from the header");
    std::map<std::string, std::string> m;
    for (size_t i = 0; i < cols.size(); ++i) m[header[i]] = cols[i];
    for (const char* need : {"name", "B", "Sq", "Sk", "Hq", "Hkv", "D", "Dv", "seqlens"})
      if (!m.count(need)) return fail(std::string("no column '") + need + "'");
    Shape s;
    s.p.name = m["name"];
    s.p.B = std::stoll(m["B"]);
    s.p.Sq = std::stoll(m["Sq"]);
    s.p.Sk = std::stoll(m["Sk"]);
    s.p.Hq = std::stoll(m["Hq"]);
    s.p.Hkv = std::stoll(m["Hkv"]);
    s.p.D = std::stoll(m["D"]);
    s.p.Dv = std::stoll(m["Dv"]);
    const std::string& sl = m["seqlens"];
    if (sl == "-") {
      s.lens_q.assign(static_cast<size_t>(s.p.B), static_cast<int32_t>(s.p.Sq));
      s.lens_k.assign(static_cast<size_t>(s.p.B), static_cast<int32_t>(s.p.Sk));
    } else {
      std::istringstream ss(sl);
      for (std::string pair; std::getline(ss, pair, ',');) {
        const size_t c = pair.find(':');
        if (c == std::string::npos) return fail("line " + std::to_string(lineno) + ": bad seqlens");
        s.lens_q.push_back(std::stoi(pair.substr(0, c)));
        s.lens_k.push_back(std::stoi(pair.substr(c + 1)));
      }
    }
    if (static_cast<int64_t>(s.lens_q.size()) != s.p.B)
      return fail("line " + std::to_string(lineno) + ": seqlens must have B entries");
    for (size_t b = 0; b < s.lens_q.size(); ++b)
      if (s.lens_q[b] < 0 || s.lens_q[b] > s.p.Sq || s.lens_k[b] < 0 || s.lens_k[b] > s.p.Sk)
        return fail("line " + std::to_string(lineno) + ": a length exceeds Sq/Sk");
    out.push_back(s);
  }
  if (out.empty()) return fail("no cases");
  return out;
}

}  // namespace fat
