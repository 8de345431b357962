// Tools: the `flashattn` command line; dispatches to one subcommand.
// Uses the library only through its C ABI (include/flashattn/flashattn.h).
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "common.h"

namespace {

void usage(FILE* to) {
  std::fprintf(to,
               "usage: flashattn <command> [options]\n\n"
               "commands:\n"
               "  demo    forward + backward, naive and FlashAttention side by side: time,\n"
               "          measured peak memory, error; then a sweep over sequence lengths\n"
               "  check   random-shape correctness sweep against the reference\n"
               "  bench   forward and backward TFLOP/s over a grid of shapes\n"
               "  info    version, backends, devices and CPU features\n\n"
               "'flashattn <command> --help' lists the options of a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return cli::kExitUsage;
  }
  const char* cmd = argv[1];
  if (!std::strcmp(cmd, "--help") || !std::strcmp(cmd, "-h") || !std::strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!std::strcmp(cmd, "--version")) {
    std::printf("flashattn %s\n", fa_version());
    return 0;
  }
  if (!std::strcmp(cmd, "demo")) return cli::demo_main(argc - 2, argv + 2);
  if (!std::strcmp(cmd, "check")) return cli::check_main(argc - 2, argv + 2);
  if (!std::strcmp(cmd, "bench")) return cli::bench_main(argc - 2, argv + 2);
  if (!std::strcmp(cmd, "info")) return cli::info_main(argc - 2, argv + 2);
  std::fprintf(stderr, "flashattn: unknown command '%s'\n", cmd);
  usage(stderr);
  return cli::kExitUsage;
}
