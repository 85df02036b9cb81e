// Initialisation (004 §8.1): every weight drawn by its role from one counter-based stream.
#include "nn/transformer.h"

#include "kernels/random_fill.h"
#include "nn/lora.h"

#include <cmath>

namespace attend {

// ---- Initialisation (004 §8.1) ---------------------------------------------------------------------

// Biases 0, norm gains 1 (stored as 0 when norms multiply by 1 + γ); embeddings N(0, σ²); matrices N(0, σ²) (GPT-2) or N(0, 2/(fan_in + fan_out))
// (Xavier). GPT-2 scales the residual output projections (attention W_O, FFN down) by 1/√(2·blocks of
// the stack) so the residual stream's variance does not grow with depth. W_Q and W_K rows get σ·init_qk_scale.
void Model::initialize(uint64_t seed) {
  const ModelConfig& c = impl_->config;
  const int64_t H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();
  uint64_t offset = 0;  // each parameter draws its own range of the stream
  for (Parameter* p : impl_->params) {
    Tensor& v = p->value;
    if (is_bias(p->role)) {
      v.zero();
      continue;
    }
    if (is_norm_gain(p->role)) {
      v.fill(c.norm_unit_offset ? 0.0f : 1.0f);  // a gain of 1 either way
      continue;
    }
    if (p->role == Role::LoraB) {  // an adapter starts as nothing
      v.zero();
      continue;
    }
    if (p->role == Role::LoraA) {  // Kaiming-uniform (a = √5), as PEFT
      nn::draw_lora_a(*p, seed, offset);
      offset += static_cast<uint64_t>(v.numel()) + 2;
      continue;
    }
    double std = c.init_std;
    int64_t qk_rows = 0;  // leading rows that are W_Q or W_K
    if (is_projection(p->role)) {
      if (c.init == InitScheme::Xavier) std = std::sqrt(2.0 / double(v.size(0) + v.size(1)));
      const bool residual_out = p->role == Role::AttentionOutput || p->role == Role::FfnOut;
      if (c.init == InitScheme::GPT2 && residual_out) std /= std::sqrt(2.0 * double(p->stack_blocks));
      if (p->role == Role::AttentionQkv) qk_rows = (H + Hkv) * D;
      if (p->role == Role::AttentionQuery) qk_rows = H * D;
      if (p->role == Role::AttentionKeyValue) qk_rows = Hkv * D;
    }
    const int64_t split = qk_rows * (v.rank() == 2 ? v.size(1) : 1);
    kernels::fill_normal(v.data(), split, 0.0, std * c.init_qk_scale, seed, offset);
    kernels::fill_normal(v.data() + split, v.numel() - split, 0.0, std, seed, offset + split + 1);
    offset += static_cast<uint64_t>(v.numel()) + 2;
  }
}

}  // namespace attend
