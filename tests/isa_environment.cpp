// ATTEND_ISA=generic|avx2|avx512|avx512vnni runs the whole test binary with that instruction set's kernels
// (src/kernels/cpu.h); CTest registers the kernel suites once per set (tests/CMakeLists.txt). A set this
// CPU cannot run exits with 77, which CTest reports as skipped.
#include "kernels/cpu.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

const bool chosen = [] {
  using namespace attend::kernels;
  const char* name = std::getenv("ATTEND_ISA");
  if (name == nullptr || *name == '\0') return false;
  Isa isa;
  if (!parse_isa(name, isa)) {
    std::fprintf(stderr, "ATTEND_ISA=%s: expected generic, avx2, avx512 or avx512vnni\n", name);
    std::exit(2);
  }
  if (isa > cpu_isa()) {
    std::fprintf(stderr, "skipped: this CPU cannot run the %s kernels (it has up to %s)\n", name,
                 std::string(isa_name(cpu_isa())).c_str());
    std::exit(77);
  }
  set_isa(isa);
  std::fprintf(stderr, "kernels: %s\n", name);
  return true;
}();

}  // namespace
