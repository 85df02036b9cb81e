// Decoding sessions (001 §10): a session owns one sequence's KV cache, position and last logits; the model's
// weights are shared and only read. A step over several sessions embeds and runs all their new rows through
// one forward of the decoder stack (Stack::step): the matmuls see every row at once, each sequence attends to
// its own cache, and the LM head runs on each sequence's last row.
#include "nn/kv_cache.h"
#include "nn/kv_pool.h"
#include "nn/layers.h"
#include "nn/transformer.h"

#include "kernels/elementwise.h"

#include <attend/error.h>
#include <attend/session.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

namespace attend {

using nn::check_sequences;
using nn::valid_mask;

struct KVBlockPool::Impl {
  const Model* model = nullptr;
  std::shared_ptr<nn::KVPool> pool;
};

struct Session::State {
  const Model* model = nullptr;
  const Model::Impl* network = nullptr;  // the model's weights (Session is Model's friend; step is not)
  nn::KVCache cache;
  int64_t position = 0;
  uint64_t adapters = 0;        // SessionOptions::adapters, of the model's slots
  std::vector<double> scales;   // SessionOptions::adapter_scales, one per slot (NaN: as loaded); empty: none given
  std::vector<int32_t> tokens;  // run so far
  // Encoder-decoder models: every decoder block's cross-attention keys and values of the source.
  std::vector<Tensor> context_keys, context_values;
  std::vector<float> logits;  // (V) after the last step

  State(const Model& m, const nn::KVCacheConfig& c) : model(&m), network(m.impl_.get()), cache(c) {}
  State(const Model& m, std::shared_ptr<nn::KVPool> pool, int64_t max_T)
      : model(&m), network(m.impl_.get()), cache(std::move(pool), max_T) {}
  State(const State& o)
      : model(o.model), network(o.network), cache(o.cache), position(o.position), adapters(o.adapters),
        scales(o.scales), tokens(o.tokens), context_keys(clones(o.context_keys)),
        context_values(clones(o.context_values)), logits(o.logits) {}

  // The prefix cache's salt: what a block's keys and values depend on besides the tokens, which the pool compares
  // whole: the adapter mask, and the multipliers' bits where there are any.
  std::vector<uint64_t> salt() const {
    std::vector<uint64_t> words = {adapters};
    for (const double s : scales) {
      uint64_t bits = 0;
      std::memcpy(&bits, &s, sizeof bits);
      words.push_back(std::isnan(s) ? ~uint64_t{0} : bits);
    }
    return words;
  }

  void set_adapters(const Model& m, const SessionOptions& o) {
    adapters = nn::adapter_mask(m, o.adapters);
    scales = nn::adapter_multipliers(m, o.adapter_scales);
  }

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

nn::KVPoolConfig pool_config(const Model& model, int64_t blocks, CacheType cache) {
  const ModelConfig& c = model.config();
  return {c.decoder_layers(), c.kv_heads(), c.d_head(), cache, blocks};
}

}  // namespace

KVBlockPool::KVBlockPool(const Model& model, int64_t blocks, CacheType cache)
    : impl_(std::make_shared<Impl>(Impl{&model, std::make_shared<nn::KVPool>(pool_config(model, blocks, cache))})) {
  static_assert(kBlockPositions == nn::KVPool::kBlock);
}
int64_t KVBlockPool::block_bytes(const Model& model, CacheType cache) {
  return nn::KVPool::block_bytes(pool_config(model, 1, cache));
}
const Model& KVBlockPool::model() const { return *impl_->model; }
CacheType KVBlockPool::cache() const { return impl_->pool->config().storage; }
int64_t KVBlockPool::blocks() const { return impl_->pool->config().blocks; }
int64_t KVBlockPool::available() const { return impl_->pool->available(); }
int64_t KVBlockPool::in_use() const { return impl_->pool->in_use(); }
int64_t KVBlockPool::cached() const { return impl_->pool->cached(); }
int64_t KVBlockPool::memory_bytes() const { return impl_->pool->memory_bytes(); }

Session::Session(const Model& model, const SessionOptions& options) {
  const ModelConfig& c = model.config();
  check(c.architecture != Architecture::Encoder,
        "session: an encoder model does not generate text (it has no decoder): it encodes (hidden states, "
        "classification: attend eval-classify)");
  check(c.architecture == Architecture::Decoder,
        "session: an encoder-decoder model decodes from a source (construct the session with the encoder's input)");
  if (options.pool != nullptr) {
    check(&options.pool->model() == &model, "session: the KV block pool was made for another model");
    const nn::KVCacheConfig cc = cache_config(c, options);
    state_ = std::make_unique<State>(model, options.pool->impl_->pool, cc.max_T);
  } else {
    state_ = std::make_unique<State>(model, cache_config(c, options));
  }
  state_->set_adapters(model, options);
}

Session::Session(const Model& model, std::span<const int32_t> source, const SessionOptions& options) {
  const ModelConfig& c = model.config();
  check(c.architecture == Architecture::EncoderDecoder, "session: only encoder-decoder models decode from a source");
  check(options.pool == nullptr, "session: encoder-decoder sessions keep their own caches (no KV block pool)");
  state_ = std::make_unique<State>(model, cache_config(c, options));
  state_->set_adapters(model, options);
  const Model::Impl& m = *model.impl_;
  const std::vector<int32_t> ids(source.begin(), source.end());
  const auto T = static_cast<int64_t>(ids.size());
  check(T >= 1, "session: the source has no tokens");
  const std::vector<int32_t> lengths = check_sequences(ids, {}, 1, T, "src_ids", "src_lengths", c);
  const std::vector<uint8_t> valid = valid_mask(lengths, 1, T);
  const Tensor x = m.embed(nullptr, ids, {}, 1, T, false, nullptr);
  const nn::StackCall call{1, T, lengths.data(), valid.data()};
  // The encoder and the cross-attention's keys and values with the session's adapters too (T rows each).
  const nn::SameAdapters rows(model, state_->adapters, state_->scales, T);
  const nn::SelectAdapters select(rows.masks, rows.scales);
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
uint64_t Session::adapters() const { return state_->adapters; }
std::vector<std::optional<double>> Session::adapter_scales() const {
  std::vector<std::optional<double>> out;
  for (const double s : state_->scales) out.push_back(std::isnan(s) ? std::nullopt : std::optional(s));
  return out;
}
std::span<const float> Session::logits() const { return state_->logits; }

std::span<const float> Session::step(std::span<const int32_t> tokens) {
  attend::step({this}, {std::vector<int32_t>(tokens.begin(), tokens.end())});
  return logits();
}

void Session::assign(const Session& other) {
  State& s = *state_;
  const State& o = *other.state_;
  check(s.model == o.model && s.cache.config().max_T == o.cache.config().max_T &&
            s.cache.config().storage == o.cache.config().storage && s.cache.pool() == o.cache.pool() &&
            s.adapters == o.adapters && s.scales == o.scales,
        "session: assign takes a session of the same model, capacity, cache type, pool and adapters (and their "
        "scales)");
  if (this == &other) return;
  s.cache.copy_from(o.cache, o.position);
  s.position = o.position;
  s.tokens = o.tokens;
  s.context_keys = Session::State::clones(o.context_keys);
  s.context_values = Session::State::clones(o.context_values);
  s.logits = o.logits;
}

std::span<const int32_t> Session::tokens() const { return state_->tokens; }

int64_t Session::blocks_needed(int64_t more) const { return state_->cache.blocks_needed(state_->position + more); }

int64_t Session::reuse_prefix(std::span<const int32_t> tokens, int64_t multiple) {
  State& s = *state_;
  check(s.cache.paged(), "session: reuse_prefix needs a session on a KV block pool");
  check(s.position == 0, "session: reuse_prefix starts a session, but this one has run {} tokens", s.position);
  check(multiple > 0 && multiple % nn::KVPool::kBlock == 0, "session: reuse_prefix's multiple must be a positive "
        "multiple of {}, got {}", nn::KVPool::kBlock, multiple);
  const auto n = static_cast<int64_t>(tokens.size());
  // At most the whole multiples that leave a token to run, and that fit the cache.
  const int64_t limit = std::min(n - 1, s.cache.config().max_T) / multiple * multiple;
  if (limit <= 0) return 0;
  std::vector<int32_t> blocks;
  const int64_t found = s.cache.pool()->match(tokens.first(limit), blocks, s.salt()) * nn::KVPool::kBlock;
  const int64_t keep = found / multiple * multiple;
  for (size_t i = keep / nn::KVPool::kBlock; i < blocks.size(); ++i) s.cache.pool()->release(blocks[i]);
  blocks.resize(keep / nn::KVPool::kBlock);
  if (keep == 0) return 0;
  s.cache.adopt(std::move(blocks));
  s.position = keep;
  s.tokens.assign(tokens.begin(), tokens.begin() + keep);
  return keep;
}

void Session::share_prefix(int64_t positions) {
  State& s = *state_;
  check(s.cache.paged(), "session: share_prefix needs a session on a KV block pool");
  check(positions >= 0 && positions <= s.position && positions % nn::KVPool::kBlock == 0,
        "session: share_prefix takes whole blocks of {} positions run so far ({}), got {}", nn::KVPool::kBlock,
        s.position, positions);
  const std::vector<int32_t>& table = s.cache.blocks();
  s.cache.pool()->publish(s.tokens, std::span(table).first(positions / nn::KVPool::kBlock), s.salt());
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
  // Blocks from the sessions' pools, all or none.
  std::vector<std::pair<nn::KVCache*, size_t>> taken;
  for (int64_t i = 0; i < S; ++i) {
    Session::State& s = *sessions[i]->state_;
    const size_t before = s.cache.blocks().size();
    if (!s.cache.reserve(s.position + static_cast<int64_t>(tokens[i].size()))) {
      const int64_t need = s.cache.blocks_needed(s.position + static_cast<int64_t>(tokens[i].size()));
      for (auto& [cache, size] : taken) cache->shrink_blocks(size);
      throw Error(fmt::format("session step: session {} needs {} more KV blocks; the pool has {} free", i, need,
                              s.cache.pool()->available()));
    }
    taken.emplace_back(&s.cache, before);
  }

  // Each row with its session's adapters (and their multipliers), where the sessions do not all run with every
  // one at its own scale.
  std::vector<uint64_t> row_adapters;
  std::vector<const double*> row_scales;
  const uint64_t all = nn::adapter_mask(model, ~uint64_t{0});
  const auto own = [&](const Session* s) { return s->state_->adapters != all || !s->state_->scales.empty(); };
  if (std::any_of(sessions.begin(), sessions.end(), own))
    for (int64_t i = 0; i < S; ++i) row_adapters.insert(row_adapters.end(), tokens[i].size(), sessions[i]->state_->adapters);
  if (std::any_of(sessions.begin(), sessions.end(), [](const Session* s) { return !s->state_->scales.empty(); }))
    for (int64_t i = 0; i < S; ++i) {
      const std::vector<double>& scales = sessions[i]->state_->scales;
      row_scales.insert(row_scales.end(), tokens[i].size(), scales.empty() ? nullptr : scales.data());
    }
  const nn::SelectAdapters select(row_adapters, row_scales);
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
    s.tokens.insert(s.tokens.end(), tokens[i].begin(), tokens[i].end());
  }
}

void step_row_invariant(const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& tokens) {
  check(sessions.size() == tokens.size(), "session step: {} sessions but {} token lists", sessions.size(),
        tokens.size());
  if (sessions.empty()) return;  // nothing to step
  // What the steps below would refuse, refused before any of them runs: ids outside the vocabulary, too few
  // blocks in a pool for all of them.
  std::map<const nn::KVPool*, int64_t> blocks;
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Session::State& s = *sessions[i]->state_;
    const int64_t V = s.model->config().vocab_size;
    for (const int32_t t : tokens[i])
      check(t >= 0 && t < V, "session step: session {}: token id {} is outside the vocabulary [0, {})", i, t, V);
    if (s.cache.paged()) blocks[s.cache.pool()] += s.cache.blocks_needed(s.position + static_cast<int64_t>(tokens[i].size()));
  }
  for (const auto& [pool, need] : blocks)
    check(need <= pool->available(), "session step: the sessions need {} more KV blocks; the pool has {} free", need,
          pool->available());
  // Prompt chunks whose rows every projection multiplies on the per-row kernels anyway (a 16-bit or quantized
  // model's chunks of up to 64 or 128 rows) join the decoding rows in one forward: the same bits as alone, and one
  // pass over the weights for all (a server's eight new prompts of 30 tokens on GPT-2 in fp16 took eight).
  size_t longest = 0;
  for (const std::vector<int32_t>& t : tokens) longest = std::max(longest, t.size());
  auto chunks_per_row = [&] {  // asked only of a step that has chunks
    const std::vector<const Parameter*> parameters = sessions.front()->model().parameters();
    return std::all_of(parameters.begin(), parameters.end(), [&](const Parameter* p) {
      return !is_projection(p->role) || p->role == Role::HeadMatrix ||  // the head takes each session's last row
             nn::rows_take_per_row_kernels(*p, static_cast<int64_t>(longest));
    });
  };
  if (longest == 1 || chunks_per_row()) {
    const nn::PerRowMatmuls rows;
    step(sessions, tokens);
    return;
  }
  std::vector<Session*> single;
  std::vector<std::vector<int32_t>> single_tokens;
  for (size_t i = 0; i < sessions.size(); ++i)
    if (tokens[i].size() == 1) single.push_back(sessions[i]), single_tokens.push_back(tokens[i]);
  if (!single.empty()) {
    const nn::PerRowMatmuls rows;
    step(single, single_tokens);
  }
  for (size_t i = 0; i < sessions.size(); ++i)
    if (tokens[i].size() != 1) step({sessions[i]}, {tokens[i]});
}

}  // namespace attend
