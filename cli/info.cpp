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
    fmt::print("kernels       {} (the decode matmuls and attention, conversions, optimizer updates; widest here: {})\n",
               info.kernel_isa, info.widest_kernel_isa);
    fmt::print("decode gemv   {}\n", info.gemv_prefetch ? "16-bit and quantized rows prefetched 2 KiB ahead in software "
                                                          "(Intel's cores; ATTEND_GEMV_PREFETCH=0 turns it off)"
                                                        : "hardware prefetch alone on 16-bit and quantized rows "
                                                          "(ATTEND_GEMV_PREFETCH=1 adds software prefetch)");
    fmt::print("bf16 matmul   {}\n",
               info.bf16_matmul_used ? "oneDNN bf16 (AVX-512 BF16)"
               : info.bf16_matmul    ? "oneDNN's bf16 not taken: without AMX this Intel core's bf16 products are no faster "
                                       "than its fp32 FMAs, so 16-bit weights' prompts widen to fp32 for sgemm "
                                       "(ATTEND_BF16_GEMM=1 takes it)"
                                     : "none on this CPU: 16-bit weights' prompts run sgemm on their fp32 "
                                       "values (fp32's speed); generation reads the 16-bit weights");
  });
}

}  // namespace attend::cli
