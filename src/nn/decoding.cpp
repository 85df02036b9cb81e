// Generation through the KV cache (001 §10): the cache's set-up, one step of new tokens at the next
// positions, beam reordering, and bf16 decode weights.
#include "nn/kv_cache.h"
#include "nn/transformer.h"

#include "kernels/convert.h"

#include <attend/error.h>

#include <cstring>

namespace attend {

using nn::check_sequences;
using nn::valid_mask;

// ---- Generation -------------------------------------------------------------------------------------

void Model::start_decoding(int64_t batch, int64_t max_T, std::vector<int32_t> left_pad) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  check(c.architecture == Architecture::Decoder,
        "generation: a {} model decodes from a source (start_decoding with the encoder's input)",
        architecture_name(c.architecture));
  check(batch >= 1 && max_T >= 1 && max_T <= c.max_seq_len,
        "generation: the cache needs batch ≥ 1 and 1 ≤ max_T ≤ max_seq_len = {}, got batch {} and max_T {}",
        c.max_seq_len, batch, max_T);
  check(left_pad.empty() || static_cast<int64_t>(left_pad.size()) == batch,
        "generation: {} left-padding counts for a batch of {}", left_pad.size(), batch);
  for (int32_t pad : left_pad)
    check(pad >= 0 && pad < max_T, "generation: left padding {} is outside [0, {})", pad, max_T);
  m.cache = std::make_unique<nn::KVCache>(
      nn::KVCacheConfig{c.decoder_layers(), batch, max_T, c.kv_heads(), c.d_head(), m.cache_type});
  m.decode_position = 0;
  m.src_lengths.clear();
  m.left_pad = std::move(left_pad);
  m.mark_rounded_stale();
}

void Model::start_decoding(const Batch& source, int64_t max_T) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  check(c.architecture == Architecture::EncoderDecoder, "generation: only encoder-decoder models decode from a source");
  check(max_T >= 1 && max_T <= c.max_seq_len, "generation: max_T must be in [1, max_seq_len = {}], got {}",
        c.max_seq_len, max_T);
  const int64_t B = source.B;
  check(B >= 1, "generation: the source has no sequences");
  m.mark_rounded_stale();
  m.src_lengths = check_sequences(source.src_ids, source.src_lengths, B, source.src_T, "src_ids", "src_lengths", c);
  m.enc_valid = valid_mask(m.src_lengths, B, source.src_T);
  Impl::Embedded embedded;
  const Tensor x = m.embed(embedded, source.src_ids, B, source.src_T, false, nullptr);
  nn::StackCall call{B, source.src_T, m.src_lengths.data(), m.enc_valid.data()};
  Tensor enc = m.encoder->forward(x, call);
  enc.reshape({B, source.src_T, c.d_model});
  m.decoder->cache_context(enc);
  m.left_pad.clear();
  m.cache = std::make_unique<nn::KVCache>(
      nn::KVCacheConfig{c.decoder_layers(), B, max_T, c.kv_heads(), c.d_head(), m.cache_type});
  m.decode_position = 0;
}

int64_t Model::decoded_positions() const { return impl_->decode_position; }

void Model::reorder_decoding(const std::vector<int64_t>& source) {
  check(impl_->cache != nullptr, "generation: reorder before start_decoding");
  impl_->cache->reorder(source, impl_->decode_position);
}

const Tensor& Model::decode(const std::vector<int32_t>& ids, int64_t T_new) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  check(m.cache != nullptr, "generation: decode before start_decoding");
  const int64_t B = m.cache->config().batch, C = c.d_model, V = c.vocab_size;
  check(T_new >= 1 && static_cast<int64_t>(ids.size()) == B * T_new,
        "generation: decode got {} ids, expected batch × new tokens = {} × {}", ids.size(), B, T_new);
  check(m.decode_position + T_new <= m.cache->config().max_T,
        "generation: {} tokens after {} do not fit the context of {} positions", T_new, m.decode_position,
        m.cache->config().max_T);
  for (size_t i = 0; i < ids.size(); ++i)
    check(ids[i] >= 0 && ids[i] < V, "generation: token id {} is outside the vocabulary [0, {})", ids[i], V);
  Impl::Embedded embedded;
  const bool padded = !m.left_pad.empty();
  const Tensor x = m.embed(embedded, ids, B, T_new, false, nullptr, m.decode_position, padded ? &m.left_pad : nullptr);
  // Left padding: no query attends to its sequence's pad keys (the causal mask does the rest).
  const int64_t Tk = m.decode_position + T_new;
  std::vector<uint8_t> mask;
  if (padded) {
    mask.resize(B * T_new * Tk);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T_new; ++i)
        for (int64_t j = 0; j < Tk; ++j) mask[(b * T_new + i) * Tk + j] = j >= m.left_pad[b];
  }
  nn::StackCall call{B, T_new, nullptr, nullptr, nullptr, m.src_lengths.empty() ? nullptr : m.src_lengths.data(),
                     false, nullptr, m.cache.get(), m.decode_position, padded ? mask.data() : nullptr};
  const Tensor top = m.decoder->forward(x, call);
  m.decode_position += T_new;
  Tensor last = Tensor::uninitialized({B, C});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(last.data() + b * C, top.data() + (b * T_new + T_new - 1) * C, C * sizeof(float));
  m.next_logits = Tensor::uninitialized({B, V});
  nn::linear_forward(m.next_logits.data(), last.data(), m.output_matrix(), nullptr, B, C, V);
  return m.next_logits;
}

void Model::set_cache_type(CacheType type) { impl_->cache_type = type; }
CacheType Model::cache_type() const { return impl_->cache_type; }

void Model::set_decode_weights(WeightType weights) {
  check(weights != WeightType::F16, "generation: decode weights are f32 or bf16, not f16");
  for (Parameter* p : impl_->params) {
    p->bf16.clear();
    if (weights != WeightType::BF16) continue;
    // Every value becomes what a bf16 checkpoint holds, so the prompt (sgemm on fp32) and the decoded tokens
    // (bf16) see one model; the multiplied matrices also stay packed for decoding.
    std::vector<uint16_t> bits(static_cast<size_t>(p->numel()));
    kernels::float_to_bf16(bits.data(), p->value.data(), p->numel());
    kernels::bf16_to_float(p->value.data(), bits.data(), p->numel());
    if (p->value.rank() == 2 && p->role != Role::PositionTable) p->bf16 = std::move(bits);
  }
}

}  // namespace attend
