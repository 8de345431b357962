// Tools: one attention problem with its buffers on one device (see attention.h).
// Everything goes through the C ABI; device memory through gpu.h.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common.h"
#include "gpu.h"

namespace cli {

// ---- Shape -------------------------------------------------------------------------------

static int64_t sum(const std::vector<int32_t>& v) {
  int64_t s = 0;
  for (int32_t x : v) s += x;
  return s;
}

int64_t Shape::rows_q() const { return varlen() ? sum(lens_q) : batch * seqlen_q; }
int64_t Shape::rows_k() const { return varlen() ? sum(lens_k) : batch * seqlen_k; }

std::string Shape::dims() const {
  std::string s = fmt("B=%lld Sq=%lld Sk=%lld H=%lld", (long long)batch, (long long)seqlen_q,
                      (long long)seqlen_k, (long long)heads_q);
  if (heads_kv != heads_q) s += fmt("/%lld", (long long)heads_kv);
  s += fmt(" D=%lld", (long long)head_dim);
  if (head_dim_v != head_dim) s += fmt("/%lld", (long long)head_dim_v);
  return s;
}

std::string Shape::features() const {
  std::vector<std::string> f;
  if (causal) f.push_back("causal");
  if (window_left >= 0 || (!causal && window_right >= 0))
    f.push_back(fmt("window(%lld,%lld)", (long long)window_left, (long long)(causal ? 0 : window_right)));
  if (softcap > 0) f.push_back(fmt("softcap=%g", softcap));
  if (heads_kv != heads_q) f.push_back(heads_kv == 1 ? "mqa" : "gqa");
  if (varlen()) f.push_back("varlen");
  if (bhsd) f.push_back("bhsd");
  std::string s;
  for (const std::string& x : f) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

double Shape::fwd_flops() const {
  const double per_pair = 2.0 * double(head_dim + head_dim_v) * double(heads_q);
  const bool plain_causal = causal && window_left < 0;
  auto pairs = [&](int64_t sq, int64_t sk) -> double {
    if (!causal && window_left < 0 && window_right < 0) return double(sq) * double(sk);
    if (plain_causal && sq == sk) return 0.5 * double(sq) * double(sk);  // the peers' convention
    const int64_t right = causal ? 0 : window_right;
    double n = 0;  // count the visible pairs of each row exactly
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t diag = i + sk - sq;
      const int64_t lo = window_left < 0 ? 0 : std::max<int64_t>(0, diag - window_left);
      const int64_t hi = right < 0 ? sk - 1 : std::min<int64_t>(sk - 1, diag + right);
      if (hi >= lo) n += double(hi - lo + 1);
    }
    return n;
  };
  if (!varlen()) return per_pair * double(batch) * pairs(seqlen_q, seqlen_k);
  double total = 0;
  for (size_t b = 0; b < lens_q.size(); ++b) total += per_pair * pairs(lens_q[b], lens_k[b]);
  return total;
}

Inputs random_inputs(const Shape& s, fa_dtype t, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.q.resize(s.numel_q());
  in.k.resize(s.numel_k());
  in.v.resize(s.numel_v());
  in.dout.resize(s.numel_o());
  fill_normal(in.q, t, rng);
  fill_normal(in.k, t, rng);
  fill_normal(in.v, t, rng);
  fill_normal(in.dout, t, rng);
  return in;
}

// ---- Buffer ------------------------------------------------------------------------------

Buffer::Buffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  p_ = device == FA_DEVICE_CPU ? std::malloc(bytes) : gpu::alloc(device, bytes);
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : device_(o.device_), p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (!p_) return;
  if (device_ == FA_DEVICE_CPU) std::free(p_);
  else gpu::release(p_);
  p_ = nullptr;
}

void Buffer::upload(const void* host) {
  if (!p_) return;
  if (device_ == FA_DEVICE_CPU) std::memcpy(p_, host, bytes_);
  else gpu::upload(p_, host, bytes_);
}

void Buffer::download(void* host) const {
  if (!p_) return;
  if (device_ == FA_DEVICE_CPU) std::memcpy(host, p_, bytes_);
  else gpu::download(host, p_, bytes_);
}

void Buffer::poison() {
  if (!p_) return;
  if (device_ == FA_DEVICE_CPU) std::memset(p_, 0xff, bytes_);
  else gpu::fill_ff(p_, bytes_);
}

// ---- Attention ---------------------------------------------------------------------------

Attention::Attention(const Shape& s, fa_dtype t, int device) : s_(s), t_(t), device_(device) {
  const size_t e = dtype_bytes(t);
  q_ = Buffer(device, s.numel_q() * e);
  k_ = Buffer(device, s.numel_k() * e);
  v_ = Buffer(device, s.numel_v() * e);
  dout_ = Buffer(device, s.numel_o() * e);
  if (s.varlen()) {
    std::vector<int32_t> cq(1, 0), ck(1, 0);
    for (size_t b = 0; b < s.lens_q.size(); ++b) {
      cq.push_back(cq.back() + s.lens_q[b]);
      ck.push_back(ck.back() + s.lens_k[b]);
    }
    cu_q_ = Buffer(device, cq.size() * 4);
    cu_k_ = Buffer(device, ck.size() * 4);
    cu_q_.upload(cq.data());
    cu_k_.upload(ck.data());
  }
  for (const Buffer* b : {&q_, &k_, &v_, &dout_, &cu_q_, &cu_k_})
    if (!b->ok()) error_ = fmt("cannot allocate %s MiB for the inputs", mib(double(b->bytes())).c_str());
}

void Attention::set_inputs(const Inputs& in) {
  std::vector<unsigned char> tmp;
  auto put = [&](Buffer& b, const std::vector<float>& v) {
    tmp.resize(v.size() * dtype_bytes(t_));
    store(t_, v.data(), tmp.data(), v.size());
    b.upload(tmp.data());
  };
  put(q_, in.q);
  put(k_, in.k);
  put(v_, in.v);
  put(dout_, in.dout);
}

void Attention::randomize(uint64_t seed) {
  if (device_ == FA_DEVICE_CPU) return set_inputs(random_inputs(s_, t_, seed));
  uint64_t n = 0;
  for (Buffer* b : {&q_, &k_, &v_, &dout_})
    gpu::fill_normal(b->get(), t_, b->bytes() / dtype_bytes(t_), seed + 0x5851F42D4C957F2Dull * ++n);
}

bool Attention::alloc_outputs() { return alloc_forward_outputs() && alloc_backward_outputs(); }

bool Attention::alloc_forward_outputs() {
  o_ = Buffer(device_, s_.numel_o() * dtype_bytes(t_));
  lse_ = Buffer(device_, s_.numel_lse() * 4);
  for (const Buffer* b : {&o_, &lse_})
    if (!b->ok()) {
      error_ = fmt("cannot allocate %s MiB for the forward's outputs", mib(double(b->bytes())).c_str());
      return false;
    }
  o_.poison();
  lse_.poison();
  if (device_ != FA_DEVICE_CPU) gpu::sync();
  return true;
}

bool Attention::alloc_backward_outputs() {
  const size_t e = dtype_bytes(t_);
  dq_ = Buffer(device_, s_.numel_q() * e);
  dk_ = Buffer(device_, s_.numel_k() * e);
  dv_ = Buffer(device_, s_.numel_v() * e);
  for (const Buffer* b : {&dq_, &dk_, &dv_})
    if (!b->ok()) {
      error_ = fmt("cannot allocate %s MiB for the gradients", mib(double(b->bytes())).c_str());
      return false;
    }
  if (device_ != FA_DEVICE_CPU) {  // the backward's scratch, allocated here so it is counted
    size_t ws = 0;
    const fa_bwd_params bp = bwd_params(FA_ALGORITHM_AUTO);
    if (fa_bwd_workspace_size(&bp, &ws) == FA_STATUS_OK && ws > 0) {
      workspace_ = Buffer(device_, ws);
      if (!workspace_.ok()) {
        error_ = fmt("cannot allocate %s MiB of backward workspace", mib(double(ws)).c_str());
        return false;
      }
    }
  }
  for (Buffer* b : {&dq_, &dk_, &dv_}) b->poison();  // O and LSE may hold the forward's result
  if (device_ != FA_DEVICE_CPU) gpu::sync();
  return true;
}

void Attention::free_outputs() {
  for (Buffer* b : {&o_, &lse_, &dq_, &dk_, &dv_, &workspace_}) *b = Buffer();
}

void Attention::poison_outputs() {
  for (Buffer* b : {&o_, &lse_, &dq_, &dk_, &dv_}) b->poison();
  if (device_ != FA_DEVICE_CPU) gpu::sync();
}

fa_tensor Attention::view(const Buffer& b, int64_t seqlen, int64_t heads, int64_t dim) const {
  fa_tensor t{};
  t.data = b.get();
  t.dim_stride = 1;
  if (s_.varlen()) {
    t.row_stride = heads * dim;
    t.head_stride = dim;
  } else if (s_.bhsd) {
    t.batch_stride = heads * seqlen * dim;
    t.head_stride = seqlen * dim;
    t.row_stride = dim;
  } else {
    t.batch_stride = seqlen * heads * dim;
    t.row_stride = heads * dim;
    t.head_stride = dim;
  }
  return t;
}

fa_fwd_params Attention::fwd_params(fa_algorithm a) const {
  fa_fwd_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.device = device_;
  p.dtype = t_;
  p.algorithm = a;
  p.batch = s_.varlen() ? int64_t(s_.lens_q.size()) : s_.batch;
  p.seqlen_q = s_.seqlen_q;
  p.seqlen_k = s_.seqlen_k;
  p.heads_q = s_.heads_q;
  p.heads_kv = s_.heads_kv;
  p.head_dim = s_.head_dim;
  p.head_dim_v = s_.head_dim_v;
  p.q = view(q_, s_.seqlen_q, s_.heads_q, s_.head_dim);
  p.k = view(k_, s_.seqlen_k, s_.heads_kv, s_.head_dim);
  p.v = view(v_, s_.seqlen_k, s_.heads_kv, s_.head_dim_v);
  p.o = view(o_, s_.seqlen_q, s_.heads_q, s_.head_dim_v);
  p.lse = static_cast<float*>(lse_.get());
  p.scale = 1.0f / std::sqrt(float(s_.head_dim));
  p.softcap = s_.softcap;
  p.causal = s_.causal;
  p.window_left = s_.window_left;
  p.window_right = s_.window_right;
  if (s_.varlen()) {
    p.cu_seqlens_q = static_cast<const int32_t*>(cu_q_.get());
    p.cu_seqlens_k = static_cast<const int32_t*>(cu_k_.get());
    p.total_q = s_.rows_q();
    p.total_k = s_.rows_k();
  }
  p.num_threads = threads;
  return p;
}

fa_bwd_params Attention::bwd_params(fa_algorithm a) const {
  fa_bwd_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.fwd = fwd_params(a);
  p.dout = view(dout_, s_.seqlen_q, s_.heads_q, s_.head_dim_v);
  p.dq = view(dq_, s_.seqlen_q, s_.heads_q, s_.head_dim);
  p.dk = view(dk_, s_.seqlen_k, s_.heads_kv, s_.head_dim);
  p.dv = view(dv_, s_.seqlen_k, s_.heads_kv, s_.head_dim_v);
  p.workspace = workspace_.get();
  p.workspace_size = workspace_.bytes();
  return p;
}

fa_status Attention::fwd(fa_algorithm a) {
  const fa_fwd_params p = fwd_params(a);
  const fa_status s = fa_fwd(&p, nullptr);
  if (s == FA_STATUS_OK && device_ != FA_DEVICE_CPU && !gpu::sync()) return FA_STATUS_DEVICE_ERROR;
  return s;
}

fa_status Attention::bwd(fa_algorithm a) {
  const fa_bwd_params p = bwd_params(a);
  const fa_status s = fa_bwd(&p, nullptr);
  if (s == FA_STATUS_OK && device_ != FA_DEVICE_CPU && !gpu::sync()) return FA_STATUS_DEVICE_ERROR;
  return s;
}

Outputs Attention::outputs() const {
  Outputs out;
  std::vector<unsigned char> tmp;
  auto get = [&](const Buffer& b, std::vector<float>& v, size_t n, fa_dtype t) {
    v.assign(n, NAN);
    if (!b.get()) return;
    tmp.resize(b.bytes());
    b.download(tmp.data());
    load(t, tmp.data(), v.data(), n);
  };
  get(o_, out.o, s_.numel_o(), t_);
  get(lse_, out.lse, s_.numel_lse(), FA_DTYPE_FP32);
  get(dq_, out.dq, s_.numel_q(), t_);
  get(dk_, out.dk, s_.numel_k(), t_);
  get(dv_, out.dv, s_.numel_v(), t_);
  return out;
}

}  // namespace cli
