// Tests: shared helpers of the GoogleTest suite (host tensors, dtype rounding, problem set-up,
// calls through the C ABI, the correctness rule of docs/DESIGN.md).
// Uses only include/flashattn/flashattn.h: never the library's internals.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace fat {

// ---- dtype rounding (round to nearest even, as stored) -------------------------------------

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);
float fp16_to_float(uint16_t h);
// f rounded to dtype and back.
float round_to(fa_dtype dt, float f);
// The rounding step (ulp) of dtype at magnitude m (m >= 0).
double ulp_at(fa_dtype dt, double m);
const char* dtype_name(fa_dtype dt);

// ---- strided host tensors -------------------------------------------------------------------

// Logical shape [n0, n1, n2, n3] = [batch, row, head, dim]; varlen tensors have n0 == 1.
struct Dims {
  int64_t n0 = 1, n1 = 1, n2 = 1, n3 = 1;
  int64_t count() const { return n0 * n1 * n2 * n3; }
};

// How a tensor lies in memory; the last dim is always contiguous.
enum class Layout {
  bshd,    // contiguous [batch, row, head, dim]
  bhsd,    // [batch, head, row, dim] seen through strides (SDPA's layout)
  padded,  // bshd with slack after each dim vector, row and batch (the slack holds NaN)
};

// A tensor in the storage dtype, in some layout. Logical values travel as fp32 vectors in
// contiguous [n0, n1, n2, n3] order.
struct Stored {
  fa_dtype dtype = FA_DTYPE_FP32;
  Dims dims;
  int64_t s0 = 0, s1 = 0, s2 = 0;  // batch, row, head strides (elements)
  std::vector<uint8_t> bytes;

  fa_tensor view();
  int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return i0 * s0 + i1 * s1 + i2 * s2 + i3;
  }
  float get(int64_t off) const;
  void set(int64_t off, float f);
};

// A buffer of NaN in `layout`, then the logical values written (rounded to dtype).
Stored store(const std::vector<float>& values, Dims dims, fa_dtype dt, Layout layout);
// A buffer of NaN only (an output to be written).
Stored poisoned(Dims dims, fa_dtype dt, Layout layout);
// The logical values of a stored tensor.
std::vector<float> load(const Stored& t);

// ---- problems --------------------------------------------------------------------------------

struct Problem {
  std::string name;
  int64_t B = 1, Sq = 1, Sk = 1, Hq = 1, Hkv = 1, D = 1, Dv = 1;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  float scale = 0.f;                   // 0: 1/sqrt(D)
  std::vector<int32_t> lens_q, lens_k; // non-empty: varlen (B entries each)

  bool varlen() const { return !lens_q.empty(); }
  float effective_scale() const;
  int64_t total_q() const;  // varlen: sum of lens_q; else B * Sq
  int64_t total_k() const;
  std::vector<int32_t> cu_q() const;
  std::vector<int32_t> cu_k() const;
  int64_t len_q(int64_t b) const { return varlen() ? lens_q[b] : Sq; }
  int64_t len_k(int64_t b) const { return varlen() ? lens_k[b] : Sk; }
  Dims q_dims() const;
  Dims k_dims() const;
  Dims v_dims() const;
  Dims o_dims() const;
  int64_t lse_count() const { return Hq * total_q(); }
  // Index into the logical LSE of (batch b, head h, row i of that sequence).
  int64_t lse_index(int64_t b, int64_t h, int64_t i) const;
  // Index of the first logical q/o row of sequence b (in n0*n1 row space).
  int64_t row0_q(int64_t b) const;
  int64_t row0_k(int64_t b) const;
  // The mask of the header, written out again here: does row i see key j in sequence b?
  bool visible(int64_t b, int64_t i, int64_t j) const;
  std::string str() const;
};

// gtest prints a parameter through PrintTo: the problem's one-line description.
void PrintTo(const Problem& p, std::ostream* os);

struct Inputs {
  std::vector<float> q, k, v, dout;  // logical, already rounded to the run's dtype
};
// Fresh N(0,1) inputs rounded to dt.
Inputs random_inputs(const Problem& p, fa_dtype dt, std::mt19937_64& rng);

struct Outputs {
  std::vector<float> o, lse;      // forward
  std::vector<float> dq, dk, dv;  // backward
};

struct RunOpts {
  fa_dtype dtype = FA_DTYPE_FP32;
  fa_algorithm algorithm = FA_ALGORITHM_FLASH;
  int32_t num_threads = 1;
  Layout layout = Layout::bshd;
};

// Holds the stored tensors of one call and fills the params the way a caller would.
struct Call {
  const Problem& p;
  RunOpts opts;
  Stored q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;
  std::vector<int32_t> cu_q, cu_k;
  fa_fwd_params fwd{};
  fa_bwd_params bwd{};

  Call(const Problem& p, const Inputs& in, RunOpts opts);
  // Sets o and lse as backward inputs (o rounded to the run's dtype).
  void set_forward_result(const Outputs& f);
  fa_status run_fwd();
  fa_status run_bwd();
};

// Forward (and backward when `backward`, fed with this run's own O and LSE). Records a test
// failure, with the library's message, if a call fails or any output is left unwritten (NaN).
Outputs run(const Problem& p, const Inputs& in, const RunOpts& opts, bool backward);
// The backward alone, fed with the given forward result.
Outputs run_bwd(const Problem& p, const Inputs& in, const RunOpts& opts, const Outputs& fwd);

// ---- checks ----------------------------------------------------------------------------------

double max_abs(const std::vector<float>& a);
// max |a - b| over finite pairs; +inf when one is NaN or when the infinities differ.
double max_err(const std::vector<float>& a, const std::vector<float>& b);
int64_t count_nan(const std::vector<float>& a);
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

// The rows of LSE that see no key must be -inf; the others finite. Returns a failure text or "".
std::string check_lse_pattern(const Problem& p, const std::vector<float>& lse);

// Seed for a test: FA_TEST_SEED from the environment when set, else std::random_device.
uint64_t test_seed();

// One line of the shared list of awkward shapes (tests/awkward_shapes.txt): the dense problem
// and the per-sequence lengths its varlen runs use (all full lengths when the column is '-').
struct Shape {
  Problem p;
  std::vector<int32_t> lens_q, lens_k;
};
// The list, parsed. Empty with `error` set when the file cannot be read or parsed.
std::vector<Shape> awkward_shapes(std::string* error = nullptr);

}  // namespace fat
