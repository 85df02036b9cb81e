#include <attend/runtime.h>

#include <attend/error.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

#include <fmt/format.h>

#include <thread>
#include <utility>

namespace attend {

const char* version() { return ATTEND_VERSION; }

void set_num_threads(int n) { kernels::set_num_threads(n); }
int num_threads() { return kernels::num_threads(); }

void set_kernel_isa(const std::string& name) {
  kernels::Isa isa = kernels::cpu_isa();
  if (name != "auto") {
    check(kernels::parse_isa(name, isa), "kernel instruction set '{}': expected auto, generic, avx2, avx512 or avx512vnni", name);
    check(isa <= kernels::cpu_isa(), "kernel instruction set '{}': this CPU runs up to {}", name,
          kernels::isa_name(kernels::cpu_isa()));
  }
  kernels::set_isa(isa);
}

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.version = version();
  info.gemm_backend = kernels::gemm_backend();
  // __builtin_cpu_supports needs a literal, so each feature is spelled out once here.
  const std::pair<const char*, bool> features[] = {
      {"avx512f", __builtin_cpu_supports("avx512f")},       {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")},     {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
      {"avx512vnni", __builtin_cpu_supports("avx512vnni")}, {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},
  };
  for (const auto& [name, present] : features)
    if (present) info.cpu_isa += (info.cpu_isa.empty() ? "" : " ") + std::string(name);
  if (info.cpu_isa.empty()) info.cpu_isa = "sse2";
  info.kernel_isa = kernels::isa_name(kernels::active_isa());
  info.widest_kernel_isa = kernels::isa_name(kernels::cpu_isa());
  info.gemv_prefetch = kernels::gemv_prefetch();
  info.bf16_matmul = kernels::bf16_kernel_available();
  info.bf16_matmul_used = kernels::bf16_kernel_in_use();
  info.threads = kernels::num_threads();
  info.cores = static_cast<int>(std::thread::hardware_concurrency());
  return info;
}

}  // namespace attend
