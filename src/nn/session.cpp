// Decoding sessions (001 §10): a session owns one sequence's KV cache, position and last logits; the model's
// weights are shared and only read. A step over several sessions embeds and runs all their new rows through
// one forward of the decoder stack (Stack::step): the matmuls see every row at once, each sequence attends to
// its own cache, and the LM head runs on each sequence's last row.
#include "nn/kv_cache.h"
#include "nn/transformer.h"

#include "kernels/elementwise.h"

#include <attend/error.h>
#include <attend/session.h>

#include <algorithm>
#include <cstring>

namespace attend {

using nn::check_sequences;
using nn::valid_mask;

struct Session::State {
  const Model* model = nullptr;
  const Model::Impl* network = nullptr;  // the model's weights (Session is Model's friend; step is not)
  nn::KVCache cache;
  int64_t position = 0;
  // Encoder-decoder models: every decoder block's cross-attention keys and values of the source.
  std::vector<Tensor> context_keys, context_values;
  std::vector<float> logits;  // (V) after the last step

  State(const Model& m, const nn::KVCacheConfig& c) : model(&m), network(m.impl_.get()), cache(c) {}
  State(const State& o)
      : model(o.model), network(o.network), cache(o.cache), position(o.position),
        context_keys(clones(o.context_keys)), context_values(clones(o.context_values)), logits(o.logits) {}

  static std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
    std::vector<Tensor> out;
    for (const Tensor& t : tensors) out.push_back(t.clone());
    return out;
  }
};

namespace {

nn::KVCacheConfig cache_config(const ModelConfig& c, const SessionOptions& o) {
  const int64_t max_T = o.max_T > 0 ? o.max_T : c.max_seq_len;
  check(o.max_T >= 0 && max_T <= c.max_seq_len,
        "session: max_T must be in [1, max_seq_len = {}] (0 for the whole context), got {}", c.max_seq_len, o.max_T);
  return {c.decoder_layers(), 1, max_T, c.kv_heads(), c.d_head(), o.cache};
}

}  // namespace

Session::Session(const Model& model, const SessionOptions& options) {
  const ModelConfig& c = model.config();
  check(c.architecture != Architecture::Encoder,
        "session: an encoder model does not generate text (it has no decoder): it encodes (hidden states, "
        "classification: attend eval-classify)");
  check(c.architecture == Architecture::Decoder,
        "session: an encoder-decoder model decodes from a source (construct the session with the encoder's input)");
  state_ = std::make_unique<State>(model, cache_config(c, options));
}

Session::Session(const Model& model, std::span<const int32_t> source, const SessionOptions& options) {
  const ModelConfig& c = model.config();
  check(c.architecture == Architecture::EncoderDecoder, "session: only encoder-decoder models decode from a source");
  state_ = std::make_unique<State>(model, cache_config(c, options));
  const Model::Impl& m = *model.impl_;
  const std::vector<int32_t> ids(source.begin(), source.end());
  const auto T = static_cast<int64_t>(ids.size());
  check(T >= 1, "session: the source has no tokens");
  const std::vector<int32_t> lengths = check_sequences(ids, {}, 1, T, "src_ids", "src_lengths", c);
  const std::vector<uint8_t> valid = valid_mask(lengths, 1, T);
  const Tensor x = m.embed(nullptr, ids, {}, 1, T, false, nullptr);
  const nn::StackCall call{1, T, lengths.data(), valid.data()};
  Tensor encoded = m.encoder->forward(x, call, nullptr);
  encoded.reshape({1, T, c.d_model});
  m.decoder->project_context(encoded, state_->context_keys, state_->context_values);
}

Session::~Session() = default;
Session::Session(const Session& other) : state_(std::make_unique<State>(*other.state_)) {}
Session& Session::operator=(const Session& other) {
  if (this != &other) state_ = std::make_unique<State>(*other.state_);
  return *this;
}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

const Model& Session::model() const { return *state_->model; }
int64_t Session::position() const { return state_->position; }
int64_t Session::capacity() const { return state_->cache.config().max_T; }
int64_t Session::cache_bytes() const { return state_->cache.memory_bytes(); }
std::span<const float> Session::logits() const { return state_->logits; }

std::span<const float> Session::step(std::span<const int32_t> tokens) {
  attend::step({this}, {std::vector<int32_t>(tokens.begin(), tokens.end())});
  return logits();
}

void Session::assign(const Session& other) {
  State& s = *state_;
  const State& o = *other.state_;
  check(s.model == o.model && s.cache.config().max_T == o.cache.config().max_T &&
            s.cache.config().storage == o.cache.config().storage,
        "session: assign takes a session of the same model, capacity and cache type");
  if (this == &other) return;
  s.cache.copy_from(o.cache, o.position);
  s.position = o.position;
  s.context_keys = Session::State::clones(o.context_keys);
  s.context_values = Session::State::clones(o.context_values);
  s.logits = o.logits;
}

void step(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens) {
  check(!sessions.empty(), "session step: no sessions");
  check(sessions.size() == tokens.size(), "session step: {} sessions but {} token lists", sessions.size(),
        tokens.size());
  const Model& model = sessions[0]->model();
  const Model::Impl& m = *sessions[0]->state_->network;
  const ModelConfig& c = m.config;
  const int64_t C = c.d_model, V = c.vocab_size, S = static_cast<int64_t>(sessions.size());

  // Every check before anything changes: a bad session leaves all of them as they were.
  std::vector<nn::CachedSequence> sequences;
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < S; ++i) {
    Session::State& s = *sessions[i]->state_;
    const std::vector<int32_t>& t = tokens[i];
    check(s.model == &model, "session step: session {} runs another model than session 0", i);
    for (int64_t j = 0; j < i; ++j)
      check(sessions[j] != sessions[i], "session step: session {} is also session {}", i, j);
    const auto n = static_cast<int64_t>(t.size());
    check(n >= 1, "session step: session {} got no tokens", i);
    check(s.position + n <= s.cache.config().max_T,
          "session step: session {}: {} tokens after {} do not fit the context of {} positions", i, n, s.position,
          s.cache.config().max_T);
    for (int64_t j = 0; j < n; ++j) {
      check(t[j] >= 0 && t[j] < V, "session step: session {}: token id {} is outside the vocabulary [0, {})", i, t[j],
            V);
      positions.push_back(s.position + j);
    }
    ids.insert(ids.end(), t.begin(), t.end());
    sequences.push_back({&s.cache, s.position, n, s.context_keys.empty() ? nullptr : &s.context_keys,
                         s.context_values.empty() ? nullptr : &s.context_values});
  }

  const Tensor x = m.embed_rows(ids, positions);
  const Tensor top = m.decoder->step(x, sequences);
  // The LM head on each sequence's last row.
  Tensor last = Tensor::uninitialized({S, C});
  int64_t r = 0;
  for (int64_t i = 0; i < S; ++i) {
    r += sequences[i].rows;
    std::memcpy(last.data() + i * C, top.data() + (r - 1) * C, C * sizeof(float));
  }
  if (m.config.lm_head_scale != 1.0)
    kernels::scale(last.data(), last.numel(), static_cast<float>(m.config.lm_head_scale));
  Tensor logits = Tensor::uninitialized({S, V});
  nn::linear_forward(logits.data(), last.data(), m.output_matrix(), nullptr, S, C, V, Precision::F32);
  for (int64_t i = 0; i < S; ++i) {
    Session::State& s = *sessions[i]->state_;
    s.logits.assign(logits.data() + i * V, logits.data() + (i + 1) * V);
    s.position += sequences[i].rows;
  }
}

}  // namespace attend
