// Tools: helpers every subcommand of the `flashattn` CLI shares.
// Argument parsing, timing, random numbers, bf16/fp16 rounding, tables, machine facts.
// Talks to the library only through the C ABI; no CUDA here (see gpu.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace cli {

// Exit codes: 0 success, 1 a check failed or a run failed, 2 a usage error.
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;

// ---- arguments -------------------------------------------------------------------------

struct Option {
  const char* name;   // without the leading "--"
  const char* value;  // metavariable ("N", "FILE"), or nullptr for a flag
  const char* help;
};

// Parses "--name value", "--name=value" and "--flag" against `options`. On a usage error
// (unknown option, missing or malformed value) it prints the reason naming the option and
// exits with kExitUsage; "--help" / "-h" prints the usage and exits 0.
class Args {
 public:
  Args(const char* command, const char* summary, std::vector<Option> options, int argc,
       char** argv);

  bool has(const char* name) const;
  std::string str(const char* name, const std::string& fallback) const;
  int64_t integer(const char* name, int64_t fallback) const;
  double real(const char* name, double fallback) const;
  // A comma-separated list of integers, e.g. "512,1024,4k"; k = 1024.
  std::vector<int64_t> int_list(const char* name, const std::vector<int64_t>& fallback) const;
  std::vector<std::string> str_list(const char* name,
                                    const std::vector<std::string>& fallback) const;

  [[noreturn]] void usage_error(const std::string& message) const;
  void print_usage(FILE* to) const;

 private:
  const std::string* find(const char* name) const;
  std::string command_, summary_;
  std::vector<Option> options_;
  std::vector<std::pair<std::string, std::string>> given_;
};

// ---- dtypes ------------------------------------------------------------------------------

const char* dtype_name(fa_dtype t);
bool parse_dtype(const std::string& s, fa_dtype* out);
inline size_t dtype_bytes(fa_dtype t) { return t == FA_DTYPE_FP32 ? 4 : 2; }

uint16_t float_to_bf16(float f);  // round to nearest even; NaN stays NaN
float bf16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);  // round to nearest even; overflow to inf
float fp16_to_float(uint16_t h);
// The value f becomes once stored in t.
float round_to(fa_dtype t, float f);
// Spacing of t's representable numbers at magnitude m (the rounding step of the output).
double ulp_at(fa_dtype t, double m);

// Converts n floats to storage of type t at dst, and back.
void store(fa_dtype t, const float* src, void* dst, size_t n);
void load(fa_dtype t, const void* src, float* dst, size_t n);

// ---- random numbers, time, errors -----------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed);  // nearby seeds give unrelated streams
  uint64_t next();
  double uniform();                           // [0, 1)
  int64_t range(int64_t lo, int64_t hi);      // [lo, hi]
  float normal();
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(range(0, (int64_t)v.size() - 1))]; }

 private:
  uint64_t s_;
  float spare_ = 0;
  bool has_spare_ = false;
};

// Fills v with standard normal values rounded to t (so every dtype sees the same numbers).
void fill_normal(std::vector<float>& v, fa_dtype t, Rng& rng);
uint64_t seed_from_time();

double now_seconds();
double median(std::vector<double> v);

// max |a - b|; NaN anywhere, or an inf on one side only, gives +inf; equal infs give 0.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
double max_abs(const std::vector<float>& a);  // finite entries only

// Prints the failing call's status and fa_last_error() and returns false when s != OK.
bool ok(fa_status s, const char* what);

// ---- output ---------------------------------------------------------------------------------

// Columns aligned on the widest cell; the first row is the header.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(FILE* to = stdout, const char* indent = "  ") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string mib(double bytes);   // "123.4"
std::string human_len(int64_t n);  // 16384 -> "16k"

// ---- the machine ---------------------------------------------------------------------------

std::string cpu_model();  // from /proc/cpuinfo
int cpu_cores();          // online logical cores
double mem_available_bytes();  // MemAvailable from /proc/meminfo, 0 if unknown
std::string today();      // YYYY-MM-DD
std::string git_commit(); // `git rev-parse HEAD`, or "unknown"

}  // namespace cli
