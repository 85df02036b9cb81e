// LoRA adapters (Model::add_lora): W x + s·B(A x) on the chosen projections of every block. Checked against
// the merged model (W + s·B·A), finite differences of A and B, PEFT's initialisation, and the frozen rest.
#include "fixtures.h"
#include "formats/gguf.h"
#include "nn/layers.h"
#include "testing.h"
#include "kernels/convert.h"

#include <attend/error.h>
#include <attend/model.h>
#include <attend/rng.h>
#include <attend/io.h>
#include <attend/safetensors.h>
#include <attend/model_dir.h>
#include <attend/session.h>
#include <attend/train.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <nlohmann/json.hpp>

namespace attend {
namespace {

ModelConfig family(const std::string& name) {
  ModelConfig c;
  c.vocab_size = 40, c.d_model = 16, c.n_layers = 2, c.n_heads = 4, c.max_seq_len = 16, c.seed = 3;
  c.activation = FfnKind::GELUTanh;  // smooth: finite differences never straddle a kink
  if (name == "llama") {
    c.norm = NormKind::RMSNorm, c.position = PositionKind::RoPE, c.activation = FfnKind::SwiGLU;
    c.n_kv_heads = 2, c.bias = false, c.tie_embeddings = false;
  }
  if (name == "t5") {
    c.architecture = Architecture::EncoderDecoder, c.position = PositionKind::T5, c.norm = NormKind::RMSNorm;
    c.bias = false;
  }
  if (name == "bert") {
    c.architecture = Architecture::Encoder, c.n_classes = 3, c.pooler = true, c.mlm_head = false;
    c.type_vocab_size = 2;
  }
  return c;
}

Batch batch_for(const ModelConfig& c, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.B = 2, b.T = 6;
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.ids.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
    b.targets.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
  }
  if (c.architecture == Architecture::Encoder) b.targets.clear(), b.labels = {2, 0}, b.lengths = {6, 4};
  if (c.architecture == Architecture::EncoderDecoder) {
    b.src_T = 5;
    for (int64_t i = 0; i < b.B * b.src_T; ++i) b.src_ids.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
  }
  return b;
}

const std::vector<std::string> kEvery = {"q", "k", "v", "o", "up", "gate", "down"};

// What trains in a LoRA model: the adapters, and a classification head (classifier and pooler) beside them.
bool trains(const Parameter& p) {
  return is_adapter(p.role) || p.name.starts_with("classifier.") || p.name.starts_with("pooler.");
}

// B random instead of zero, so that the adapters do something.
void randomize_b(Model& m, uint64_t seed) {
  Rng rng(seed);
  for (Parameter* p : m.parameters())
    if (p->role == Role::LoraB)
      for (float& x : p->value.span()) x = 0.2f * static_cast<float>(rng.normal());
}

// Adapters of rank 2 on every projection, with B random: the model the gradient tests probe.
Model adapted(const ModelConfig& c) {
  Model m(c);
  m.add_lora({.r = 2, .alpha = 4, .targets = kEvery, .seed = 9});
  randomize_b(m, 5);
  return m;
}

std::vector<float> logits_of(Model& m, const Batch& b) {
  const Tensor& l = (m.forward(b), m.logits());
  return std::vector<float>(l.span().begin(), l.span().end());
}

TEST(Lora, AdaptersStartAsNothingAndAloneTrain) {
  for (const std::string name : {"gpt", "llama", "t5", "bert"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    Model m(c);
    const Batch b = batch_for(c, 1);
    const std::vector<float> before = logits_of(m, b);
    const ParameterCount base = m.count();
    m.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .seed = 9});
    EXPECT_TRUE(m.has_lora());
    EXPECT_EQ(logits_of(m, b), before) << "B starts at zero: the adapted model is the model";
    // r·(in + out) per adapted projection: q, k, v (rows of the fused matrices), o, and the FFN's.
    const int64_t C = c.d_model, H = c.n_heads * c.d_head(), KV = c.kv_heads() * c.d_head(), F = c.ffn_hidden();
    const int64_t r = 4, blocks = c.architecture == Architecture::EncoderDecoder ? c.n_layers + c.decoder_layers() : c.n_layers;
    const int64_t attention = r * (C + H) + 2 * r * (C + KV) + r * (H + C);
    const int64_t ffn = r * (C + F) * (is_gated(c.activation) ? 2 : 1) + r * (F + C);
    const int64_t cross = c.architecture == Architecture::EncoderDecoder ? c.decoder_layers() * attention : 0;
    EXPECT_EQ(m.count().adapters, blocks * (attention + ffn) + cross);
    EXPECT_EQ(m.count().total(), base.total() + m.count().adapters);
    int64_t head = 0;
    for (Parameter* p : m.parameters()) {
      EXPECT_EQ(p->frozen, !trains(*p)) << p->name;
      if (!is_adapter(p->role) && trains(*p)) head += p->numel();
      if (p->role == Role::LoraA) {  // U(−1/√in, 1/√in), as PEFT's Kaiming-uniform with a = √5
        const float bound = 1.0f / std::sqrt(static_cast<float>(p->value.size(1)));
        for (float x : p->value.span()) ASSERT_LE(std::abs(x), bound) << p->name;
      }
      if (p->role == Role::LoraB) {
        for (float x : p->value.span()) ASSERT_EQ(x, 0.0f) << p->name;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(m.gradient_buffer().size()), m.count().adapters + head);
    EXPECT_EQ(head > 0, c.n_classes > 0) << "a classification head trains beside the adapters";
  }
}

// Merging into a base held as stored: a bf16 base packed beside its values, an F16 one held in its 16 bits alone
// (a GGUF file's), a Q8_0 one as blocks. Each adapted weight becomes fp32, W + s·B·A (its stored copy, left in
// use, would drop the adapter), and the merged model gives the adapted model's logits up to the stored type's
// matmuls against fp32 ones.
TEST(Lora, MergingIntoAStoredBaseMakesTheWeightFp32) {
  ModelConfig c = family("llama");
  c.d_model = 64, c.d_ff = 256;  // whole Q8_0 blocks
  const Batch b = batch_for(c, 2);
  for (const WeightType type : {WeightType::BF16, WeightType::F16, WeightType::Q8_0}) {
    SCOPED_TRACE(weight_type_name(type));
    Model m(c);
    m.add_lora({.r = 4, .alpha = 8, .targets = {"q", "v"}, .seed = 9});
    randomize_b(m, 4);
    Model base(c);  // the same base without its adapters, as stored
    base.copy_parameters_from(m);
    base.set_storage(type);
    m.set_storage(type);
    if (type == WeightType::F16) m.hold_as_stored();
    const std::vector<float> with = logits_of(m, b);
    const std::vector<float> without = logits_of(base, b);
    const Parameter& qkv_before = *m.find("decoder.layers.0.attn.qkv.weight");
    ASSERT_TRUE(nn::held_as_stored(qkv_before));
    const WeightType o_type = m.find("decoder.layers.0.attn.o.weight")->storage;  // no adapter on o
    m.merge_lora();
    const Parameter& qkv = *m.find("decoder.layers.0.attn.qkv.weight");
    EXPECT_EQ(qkv.storage, WeightType::F32);
    EXPECT_TRUE(qkv.has_values());
    EXPECT_TRUE(qkv.packed.empty() && qkv.quantized.empty());
    EXPECT_EQ(m.find("decoder.layers.0.attn.o.weight")->storage, o_type) << "a weight without adapters stays as stored";
    const std::vector<float> merged = logits_of(m, b);
    double largest = 0.0, adapter = 0.0, off = 0.0;
    for (size_t i = 0; i < with.size(); ++i) {
      largest = std::max(largest, double(std::abs(with[i])));
      adapter = std::max(adapter, double(std::abs(with[i] - without[i])));
      off = std::max(off, double(std::abs(merged[i] - with[i])));
    }
    EXPECT_GT(adapter, 0.05 * largest) << "the adapters change the logits";
    EXPECT_LT(off, 0.1 * adapter) << "the merged model runs the adapters";
  }
}

// Several adapter sets at once (`--lora A --lora B:0.5`): the model's own and a named one, each with its scale,
// add up; the merged model (both folded in) gives the same logits to fp32 rounding, and a set at scale 0 is no
// set at all, bit for bit.
TEST(Lora, SeveralAdapterSetsAddUpEachWithItsScale) {
  for (const std::string name : {"gpt", "llama", "t5", "bert"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    const Batch b = batch_for(c, 2);
    Model m(c);
    EXPECT_EQ(m.add_lora({.r = 4, .alpha = 8, .targets = {"q", "v"}, .seed = 9}), 0);
    EXPECT_EQ(m.add_lora({.r = 2, .alpha = 2, .targets = kEvery, .seed = 7, .name = "other", .multiplier = 0.5}), 1);
    EXPECT_EQ(m.adapters(), (std::vector<std::string>{"", "other"}));
    EXPECT_NE(m.find((name == "bert" ? "encoder" : "decoder") + std::string(".layers.0.attn.o.lora_A.other.weight")),
              nullptr);
    randomize_b(m, 4);
    EXPECT_THROW(m.add_lora({.r = 2, .name = "other"}), Error) << "a second set of the same name";
    EXPECT_THROW(m.add_lora({.r = 2}), Error) << "a second set of the model's own";
    EXPECT_THROW(m.add_lora({.r = 2, .name = "a.b"}), Error) << "a name that cannot go into tensor names";
    const std::vector<float> with = logits_of(m, b);
    m.merge_lora();
    EXPECT_TRUE(m.adapters().empty());
    double largest = 0.0;
    for (float x : with) largest = std::max(largest, double(std::abs(x)));
    testing::expect_all_close(logits_of(m, b), with, 1e-4 * largest, name + ": both sets merged");

    Model one(c), two(c);
    one.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .seed = 9});
    two.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .seed = 9});
    randomize_b(one, 4), randomize_b(two, 4);
    two.add_lora({.r = 2, .alpha = 2, .targets = kEvery, .seed = 7, .name = "silent", .multiplier = 0.0});
    for (Parameter* p : two.parameters())  // the silent set's B not zero either
      if (p->name.find("lora_B.silent") != std::string::npos) p->value.fill(0.5f);
    EXPECT_EQ(logits_of(two, b), logits_of(one, b)) << "a set at scale 0 adds nothing";
  }
}

// Prompts of 3, 4, 5, ... random tokens, one for each of `count` sessions.
std::vector<std::vector<int32_t>> prompts_for(size_t count, int64_t V, Rng& rng) {
  std::vector<std::vector<int32_t>> prompts(count);
  for (size_t i = 0; i < count; ++i)
    for (size_t t = 0; t < 3 + i; ++t) prompts[i].push_back(1 + static_cast<int32_t>(rng.below(V - 1)));
  return prompts;
}

// Session i's logits after each of `steps` row-invariant steps, the sessions stepping together (a server's step):
// their prompts in the first, then one token each, the same for a session stepping alone (step_alone).
int32_t next_token(int step, size_t i, int64_t V) { return static_cast<int32_t>(1 + (step * 7 + i * 3) % (V - 1)); }
std::vector<std::vector<std::vector<float>>> step_together(std::vector<Session>& sessions,
                                                           std::vector<std::vector<int32_t>> tokens, int steps, int64_t V) {
  std::vector<Session*> all;
  for (Session& s : sessions) all.push_back(&s);
  std::vector<std::vector<std::vector<float>>> got(sessions.size());
  for (int step = 0; step < steps; ++step) {
    step_row_invariant(all, tokens);
    for (size_t i = 0; i < sessions.size(); ++i) {
      got[i].emplace_back(sessions[i].logits().begin(), sessions[i].logits().end());
      tokens[i] = {next_token(step, i, V)};
    }
  }
  return got;
}
// The same steps for session i of step_together stepping alone.
std::vector<std::vector<float>> step_alone(Session& session, std::vector<int32_t> prompt, size_t i, int steps,
                                           int64_t V) {
  std::vector<std::vector<float>> got;
  for (int step = 0; step < steps; ++step) {
    step_row_invariant({&session}, {prompt});
    got.emplace_back(session.logits().begin(), session.logits().end());
    prompt = {next_token(step, i, V)};
  }
  return got;
}

// A server's requests: sessions with different adapter sets (none, the model's own, a named one held module by
// module: every other projection, at ranks 1 and 3, as a PEFT rank_pattern or a GGUF LoRA file gives them; both) step
// together, and each gets exactly what it gets stepping alone; a session without adapters is the bare model's;
// the prefix cache shares blocks only between sessions of the same sets.
TEST(Lora, SessionsWithDifferentAdaptersStepTogetherAsAlone) {
  for (const std::string name : {"gpt", "llama"}) {
    SCOPED_TRACE(name);
    ModelConfig c = family(name);
    c.max_seq_len = 80;
    Model plain(c), m(c);
    m.add_lora({.r = 4, .alpha = 8, .targets = {"q", "k", "v", "o"}, .seed = 9});
    LoraConfig b{.r = 2, .alpha = 4, .targets = kEvery, .seed = 7, .name = "b"};
    {
      Model scratch(c);  // the modules' keys: a whole set's adapters' names before ".lora_A"
      scratch.add_lora(b);
      int64_t k = 0;
      for (const Parameter* p : scratch.parameters())
        if (p->role == Role::LoraA && k++ % 2 == 0)
          b.per_module[p->name.substr(0, p->name.find(".lora_A"))] = {.r = k % 4 == 1 ? 1 : 3, .alpha = 2.5};
    }
    m.add_lora(b);
    int64_t held = 0;
    for (const Parameter* p : m.parameters()) held += p->role == Role::LoraA && p->name.find(".b.") != std::string::npos;
    EXPECT_EQ(held, static_cast<int64_t>(b.per_module.size()));
    randomize_b(m, 4);
    const std::vector<uint64_t> masks = {0, 1, 2, 3};
    const int64_t V = c.vocab_size;
    Rng rng(6);
    const std::vector<std::vector<int32_t>> prompts = prompts_for(masks.size(), V, rng);
    // Together: the prompts in one step, then three one-token steps of all four.
    std::vector<Session> together;
    for (uint64_t mask : masks) together.emplace_back(m, SessionOptions{.adapters = mask});
    const auto got = step_together(together, prompts, 4, V);
    for (size_t i = 0; i < masks.size(); ++i) {
      SCOPED_TRACE("adapters " + std::to_string(masks[i]));
      Session alone(m, {.adapters = masks[i]}), bare(plain);
      const auto mine = step_alone(alone, prompts[i], i, 4, V);
      const auto bare_steps = masks[i] == 0 ? step_alone(bare, prompts[i], i, 4, V) : got[i];
      for (int step = 0; step < 4; ++step) {
        EXPECT_EQ(mine[step], got[i][step]) << "step " << step;
        if (masks[i] == 0) {
          EXPECT_EQ(bare_steps[step], got[i][step]) << "no adapters: the bare model, step " << step;
        } else {
          EXPECT_NE(got[i][step], got[0][step]) << "the adapters change the logits, step " << step;
        }
      }
    }
    // Prefix cache: 64 positions published under the own set are reused by the own set alone.
    KVBlockPool pool(m, 16);
    std::vector<int32_t> prompt(70);
    for (int32_t& x : prompt) x = 1 + static_cast<int32_t>(rng.below(c.vocab_size - 1));
    Session first(m, {.pool = &pool, .adapters = 1});
    step_row_invariant({&first}, {std::vector<int32_t>(prompt.begin(), prompt.begin() + 64)});
    first.share_prefix(64);
    Session other(m, {.pool = &pool, .adapters = 2}), bare(m, {.pool = &pool, .adapters = 0}),
        same(m, {.pool = &pool, .adapters = 1});
    EXPECT_EQ(other.reuse_prefix(prompt, 32), 0);
    EXPECT_EQ(bare.reuse_prefix(prompt, 32), 0);
    EXPECT_EQ(same.reuse_prefix(prompt, 32), 64);
  }
  // An encoder-decoder session runs its encoder and cross-attention keys and values with its adapters too: without
  // them, the bare model's logits.
  const ModelConfig c = family("t5");
  Model plain(c), m(c);
  m.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .seed = 9});
  randomize_b(m, 4);
  const std::vector<int32_t> src = {3, 9, 4, 7, 12};
  const int32_t start[] = {1};
  Session bare(m, src, {.adapters = 0}), base(plain, src), adapted(m, src);
  const std::span<const float> a = bare.step(start), b = base.step(start), d = adapted.step(start);
  EXPECT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
  EXPECT_NE(std::vector<float>(d.begin(), d.end()), std::vector<float>(b.begin(), b.end()));
}

// A request's own LoRA scales (llama-server's per-request "lora"): a session whose adapter_scales replace its sets'
// multipliers gets, bit for bit, what the model loaded with those multipliers gets, stepping among sessions at other
// scales as alone (per row) and grouped by scale in a batched step; 0 turns a set off; the prefix cache shares
// blocks only at the same multipliers.
TEST(Lora, SessionAdapterScalesAreTheSetsLoadedAtThoseScales) {
  for (const std::string name : {"gpt", "llama"}) {
    SCOPED_TRACE(name);
    ModelConfig c = family(name);
    c.max_seq_len = 80;
    const auto loaded = [&](double own, double b) {
      auto model = std::make_unique<Model>(c);
      model->add_lora({.r = 6, .alpha = 16, .targets = {"q", "k", "v", "o"}, .seed = 9, .multiplier = own});
      model->add_lora({.r = 3, .alpha = 4, .targets = kEvery, .rslora = true, .seed = 7, .name = "b", .multiplier = b});
      randomize_b(*model, 4);
      return model;
    };
    // Loaded at scales that are not 1, and asked for others that no float holds exactly (16/6 · 1.3, 4/√3 · 0.3).
    const std::unique_ptr<Model> m = loaded(0.3, 1.7);
    struct Case {
      std::vector<std::optional<double>> scales;
      double own, b;
    };
    const std::vector<Case> cases = {{{1.3, std::nullopt}, 1.3, 1.7}, {{std::nullopt, 0.3}, 0.3, 0.3},
                                     {{0.01, 0.0}, 0.01, 0.0},         {{}, 0.3, 1.7},
                                     {{-1.0}, -1.0, 1.7},              {{0.3, 1.7}, 0.3, 1.7}};
    std::vector<Session> together;
    for (const Case& k : cases) together.emplace_back(*m, SessionOptions{.adapter_scales = k.scales});
    EXPECT_TRUE(together[3].adapter_scales().empty()) << "none given";
    EXPECT_EQ(together[4].adapter_scales(), (std::vector<std::optional<double>>{-1.0, std::nullopt}))
        << "one per slot, as loaded past the list";
    const int64_t V = c.vocab_size;
    Rng rng(6);
    const std::vector<std::vector<int32_t>> prompts = prompts_for(cases.size(), V, rng);
    const auto got = step_together(together, prompts, 3, V);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("case " + std::to_string(i));
      const std::unique_ptr<Model> ref = loaded(cases[i].own, cases[i].b);
      Session alone(*ref);
      const auto mine = step_alone(alone, prompts[i], i, 3, V);
      for (int step = 0; step < 3; ++step) {
        EXPECT_EQ(mine[step], got[i][step]) << "step " << step;
        if (i < 3) {
          EXPECT_NE(got[i][step], got[3][step]) << "other scales change the logits";
        }
      }
    }
    // The batched step (not row-invariant) runs each run of rows at one scale together: sessions at 1.3, 1.3, as
    // loaded and 1.3 in one step, each against the model loaded at its scales stepping alone (the same rows in
    // other groupings: the products may round apart, within a bound of a few ulps of the largest logit).
    const std::unique_ptr<Model> at_13 = loaded(1.3, 1.7);
    const std::vector<std::vector<std::optional<double>>> batch_scales = {{1.3}, {1.3}, {}, {1.3}};
    std::vector<Session> batch;
    for (const auto& sc : batch_scales) batch.emplace_back(*m, SessionOptions{.adapter_scales = sc});
    std::vector<Session*> batch_ptrs;
    for (Session& s : batch) batch_ptrs.push_back(&s);
    std::vector<std::vector<int32_t>> batch_tokens = {prompts[0], prompts[1], prompts[2], prompts[3]};
    step(batch_ptrs, batch_tokens);
    for (size_t i = 0; i < batch.size(); ++i) {
      Session alone(batch_scales[i].empty() ? *m : *at_13);
      alone.step(batch_tokens[i]);
      const std::vector<float> want(alone.logits().begin(), alone.logits().end());
      double largest = 0.0;
      for (float x : want) largest = std::max(largest, double(std::abs(x)));
      testing::expect_all_close(std::vector<float>(batch[i].logits().begin(), batch[i].logits().end()), want,
                                1e-4 * largest, "batched session " + std::to_string(i));
    }

    EXPECT_THROW(Session(*m, {.adapter_scales = {1.0, std::numeric_limits<double>::quiet_NaN()}}), Error);
    EXPECT_THROW(Session(*m, {.adapter_scales = {std::numeric_limits<double>::infinity()}}), Error);
    Session half(*m, {.adapter_scales = {0.5}}), plain(*m);
    EXPECT_THROW(half.assign(plain), Error) << "assign across multipliers";

    KVBlockPool pool(*m, 16);
    std::vector<int32_t> prompt(70);
    for (int32_t& x : prompt) x = 1 + static_cast<int32_t>(rng.below(c.vocab_size - 1));
    Session first(*m, {.pool = &pool, .adapter_scales = {0.5}});
    step_row_invariant({&first}, {std::vector<int32_t>(prompt.begin(), prompt.begin() + 64)});
    first.share_prefix(64);
    Session same(*m, {.pool = &pool, .adapter_scales = {0.5, std::nullopt}}), unscaled(*m, {.pool = &pool}),
        other(*m, {.pool = &pool, .adapter_scales = {0.25}}), close(*m, {.pool = &pool, .adapter_scales = {0.5 + 1e-12}});
    EXPECT_EQ(same.reuse_prefix(prompt, 32), 64);
    EXPECT_EQ(unscaled.reuse_prefix(prompt, 32), 0);
    EXPECT_EQ(other.reuse_prefix(prompt, 32), 0);
    EXPECT_EQ(close.reuse_prefix(prompt, 32), 0) << "the multipliers compared whole";
  }
}

// W x + s·B(A x) against (W + s·B·A) x: the same products summed in another order. Each logit is a sum of
// fp32 products through the network; the two orders differ by a few ulps of the largest magnitudes
// involved, far below 1e-4 of the largest logit for these sizes.
TEST(Lora, LogitsEqualTheMergedModelsAndSessionsApplyThem) {
  for (const std::string name : {"gpt", "llama", "t5", "bert"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    for (bool rslora : {false, true}) {
      Model adapted(c);
      adapted.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .rslora = rslora, .seed = 9});
      randomize_b(adapted, 4);
      const Batch b = batch_for(c, 2);
      const std::vector<float> with = logits_of(adapted, b);
      Model plain(c);
      EXPECT_NE(logits_of(plain, b), with) << "the adapters change the model";
      adapted.merge_lora();
      EXPECT_FALSE(adapted.has_lora());
      EXPECT_EQ(adapted.parameters().size(), plain.parameters().size());
      EXPECT_EQ(adapted.trainable_parameters().size(), plain.parameters().size());
      const std::vector<float> merged = logits_of(adapted, b);
      double largest = 0.0;
      for (float x : with) largest = std::max(largest, double(std::abs(x)));
      testing::expect_all_close(merged, with, 1e-4 * largest, name + ": merged against adapted logits");
    }
    if (c.architecture != Architecture::Decoder) continue;
    // Decoding through the KV cache applies the adapters too: its last logits are the forward's.
    Model adapted(c);
    adapted.add_lora({.r = 4, .alpha = 8, .targets = kEvery, .seed = 9});
    randomize_b(adapted, 4);
    Batch one = batch_for(c, 3);
    one.B = 1, one.ids.resize(6), one.targets.resize(6);
    const std::vector<float> full = logits_of(adapted, one);
    Session session(adapted);
    const std::span<const float> last = session.step(one.ids);
    std::vector<float> want(full.end() - c.vocab_size, full.end());
    testing::expect_all_close(std::vector<float>(last.begin(), last.end()), want, 1e-4, name + ": session logits");
  }
}

// ∂loss/∂A and ∂loss/∂B against central differences (a five-point stencil), entry by entry and along a random
// direction; the rest of the model is frozen and keeps no gradient.
TEST(Lora, GradientsOfAAndBAgreeWithFiniteDifferences) {
  for (const std::string name : {"gpt", "llama", "t5", "bert"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    Model m = adapted(c);
    testing::expect_finite_differences(m, batch_for(c, 6), {}, name);
    EXPECT_GT(m.trainable_parameters().size(), 10u) << "A and B of every adapted projection are probed";
    for (const Parameter* p : m.parameters()) {
      EXPECT_EQ(p->frozen, !trains(*p)) << p->name;
      if (p->frozen) {
        EXPECT_EQ(p->grad.numel(), 0) << p->name;
      }
    }
  }
}

// Adapter dropout (PEFT's lora_dropout): training drops the adapters' input, B(A·drop(x)), with a mask that is a
// function of the run's seed, so that finite differences of the training loss see the same masks; evaluation
// and a p of 0 are the plain adapters, bit for bit.
TEST(Lora, AdapterDropoutDropsTheAdaptersInputWithGradientsToMatch) {
  for (const std::string name : {"gpt", "llama", "t5", "bert"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    const Batch b = batch_for(c, 6);
    Model dropping(c), plain(c);
    // alpha 2: T5's loss curves too much at the stencil's step (1e-2) with the adapters at twice this scale (the
    // differences then converge to the gradient only as the step shrinks).
    dropping.add_lora({.r = 2, .alpha = 2, .targets = kEvery, .seed = 9, .dropout = 0.3});
    plain.add_lora({.r = 2, .alpha = 2, .targets = kEvery, .seed = 9});
    randomize_b(dropping, 5), randomize_b(plain, 5);
    EXPECT_EQ(dropping.config().lora_dropout, 0.3);
    const RunOptions training{.training = true, .seed = 5};
    EXPECT_EQ(dropping.forward(b).loss, plain.forward(b).loss) << "evaluation keeps every input";
    EXPECT_EQ(plain.forward(b, training).loss, plain.forward(b).loss) << "no dropout anywhere else";
    EXPECT_NE(dropping.forward(b, training).loss, plain.forward(b, training).loss) << "training drops";
    EXPECT_EQ(dropping.forward(b, training).loss, dropping.forward(b, training).loss) << "the same masks again";
    testing::expect_finite_differences(dropping, b, training, name + " with adapter dropout");
  }
}

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_test_lora_" + name);
  fs::remove_all(dir);
  return dir;
}

// config.json's lora_* fields give a model its adapters: a saved LoRA model loads with them (frozen around
// them), and gives the same logits bit for bit.
TEST(Lora, ASavedModelLoadsWithItsAdapters) {
  ModelConfig c = family("llama");
  c.lora_r = 4, c.lora_alpha = 8, c.lora_targets = kEvery;
  Model m(c);
  EXPECT_TRUE(m.has_lora());
  randomize_b(m, 11);
  const Batch b = batch_for(c, 12);
  const std::vector<float> want = logits_of(m, b);
  const fs::path dir = fresh("saved");
  save_model(m, dir);
  Model back = load_model(dir);
  EXPECT_TRUE(back.has_lora());
  EXPECT_EQ(back.config().lora_r, 4);
  EXPECT_EQ(logits_of(back, b), want);
  EXPECT_EQ(back.trainable_parameters().size(), m.trainable_parameters().size());
  // Merged, it is a plain model again: config.json without adapters.
  back.merge_lora();
  EXPECT_EQ(back.config().lora_r, 0);
  const fs::path merged = fresh("merged");
  save_model(back, merged);
  EXPECT_FALSE(load_model(merged).has_lora());
}

// LoraConfig::layers (PEFT's layers_to_transform; run.json's train.lora.layers): those blocks' projections of the
// targets alone take adapters, in each stack of an encoder-decoder; config.json records them module by module. Every
// block named is a plain set; a block the model lacks, a block named twice, or layers beside per_module is an error.
TEST(Lora, LayersAdaptThoseBlocksAlone) {
  ModelConfig c = family("t5");
  c.n_layers = 3;
  Model m(c);
  m.add_lora({.r = 2, .alpha = 4, .targets = {"q", "down"}, .seed = 1, .layers = {0, 2}});
  std::set<std::string> adapted;
  for (const Parameter* p : m.parameters())
    if (p->role == Role::LoraA) adapted.insert(p->name.substr(0, p->name.rfind(".lora_A")));
  std::set<std::string> want;
  for (const char* stack : {"encoder", "decoder"})
    for (int layer : {0, 2})
      for (const char* module : {"attn.qkv.q", "ffn.down"}) want.insert(fmt::format("{}.layers.{}.{}", stack, layer, module));
  for (int layer : {0, 2}) want.insert(fmt::format("decoder.layers.{}.cross_attn.q", layer));
  EXPECT_EQ(adapted, want);
  EXPECT_TRUE(m.lora_per_module());
  EXPECT_EQ(m.config().lora_per_module.size(), want.size());
  EXPECT_EQ(m.config().lora_per_module.at("encoder.layers.2.ffn.down"), (LoraConfig::Rank{.r = 2, .alpha = 4}));

  Model every(c);
  every.add_lora({.r = 2, .alpha = 4, .targets = {"q"}, .seed = 1, .layers = {2, 0, 1}});
  EXPECT_FALSE(every.lora_per_module()) << "every block: a plain set";
  Model other(c);
  testing::expect_error_mentions<Error>([&] { other.add_lora({.r = 2, .targets = {"q"}, .layers = {3}}); },
                                        {"layers holds 3", "0 to 2"});
  testing::expect_error_mentions<Error>([&] { other.add_lora({.r = 2, .targets = {"q"}, .layers = {1, 1}}); },
                                        {"layers holds 1 twice"});
  testing::expect_error_mentions<Error>(
      [&] { other.add_lora({.r = 2, .targets = {"q"}, .per_module = {{"decoder.layers.0.attn.qkv.q", {}}}, .layers = {1}}); },
      {"layers and ranks module by module"});
  EXPECT_FALSE(other.has_lora()) << "a refused set changed the model";
}

// config.json's lora_per_module: exactly the modules it names take adapters, each at its rank and alpha; such a
// model saves and loads with them, bit for bit; a key that names no projection among lora_targets, a value of the
// wrong shape, a bad rank, or the map without lora_r is an error naming it.
TEST(Lora, ConfigJsonHoldsRanksModuleByModule) {
  ModelConfig c = family("llama");
  c.lora_r = 4, c.lora_alpha = 8, c.lora_targets = {"q", "down"};
  c.lora_per_module = {{"decoder.layers.1.attn.qkv.q", {.r = 2, .alpha = 3}}, {"decoder.layers.0.ffn.down", {.r = 5, .alpha = 1}}};
  Model m(c);
  EXPECT_TRUE(m.lora_per_module());
  std::map<std::string, int64_t> ranks;
  for (const Parameter* p : m.parameters())
    if (p->role == Role::LoraA) ranks[p->name] = p->value.size(0);
  EXPECT_EQ(ranks, (std::map<std::string, int64_t>{{"decoder.layers.0.ffn.down.lora_A.weight", 5},
                                                    {"decoder.layers.1.attn.qkv.q.lora_A.weight", 2}}));
  const Parameter* q = m.find("decoder.layers.1.attn.qkv.weight");
  ASSERT_EQ(q->lora.size(), 1u);
  EXPECT_EQ(q->lora[0].scale, 3.0 / 2.0);
  randomize_b(m, 5);
  const Batch b = batch_for(c, 12);
  const std::vector<float> want = logits_of(m, b);
  const fs::path dir = fresh("saved_per_module");
  save_model(m, dir);
  const auto json = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(json["lora_per_module"]["decoder.layers.0.ffn.down"], nlohmann::json({{"r", 5}, {"alpha", 1.0}}));
  Model back = load_model(dir);
  EXPECT_EQ(back.config().lora_per_module, c.lora_per_module);
  EXPECT_EQ(logits_of(back, b), want);
  EXPECT_EQ(back.trainable_parameters().size(), 4u);
  back.merge_lora();
  EXPECT_TRUE(back.config().lora_per_module.empty());

  ModelConfig bad = c;
  bad.lora_per_module["decoder.layers.1.attn.qkv.k"] = {.r = 2, .alpha = 2};
  testing::expect_error_mentions<Error>([&] { Model x(bad); }, {"lora_per_module", "decoder.layers.1.attn.qkv.k",
                                                                "q, down"});
  bad = c, bad.lora_per_module["decoder.layers.0.attn.qkv.q"] = {.r = 0, .alpha = 2};
  testing::expect_error_mentions<Error>([&] { bad.validate(); }, {"decoder.layers.0.attn.qkv.q", "r 0"});
  bad = c, bad.lora_r = 0;
  testing::expect_error_mentions<Error>([&] { bad.validate(); }, {"lora_per_module without lora_r"});
  std::string text = c.to_json();
  text.replace(text.find("{\n      \"r\": 5"), 1, "[1], \"x\": {");
  testing::expect_error_mentions<Error>([&] { (void)ModelConfig::from_json(text, "config.json"); },
                                        {"config.json: 'lora_per_module'", "decoder.layers.0.ffn.down", "[1]"});
}

// A base's pattern and the one adapters learn on top of it: 1 … 9 counted up (or down), then a random token of
// 10-29, again until `n` tokens.
std::vector<int32_t> counting(bool backwards, size_t n) {
  std::vector<int32_t> tokens;
  Rng rng(2);
  while (tokens.size() < n) {
    for (int32_t t = 1; t <= 9; ++t) tokens.push_back(backwards ? 10 - t : t);
    tokens.push_back(10 + static_cast<int32_t>(rng.below(20)));
  }
  return tokens;
}

// Fine-tuning with LoRA: a base trained on one pattern (train.init_from) learns another through its adapters
// alone; the base's weights stay as they were, bit for bit. (A random base would not do: its frozen, tiny
// embeddings, tied to the head, keep every softmax near uniform whatever the adapters do.)
TEST(Lora, FineTuningTrainsTheAdaptersAloneOnTopOfTheBase) {
  LmDataset forwards(counting(false, 3000), {}, {.batch_size = 4, .seq_len = 12, .seed = 1});
  LmDataset backwards(counting(true, 3000), {}, {.batch_size = 4, .seq_len = 12, .seed = 1});
  ModelConfig base_config = family("gpt");
  base_config.d_model = 32;  // whole Q8_0 blocks for the QLoRA run
  TrainConfig t;
  t.steps = 150;
  t.schedule = {.kind = train::ScheduleKind::Constant, .lr = 1e-2};
  t.eval_every = 0, t.checkpoint_every = 0;
  const fs::path base_dir = fresh("base");
  {
    Trainer pretrain{Model(base_config), forwards, t, base_dir};
    pretrain.run();
  }
  // The adapters from the model's lora_* fields, or from train.lora (with adapter dropout) on a plain model.
  for (bool from_train : {false, true}) {
    SCOPED_TRACE(from_train ? "train.lora on a Q8_0 base" : "model.lora_r");
    ModelConfig c = base_config;
    TrainConfig lt = t;
    if (from_train) lt.lora = {.r = 4, .alpha = 8, .targets = kEvery, .dropout = 0.1};
    if (from_train) lt.frozen_weights = WeightType::Q8_0;  // QLoRA
    else c.lora_r = 4, c.lora_alpha = 8, c.lora_targets = kEvery;
    lt.steps = 60;
    lt.init_from = (base_dir / "checkpoint").string();
    const fs::path run_dir = fresh(from_train ? "run_train_lora" : "run");
    Trainer trainer{Model(c), backwards, lt, run_dir};
    std::vector<double> losses;
    trainer.run([&](const StepReport& r) { losses.push_back(r.loss); });
    EXPECT_LT(losses.back(), 0.8 * losses.front()) << "the adapters learn the reversed pattern";
    // The base stays as it was: bit for bit, or (QLoRA) as its Q8_0 blocks, whose values the checkpoint holds.
    const Model loaded = load_model(base_dir / "checkpoint"), saved_model = load_model(run_dir / "checkpoint");
    int64_t quantized = 0;
    for (const Parameter* p : trainer.model().parameters()) {
      if (p->role == Role::LoraA || p->role == Role::LoraB) continue;
      const Parameter* q = loaded.find(p->name);
      ASSERT_NE(q, nullptr) << p->name;
      if (!p->has_values()) {
        ++quantized;
        const Parameter* kept = saved_model.find(p->name);
        float largest = 0.0f;
        for (int64_t i = 0; i < p->numel(); ++i) largest = std::max(largest, std::abs(q->value[i]));
        for (int64_t i = 0; i < p->numel(); ++i)
          ASSERT_NEAR(kept->value[i], q->value[i], largest / 127) << p->name << ": Q8_0's rounding at most";
        continue;
      }
      for (int64_t i = 0; i < p->numel(); ++i) ASSERT_EQ(p->value[i], q->value[i]) << p->name << " moved";
    }
    EXPECT_EQ(quantized > 0, from_train) << "QLoRA holds the frozen projections as blocks";
    const ModelConfig saved = load_model_config(run_dir / "checkpoint");
    EXPECT_EQ(saved.lora_r, 4);
    EXPECT_EQ(saved.lora_targets, kEvery);
    EXPECT_EQ(saved.lora_dropout, from_train ? 0.1 : 0.0);
    if (from_train) {  // resumable: the run's model gets the adapters again and matches the checkpoint's
      lt.steps = 70;
      Trainer resumed{Model(c), backwards, lt, run_dir, /*resume=*/true};
      resumed.run();
      EXPECT_EQ(resumed.steps_done(), 70);
      lt.lora.r = 2;
      EXPECT_THROW((Trainer{Model(saved), backwards, lt, fresh("run_mismatch")}), Error)
          << "a model with adapters of its own and another train.lora";
    }
  }
}

// train.frozen_weights=bf16: the frozen projections and the frozen LM head (here the token table it is tied to) held
// packed in bf16, their values the base's rounded to bf16, norms and the adapters fp32; the adapters learn.
TEST(Lora, ABf16BaseHoldsItsHeadInBf16Too) {
  LmDataset forwards(counting(false, 2000), {}, {.batch_size = 4, .seq_len = 12, .seed = 1});
  LmDataset backwards(counting(true, 2000), {}, {.batch_size = 4, .seq_len = 12, .seed = 1});
  const ModelConfig c = family("gpt");
  ASSERT_TRUE(c.tie_embeddings);
  TrainConfig t;
  t.steps = 100;
  t.schedule = {.kind = train::ScheduleKind::Constant, .lr = 1e-2};
  t.eval_every = 0, t.checkpoint_every = 0;
  const fs::path base_dir = fresh("bf16_base");
  {
    Trainer pretrain{Model(c), forwards, t, base_dir};
    pretrain.run();
  }
  const Model base = load_model(base_dir / "checkpoint");
  t.steps = 40;
  t.lora = {.r = 4, .alpha = 8, .targets = kEvery};
  t.frozen_weights = WeightType::BF16;
  t.init_from = (base_dir / "checkpoint").string();
  Trainer trainer{Model(c), backwards, t, fresh("bf16_run")};
  int64_t packed = 0;
  for (const Parameter* p : trainer.model().parameters()) {
    const bool held = p->frozen && (is_projection(p->role) || p->role == Role::TokenEmbedding);
    EXPECT_EQ(p->storage, held ? WeightType::BF16 : WeightType::F32) << p->name;
    if (!held) continue;
    ++packed;
    const Parameter& from = *base.find(p->name);
    std::vector<uint16_t> bits(static_cast<size_t>(p->numel()));
    std::vector<float> want(bits.size());
    kernels::float_to_bf16(bits.data(), from.value.data(), p->numel());
    kernels::bf16_to_float(want.data(), bits.data(), p->numel());
    EXPECT_TRUE(std::equal(bits.begin(), bits.end(), p->packed.begin())) << p->name;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), p->value.data())) << p->name;
  }
  EXPECT_GT(packed, 8);
  std::vector<double> losses;
  trainer.run([&](const StepReport& r) { losses.push_back(r.loss); });
  EXPECT_LT(losses.back(), 0.8 * losses.front()) << "the adapters learn on the bf16 base";
}

// QLoRA: the frozen projections held as quantized blocks (their fp32 values gone); the forward multiplies the
// blocks, the backward takes the input gradients through their values. The adapters' gradients then follow those of
// an fp32 model holding the blocks' values (saved and loaded: a checkpoint holds them), within the rounding the
// quantized matmuls put on the activations (Q8_0's repacked rows: int8 activations, |error| ≤ 1/254 of a block's
// largest; Q4_K's dequantized pieces: a bf16 GEMM where the CPU has one, 2^-9 relative). A base held in bf16 runs
// its forward and its input gradients on the bf16 GEMM where the CPU has one (inputs and output gradients rounded
// to bf16, 2^-9 relative), on sgemm otherwise.
TEST(Lora, QLoraTrainsAdaptersOnQuantizedFrozenWeights) {
  for (const std::string name : {"gpt", "llama"}) {
    for (const WeightType type : {WeightType::Q8_0, WeightType::Q4_K, WeightType::BF16, WeightType::F16}) {
      SCOPED_TRACE(name + " " + weight_type_name(type));
      ModelConfig c = family(name);
      c.d_model = 64, c.d_ff = 256;  // whole blocks: 32 (Q8_0) and, for down's rows, 256 (Q4_K; up falls back to Q5_0)
      Model m(c);
      m.add_lora({.r = 2, .alpha = 4, .targets = kEvery, .seed = 9});
      randomize_b(m, 5);
      auto held = [](const Parameter& p) { return p.frozen && is_projection(p.role) && p.role != Role::HeadMatrix; };
      m.set_storage(type, held);
      // F16: the frozen matrices held as their 16-bit values alone (Model::hold_as_stored), which the forward and
      // the input gradients widen a piece of rows at a time for fp32 GEMMs: the fp32 model of those values.
      if (type == WeightType::F16) m.hold_as_stored();
      int64_t quantized = 0;
      for (const Parameter* p : m.parameters()) {
        if (!held(*p)) continue;
        if (type == WeightType::BF16 || type == WeightType::F16) {  // packed, beside its (rounded) values for bf16
          EXPECT_EQ(p->storage, type) << p->name;
          EXPECT_FALSE(p->packed.empty()) << p->name;
          EXPECT_EQ(p->has_values(), type == WeightType::BF16) << p->name;
        } else {
          EXPECT_FALSE(p->has_values()) << p->name << ": its fp32 values go";
          EXPECT_FALSE(p->quantized.empty()) << p->name;
        }
        ++quantized;
      }
      EXPECT_GT(quantized, 4);
      const fs::path dir = fresh("qlora_" + name);
      save_model(m, dir);  // the blocks' values, in fp32
      Model ref = load_model(dir);
      if (type == WeightType::Q8_0) {  // quantizing the blocks' values again gives the blocks back (a resumed run)
        Model again = load_model(dir);
        again.set_storage(type, held);
        for (const Parameter* p : m.parameters()) {
          if (!held(*p)) continue;
          const Parameter* q = again.find(p->name);
          ASSERT_EQ(q->quantized.size(), p->quantized.size()) << p->name;
          for (size_t k = 0; k < p->quantized.size(); ++k)
            EXPECT_TRUE(std::ranges::equal(q->quantized[k].blocks(), p->quantized[k].blocks())) << p->name;
        }
      }
      Batch b;
      b.B = 2, b.T = 12;  // 24 rows: past the decoding kernels' rows
      Rng rng(3);
      for (int64_t i = 0; i < b.B * b.T; ++i) {
        b.ids.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
        b.targets.push_back(1 + static_cast<int32_t>(rng.below(c.vocab_size - 1)));
      }
      m.zero_grad(), ref.zero_grad();
      const double loss = m.forward(b, {.training = true}).loss, want = ref.forward(b, {.training = true}).loss;
      EXPECT_NEAR(loss, want, 1e-2 * want);
      m.backward(), ref.backward();
      double largest = 0.0, worst = 0.0;
      for (Parameter* p : ref.trainable_parameters())
        for (int64_t i = 0; i < p->numel(); ++i) largest = std::max(largest, double(std::abs(p->grad[i])));
      for (Parameter* p : m.trainable_parameters()) {
        const Parameter* q = ref.find(p->name);
        ASSERT_NE(q, nullptr) << p->name;
        for (int64_t i = 0; i < p->numel(); ++i) worst = std::max(worst, double(std::abs(p->grad[i] - q->grad[i])));
      }
      EXPECT_GT(largest, 0.0);
      // F16 differs from the fp32 model of its values only in the order of the sums (a few ulps over sums of up
      // to 256 terms); the others round each matmul's input (to bf16 or int8).
      EXPECT_LT(worst, (type == WeightType::F16 ? 1e-4 : 3e-2) * largest) << "the adapters' gradients through the base";
    }
  }
}

// Every task Attend trains, with train.lora on a base trained briefly on the task (a fresh model's frozen output
// layer could not move its logits far from uniform): masked LM (an encoder with its MLM head), seq2seq (an
// encoder-decoder copying its source backwards) and classification (an encoder whose head is new and trains
// beside the adapters). The adapters (and the head) move and the loss falls below the base's; every other weight
// stays.
TEST(Lora, EveryTaskTrainsItsAdapters) {
  Rng rng(12);
  std::vector<int32_t> stream;
  while (stream.size() < 4000) {
    for (int32_t t = 3; t <= 11; ++t) stream.push_back(t);
    stream.push_back(12 + static_cast<int32_t>(rng.below(20)));
  }
  std::vector<Example> copies, labelled;
  for (int i = 0; i < 256; ++i) {
    std::vector<int32_t> src;
    for (int j = 0; j < 6; ++j) src.push_back(3 + static_cast<int32_t>(rng.below(30)));
    copies.push_back({src, std::vector<int32_t>(src.rbegin(), src.rend()), 0});
    const bool has = std::find(src.begin(), src.end(), 7) != src.end();  // the class: whether token 7 is there
    labelled.push_back({src, {}, has ? 1 : 0});
  }
  for (const std::string task : {"mlm", "seq2seq", "classify"}) {
    SCOPED_TRACE(task);
    ModelConfig c = family(task == "seq2seq" ? "t5" : "bert");
    if (task == "mlm") c.n_classes = 0, c.pooler = false, c.mlm_head = true;
    if (task == "classify") c.n_classes = 2;
    std::unique_ptr<Dataset> data;
    if (task == "mlm")
      data = std::make_unique<MlmDataset>(stream, std::vector<int32_t>{}, MlmOptions{.batch_size = 8, .seq_len = 12,
                                          .seed = 1, .mask_id = 2, .vocab_size = 40, .special_ids = {0, 1, 2}});
    else
      data = std::make_unique<ExampleDataset>(task == "seq2seq" ? ExampleDataset::Kind::Seq2Seq
                                                                : ExampleDataset::Kind::Classify,
                                              task == "seq2seq" ? copies : labelled, std::vector<Example>{},
                                              ExampleOptions{.batch_size = 16, .seed = 1, .bos_id = 1, .eos_id = 2});
    TrainConfig t;
    t.steps = 40;
    t.schedule = {.kind = train::ScheduleKind::Constant, .lr = 1e-2};
    t.eval_every = 0, t.checkpoint_every = 0;
    const fs::path base_dir = fresh("task_base_" + task);
    ModelConfig base_config = c;
    if (task == "classify") base_config.n_classes = 0, base_config.pooler = false, base_config.mlm_head = true;
    {  // the base: an MLM encoder for classification (its head is new), else the task itself, fully trained
      std::unique_ptr<Dataset> pretraining;
      if (task == "classify")
        pretraining = std::make_unique<MlmDataset>(stream, std::vector<int32_t>{},
                                                   MlmOptions{.batch_size = 8, .seq_len = 12, .seed = 2, .mask_id = 2,
                                                              .vocab_size = 40, .special_ids = {0, 1, 2}});
      Trainer base{Model(base_config), pretraining ? *pretraining : *data, t, base_dir};
      base.run();
    }
    t.steps = 100;
    t.init_from = (base_dir / "checkpoint").string();
    t.lora = {.r = 4, .alpha = 8, .targets = kEvery};
    const Model start = load_model(base_dir / "checkpoint");
    Trainer trainer{Model(c), *data, t, fresh("task_" + task)};
    // The loss on ten training batches, of the base (the classifier: a head of zeros' worth, ln 2) and after.
    auto loss_on = [&](Model& m) {
      double sum = 0.0;
      for (int64_t i = 0; i < 10; ++i) sum += m.forward(data->train_batch(i)).loss;
      return sum / 10;
    };
    Model base_model(c);
    base_model.copy_parameters_from(start);
    const double before = task == "classify" ? std::log(2.0) : loss_on(base_model);
    trainer.run();
    const double after = loss_on(trainer.model());
    EXPECT_LT(after, 0.97 * before) << "the adapters learn";
    bool head_moved = false;
    for (const Parameter* p : trainer.model().parameters()) {
      if (is_adapter(p->role)) continue;
      const Parameter* q = start.find(p->name);
      if (q == nullptr) {  // not in the base: the new classification head
        EXPECT_TRUE(task == "classify" && (p->name.starts_with("classifier.") || p->name.starts_with("pooler.")))
            << p->name;
        head_moved = true;
        continue;
      }
      const bool moved = !std::equal(p->value.span().begin(), p->value.span().end(), q->value.span().begin());
      if (p->name.starts_with("classifier.") || p->name.starts_with("pooler.")) head_moved |= moved;
      else EXPECT_FALSE(moved) << p->name << " moved";
    }
    EXPECT_EQ(head_moved, task == "classify") << "the classification head trains beside the adapters";
  }
}

// modules_to_save "embeddings": the token embeddings (and an untied LM head) train beside the adapters, a new
// domain's vocabulary; PEFT's files save them whole under the family's module names, and reading gives them back.
TEST(Lora, EmbeddingsTrainBesideTheAdaptersAndTravelInPeftFiles) {
  for (const std::string name : {"gpt", "llama"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    Model m(c);
    m.add_lora({.r = 2, .alpha = 4, .targets = {"q", "v"}, .seed = 9, .modules_to_save = {"embeddings"}});
    EXPECT_FALSE(m.find("embed.tokens.weight")->frozen);
    if (!c.tie_embeddings) {
      EXPECT_FALSE(m.find("lm_head.weight")->frozen);
    }
    EXPECT_TRUE(m.find("decoder.layers.0.attn.qkv.weight")->frozen);
    randomize_b(m, 2);
    for (float& x : m.find("embed.tokens.weight")->value.span()) x *= 1.5f;  // trained: not the base's any more
    const Batch b = batch_for(c, 3);
    const std::vector<float> want = logits_of(m, b);
    const fs::path dir = fresh("peft_embeddings_" + name);
    save_peft_adapter(m, dir);
    const auto config = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
    const SafetensorsReader file(dir / "adapter_model.safetensors");
    if (name == "gpt") {
      EXPECT_EQ(config["modules_to_save"], nlohmann::json({"wte"}));
      EXPECT_NE(file.find("base_model.model.transformer.wte.weight"), nullptr);
    } else {
      EXPECT_EQ(config["modules_to_save"], nlohmann::json({"embed_tokens", "lm_head"}));
      EXPECT_NE(file.find("base_model.model.model.embed_tokens.weight"), nullptr);
      EXPECT_NE(file.find("base_model.model.lm_head.weight"), nullptr);
    }
    Model back(c);
    load_peft_adapter(back, dir);
    EXPECT_EQ(back.config().lora_modules_to_save, std::vector<std::string>{"embeddings"});
    EXPECT_EQ(logits_of(back, b), want);
    // Onto a base held in 16 bits alone (a GGUF file's F16 matrices, whose token table has no fp32 values): the
    // saved modules become plain fp32 values, which the lookup and the LM head then read, not the stored copy.
    Model held(c);
    held.set_storage(WeightType::F16);
    held.hold_as_stored();
    ASSERT_FALSE(held.find(c.tie_embeddings ? "embed.tokens.weight" : "lm_head.weight")->has_values());
    load_peft_adapter(held, dir);
    for (const char* module : {"embed.tokens.weight", "lm_head.weight"}) {
      const Parameter* p = held.find(module);
      if (p == nullptr) continue;  // tied
      EXPECT_EQ(p->storage, WeightType::F32) << module;
      ASSERT_TRUE(p->has_values()) << module;
      EXPECT_TRUE(std::ranges::equal(p->value.span(), m.find(module)->value.span())) << module;
    }
    EXPECT_TRUE(held.find("decoder.layers.0.attn.qkv.weight")->packed.size() > 0);
  }
  // A classifier with its pooler and the embeddings beside the adapters: five whole tensors in the file (the writer
  // once kept them where a vector's growth could move them: under AddressSanitizer, a read after free).
  const ModelConfig c = family("bert");
  Model m(c);
  m.add_lora({.r = 2, .alpha = 4, .targets = {"q", "v"}, .seed = 9,
              .modules_to_save = {"classifier", "pooler", "embeddings"}});
  randomize_b(m, 2);
  for (float& x : m.find("embed.tokens.weight")->value.span()) x *= 1.5f;
  const Batch b = batch_for(c, 3);
  const fs::path dir = fresh("peft_embeddings_bert");
  save_peft_adapter(m, dir);
  const SafetensorsReader file(dir / "adapter_model.safetensors");
  int64_t whole = 0;
  for (const TensorInfo& t : file.tensors()) whole += t.name.find("lora_") == std::string::npos;
  EXPECT_EQ(whole, 5);
  Model back(c);
  load_peft_adapter(back, dir);
  EXPECT_EQ(logits_of(back, b), logits_of(m, b));
}

// run.json's train.lora section: read, written back, set with --set train.lora.FIELD, and checked.
TEST(Lora, RunJsonTrainLoraSection) {
  RunConfig run = RunConfig::from_json(R"({"train": {"steps": 5, "lora": {"r": 16, "alpha": 32, "dropout": 0.05,
      "targets": ["q", "k", "v", "o"], "rslora": true}}})", "run.json");
  EXPECT_EQ(run.train.steps, 5);
  EXPECT_EQ(run.train.lora.r, 16);
  EXPECT_EQ(run.train.lora.alpha, 32.0);
  EXPECT_EQ(run.train.lora.dropout, 0.05);
  EXPECT_EQ(run.train.lora.targets, (std::vector<std::string>{"q", "k", "v", "o"}));
  EXPECT_TRUE(run.train.lora.rslora);
  const RunConfig back = RunConfig::from_json(run.to_json(), "written");
  EXPECT_EQ(back.train.lora.r, 16);
  EXPECT_EQ(back.train.lora.targets, run.train.lora.targets);
  run.set("train.lora.targets", "q,v,down");
  run.set("train.lora.r", "4");
  EXPECT_EQ(run.train.lora.targets, (std::vector<std::string>{"q", "v", "down"}));
  EXPECT_EQ(run.train.lora.r, 4);
  testing::expect_error_mentions<Error>([&] { run.set("train.lora.rank", "4"); }, {"train.lora.rank"});
  run.set("train.lora.layers", "1,3");
  EXPECT_EQ(run.train.lora.layers, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(RunConfig::from_json(run.to_json(), "written").train.lora.layers, (std::vector<int64_t>{1, 3}));
  run.set("train.lora.layers", "[2]");
  EXPECT_EQ(run.train.lora.layers, (std::vector<int64_t>{2}));
  run.set("train.lora.layers", " 4, 5");
  EXPECT_EQ(run.train.lora.layers, (std::vector<int64_t>{4, 5}));
  run.set("train.lora.layers", "");
  EXPECT_TRUE(run.train.lora.layers.empty());
  testing::expect_error_mentions<Error>([&] { run.set("train.lora.layers", "1,x"); }, {"train.lora", "'layers'", "'x'"});
  EXPECT_EQ(RunConfig::from_json(R"({"train": {"lora": {"r": 4, "layers": 0}}})", "run.json").train.lora.layers,
            (std::vector<int64_t>{0})) << "one number, as PEFT's layers_to_transform takes it";
  testing::expect_error_mentions<Error>(
      [] { RunConfig::from_json(R"({"train": {"lora": {"r": 4, "layers": [1.5]}}})", "run.json"); },
      {"train.lora", "layers", "1.5", "integers"});
  testing::expect_error_mentions<Error>([] { RunConfig::from_json(R"({"train": {"lora": {"r": "8"}}})", "run.json"); },
                                 {"train.lora"});
  RunConfig bad = RunConfig::from_json(R"({"data": {"train": ["x"], "tokenizer": "t"}, "train": {"lora": {"r": 4,
      "dropout": 1.5}}})", "run.json");
  testing::expect_error_mentions<Error>([&] { bad.validate(); }, {"train.lora: dropout"});
  EXPECT_EQ(RunConfig().to_json().find("lora\": {"), std::string::npos) << "no section without LoRA";
  // train.lora.from: read, written back, and only with a base and train.lora's options.
  run.set("train.lora.from", "adapters/mine");
  EXPECT_EQ(RunConfig::from_json(run.to_json(), "written").train.lora_from, "adapters/mine");
  RunConfig from = RunConfig::from_json(R"({"data": {"train": ["x"], "tokenizer": "t"}, "train": {"lora": {"r": 4,
      "from": "adapter"}}})", "run.json");
  testing::expect_error_mentions<Error>([&] { from.validate(); }, {"train.lora.from (adapter)", "train.init_from"});
  from.set("train.init_from", "base");
  EXPECT_NO_THROW(from.validate());
}

// PEFT's files for the Llama family: PEFT's names and shapes, read back to the same logits bit for bit; and an
// independent check of B's rows, whose order RoPE's permutation changes: W + s·B·A formed from the file's
// tensors in Hugging Face's own layout (as PEFT's merge does), loaded by the Hugging Face reader, gives the
// adapted model's logits.
TEST(Lora, PeftFilesOfTheLlamaFamilyRoundTripAndMergeAsHuggingFaceWould) {
  for (const std::string variant : {"mistral", "qwen3"}) {  // one-file checkpoints
    SCOPED_TRACE(variant);
    const fs::path hf = fs::path(ATTEND_TEST_DATA) / "hf-llama" / variant;
    Model m = load_model(hf);
    m.add_lora({.r = 2, .alpha = 4, .targets = kEvery, .seed = 3});
    randomize_b(m, 8);
    const ModelConfig& c = m.config();
    Batch b;
    b.B = 1, b.T = 5, b.ids = {1, 7, 3, 9, 4};
    const std::vector<float> adapted = logits_of(m, b);
    const fs::path dir = fresh("peft_" + variant);
    save_peft_adapter(m, dir);
    const auto config = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
    EXPECT_EQ(config["peft_type"], "LORA");
    EXPECT_EQ(config["r"], 2);
    EXPECT_EQ(config["lora_alpha"], 4.0);
    EXPECT_EQ(config["target_modules"],
              nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
    const SafetensorsReader file(dir / "adapter_model.safetensors");
    const TensorInfo* qb = file.find("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
    ASSERT_NE(qb, nullptr);
    EXPECT_EQ(qb->shape, (Shape{c.n_heads * c.d_head(), 2}));
    EXPECT_EQ(file.find("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight")->shape, (Shape{2, c.ffn_hidden()}));
    EXPECT_EQ(static_cast<int64_t>(file.tensors().size()), 2 * 7 * c.n_layers);

    Model again = load_model(hf);
    load_peft_adapter(again, dir);
    EXPECT_EQ(again.config().lora_r, 2);
    EXPECT_EQ(logits_of(again, b), adapted);

    // W ← W + s·B·A in Hugging Face's layout, summed in double.
    const SafetensorsReader base(hf / "model.safetensors");
    std::vector<Tensor> tensors;
    tensors.reserve(base.tensors().size());
    std::vector<NamedTensor> named;
    const double s = 4.0 / 2.0;
    for (const TensorInfo& t : base.tensors()) {
      tensors.push_back(base.load(t.name));
      Tensor& w = tensors.back();
      const std::string prefix = t.name.substr(0, t.name.size() - std::string(".weight").size());
      if (const TensorInfo* a_info = file.find("base_model.model." + prefix + ".lora_A.weight")) {
        const Tensor a = file.load(a_info->name), bb = file.load("base_model.model." + prefix + ".lora_B.weight");
        const int64_t rows = w.size(0), cols = w.size(1);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            double sum = 0.0;
            for (int64_t k = 0; k < 2; ++k) sum += double(bb[i * 2 + k]) * double(a[k * cols + j]);
            w[i * cols + j] = static_cast<float>(double(w[i * cols + j]) + s * sum);
          }
      }
      named.push_back({t.name, &w});
    }
    const fs::path merged = fresh("peft_merged_" + variant);
    fs::create_directories(merged);
    fs::copy_file(hf / "config.json", merged / "config.json");
    write_safetensors(merged / "model.safetensors", named, {{"format", "pt"}});
    Model by_hf = load_model(merged);
    double largest = 0.0;
    for (float x : adapted) largest = std::max(largest, double(std::abs(x)));
    testing::expect_all_close(logits_of(by_hf, b), adapted, 1e-4 * largest, variant + ": merged in HF's layout");
  }
}

// llama.cpp's GGUF LoRA files (what `attend export --format gguf-lora` writes, and convert_lora_to_gguf.py): read
// back onto the base, each pair's update multiplier · (alpha / r) · B·A as llama.cpp applies it, the logits are the
// adapted model's, the adapters those written; at multiplier 0.5 the logits are those of the PEFT files loaded at
// 0.5. GPT-2 (one fused attn_qkv for q and v), llama (mistral) and
// qwen3 (B's rows of q and k in Hugging Face's order in the file).
TEST(Lora, GgufLoraFilesReadBackAsTheAdaptersTheyHold) {
  for (const std::string variant : {"hf-gpt2", "hf-llama/mistral", "hf-llama/qwen3"}) {
    SCOPED_TRACE(variant);
    const fs::path hf = fs::path(ATTEND_TEST_DATA) / variant;
    Model m = load_model(hf);
    const bool gpt2 = variant == "hf-gpt2";
    m.add_lora({.r = 2, .alpha = 4, .targets = gpt2 ? std::vector<std::string>{"q", "v", "up"} : kEvery, .seed = 3});
    randomize_b(m, 8);
    Batch b;
    b.B = 1, b.T = 5, b.ids = {1, 7, 3, 9, 4};
    const std::vector<float> adapted = logits_of(m, b);
    const std::string tag = variant.substr(variant.rfind('/') + 1);
    const fs::path file = fresh("gguf_lora_" + tag) / "adapter.gguf";
    fs::create_directories(file.parent_path());
    export_gguf_lora(m, file);

    Model base = load_model(hf);
    const std::vector<float> plain = logits_of(base, b);
    load_peft_adapter(base, file);
    const std::vector<float> loaded = logits_of(base, b);
    double largest = 0.0, moved = 0.0;
    for (size_t i = 0; i < adapted.size(); ++i) {
      largest = std::max(largest, double(std::abs(adapted[i])));
      moved = std::max(moved, double(std::abs(adapted[i] - plain[i])));
    }
    ASSERT_GT(moved, 1e-3 * largest) << "the adapters change the logits";
    testing::expect_all_close(loaded, adapted, 1e-5 * largest, "the GGUF LoRA read back");
    // The adapters the file was written from, at their rank and alpha: GPT-2's fused pair (q and v stacked at rank
    // 4, each block of B twice its own) splits back into q's and v's, k taking none; B's factors are powers of two
    // and qwen3's rows a permutation, so every number comes back as it was.
    EXPECT_EQ(base.config().lora_r, 2);
    EXPECT_EQ(base.config().lora_alpha, 4.0);
    EXPECT_EQ(base.config().lora_targets, m.config().lora_targets);
    std::map<std::string, const Parameter*> written;
    for (const Parameter* p : m.parameters())
      if (p->role == Role::LoraA || p->role == Role::LoraB) written[p->name] = p;
    size_t read = 0;
    for (const Parameter* p : base.parameters()) {
      if (p->role != Role::LoraA && p->role != Role::LoraB) continue;
      ++read;
      const auto it = written.find(p->name);
      ASSERT_NE(it, written.end()) << p->name << " is not among the adapters written";
      ASSERT_EQ(p->value.shape(), it->second->value.shape()) << p->name;
      EXPECT_EQ(std::memcmp(p->value.data(), it->second->value.data(), p->numel() * sizeof(float)), 0) << p->name;
    }
    EXPECT_EQ(read, written.size());

    const fs::path peft = fresh("gguf_lora_peft_" + tag);
    save_peft_adapter(m, peft);
    Model half_peft = load_model(hf), half_gguf = load_model(hf);
    load_peft_adapter(half_peft, peft, "", 0.5);
    load_peft_adapter(half_gguf, file, "", 0.5);
    testing::expect_all_close(logits_of(half_gguf, b), logits_of(half_peft, b), 1e-5 * largest, "at 0.5");
    if (gpt2) {
      // A column of B that is zero (here q's second, in block 0) adds nothing: it goes with the block it lies in,
      // so the pair still splits into q's and v's adapters at rank 2. With B zero throughout (adapters not yet
      // trained) nothing tells the parts apart: q, k and v each take the whole pair, which adds nothing either.
      Parameter* qb = m.find("decoder.layers.0.attn.qkv.q.lora_B.weight");
      for (int64_t row = 0; row < qb->value.size(0); ++row) qb->value.data()[row * 2 + 1] = 0.0f;
      const fs::path zero_column = fresh("gguf_lora_zero_column") / "adapter.gguf";
      fs::create_directories(zero_column.parent_path());
      export_gguf_lora(m, zero_column);
      Model split = load_model(hf);
      load_peft_adapter(split, zero_column);
      EXPECT_FALSE(split.lora_per_module());
      EXPECT_EQ(split.config().lora_targets, m.config().lora_targets);
      EXPECT_EQ(logits_of(split, b), logits_of(m, b));
      Model untrained = load_model(hf);
      untrained.add_lora({.r = 2, .alpha = 4, .targets = {"q", "v"}, .seed = 3});
      const fs::path zero = fresh("gguf_lora_zero") / "adapter.gguf";
      fs::create_directories(zero.parent_path());
      export_gguf_lora(untrained, zero);
      Model whole = load_model(hf);
      load_peft_adapter(whole, zero);
      EXPECT_EQ(whole.config().lora_targets, (std::vector<std::string>{"q", "k", "v"}));
      EXPECT_EQ(whole.config().lora_r, 4);
      EXPECT_EQ(logits_of(whole, b), plain);
    }
  }
  // What is not an adapter for this model is named.
  const fs::path llama = fs::path(ATTEND_TEST_DATA) / "hf-llama" / "mistral";
  Model other = load_model(llama);
  testing::expect_error_mentions<Error>(
      [&] { load_peft_adapter(other, fs::temp_directory_path() / "attend_test_lora_gguf_lora_qwen3" / "adapter.gguf"); },
      {"an adapter for qwen3 models; this model is llama"});
  const fs::path model_file = fresh("gguf_lora_model") / "model.gguf";
  fs::create_directories(model_file.parent_path());
  export_gguf(other, model_file);
  testing::expect_error_mentions<Error>([&] { load_peft_adapter(other, model_file); },
                                        {"model.gguf", "not a GGUF LoRA adapter", "a model file is --model's"});
}

// A GGUF LoRA file as others write them: some blocks not covered (their projections adapt nothing), a pair stored
// in F16, and a norm tensor a LoRA extraction carried along (skipped, as llama.cpp skips it). The file is Attend's
// own with block 1's pairs left out, one A stored as F16 (its values made F16's first, so the file holds them
// exactly) and a norm added; the model it must give is the adapted one with block 1's B zeroed.
TEST(Lora, GgufLoraFilesCoveringSomeBlocksInOtherTypesRead) {
  const fs::path hf = fs::path(ATTEND_TEST_DATA) / "hf-llama" / "mistral";
  Model m = load_model(hf);
  m.add_lora({.r = 2, .alpha = 4, .targets = kEvery, .seed = 3});
  randomize_b(m, 8);
  for (Parameter* p : m.parameters())
    if (p->role == Role::LoraA) {
      std::vector<uint16_t> half(static_cast<size_t>(p->numel()));
      kernels::float_to_half(half.data(), p->value.data(), p->numel());
      kernels::half_to_float(p->value.data(), half.data(), p->numel());
    }
  const fs::path dir = fresh("gguf_lora_partial");
  fs::create_directories(dir);
  export_gguf_lora(m, dir / "whole.gguf");
  const gguf::Reader whole(dir / "whole.gguf");
  gguf::Writer w;
  for (const auto& [key, value] : whole.metadata())
    if (key != "general.alignment") w.set(key, value);
  for (const gguf::TensorInfo& t : whole.tensors()) {
    if (t.name.starts_with("blk.1.")) continue;
    if (t.name == "blk.0.attn_q.weight.lora_a") {
      std::vector<float> values(static_cast<size_t>(t.numel()));
      std::memcpy(values.data(), t.data, values.size() * sizeof(float));
      std::vector<uint8_t> half(values.size() * 2);
      kernels::float_to_half(reinterpret_cast<uint16_t*>(half.data()), values.data(), t.numel());
      w.add_tensor(t.name, t.dims, gguf::tensor_type::F16, std::move(half));
    } else {
      w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.bytes));
    }
  }
  const std::vector<float> ones(static_cast<size_t>(m.config().d_model), 1.0f);
  std::vector<uint8_t> norm(ones.size() * sizeof(float));
  std::memcpy(norm.data(), ones.data(), norm.size());
  w.add_tensor("blk.0.attn_norm.weight", {m.config().d_model}, gguf::tensor_type::F32, std::move(norm));
  w.write(dir / "partial.gguf");

  for (Parameter* p : m.parameters())  // what the file leaves out: block 1's adapters add nothing
    if (p->name.starts_with("decoder.layers.1."))
      for (const LowRankUpdate& u : p->lora) std::fill(u.B->value.data(), u.B->value.data() + u.B->value.numel(), 0.0f);
  Batch b;
  b.B = 1, b.T = 5, b.ids = {1, 7, 3, 9, 4};
  const std::vector<float> want = logits_of(m, b);
  Model read = load_model(hf);
  load_peft_adapter(read, dir / "partial.gguf");
  double largest = 0.0;
  for (float x : want) largest = std::max(largest, double(std::abs(x)));
  testing::expect_all_close(logits_of(read, b), want, 1e-5 * largest, "block 0 alone, one A in F16");
  int64_t adapters[2] = {0, 0};  // block 1, which the file leaves out, takes none
  for (const Parameter* p : read.parameters())
    if (p->role == Role::LoraA) {
      EXPECT_EQ(p->value.size(0), 2) << p->name;
      ++adapters[p->name.starts_with("decoder.layers.1.") ? 1 : 0];
    }
  EXPECT_EQ(adapters[0], 7);
  EXPECT_EQ(adapters[1], 0);

  // An adapter on the LM head: applied by llama.cpp, not by Attend; named.
  gguf::Writer head;
  for (const auto& [key, value] : whole.metadata())
    if (key != "general.alignment") head.set(key, value);
  const int64_t C = m.config().d_model, V = m.config().vocab_size;
  head.add_tensor("output.weight.lora_a", {C, 2}, gguf::tensor_type::F32, std::vector<uint8_t>(C * 2 * 4));
  head.add_tensor("output.weight.lora_b", {2, V}, gguf::tensor_type::F32, std::vector<uint8_t>(2 * V * 4));
  head.write(dir / "head.gguf");
  Model again = load_model(hf);
  testing::expect_error_mentions<Error>([&] { load_peft_adapter(again, dir / "head.gguf"); },
                                        {"head.gguf", "'output.weight'", "which llama.cpp applies"});
}

TEST(Lora, PeftFilesWithWhatAttendCannotRunAreErrors) {
  const fs::path hf = fs::path(ATTEND_TEST_DATA) / "hf-llama" / "tied-llama3";
  Model m = load_model(hf);
  m.add_lora({.r = 2, .alpha = 4, .targets = {"q", "v"}, .seed = 3});
  const fs::path dir = fresh("peft_bad");
  save_peft_adapter(m, dir);
  const std::string good = read_file(dir / "adapter_config.json");
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    auto j = nlohmann::json::parse(good);
    j[key] = value;
    write_file_atomic(dir / "adapter_config.json", j.dump());
  };
  auto fails = [&](const std::vector<std::string>& needles) {
    Model fresh_model = load_model(hf);
    testing::expect_error_mentions<Error>([&] { load_peft_adapter(fresh_model, dir); }, needles);
    EXPECT_TRUE(fresh_model.adapters().empty()) << "a refused file left an adapter set behind";
    EXPECT_FALSE(fresh_model.has_lora()) << "a refused file left adapters behind";
  };
  with("peft_type", "IA3");
  fails({"peft_type", "LORA"});
  with("use_dora", true);
  fails({"DoRA"});
  with("target_modules", "q_proj|v_proj");  // a pattern matches a module's whole name
  fails({"target_modules", "matches none", "model.layers.0.self_attn.q_proj"});
  with("target_modules", "(q_proj");
  fails({"target_modules", "'(q_proj'", "missing closing parenthesis"});
  // Python's syntax where it differs from ECMAScript's (a named group), counted repetitions, and a pattern that
  // backtracks without end on a module's name: an error naming it (PCRE2's match limit), not a hang.
  with("target_modules", ".*\\.(?P<proj>q|v){1,2}_proj");
  {
    Model adapted_model = load_model(hf);
    EXPECT_NO_THROW(load_peft_adapter(adapted_model, dir));
  }
  with("target_modules", "(.*.*)*q");
  fails({"target_modules", "'(.*.*)*q'", "model.layers.0", "limit"});
  with("target_modules", std::string(300, 'q'));
  fails({"300 characters"});
  with("target_modules", ".*\\.q_proj");  // v_proj's tensors are then no adapter's
  fails({"v_proj", "not one of the adapters"});
  with("target_modules", nlohmann::json({"q_proj", "c_attn"}));
  fails({"'c_attn'"});
  // PEFT's options that give modules their own ranks and alphas or leave some out: bad values name themselves, and
  // an adapter they leave out (or give another rank) no longer fits the file's tensors.
  with("rank_pattern", nlohmann::json({{"q_proj", 0}}));
  fails({"rank_pattern", "'q_proj'", "rank 0"});
  with("rank_pattern", nlohmann::json({{"layers.1.self_attn.q_proj", 4}}));  // the file's are of rank 2
  fails({"'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight' has shape", "r = 4"});
  with("rank_pattern", nlohmann::json({{"(q_proj", 2}}));
  fails({"rank_pattern '(q_proj'", "missing closing parenthesis"});
  with("alpha_pattern", nlohmann::json({{"v_proj", "big"}}));
  fails({"alpha_pattern", "'v_proj'", "positive number"});
  with("alpha_pattern", nlohmann::json({{"(.*.*)*q", 2.0}}));
  fails({"alpha_pattern '(.*.*)*q'", "limit"});
  with("exclude_modules", nlohmann::json({"layers.0.self_attn.v_proj"}));
  fails({"'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight' is not one of the adapters"});
  with("layers_to_transform", nlohmann::json({0, "1"}));
  fails({"layers_to_transform", "\"1\"", "layer numbers"});
  with("layers_to_transform", nlohmann::json({0, -1}));  // -1 is no layer's (PEFT's too): block 0 alone
  fails({"model.layers.1.self_attn", "is not one of the adapters"});
  with("layers_pattern", "layers");
  fails({"layers_pattern without layers_to_transform"});
  {  // what else PEFT's LoraConfig refuses, or finds nothing with; a layers_pattern whose first group is not the
     // number (PEFT's int() of it raises)
    auto j = nlohmann::json::parse(good);
    auto fails_with = [&](const nlohmann::json& changes, const std::vector<std::string>& needles) {
      auto k = j;
      k.update(changes);
      write_file_atomic(dir / "adapter_config.json", k.dump());
      fails(needles);
    };
    fails_with({{"target_modules", ".*_proj"}, {"layers_to_transform", {0}}}, {"layers_to_transform with "
               "target_modules as a pattern"});
    fails_with({{"layers_to_transform", {0}}, {"layers_pattern", {1}}}, {"layers_pattern", "holds 1"});
    fails_with({{"layers_to_transform", {0}}, {"layers_pattern", {""}}}, {"matches none", "layers_to_transform"});
    j["layers_to_transform"] = {0, 1};
    j["layers_pattern"] = "(layers)";
    write_file_atomic(dir / "adapter_config.json", j.dump());
    fails({"layers_pattern '.*\\.(layers)", "finds 'layers'", "not a layer's number"});
    j["layers_pattern"] = nlohmann::json({"h", "layers"});  // each name in turn: every layer of the file
    write_file_atomic(dir / "adapter_config.json", j.dump());
    Model both = load_model(hf);
    EXPECT_NO_THROW(load_peft_adapter(both, dir));
    EXPECT_FALSE(both.lora_per_module()) << "every block at the one rank: adapters as a LoRA run's own";
  }
  with("r", 3);
  fails({"shape", "lora_A"});
  with("target_modules", nlohmann::json({"q_proj", "v_proj", "o_proj"}));
  fails({"no tensor", "o_proj"});
  with("target_modules", nlohmann::json({"q_proj", "self_attn.v_proj"}));
  with("modules_to_save", nlohmann::json({"norm"}));
  fails({"modules_to_save", "norm", "classifier"});
}

// target_modules as one string, as PEFT takes it: a regular expression a module's whole name matches, or
// "all-linear" (every projection); the same adapters as the list of names.
TEST(Lora, PeftTargetModulesAsAPatternAdaptWhatTheListAdapts) {
  const fs::path hf = fs::path(ATTEND_TEST_DATA) / "hf-llama" / "tied-llama3";
  Batch b;
  b.B = 1, b.T = 5, b.ids = {1, 7, 3, 9, 4};
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"q", "v"}, {".*\\.(q_proj|v_proj)", "model\\.layers\\.\\d+\\.self_attn\\.[qv]_proj", "(?:.*\\.)?[qv]_proj"}},
      {kEvery, {"all-linear", "ALL-LINEAR", ".*_proj"}}};
  for (const auto& [targets, patterns] : cases) {
    Model m = load_model(hf);
    m.add_lora({.r = 2, .alpha = 4, .targets = targets, .seed = 3});
    randomize_b(m, 8);
    const fs::path dir = fresh("peft_pattern");
    save_peft_adapter(m, dir);
    Model listed = load_model(hf);
    load_peft_adapter(listed, dir);
    const std::vector<float> want = logits_of(listed, b);
    Model base = load_model(hf);
    EXPECT_NE(want, logits_of(base, b)) << "the adapters change the logits";
    auto j = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
    for (const std::string& pattern : patterns) {
      SCOPED_TRACE(pattern);
      j["target_modules"] = pattern;
      write_file_atomic(dir / "adapter_config.json", j.dump());
      Model by_pattern = load_model(hf);
      load_peft_adapter(by_pattern, dir);
      EXPECT_EQ(by_pattern.config().lora_targets, targets);
      EXPECT_EQ(logits_of(by_pattern, b), want);
    }
  }
}

// PeftModules decides as PEFT's check_target_module_exists and get_pattern_key do, worked by hand from their code:
// rank_pattern's first key in the file's order wins; a key matches from a name's start or after a dot
// (rf"(.*\.)?({key})$"); alpha_pattern apart from rank_pattern; exclude_modules first; a target_modules entry naming
// the module whole ignores layers_to_transform; the layer is the number after layers_pattern's names in turn, or
// without them the last number between two names after the first two (T5's sub-layer, not its block).
TEST(Lora, PeftModulesDecideAsPeftDoes) {
  auto modules = [](const std::string& config) { return PeftModules(parse_peft_config(config, "test"), "test"); };
  auto rank = [](const PeftModules& m, const std::string& module) {
    const std::optional<LoraConfig::Rank> r = m.adapter(module);
    return r ? std::pair<int64_t, double>(r->r, r->alpha) : std::pair<int64_t, double>(0, 0.0);
  };
  const std::string q0 = "model.layers.0.self_attn.q_proj", q1 = "model.layers.1.self_attn.q_proj";
  const std::string v0 = "model.layers.0.self_attn.v_proj", v1 = "model.layers.1.self_attn.v_proj";
  const PeftModules first = modules(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj",
      "v_proj"], "rank_pattern": {"q_proj": 4, "layers.0.self_attn.q_proj": 2, "attn.v_proj": 3},
      "alpha_pattern": {"layers.1.self_attn.q_proj": 5}})");
  EXPECT_EQ(rank(first, q0), std::make_pair(int64_t{4}, 16.0)) << "the first key in the file's order";
  EXPECT_EQ(rank(first, q1), std::make_pair(int64_t{4}, 5.0)) << "alpha_pattern on its own";
  EXPECT_EQ(rank(first, v0), std::make_pair(int64_t{8}, 16.0)) << "'attn.v_proj' starts inside 'self_attn'";
  const PeftModules reversed = modules(R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"],
      "rank_pattern": {"layers.0.self_attn.q_proj": 2, "q_proj": 4}})");
  EXPECT_EQ(rank(reversed, q0).first, 2);
  EXPECT_EQ(rank(reversed, q1).first, 4);
  const PeftModules layers = modules(R"({"peft_type": "LORA", "r": 8, "target_modules": [")" + q1 + R"(", "v_proj"],
      "layers_to_transform": 0, "exclude_modules": ["layers.0.self_attn.q_proj"]})");
  EXPECT_EQ(rank(layers, q1).first, 8) << "named whole: any layer";
  EXPECT_EQ(rank(layers, v0).first, 8);
  EXPECT_EQ(rank(layers, v1).first, 0) << "layer 1 is not in layers_to_transform";
  EXPECT_EQ(rank(layers, q0).first, 0) << "excluded, and not named";
  const PeftModules negative = modules(R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"],
      "layers_to_transform": [-1, 1]})");  // PEFT keeps -1, which no layer's number is
  EXPECT_EQ(rank(negative, q1).first, 8);
  EXPECT_EQ(rank(negative, q0).first, 0);
  EXPECT_EQ(rank(PeftModules(parse_peft_config(R"({"peft_type": "LORA", "target_modules": ["q_proj"],
      "layers_to_transform": -1})", "test"), "test"), q0).first, 0);
  const PeftModules t5 = modules(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q", "wo"],
      "layers_to_transform": [1]})");
  EXPECT_EQ(rank(t5, "encoder.block.3.layer.1.DenseReluDense.wo").first, 2) << "sub-layer 1 of block 3";
  EXPECT_EQ(rank(t5, "encoder.block.1.layer.0.SelfAttention.q").first, 0) << "sub-layer 0 of block 1";
  EXPECT_EQ(rank(t5, "decoder.block.0.layer.1.EncDecAttention.q").first, 2);
  const PeftModules by_block = modules(R"({"peft_type": "LORA", "r": 2, "target_modules": ["q", "c_attn"],
      "layers_to_transform": [1], "layers_pattern": ["h", "block"], "exclude_modules": ".*decoder.*"})");
  EXPECT_EQ(rank(by_block, "encoder.block.1.layer.0.SelfAttention.q").first, 2);
  EXPECT_EQ(rank(by_block, "encoder.block.3.layer.1.SelfAttention.q").first, 0);
  EXPECT_EQ(rank(by_block, "decoder.block.1.layer.0.SelfAttention.q").first, 0) << "excluded by the pattern";
  EXPECT_EQ(rank(by_block, "transformer.h.1.attn.c_attn").first, 2);
}

// PEFT adapters as PEFT writes and applies them, for each family's Hugging Face layout: adapter directories and the
// logits of W + s·B·A computed in plain PyTorch in float64 (tools/make_peft_fixtures.py): GPT-2's fused c_attn
// (fan_in_fan_out), BERT's query, value and output.dense (which PEFT also matches in attention.output.dense) with
// the classifier saved whole, T5's q and v of self and cross attention and its gated FFN's wi_1 and wo, and
// Mistral's every projection under rsLoRA; and PEFT's options that choose modules, ranks and alphas one by one, the
// reference deciding as PEFT's own functions do: Mistral's with rank_pattern, alpha_pattern and exclude_modules
// (ranks 1 to 4), GPT-2's block 1 alone (layers_to_transform with layers_pattern "h"), T5's sub-layer 1 alone
// (layers_to_transform without layers_pattern: PEFT then takes the number after "layer", so the encoder's FFN and
// the decoder's cross-attention). Attend's fp32 logits agree to 1e-4 of the largest.
TEST(Lora, PeftAdaptersOfEveryFamilyGiveTheLogitsOfPyTorchsReference) {
  const fs::path data(ATTEND_TEST_DATA);
  const std::map<std::string, std::vector<std::string>> targets = {
      {"gpt2", {"q", "k", "v", "down"}}, {"bert", {"q", "v", "o", "down"}}, {"t5", {"q", "v", "up", "down"}},
      {"mistral", kEvery}, {"mistral_patterns", kEvery}, {"gpt2_layers", {"q", "k", "v", "o", "down"}},
      {"t5_layers", {"q", "v", "down"}}};
  const std::map<std::string, std::map<int64_t, int64_t>> adapters_by_rank = {  // the per-module cases' adapters
      {"mistral_patterns", {{1, 1}, {2, 9}, {3, 1}, {4, 2}}},  // 14 projections less gate of block 1
      {"gpt2_layers", {{3, 5}}},                               // block 1's q, k, v, o and down
      {"t5_layers", {{2, 8}}}};                                // the encoder's 2 FFN downs, the decoder's 3 × q, v
  for (const auto& [name, want_targets] : targets) {
    SCOPED_TRACE(name);
    const fs::path dir = data / "peft" / name;
    const auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
    Model m = load_model(data / golden["base"].get<std::string>());
    EXPECT_EQ(load_peft_adapter(m, dir), 0);
    EXPECT_EQ(m.config().lora_targets, want_targets);
    EXPECT_EQ(m.lora_per_module(), adapters_by_rank.count(name) > 0);
    if (adapters_by_rank.count(name)) {
      std::map<int64_t, int64_t> by_rank;
      for (const Parameter* p : m.parameters())
        if (p->role == Role::LoraA) ++by_rank[p->value.size(0)];
      EXPECT_EQ(by_rank, adapters_by_rank.at(name));
    }
    Batch b;
    if (name == "bert") {
      b.B = 2, b.T = 9;
      for (const auto& seq : golden["ids"]) for (int32_t id : seq.get<std::vector<int32_t>>()) b.ids.push_back(id);
      b.lengths = golden["lengths"].get<std::vector<int32_t>>();
      b.labels = {0, 0};  // the classification head's logits
      EXPECT_EQ(m.config().lora_modules_to_save, (std::vector<std::string>{"classifier"}));
    } else if (name.starts_with("t5")) {
      b.src_ids = golden["src_ids"].get<std::vector<int32_t>>();
      b.ids = golden["decoder_ids"].get<std::vector<int32_t>>();
      b.B = 1, b.src_T = static_cast<int64_t>(b.src_ids.size()), b.T = static_cast<int64_t>(b.ids.size());
      if (name == "t5") {
        EXPECT_EQ(m.config().lora_dropout, 0.1);
      }
    } else {
      b.ids = golden["prompt_ids"].get<std::vector<int32_t>>();
      b.B = 1, b.T = static_cast<int64_t>(b.ids.size());
    }
    ForwardState state(/*for_backward=*/false);
    m.forward(b, state);
    const std::vector<double> want = golden["logits"].get<std::vector<double>>();
    double largest = 0.0;
    for (double x : want) largest = std::max(largest, std::abs(x));
    testing::expect_all_close(std::vector<float>(state.logits().span().begin(), state.logits().span().end()), want,
                              1e-4 * largest, name + ": logits with the PEFT adapter");

    // Written back as PEFT's files and read onto the base again: the same logits, bit for bit.
    const fs::path again_dir = fresh("peft_family_" + name);
    save_peft_adapter(m, again_dir);
    EXPECT_EQ(nlohmann::json::parse(read_file(again_dir / "adapter_config.json"))["r"],
              nlohmann::json::parse(read_file(dir / "adapter_config.json"))["r"])
        << "the same rank written back (GPT-2's c_attn: one A for q, k and v, as read)";
    Model again = load_model(data / golden["base"].get<std::string>());
    load_peft_adapter(again, again_dir);
    ForwardState again_state(/*for_backward=*/false);
    again.forward(b, again_state);
    EXPECT_EQ(std::vector<float>(again_state.logits().span().begin(), again_state.logits().span().end()),
              std::vector<float>(state.logits().span().begin(), state.logits().span().end()));
    EXPECT_EQ(again.lora_per_module(), m.lora_per_module());

    // A model directory holds the adapters unmerged (config.json's lora_per_module for the per-module sets): loaded,
    // the same logits bit for bit.
    const fs::path model_dir = fresh("peft_family_model_" + name);
    save_model(m, model_dir);
    Model saved = load_model(model_dir);
    EXPECT_EQ(saved.config().lora_per_module.size(), adapters_by_rank.count(name) ? m.config().lora_per_module.size()
                                                                                  : size_t{0});
    EXPECT_EQ(saved.config().to_json(), m.config().to_json());
    ForwardState saved_state(/*for_backward=*/false);
    saved.forward(b, saved_state);
    EXPECT_EQ(std::vector<float>(saved_state.logits().span().begin(), saved_state.logits().span().end()),
              std::vector<float>(state.logits().span().begin(), state.logits().span().end()));

    // As llama.cpp's LoRA file (each tensor pair at its own rank, one alpha: each pair's scale folded into its B)
    // and read back: the same logits to fp32's rounding of the folding.
    if (name == "mistral_patterns" || name == "gpt2_layers") {
      const fs::path gguf = fresh("peft_family_gguf_" + name) / "adapter.gguf";
      fs::create_directories(gguf.parent_path());
      export_gguf_lora(m, gguf);
      Model from_gguf = load_model(data / golden["base"].get<std::string>());
      load_peft_adapter(from_gguf, gguf);
      std::map<int64_t, int64_t> by_rank;
      for (const Parameter* p : from_gguf.parameters())
        if (p->role == Role::LoraA) ++by_rank[p->value.size(0)];
      EXPECT_EQ(by_rank, adapters_by_rank.at(name)) << "each pair at its own rank, nothing where the file is silent";
      ForwardState gguf_state(/*for_backward=*/false);
      from_gguf.forward(b, gguf_state);
      double largest = 0.0;
      for (float x : state.logits().span()) largest = std::max(largest, double(std::abs(x)));
      testing::expect_all_close(std::vector<float>(gguf_state.logits().span().begin(), gguf_state.logits().span().end()),
                                std::vector<float>(state.logits().span().begin(), state.logits().span().end()),
                                1e-5 * largest, "through a GGUF LoRA");
    }
  }
}

// What Attend writes for each family: the modules PEFT's names give (GPT-2's q and v adapters as one c_attn
// adapter of twice the rank, block-diagonal; BERT's down projection by full names, since "output.dense" would also
// adapt attention.output.dense), every module at the file's one rank, and the classifier beside them.
TEST(Lora, PeftFilesAttendWritesForEachFamily) {
  struct Case {
    std::string family;
    std::vector<std::string> targets, target_modules;
    int64_t rank;
    std::string tensor;
    Shape shape;
  };
  const int64_t C = 16;
  const std::vector<Case> cases = {
      {"gpt", {"q", "v", "o"}, {"c_attn", "attn.c_proj"}, 4, "transformer.h.1.attn.c_attn.lora_B.weight", {3 * C, 4}},
      {"bert", {"q", "v", "down"}, {"query", "value", "bert.encoder.layer.0.output.dense",
                                    "bert.encoder.layer.1.output.dense"}, 2,
       "bert.encoder.layer.1.attention.self.value.lora_A.weight", {2, C}},
      {"t5", {"q", "k", "v", "o", "up", "down"}, {"q", "k", "v", "o", "wi", "wo"}, 2,
       "decoder.block.0.layer.1.EncDecAttention.k.lora_B.weight", {C, 2}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.family);
    const ModelConfig c = family(k.family);
    Model m(c);
    m.add_lora({.r = 2, .alpha = 4, .targets = k.targets, .seed = 9});
    randomize_b(m, 3);
    const Batch b = batch_for(c, 4);
    const std::vector<float> want = logits_of(m, b);
    const fs::path dir = fresh("peft_written_" + k.family);
    save_peft_adapter(m, dir);
    const auto config = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
    EXPECT_EQ(config["target_modules"], nlohmann::json(k.target_modules));
    EXPECT_EQ(config["r"], k.rank);
    EXPECT_EQ(config["lora_alpha"].get<double>(), 2.0 * k.rank) << "alpha / r stays the adapters' scale, 2";
    const SafetensorsReader file(dir / "adapter_model.safetensors");
    const TensorInfo* t = file.find("base_model.model." + k.tensor);
    ASSERT_NE(t, nullptr) << k.tensor;
    EXPECT_EQ(t->shape, k.shape);
    if (k.family == "bert") {
      EXPECT_EQ(config["modules_to_save"], nlohmann::json({"classifier", "pooler"}));
      EXPECT_NE(file.find("base_model.model.classifier.weight"), nullptr);
      EXPECT_NE(file.find("base_model.model.bert.pooler.dense.weight"), nullptr);
      EXPECT_EQ(config["task_type"], "SEQ_CLS");
    }
    Model back(c);
    load_peft_adapter(back, dir);
    double largest = 0.0;
    for (float x : want) largest = std::max(largest, double(std::abs(x)));
    // GPT-2's c_attn comes back as q, k and v adapters of rank 4 sharing one A: the same products, with zeros.
    testing::expect_all_close(logits_of(back, b), want, 1e-5 * largest, k.family + ": read back");
  }
}

// Mixed precision: the base's matmuls in bf16, the adapters in fp32 on the fp32 input (attention's projections
// and the FFN's alike). The adapters' gradients follow the fp32 model's to bf16's rounding of the base.
TEST(Lora, AdaptersTrainUnderMixedPrecision) {
  for (const std::string name : {"gpt", "llama"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = family(name);
    Model m = adapted(c);
    const Batch b = batch_for(c, 6);
    auto grads = [&](Precision p) {
      m.zero_grad();
      ForwardState state;
      m.forward(b, state, {.precision = p});
      m.backward(state);
      const auto g = m.gradient_buffer();
      return std::vector<float>(g.begin(), g.end());
    };
    const std::vector<float> f32 = grads(Precision::F32), bf16 = grads(Precision::BF16);
    double largest = 0.0, diff = 0.0, dot = 0.0, n32 = 0.0, n16 = 0.0;
    for (size_t i = 0; i < f32.size(); ++i) {
      largest = std::max(largest, double(std::abs(f32[i])));
      diff = std::max(diff, double(std::abs(f32[i] - bf16[i])));
      dot += double(f32[i]) * bf16[i], n32 += double(f32[i]) * f32[i], n16 += double(bf16[i]) * bf16[i];
    }
    // bf16 keeps 8 bits: the gradients agree to a few percent of the largest, and point the same way.
    EXPECT_LT(diff, 0.05 * largest);
    EXPECT_GT(dot / std::sqrt(n32 * n16), 0.999);
  }
}

TEST(Lora, BadConfigurationsNameTheField) {
  Model m(family("gpt"));
  // Ranks module by module: a bad rank, or a key that is no adapted projection (here o, not among the targets), is
  // an error before the model changes.
  const size_t parameters = m.parameters().size();
  LoraConfig by_module{.targets = {"q", "v"}};
  by_module.per_module = {{"decoder.layers.0.attn.qkv.q", {.r = 0, .alpha = 1}}};
  testing::expect_error_mentions<Error>([&] { m.add_lora(by_module); }, {"'decoder.layers.0.attn.qkv.q' has r 0"});
  by_module.per_module = {{"decoder.layers.0.attn.qkv.q", {.r = 2, .alpha = 1}}, {"decoder.layers.0.attn.o", {}}};
  testing::expect_error_mentions<Error>([&] { m.add_lora(by_module); },
                                        {"'decoder.layers.0.attn.o'", "no projection", "targets q, v"});
  EXPECT_FALSE(m.has_lora());
  EXPECT_EQ(m.parameters().size(), parameters);
  testing::expect_error_mentions<Error>([&] { m.add_lora({.r = 0}); }, {"r is 0"});
  testing::expect_error_mentions<Error>([&] { m.add_lora({.alpha = -1}); }, {"alpha"});
  testing::expect_error_mentions<Error>([&] { m.add_lora({.targets = {"qq"}}); }, {"unknown target 'qq'"});
  m.add_lora({});
  testing::expect_error_mentions<Error>([&] { m.add_lora({}); }, {"adapters already"});
  ModelConfig moe = family("gpt");
  moe.n_experts = 2, moe.moe_every = 1;
  Model experts(moe);
  testing::expect_error_mentions<Error>([&] { experts.add_lora({.targets = {"up"}}); }, {"Mixture-of-Experts"});
}

}  // namespace
}  // namespace attend
