// Which instruction set the hot kernels run with (docs/ARCHITECTURE.md, "Kernels per CPU").
//
// The decode matmuls, decode attention, the storage conversions and the memory-bound element-wise passes
// are compiled once per instruction set (src/kernels/isa/) and one set is chosen at run time from the
// CPU's features, so that one portable binary runs on any x86-64 at the speed its CPU allows. A lower set
// can be forced (the CLI's --isa and ATTEND_ISA; tests run every set the CPU has).
#pragma once

#include <string_view>

namespace attend::kernels {

enum class Isa {
  Generic,  // x86-64's baseline (SSE2): plain loops the compiler vectorises 4 floats wide
  Avx2,     // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  Avx512,   // AVX-512 F/BW/DQ/VL (Skylake-SP, Zen 4 and later)
  Avx512Vnni,  // and VNNI's byte dot products (Cascade Lake, Ice Lake, Zen 4 and later)
};

std::string_view isa_name(Isa isa);
// The set named `name` ("generic", "avx2", "avx512", "avx512vnni"), or false.
bool parse_isa(std::string_view name, Isa& isa);

// The widest set this CPU (and its operating system) can run.
Isa cpu_isa();

// The set the kernels use now: cpu_isa() unless a narrower one was forced.
Isa active_isa();
// Uses `isa` from now on, or the CPU's widest if `isa` is wider than it can run; returns the set chosen.
// Not to be called while kernels run on other threads.
Isa set_isa(Isa isa);

// Whether the CPU is Intel's (CPUID's vendor string "GenuineIntel"): where the kernels' best choice was measured
// to differ between vendors' cores of the same instruction set.
bool cpu_is_intel();

// A per-CPU choice forced from the environment: true where `variable` is "1", false where "0", else `otherwise`.
bool forced_choice(const char* variable, bool otherwise);

// Whether decoding's gemv (one to three input rows) over 16-bit and quantized weights prefetches its weights in
// software: 16-bit and K-type rows 2 KiB ahead, repacked Q4_0/Q8_0 rows a group of eight ahead. On Intel's cores
// the hardware prefetchers fall behind these streams: an Emerald Rapids Xeon generated GPT-2-124M in bf16 at
// 0.63-0.68 of its bandwidth bound without, 0.90-0.93 with; Q4_K_M at 0.47-0.63 without, 0.66-0.80 with; Q4_0
// 0.56-0.64 and 0.70-0.89 (docs/BENCHMARKS.md). On Zen 4 software prefetch made the fp32 row slower and the 16-bit
// rows were not measured with it, so other vendors' cores keep the hardware's prefetchers alone.
// ATTEND_GEMV_PREFETCH=1 or 0 forces the choice; the results are the same bits either way.
bool gemv_prefetch();
// Sets it (tests and benchmarks; not while kernels run on other threads).
void set_gemv_prefetch(bool on);

}  // namespace attend::kernels
