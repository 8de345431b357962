// Tools: helpers every subcommand of the `flashattn` CLI shares (see common.h).
// Plain C++ and the C ABI; no CUDA.
#include "common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>

namespace cli {

// ---- arguments -------------------------------------------------------------------------

Args::Args(const char* command, const char* summary, std::vector<Option> options, int argc,
           char** argv)
    : command_(command), summary_(summary), options_(std::move(options)) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    if (a.rfind("--", 0) != 0) usage_error("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const Option* opt = nullptr;
    for (const Option& o : options_)
      if (name == o.name) opt = &o;
    if (!opt) usage_error("unknown option '--" + name + "'");
    if (opt->value && !inline_value) {
      if (i + 1 >= argc) usage_error("option '--" + name + "' needs a value " + opt->value);
      value = argv[++i];
    } else if (!opt->value && inline_value) {
      usage_error("option '--" + name + "' takes no value");
    }
    given_.emplace_back(name, value);
  }
}

const std::string* Args::find(const char* name) const {
  const std::string* found = nullptr;  // the last occurrence wins
  for (const auto& [n, v] : given_)
    if (n == name) found = &v;
  return found;
}

bool Args::has(const char* name) const { return find(name) != nullptr; }

std::string Args::str(const char* name, const std::string& fallback) const {
  const std::string* v = find(name);
  return v ? *v : fallback;
}

static bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str()) return false;
  if (*end == 'k' || *end == 'K') {
    v *= 1024;
    ++end;
  }
  if (*end != '\0') return false;
  *out = v;
  return true;
}

int64_t Args::integer(const char* name, int64_t fallback) const {
  const std::string* v = find(name);
  if (!v) return fallback;
  int64_t out = 0;
  if (!parse_int(*v, &out)) usage_error("option '--" + std::string(name) + "': '" + *v + "' is not an integer");
  return out;
}

double Args::real(const char* name, double fallback) const {
  const std::string* v = find(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double out = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') usage_error("option '--" + std::string(name) + "': '" + *v + "' is not a number");
  return out;
}

std::vector<std::string> Args::str_list(const char* name,
                                        const std::vector<std::string>& fallback) const {
  const std::string* v = find(name);
  if (!v) return fallback;
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v->size()) {
    const size_t comma = v->find(',', start);
    const size_t stop = comma == std::string::npos ? v->size() : comma;
    if (stop > start) out.push_back(v->substr(start, stop - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) usage_error("option '--" + std::string(name) + "' needs at least one value");
  return out;
}

std::vector<int64_t> Args::int_list(const char* name, const std::vector<int64_t>& fallback) const {
  if (!has(name)) return fallback;
  std::vector<int64_t> out;
  for (const std::string& s : str_list(name, {})) {
    int64_t x = 0;
    if (!parse_int(s, &x)) usage_error("option '--" + std::string(name) + "': '" + s + "' is not an integer");
    out.push_back(x);
  }
  return out;
}

void Args::usage_error(const std::string& message) const {
  std::fprintf(stderr, "flashattn %s: %s\n", command_.c_str(), message.c_str());
  std::fprintf(stderr, "run 'flashattn %s --help' for the options\n", command_.c_str());
  std::exit(kExitUsage);
}

void Args::print_usage(FILE* to) const {
  std::fprintf(to, "usage: flashattn %s [options]\n\n%s\n\noptions:\n", command_.c_str(),
               summary_.c_str());
  for (const Option& o : options_) {
    std::string left = std::string("--") + o.name + (o.value ? std::string(" ") + o.value : "");
    std::fprintf(to, "  %-22s %s\n", left.c_str(), o.help);
  }
  std::fprintf(to, "  %-22s %s\n", "--help", "show this text");
}

// ---- dtypes ------------------------------------------------------------------------------

const char* dtype_name(fa_dtype t) {
  switch (t) {
    case FA_DTYPE_FP32: return "fp32";
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, fa_dtype* out) {
  if (s == "fp32" || s == "float32") *out = FA_DTYPE_FP32;
  else if (s == "fp16" || s == "float16" || s == "half") *out = FA_DTYPE_FP16;
  else if (s == "bf16" || s == "bfloat16") *out = FA_DTYPE_BF16;
  else return false;
  return true;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_fp16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half in units of 2^-24 (exact scaling)
    const float units = std::nearbyint(float_of(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffffu) >> 13));
  const uint32_t rest = a & 0x1fffu;  // the 13 dropped mantissa bits
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

float round_to(fa_dtype t, float f) {
  switch (t) {
    case FA_DTYPE_BF16: return bf16_to_float(float_to_bf16(f));
    case FA_DTYPE_FP16: return fp16_to_float(float_to_fp16(f));
    default: return f;
  }
}

double ulp_at(fa_dtype t, double m) {
  const int mantissa = t == FA_DTYPE_FP32 ? 23 : (t == FA_DTYPE_BF16 ? 7 : 10);
  int e = m > 0 ? static_cast<int>(std::floor(std::log2(m))) : -126;
  if (t == FA_DTYPE_FP16) e = std::max(e, -14);
  return std::ldexp(1.0, e - mantissa);
}

void store(fa_dtype t, const float* src, void* dst, size_t n) {
  if (t == FA_DTYPE_FP32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (t == FA_DTYPE_BF16)
    for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
  else
    for (size_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
}

void load(fa_dtype t, const void* src, float* dst, size_t n) {
  if (t == FA_DTYPE_FP32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (t == FA_DTYPE_BF16)
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
  else
    for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
}

// ---- random numbers, time, errors -----------------------------------------------------------

Rng::Rng(uint64_t seed) : s_(seed) { s_ = next() ^ 0x632BE59BD9B4E019ull; }

uint64_t Rng::next() {  // splitmix64
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int64_t Rng::range(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
}

float Rng::normal() {  // Box-Muller: two values per pair of uniforms
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
  spare_ = static_cast<float>(r * std::sin(a));
  has_spare_ = true;
  return static_cast<float>(r * std::cos(a));
}

void fill_normal(std::vector<float>& v, fa_dtype t, Rng& rng) {
  for (float& x : v) x = round_to(t, rng.normal());
}

uint64_t seed_from_time() {
  return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ull;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a)
    if (std::isfinite(x)) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

bool ok(fa_status s, const char* what) {
  if (s == FA_STATUS_OK) return true;
  std::fprintf(stderr, "flashattn: %s failed: %s: %s\n", what, fa_status_string(s), fa_last_error());
  return false;
}

// ---- output ---------------------------------------------------------------------------------

void Table::print(FILE* to, const char* indent) const {
  std::vector<size_t> width;
  for (const auto& row : rows_)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (size_t r = 0; r < rows_.size(); ++r) {
    std::string line = indent;
    for (size_t c = 0; c < rows_[r].size(); ++c) {
      const std::string& cell = rows_[r][c];
      const bool left = c == 0;  // the first column names the row; numbers align right
      const std::string pad(width[c] - cell.size(), ' ');
      line += (c ? "  " : "") + (left ? cell + pad : pad + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(to, "%s\n", line.c_str());
  }
  std::fflush(to);
}

std::string fmt(const char* format, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

std::string mib(double bytes) {
  const double m = bytes / (1024.0 * 1024.0);
  return m >= 100 ? fmt("%.0f", m) : fmt("%.1f", m);
}

std::string human_len(int64_t n) {
  if (n >= 1024 && n % 1024 == 0) return fmt("%lldk", static_cast<long long>(n / 1024));
  return fmt("%lld", static_cast<long long>(n));
}

// ---- the machine ---------------------------------------------------------------------------

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(" \t"));
        return m;
      }
    }
  }
  return "unknown CPU";
}

int cpu_cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

double mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024.0;
    f.ignore(1 << 10, '\n');
  }
  return 0;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string git_commit() {
  FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r");
  if (!p) return "unknown";
  char buf[64] = {0};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  pclose(p);
  std::string s = got ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.size() == 40 ? s : "unknown";
}

}  // namespace cli
