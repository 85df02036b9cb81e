// What Attend runs on: version, threads, the GEMM backend and the CPU's vector extensions.
#pragma once

#include <string>

namespace attend {

const char* version();

// Threads used by every kernel and by the GEMM backend; n <= 0 means all cores.
void set_num_threads(int n);
int num_threads();

struct RuntimeInfo {
  std::string version;
  std::string gemm_backend;  // e.g. "oneDNN 2.6.3 sgemm"
  std::string cpu_isa;       // the widest vector extensions found, e.g. "avx512f avx512bf16 avx2 fma"
  int threads = 1;
  int cores = 1;
};
RuntimeInfo runtime_info();

}  // namespace attend
