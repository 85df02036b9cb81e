// What Attend runs on: version, threads, the GEMM backend and the CPU's vector extensions.
#pragma once

#include <string>

namespace attend {

const char* version();

// Threads used by every kernel and by the GEMM backend; n <= 0 means OMP_NUM_THREADS when set, otherwise
// every core this process may use (shared among the MPI ranks on this host).
void set_num_threads(int n);
int num_threads();

// The instruction set of the kernels that have one version per set (docs/ARCHITECTURE.md, "Kernels per
// CPU"): "generic", "avx2" or "avx512", or "auto" for the widest this CPU runs (the default). A set wider
// than the CPU runs, or an unknown name, is an attend::Error.
void set_kernel_isa(const std::string& name);

struct RuntimeInfo {
  std::string version;
  std::string gemm_backend;  // e.g. "oneDNN 2.6.3 sgemm"
  std::string cpu_isa;       // the widest vector extensions found, e.g. "avx512f avx512bf16 avx2 fma"
  std::string kernel_isa;    // the set the per-set kernels run with, e.g. "avx2"
  std::string widest_kernel_isa;  // the widest set this CPU runs
  bool gemv_prefetch = false;  // decoding's gemv over 16-bit and quantized weights prefetches in software (kernels/cpu.h)
  bool bf16_matmul = false;  // oneDNN has a bf16 matmul for this CPU (AVX-512 BF16); else bf16 GEMMs widen to fp32
  bool bf16_matmul_used = false;  // and it is taken (not on Intel's cores without AMX: kernels/gemm.h)
  int threads = 1;
  int cores = 1;
};
RuntimeInfo runtime_info();

}  // namespace attend
