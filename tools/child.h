// Tools: run a piece of work in a forked child and measure its peak resident memory.
// The parent allocates and fills the inputs, the child inherits them; in the child the
// kernel's high-water mark is reset (/proc/self/clear_refs, 5) and VmHWM − VmRSS is the
// peak extra memory of the work. Linux only; the CPU demo is its one user.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace cli {

// What a child sends back (lives in memory shared with the parent).
struct ChildReport {
  int ok = 0;
  double values[8] = {0};
  char name[64] = {0};  // a short text result, e.g. the kernel that ran
  char error[480] = {0};
  void fail(const std::string& why);
};

class Child {
 public:
  explicit Child(size_t shared_bytes);  // plus a shared region of this size for results
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Forks, runs body(report, shared) in the child and waits. False when the child could
  // not run or died (the reason is then in report().error).
  bool run(const std::function<void(ChildReport&, void* shared)>& body);
  ChildReport& report() { return *report_; }
  void* shared() { return shared_; }

 private:
  ChildReport* report_ = nullptr;
  void* shared_ = nullptr;
  size_t shared_bytes_ = 0;
};

// In the child: begin() resets the high-water mark and notes the resident set;
// peak_extra_bytes() is the highest resident set since, less that baseline.
class RssMeter {
 public:
  bool begin();  // false if the high-water mark cannot be reset
  double peak_extra_bytes() const;

 private:
  double baseline_kb_ = 0;
};

}  // namespace cli
