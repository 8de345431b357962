// Tools: the subcommands of the `flashattn` CLI, one file each.
// Each takes the arguments after its name and returns the process exit status.
#pragma once

namespace cli {

int demo_main(int argc, char** argv);
int check_main(int argc, char** argv);
int bench_main(int argc, char** argv);
int info_main(int argc, char** argv);

}  // namespace cli
