// The workspace layout of decode attention (src/kernels/isa/decode_attention.cpp), shared with
// decode_attention_workspace_size.
#pragma once

#include "kernels/attention.h"
#include "kernels/isa_namespace.h"

#include <cstdint>

namespace attend::kernels::decode_layout {
inline namespace ATTEND_ISA_NAMESPACE {

// Keys a work item reads: a fixed number, so that the result does not depend on the thread count.
constexpr int64_t kBlock = 32;

inline int64_t blocks(const AttentionParams<float>& p) { return (p.Tk + kBlock - 1) / kBlock; }
// Per (sequence, block, head): the block's unnormalised output Σ_j e^{s_j − m}·v_j (D floats), its max m and
// its sum l = Σ_j e^{s_j − m}, padded to whole vectors so that every head's output starts a cache line
// (with D + 2 floats, half the heads' vector loads and stores straddled two lines).
constexpr int64_t kLineFloats = 64 / sizeof(float);
inline int64_t partial_size(const AttentionParams<float>& p) {
  return (p.d_head + 2 + kLineFloats - 1) / kLineFloats * kLineFloats;
}
inline int64_t scores_size(const AttentionParams<float>& p) { return p.n_heads * kBlock; }

}  // namespace ATTEND_ISA_NAMESPACE
}  // namespace attend::kernels::decode_layout
