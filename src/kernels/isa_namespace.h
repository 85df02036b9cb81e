// The inline namespace that keeps header-defined (inline and template) kernel helpers apart per
// instruction set. src/kernels/isa/ sources are compiled once per set with ATTEND_ISA defined; the
// helpers they inline from lanes.h, vec_math.h and attention_scores.h get the set's name in their
// symbols, so the copy compiled for AVX-512 can never be the one another translation unit links to.
// Everything else compiles them as `project`, with the project's own flags.
#pragma once

#if defined(ATTEND_ISA)
#define ATTEND_ISA_NAMESPACE ATTEND_ISA
#else
#define ATTEND_ISA_NAMESPACE project
#endif
