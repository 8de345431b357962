// Tools: forked children and their peak resident memory (see child.h).
#include "child.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace cli {

namespace {

void* map_shared(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// A "Vm...:  1234 kB" line of /proc/self/status, in kB; -1 if absent.
double status_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kb = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      kb = std::strtod(line + n + 1, nullptr);
      break;
    }
  std::fclose(f);
  return kb;
}

}  // namespace

void ChildReport::fail(const std::string& why) {
  ok = 0;
  std::snprintf(error, sizeof error, "%s", why.c_str());
}

Child::Child(size_t shared_bytes) : shared_bytes_(shared_bytes) {
  void* r = map_shared(sizeof(ChildReport));
  report_ = r ? new (r) ChildReport() : nullptr;
  if (shared_bytes) shared_ = map_shared(shared_bytes);
}

Child::~Child() {
  if (report_) munmap(report_, sizeof(ChildReport));
  if (shared_) munmap(shared_, shared_bytes_);
}

bool Child::run(const std::function<void(ChildReport&, void* shared)>& body) {
  if (!report_ || (shared_bytes_ && !shared_)) return false;
  *report_ = ChildReport();
  std::fflush(nullptr);  // nothing buffered may be written twice
  const pid_t pid = fork();
  if (pid < 0) {
    report_->fail(std::string("fork failed: ") + std::strerror(errno));
    return false;
  }
  if (pid == 0) {
    body(*report_, shared_);
    std::fflush(nullptr);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    report_->fail(sig == SIGKILL ? "killed (out of memory?)"
                                 : std::string("died of signal ") + strsignal(sig));
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    report_->fail("exited with an error");
    return false;
  }
  return report_->ok != 0;
}

bool RssMeter::begin() {
  // Memory the allocator holds free but resident would be reused without a trace in the
  // resident set: give it back first, and have every large block mapped afresh.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  malloc_trim(0);
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  const bool reset = f && std::fputs("5", f) >= 0;
  if (f && std::fclose(f) != 0) return false;
  baseline_kb_ = status_kb("VmRSS");
  return reset && baseline_kb_ >= 0;
}

double RssMeter::peak_extra_bytes() const {
  const double hwm = status_kb("VmHWM");
  return hwm < baseline_kb_ ? 0 : (hwm - baseline_kb_) * 1024.0;
}

}  // namespace cli
