#include "kernels/cpu.h"

#include <cpuid.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace attend::kernels {
namespace {

// F16C is CPUID leaf 1, ECX bit 29. Clang (16 at least) has no "f16c" for __builtin_cpu_supports; the AVX2
// check beside it already makes sure the OS saves the YMM registers the conversions use.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

Isa detect() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the operating system saves the wide registers (XCR0).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return __builtin_cpu_supports("avx512vnni") ? Isa::Avx512Vnni : Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
    return Isa::Avx2;
  return Isa::Generic;
}

bool read_vendor_is_intel() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[12];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor, sizeof vendor) == "GenuineIntel";
}

bool& prefetching() {
  static bool on = forced_choice("ATTEND_GEMV_PREFETCH", cpu_is_intel());
  return on;
}

constexpr std::array kAll = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni};

Isa& chosen() {
  static Isa isa = cpu_isa();
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
  }
  return "?";
}

bool parse_isa(std::string_view name, Isa& isa) {
  for (Isa candidate : kAll) {
    if (isa_name(candidate) == name) {
      isa = candidate;
      return true;
    }
  }
  return false;
}

Isa cpu_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() { return chosen(); }

Isa set_isa(Isa isa) { return chosen() = isa <= cpu_isa() ? isa : cpu_isa(); }

bool cpu_is_intel() {
  static const bool intel = read_vendor_is_intel();
  return intel;
}

bool forced_choice(const char* variable, bool otherwise) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return otherwise;
  const std::string_view forced(value);
  return forced == "1" ? true : forced == "0" ? false : otherwise;
}

bool gemv_prefetch() { return prefetching(); }

void set_gemv_prefetch(bool on) { prefetching() = on; }

}  // namespace attend::kernels
