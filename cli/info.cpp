#include "commands.h"

#include <attend/runtime.h>

#include <fmt/format.h>

namespace attend::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the version, threads, GEMM backend and CPU features");
  cmd->callback([] {
    RuntimeInfo info = runtime_info();
    fmt::print("attend {}\n", info.version);
    fmt::print("threads       {} of {} cores\n", info.threads, info.cores);
    fmt::print("gemm backend  {}\n", info.gemm_backend);
    fmt::print("cpu features  {}\n", info.cpu_isa);
  });
}

}  // namespace attend::cli
