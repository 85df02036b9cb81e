// Hugging Face checkpoints of the Llama family (tests/data/hf-llama, tools/make_llama_fixtures.py) and of
// Gemma 3 (tests/data/hf-gemma3, tools/make_gemma_fixtures.py): logits, loss and greedy continuations against
// plain-PyTorch references of transformers' LlamaForCausalLM and Gemma3ForCausalLM, the export back to Hugging
// Face's layout, and the errors a bad checkpoint gets.
#include "fixtures.h"
#include "formats/hf_bert.h"
#include "formats/hf_checkpoint.h"
#include "formats/hf_gemma3.h"
#include "formats/hf_llama.h"
#include "formats/hf_t5.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/safetensors.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <utility>

namespace attend {
namespace {

namespace fs = std::filesystem;
using testing::expect_error_mentions;

const fs::path kLlama = fs::path(ATTEND_TEST_DATA) / "hf-llama";
const fs::path kGemma = fs::path(ATTEND_TEST_DATA) / "hf-gemma3";
const fs::path kT5 = fs::path(ATTEND_TEST_DATA) / "hf-t5";
const fs::path kBert = fs::path(ATTEND_TEST_DATA) / "hf-bert";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_test_hf_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<float> logits_of(const Model& model, const std::vector<int32_t>& ids) {
  Batch b;
  b.B = 1, b.T = static_cast<int64_t>(ids.size()), b.ids = ids;
  ForwardState state(/*for_backward=*/false);
  model.forward(b, state);
  return {state.logits().span().begin(), state.logits().span().end()};
}

std::vector<int32_t> greedy(const Model& model, const std::vector<int32_t>& prompt, int n) {
  Session session(model, {.max_T = static_cast<int64_t>(prompt.size()) + n});
  std::span<const float> logits = session.step(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < n) logits = session.step(std::span(&out.back(), 1));
  }
  return out;
}

// A fixture's logits of the whole prompt, its next-token loss, and a greedy continuation through a session's
// KV cache, against golden.json. The reference runs in float64 on the stored weights; Attend in fp32 with sums
// over at most 64 terms through a few layers, which moves logits of magnitude ~3 by about 1e-6 (the tolerance
// leaves 100x room).
void expect_golden(const Model& model, const fs::path& dir, const std::string& what) {
  const auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  testing::expect_all_close(logits_of(model, prompt), golden["logits"].get<std::vector<double>>(), 1e-4,
                            what + ": logits");
  Batch b;
  b.B = 1, b.T = static_cast<int64_t>(prompt.size()), b.ids = prompt;
  b.targets.assign(prompt.begin() + 1, prompt.end());
  b.targets.push_back(Batch::kIgnore);
  ForwardState state(/*for_backward=*/false);
  EXPECT_NEAR(model.forward(b, state).ce_loss, golden["loss"].get<double>(), 1e-5 * golden["loss"].get<double>())
      << what;
  EXPECT_EQ(greedy(model, prompt, 6), golden["greedy_ids"].get<std::vector<int32_t>>()) << what;
}

// Export writes Hugging Face's layout back: the parameters read back bit for bit, and every tensor the export
// wrote equals the one the checkpoint holds (as the float it stands for).
void expect_round_trip(const fs::path& dir, const std::string& what,
                       void (*export_to)(const Model&, const fs::path&, const Tokenizer*, DType),
                       const std::vector<std::string>& copies = {}) {
  const Model model = load_model(dir);
  const fs::path out = fresh_dir("export_" + what);
  export_to(model, out, nullptr, DType::F32);
  const Model again = load_model(out);
  EXPECT_EQ(again.config().to_json(), model.config().to_json()) << what;
  const auto a = model.parameters(), b = again.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(a[i]->value.data(), b[i]->value.data(), a[i]->numel() * sizeof(float)), 0)
        << what << " " << a[i]->name;
  const formats::CheckpointTensors original(dir), exported(out);
  for (const std::string& name : original.names()) {
    // A tensor the export leaves out must be one of `copies` (T5's stacks' embed_tokens, copies of shared).
    if (exported.find(name) == nullptr) {
      EXPECT_NE(std::find(copies.begin(), copies.end(), name), copies.end()) << what << ": " << name << " not exported";
      continue;
    }
    const Tensor x = original.load(name, "the fixture"), y = exported.load(name, "the export");
    ASSERT_EQ(x.shape(), y.shape()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.numel() * sizeof(float)), 0) << what << " " << name;
  }
  for (const std::string& name : exported.names())
    EXPECT_NE(original.find(name), nullptr) << what << ": the export wrote " << name << ", which the checkpoint lacks";
  fs::remove_all(out);
}

// Each variant against the reference: the logits of the whole prompt, the next-token loss, and a greedy
// continuation through a session's KV cache.
//   tied-llama3    the LM head is embed_tokens (tie_word_embeddings); rope_scaling llama3; GQA; two shards
//   untied-linear  lm_head; rope_scaling linear (positions / 2); bf16 tensors (read as the values they hold)
//   dynamic        rope_scaling dynamic: a 20-token prompt passes max_position_embeddings 16, so the whole
//                  prompt rotates with the grown base; generation rotates each new key with the base of its
//                  own step, as Hugging Face's cached generate does; fp16 tensors
//   qwen2          Qwen2ForCausalLM: biases on q, k and v (permuted with their rows); tied
//   qwen3          Qwen3ForCausalLM: RMSNorm of each head's q and k before RoPE (gains permuted as a head's
//                  channels), head_dim 16 with 4 heads on a width of 32; bf16 tensors
//   mistral        MistralForCausalLM: every layer's attention sees the newest 5 positions (sliding_window)
TEST(HfLlama, EachVariantMatchesTheReference) {
  for (const std::string variant : {"tied-llama3", "untied-linear", "dynamic", "qwen2", "qwen3", "mistral"}) {
    const Model model = load_model(kLlama / variant);
    const ModelConfig& c = model.config();
    EXPECT_EQ(c.activation, FfnKind::SwiGLU) << variant;
    EXPECT_EQ(c.norm, NormKind::RMSNorm) << variant;
    EXPECT_EQ(c.kv_heads(), 2) << variant;
    EXPECT_EQ(c.tie_embeddings, variant == "tied-llama3" || variant == "qwen2");
    EXPECT_EQ(c.qkv_bias, variant == "qwen2");
    EXPECT_EQ(c.qk_norm, variant == "qwen3");
    EXPECT_EQ(c.sliding_window, variant == "mistral" ? 5 : 0);
    expect_golden(model, kLlama / variant, variant);
  }
}

// load_model(dir, bf16|f16) reads the matrices straight into 16 bits: the model, parameter by parameter and bit for
// bit, is the one set_storage and hold_as_stored make of the fp32 load, and it runs (the same logits from a
// session's step, or the same hidden states for an encoder).
TEST(HfCheckpoints, SixteenBitLoadingIsTheConvertedModel) {
  // Every family, and Attend's own directories, read their matrices straight into 16 bits (no fp32 copy of the
  // model): the same bits as loading fp32 and converting, and the same outputs.
  const fs::path gpt2 = fs::path(ATTEND_TEST_DATA) / "hf-gpt2", kModels = fs::path(ATTEND_TEST_DATA) / "models";
  for (const fs::path& dir : {kLlama / "tied-llama3", kLlama / "untied-linear", kLlama / "dynamic", kLlama / "qwen2",
                              kLlama / "qwen3", kLlama / "mistral", kGemma / "pattern", kGemma / "layer-types", gpt2,
                              kT5 / "v1_0", kT5 / "v1_1", kBert / "base", kBert / "mlm", kBert / "classifier",
                              kModels / "gpt", kModels / "llama", kModels / "moe", kModels / "t5", kModels / "bert",
                              kModels / "encoder_mean"})
    for (const WeightType type : {WeightType::BF16, WeightType::F16}) {
      SCOPED_TRACE(dir.filename().string() + " " + weight_type_name(type));
      const Model direct = load_model(dir, type);
      Model converted = load_model(dir);
      converted.set_storage(type);
      converted.hold_as_stored();
      const std::vector<const Parameter*> a = direct.parameters(), b = std::as_const(converted).parameters();
      ASSERT_EQ(a.size(), b.size());
      int64_t packed = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        SCOPED_TRACE(a[i]->name);
        EXPECT_EQ(a[i]->name, b[i]->name);
        EXPECT_EQ(a[i]->storage, b[i]->storage);
        EXPECT_EQ(a[i]->packed, b[i]->packed);
        ASSERT_EQ(a[i]->has_values(), b[i]->has_values());
        if (a[i]->has_values()) {
          EXPECT_EQ(std::memcmp(a[i]->value.data(), b[i]->value.data(), a[i]->numel() * sizeof(float)), 0);
        }
        packed += a[i]->packed.empty() ? 0 : 1;
      }
      EXPECT_GT(packed, 0) << "no matrix held in 16 bits";
      const std::vector<int32_t> prompt = {1, 2, 3};
      if (direct.config().architecture == Architecture::Encoder) {
        Batch b;
        b.B = 1, b.T = 3, b.ids = prompt;
        const Tensor h1 = direct.hidden_states(b), h2 = converted.hidden_states(b);
        ASSERT_EQ(h1.numel(), h2.numel());
        EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.numel() * sizeof(float)), 0);
        continue;
      }
      const bool seq2seq = direct.config().architecture == Architecture::EncoderDecoder;
      auto logits_of = [&](const Model& m) {  // T5's decoder reads the prompt's encoding too
        const SessionOptions options{.max_T = 8};
        auto s = seq2seq ? std::make_unique<Session>(m, prompt, options) : std::make_unique<Session>(m, options);
        const std::span<const float> logits = s->step(prompt);
        return std::vector<float>(logits.begin(), logits.end());
      };
      EXPECT_EQ(logits_of(direct), logits_of(converted));
    }
  expect_error_mentions<Error>([&] { (void)load_model(kLlama / "qwen2", WeightType::Q8_0); },
                               {"matrices must be f32, bf16 or f16", "q8_0"});
}

// The configuration each variant maps to: Hugging Face's keys and defaults, named.
TEST(HfLlama, ConfigKeysMapToAttendsOptions) {
  const Model tied = load_model(kLlama / "tied-llama3");
  EXPECT_EQ(tied.config().rope_base, 500000.0);
  EXPECT_EQ(tied.config().rope_llama3_factor, 8.0);
  EXPECT_EQ(tied.config().rope_original_context, 16);
  EXPECT_EQ(tied.config().max_seq_len, 64);
  EXPECT_EQ(tied.config().d_ff, 48);
  EXPECT_EQ(tied.config().norm_eps, 1e-5);
  EXPECT_FALSE(tied.config().bias);
  const Model linear = load_model(kLlama / "untied-linear");
  EXPECT_EQ(linear.config().rope_position_scale, 0.5);
  const Model dynamic = load_model(kLlama / "dynamic");
  EXPECT_EQ(dynamic.config().rope_dynamic_factor, 2.0);
  EXPECT_EQ(dynamic.config().rope_original_context, 16);
  EXPECT_EQ(dynamic.config().max_seq_len, 32);  // the dynamic factor stretches the context it serves
  const Model qwen3 = load_model(kLlama / "qwen3");
  EXPECT_EQ(qwen3.config().head_dim, 16);
  EXPECT_EQ(qwen3.find("decoder.layers.0.attn.qkv.weight")->value.shape(), Shape({(4 + 2 * 2) * 16, 32}));
  EXPECT_EQ(qwen3.find("decoder.layers.0.attn.o.weight")->value.shape(), Shape({32, 64}));
  EXPECT_EQ(qwen3.find("decoder.layers.0.attn.q_norm.weight")->role, Role::NormGain);
  const Model qwen2 = load_model(kLlama / "qwen2");
  EXPECT_EQ(qwen2.find("decoder.layers.1.attn.qkv.bias")->value.shape(), Shape({(4 + 2 * 2) * 8}));
  EXPECT_EQ(qwen2.find("decoder.layers.1.attn.o.bias"), nullptr);  // Qwen2's W_O has none
}

// W_Q and W_K rows return to the half rotation's order; the rest is the checkpoint's, bit for bit.
TEST(HfLlama, ExportIsARoundTripBitForBit) {
  for (const std::string variant : {"tied-llama3", "untied-linear", "dynamic", "qwen2", "qwen3", "mistral"})
    expect_round_trip(kLlama / variant, "llama_" + variant, export_hf_llama);
  const Model gpt = load_model(testing::kModels / "gpt");
  expect_error_mentions<Error>([&] { export_hf_llama(gpt, fresh_dir("llama_export_gpt")); },
                               {"export hf-llama: position", "RoPE"});
  const Model gemma = load_model(kGemma / "pattern");
  expect_error_mentions<Error>([&] { export_hf_llama(gemma, fresh_dir("llama_export_gemma")); },
                               {"export hf-llama", "scale"});
}

// The permutation between Hugging Face's halves and Attend's pairs, by hand: a head of 4 rows (x0 x1 | x2 x3)
// becomes (x0 x2 x1 x3), and back.
TEST(HfLlama, RopeRowPermutationByHand) {
  const std::vector<float> hf = {0, 1, 2, 3, 10, 11, 12, 13};  // 2 heads of d = 4, C = 1
  std::vector<float> attend(8), back(8);
  formats::rope_rows_from_hf(attend.data(), hf.data(), 2, 4, 1);
  EXPECT_EQ(attend, std::vector<float>({0, 2, 1, 3, 10, 12, 11, 13}));
  formats::rope_rows_to_hf(back.data(), attend.data(), 2, 4, 1);
  EXPECT_EQ(back, hf);
}

// A copy of a fixture (of the Llama family, or of `family`) with config.json changed by `edit`.
fs::path edited_copy(const std::string& variant, const std::function<void(nlohmann::json&)>& edit,
                     const fs::path& family = kLlama) {
  const fs::path dir = fresh_dir("bad_" + family.filename().string() + "_" + variant);
  for (const auto& f : fs::directory_iterator(family / variant)) fs::copy_file(f.path(), dir / f.path().filename());
  auto config = nlohmann::json::parse(read_file(dir / "config.json"));
  edit(config);
  write_file_atomic(dir / "config.json", config.dump());
  return dir;
}

TEST(HfLlama, BadCheckpointsAreErrorsNamingTheCause) {
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}}; })); },
      {"rope_scaling type 'yarn'", "llama3, linear, dynamic"});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["hidden_act"] = "gelu"; })); },
      {"hidden_act 'gelu'", "silu"});
  expect_error_mentions<Error>(  // wider heads than the checkpoint's: its projections have the wrong shape
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["head_dim"] = 16; })); },
      {"self_attn.o_proj.weight", "[32, 32]", "[32, 64]"});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("qwen3", [](auto& j) { j["attention_bias"] = true; })); }, {"attention_bias true"});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["attention_bias"] = true; })); },
      {"attention_bias true"});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["intermediate_size"] = 40; })); },
      {"mlp.gate_proj.weight", "[48, 32]", "[40, 32]"});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("untied-linear", [](auto& j) { j["num_hidden_layers"] = 3; })); },
      {"no tensor 'model.layers.2."});
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("tied-llama3", [](auto& j) { j["tie_word_embeddings"] = false; })); },
      {"no tensor 'lm_head.weight'"});
  // A family Attend does not read is named as such (it was "unknown option 'architectures'"), and so is a class
  // of a family it reads that it does not (a sequence classifier loaded as the causal LM, its head dropped).
  for (const bool named : {true, false}) {
    const fs::path load = edited_copy("qwen3", [&](auto& j) {
      j["model_type"] = "phi3";
      if (named) j["architectures"] = {"Phi3ForCausalLM"};
      else j.erase("architectures");
    });
    expect_error_mentions<Error>([&] { load_model(load); }, {"config.json", "model_type \"phi3\"", "not a model Attend reads",
                                                             "Qwen3", "BERT"});
    expect_error_mentions<Error>([&] { load_model_config(load); }, {named ? "(Phi3ForCausalLM)" : "model_type \"phi3\""});
  }
  expect_error_mentions<Error>(
      [] { load_model(edited_copy("qwen3", [](auto& j) { j["architectures"] = {"Qwen3ForSequenceClassification"}; })); },
      {"architectures names \"Qwen3ForSequenceClassification\"", "LlamaForCausalLM", "Qwen3ForCausalLM"});
  // A missing shard, and an index that sends a tensor to a file that does not hold it.
  const fs::path missing = edited_copy("tied-llama3", [](auto&) {});
  fs::remove(missing / "model-00002-of-00002.safetensors");
  expect_error_mentions<Error>([&] { load_model(missing); }, {"missing shard model-00002-of-00002.safetensors"});
  const fs::path wrong = edited_copy("tied-llama3", [](auto&) {});
  auto index = nlohmann::json::parse(read_file(wrong / "model.safetensors.index.json"));
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  write_file_atomic(wrong / "model.safetensors.index.json", index.dump());
  expect_error_mentions<Error>([&] { load_model(wrong); }, {"'model.norm.weight'", "does not hold it"});
  for (const fs::path& d : {missing, wrong}) fs::remove_all(d);
}

// ---- Gemma 3 --------------------------------------------------------------------------------------

// Both variants against the reference (tools/make_gemma_fixtures.py):
//   pattern      sliding_window_pattern 3: layers 0, 1 and 3 see the newest 4 positions and rotate with
//                rope_local_base_freq, layer 2 sees all; a 14-token prompt, so the window cuts; F32
//   layer-types  the newer config spelling (layer_types listed), rope_scaling linear on the global layers; BF16
// Both: norms of 1 + γ, four a layer, q/k norms, GeGLU, embeddings × √32, scores × 24^−½ with head_dim 16.
TEST(HfGemma3, EachVariantMatchesTheReference) {
  for (const std::string variant : {"pattern", "layer-types"}) {
    const Model model = load_model(kGemma / variant);
    expect_golden(model, kGemma / variant, "gemma3 " + variant);
  }
}

TEST(HfGemma3, ConfigKeysMapToAttendsOptions) {
  const ModelConfig c = load_model(kGemma / "pattern").config();
  EXPECT_TRUE(c.norm_unit_offset && c.sandwich_norm && c.qk_norm && c.scale_embeddings && c.tie_embeddings);
  EXPECT_EQ(c.activation, FfnKind::GeGLU);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(24.0));
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_EQ(c.sliding_window_pattern, 3);
  EXPECT_EQ(c.rope_base, 1e6);
  EXPECT_EQ(c.rope_local_base, 1e4);
  EXPECT_EQ(std::vector<bool>({c.is_local_block(0), c.is_local_block(1), c.is_local_block(2), c.is_local_block(3)}),
            std::vector<bool>({true, true, false, true}));
  // A config as the 4B model's text_config has it, most keys left to Gemma3TextConfig's defaults (found by
  // fuzz/fuzz_model_config: formatting an error message read an absent key, an assertion in nlohmann).
  const ModelConfig d = formats::config_from_hf_gemma3(
      nlohmann::json::parse(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
          "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
          "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}})"),
      "config.json");
  EXPECT_EQ(d.vocab_size, 262208);
  EXPECT_EQ(d.n_heads, 8);
  EXPECT_EQ(d.kv_heads(), 4);
  EXPECT_EQ(d.d_head(), 256);
  EXPECT_EQ(d.attention_scale, 0.0);  // query_pre_attn_scalar 256 = head_dim
  EXPECT_EQ(d.sliding_window_pattern, 6);
  EXPECT_EQ(d.rope_position_scale, 1.0 / 8.0);
  const ModelConfig t = load_model(kGemma / "layer-types").config();
  EXPECT_EQ(t.sliding_window_pattern, 2);  // sliding, full, sliding, full
  EXPECT_EQ(t.rope_position_scale, 1.0 / 8.0);
  EXPECT_EQ(load_model(kGemma / "pattern").find("decoder.layers.1.ffn_post_norm.weight")->role, Role::NormGain);
}

TEST(HfGemma3, ExportIsARoundTripBitForBit) {
  for (const std::string variant : {"pattern", "layer-types"})
    expect_round_trip(kGemma / variant, "gemma3_" + variant, export_hf_gemma3);
  for (const std::string variant : {"pattern", "layer-types"})  // export_hf picks the family
    expect_round_trip(kGemma / variant, "hf_gemma3_" + variant, export_hf);
  expect_error_mentions<Error>([] { export_hf_gemma3(load_model(kLlama / "qwen3"), fresh_dir("gemma_export_qwen")); },
                               {"export hf-gemma3", "Gemma 3"});
}

// The language model inside a multimodal Gemma3ForConditionalGeneration: config.json's text_config, tensors
// under language_model.model.* (and, in later transformers, model.language_model.*) beside a vision tower that
// is skipped; the logits are the text model's.
TEST(HfGemma3, TheTextModelOfAMultimodalCheckpointLoads) {
  const Model text = load_model(kGemma / "pattern");
  const auto golden = nlohmann::json::parse(read_file(kGemma / "pattern" / "golden.json"));
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const formats::CheckpointTensors tensors(kGemma / "pattern");
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    const fs::path dir = fresh_dir("gemma_multimodal");
    std::vector<Tensor> stored;
    const auto names = tensors.names();
    stored.reserve(names.size() + 1);
    std::vector<NamedTensor> out;
    for (const std::string& name : names) {
      stored.push_back(tensors.load(name, "the fixture"));
      out.push_back({prefix + name.substr(std::string("model.").size()), &stored.back()});
    }
    stored.push_back(Tensor({2, 3}));
    const std::string vision = prefix == "model.language_model." ? "model.vision_tower.patch.weight" : "vision_tower.patch.weight";
    out.push_back({vision, &stored.back()});
    write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
    const auto text_config = nlohmann::json::parse(read_file(kGemma / "pattern" / "config.json"));
    const nlohmann::json config = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                   {"model_type", "gemma3"},
                                   {"text_config", text_config},
                                   {"vision_config", {{"model_type", "siglip_vision_model"}}}};
    write_file_atomic(dir / "config.json", config.dump());
    const Model multimodal = load_model(dir);
    EXPECT_EQ(logits_of(multimodal, prompt), logits_of(text, prompt)) << prefix;
    fs::remove_all(dir);
  }
}

TEST(HfGemma3, BadCheckpointsAreErrorsNamingTheCause) {
  auto edited = [](auto edit) { return edited_copy("pattern", edit, kGemma); };
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["final_logit_softcapping"] = 30.0; })); },
                               {"final_logit_softcapping", "soft-capping"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["hidden_activation"] = "silu"; })); },
                               {"hidden_activation 'silu'", "gelu_pytorch_tanh"});
  expect_error_mentions<Error>(
      [&] {
        load_model(edited([](auto& j) {
          j["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
        }));
      },
      {"layer_types", "layer 2", "one period"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["layer_types"] = {"sliding_attention"}; })); },
                               {"layer_types must list num_hidden_layers = 4"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["use_bidirectional_attention"] = true; })); },
                               {"use_bidirectional_attention"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["head_dim"] = 8; })); },
                               {"o_proj.weight", "[32, 64]", "[32, 32]"});
}

// ---- T5 -------------------------------------------------------------------------------------------

// T5's fixture: the source through the encoder, the decoder's inputs (labels shifted right after the start
// token 0) teacher-forced, their logits and loss; then greedy decoding from the start token through a session.
void expect_t5_golden(const Model& model, const fs::path& dir, const std::string& what) {
  const auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
  const auto src = golden["src_ids"].get<std::vector<int32_t>>();
  const auto decoder_ids = golden["decoder_ids"].get<std::vector<int32_t>>();
  Batch b;
  b.B = 1, b.src_T = static_cast<int64_t>(src.size()), b.src_ids = src;
  b.T = static_cast<int64_t>(decoder_ids.size()), b.ids = decoder_ids;
  b.targets = golden["labels"].get<std::vector<int32_t>>();
  ForwardState state(/*for_backward=*/false);
  const double loss = model.forward(b, state).ce_loss;
  testing::expect_all_close(std::vector<float>(state.logits().span().begin(), state.logits().span().end()),
                            golden["logits"].get<std::vector<double>>(), 1e-4, what + ": logits");
  EXPECT_NEAR(loss, golden["loss"].get<double>(), 1e-5 * golden["loss"].get<double>()) << what;
  Session session(model, src, {.max_T = 8});
  const int32_t start[] = {0};
  std::span<const float> logits = session.step(start);
  std::vector<int32_t> out;
  for (int i = 0; i < 6; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < 6) logits = session.step(std::span(&out.back(), 1));
  }
  EXPECT_EQ(out, golden["greedy_ids"].get<std::vector<int32_t>>()) << what;
}

// Both variants against a float64 reference of transformers' T5ForConditionalGeneration
// (tools/make_t5_fixtures.py):
//   v1_0   ReLU FFN, tied embeddings (the decoder's output × 32^−½ before the head), relative bias table of
//          block 0 shared by the stack, 8 buckets up to distance 20 under 12 source and 10 target tokens; F32
//   v1_1   gated-gelu, an untied lm_head, 2 encoder and 3 decoder layers, d_kv 16 on a width of 32; BF16
TEST(HfT5, EachVariantMatchesTheReference) {
  for (const std::string variant : {"v1_0", "v1_1"}) expect_t5_golden(load_model(kT5 / variant), kT5 / variant, variant);
}

TEST(HfT5, ConfigKeysMapToAttendsOptions) {
  const Model v10 = load_model(kT5 / "v1_0");
  const ModelConfig& c = v10.config();
  EXPECT_EQ(c.architecture, Architecture::EncoderDecoder);
  EXPECT_EQ(c.position, PositionKind::T5);
  EXPECT_TRUE(c.t5_shared_bias);
  EXPECT_EQ(c.t5_num_buckets, 8);
  EXPECT_EQ(c.t5_max_distance, 20);
  EXPECT_EQ(c.attention_scale, 1.0);
  EXPECT_EQ(c.activation, FfnKind::ReLU);
  EXPECT_DOUBLE_EQ(c.lm_head_scale, 1.0 / std::sqrt(32.0));
  EXPECT_EQ(v10.find("encoder.layers.1.attn.relative_attention_bias"), nullptr);  // block 0's serves the stack
  EXPECT_NE(v10.find("decoder.layers.0.attn.relative_attention_bias"), nullptr);
  const ModelConfig d = load_model(kT5 / "v1_1").config();
  EXPECT_EQ(d.activation, FfnKind::GeGLU);
  EXPECT_EQ(d.n_decoder_layers, 3);
  EXPECT_EQ(d.head_dim, 16);
  EXPECT_FALSE(d.tie_embeddings);
  EXPECT_EQ(d.lm_head_scale, 1.0);
}

TEST(HfT5, ExportIsARoundTripBitForBit) {
  const std::vector<std::string> copies = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"};
  for (const std::string variant : {"v1_0", "v1_1"}) {
    expect_round_trip(kT5 / variant, "t5_" + variant, export_hf_t5, copies);
    expect_round_trip(kT5 / variant, "hf_t5_" + variant, export_hf, copies);
  }
  const Model t5 = load_model(testing::kModels / "t5");  // Attend's own T5: a table in every block
  expect_error_mentions<Error>([&] { export_hf_t5(t5, fresh_dir("t5_export_own")); },
                               {"export hf-t5", "one relative position table per stack"});
}

TEST(HfT5, BadCheckpointsAreErrorsNamingTheCause) {
  auto edited = [](auto edit) { return edited_copy("v1_1", edit, kT5); };
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["feed_forward_proj"] = "gated-swish"; })); },
                               {"feed_forward_proj 'gated-swish'", "relu, gated-gelu"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["feed_forward_proj"] = "relu"; })); },
                               {"no tensor 'encoder.block.0.layer.1.DenseReluDense.wi.weight'"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["relative_attention_num_buckets"] = 16; })); },
                               {"relative_attention_bias.weight", "[8, 4]", "[16, 4]"});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["num_decoder_layers"] = 2; })); },
                               {"unexpected tensor 'decoder.block.2."});
  expect_error_mentions<Error>([&] { load_model(edited([](auto& j) { j["d_model"] = "32"; })); }, {"'d_model'"});
}

// ---- BERT -----------------------------------------------------------------------------------------

// The three classes against a float64 reference of transformers' BERT (tools/make_bert_fixtures.py):
//   mlm         BertForMaskedLM: a sentence pair with token types 0 and 1; the masked-LM logits at every position
//               and the loss at three labelled ones
//   classifier  BertForSequenceClassification: tanh(pooler(h[CLS])) → three named classes, a padded sequence
//   base        BertModel: the encoder's hidden states (no head)
// Post-LN LayerNorm with eps 1e-12, exact GELU, the embeddings' LayerNorm.
TEST(HfBert, EachClassMatchesTheReference) {
  {
    const Model model = load_model(kBert / "mlm");
    const auto golden = nlohmann::json::parse(read_file(kBert / "mlm" / "golden.json"));
    Batch b;
    b.B = 1, b.ids = golden["ids"].get<std::vector<int32_t>>(), b.T = static_cast<int64_t>(b.ids.size());
    b.token_types = golden["token_types"].get<std::vector<int32_t>>();
    ForwardState all(/*for_backward=*/false);
    model.forward(b, all);  // no targets: the head at every position
    testing::expect_all_close(std::vector<float>(all.logits().span().begin(), all.logits().span().end()),
                              golden["logits"].get<std::vector<double>>(), 1e-4, "bert mlm: logits");
    b.targets = golden["labels"].get<std::vector<int32_t>>();
    ForwardState masked(/*for_backward=*/false);
    EXPECT_NEAR(model.forward(b, masked).ce_loss, golden["loss"].get<double>(), 1e-5 * golden["loss"].get<double>());
    b.token_types.assign(b.ids.size(), 0);  // the types matter
    ForwardState one_type(/*for_backward=*/false);
    EXPECT_GT(std::abs(model.forward(b, one_type).ce_loss - golden["loss"].get<double>()), 1e-3);
  }
  {
    const Model model = load_model(kBert / "classifier");
    EXPECT_EQ(model.config().class_names, std::vector<std::string>({"negative", "neutral", "positive"}));
    const auto golden = nlohmann::json::parse(read_file(kBert / "classifier" / "golden.json"));
    Batch b;
    b.B = 2, b.T = 9;
    for (const auto& seq : golden["ids"]) for (int32_t id : seq.get<std::vector<int32_t>>()) b.ids.push_back(id);
    b.lengths = golden["lengths"].get<std::vector<int32_t>>();
    b.labels = golden["labels"].get<std::vector<int32_t>>();
    ForwardState state(/*for_backward=*/false);
    const double loss = model.forward(b, state).ce_loss;
    testing::expect_all_close(std::vector<float>(state.logits().span().begin(), state.logits().span().end()),
                              golden["logits"].get<std::vector<double>>(), 1e-4, "bert classifier: logits");
    EXPECT_NEAR(loss, golden["loss"].get<double>(), 1e-5 * golden["loss"].get<double>());
  }
  {
    const Model model = load_model(kBert / "base");
    EXPECT_FALSE(model.config().mlm_head);
    EXPECT_NE(model.find("pooler.dense.weight"), nullptr);
    const auto golden = nlohmann::json::parse(read_file(kBert / "base" / "golden.json"));
    Batch b;
    b.B = 1, b.ids = golden["ids"].get<std::vector<int32_t>>(), b.T = static_cast<int64_t>(b.ids.size());
    const Tensor h = model.hidden_states(b);
    testing::expect_all_close(std::vector<float>(h.span().begin(), h.span().end()),
                              golden["hidden"].get<std::vector<double>>(), 1e-4, "bert base: hidden states");
    ForwardState state(/*for_backward=*/false);
    expect_error_mentions<Error>([&] { model.forward(b, state); }, {"no masked-LM head"});
  }
}

TEST(HfBert, ExportIsARoundTripBitForBit) {
  expect_round_trip(kBert / "mlm", "bert_mlm", export_hf_bert);
  expect_round_trip(kBert / "classifier", "bert_classifier", export_hf);
  expect_round_trip(kBert / "base", "bert_base", export_hf_bert, {"embeddings.position_ids"});
  const Model own = load_model(testing::kModels / "bert");  // Attend's own BERT-style encoder: no embedding norm
  expect_error_mentions<Error>([&] { export_hf_bert(own, fresh_dir("bert_export_own")); }, {"export hf-bert", "norms"});
}

TEST(HfBert, BadCheckpointsAreErrorsNamingTheCause) {
  auto edited = [](const std::string& variant, auto edit) { return edited_copy(variant, edit, kBert); };
  expect_error_mentions<Error>(
      [&] { load_model(edited("mlm", [](auto& j) { j["position_embedding_type"] = "relative_key"; })); },
      {"position_embedding_type 'relative_key'", "absolute"});
  expect_error_mentions<Error>([&] { load_model(edited("mlm", [](auto& j) { j["hidden_act"] = "silu"; })); },
                               {"hidden_act 'silu'"});
  expect_error_mentions<Error>(
      [&] { load_model(edited("classifier", [](auto& j) { j["problem_type"] = "regression"; })); },
      {"problem_type 'regression'", "single-label"});
  expect_error_mentions<Error>(
      [&] { load_model(edited("classifier", [](auto& j) { j["id2label"] = {{"0", "a"}, {"x", "b"}}; })); },
      {"id2label[\"x\"]", "class number"});
  expect_error_mentions<Error>([&] { load_model(edited("classifier", [](auto& j) { j["num_labels"] = 4; })); },
                               {"classifier.weight", "[3, 32]", "[4, 32]"});
  expect_error_mentions<Error>([&] { load_model(edited("mlm", [](auto& j) { j["type_vocab_size"] = 3; })); },
                               {"token_type_embeddings", "[2, 32]", "[3, 32]"});
}

// generation_config.json first, config.json for what it leaves out; eos_token_id one id or a list.
TEST(GenerationDefaults, GenerationConfigThenConfigAndEveryErrorNamed) {
  const GenerationDefaults llama = parse_generation_defaults(
      R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6})",
      R"({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 7})");
  EXPECT_EQ(llama.bos, 128000);
  EXPECT_EQ(llama.eos, std::vector<int32_t>({128001, 128008, 128009}));
  EXPECT_EQ(llama.pad, 7);  // from config.json
  EXPECT_FALSE(llama.decoder_start.has_value());
  const GenerationDefaults t5 = read_generation_defaults(kT5 / "v1_0");  // config.json only
  EXPECT_EQ(t5.decoder_start, 0);
  EXPECT_EQ(t5.eos, std::vector<int32_t>({1}));
  const GenerationDefaults none = parse_generation_defaults("", R"({"eos_token_id": null})");
  EXPECT_TRUE(none.eos.empty() && !none.bos && !none.pad);
  expect_error_mentions<Error>([] { parse_generation_defaults(R"({"eos_token_id": "2"})", ""); },
                               {"generation_config.json", "'eos_token_id'", "token id"});
  expect_error_mentions<Error>([] { parse_generation_defaults("", R"({"eos_token_id": [1, -2]})"); },
                               {"config.json", "'eos_token_id'[1]", "-2"});
  expect_error_mentions<Error>([] { parse_generation_defaults("", R"({"bos_token_id": 4294967296})"); },
                               {"'bos_token_id'", "4294967296"});
  expect_error_mentions<Error>([] { parse_generation_defaults("[1]", ""); }, {"generation_config.json", "object"});
  expect_error_mentions<Error>([] { parse_generation_defaults("{", ""); }, {"not valid JSON"});
}

TEST(HfShardIndex, ParsesTheWeightMapAndRefusesWhatIsNotAFileName) {
  const auto map = formats::parse_shard_index(
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})",
      "index.json");
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.at("b"), "model-2.safetensors");
  expect_error_mentions<Error>([] { formats::parse_shard_index("{", "index.json"); }, {"index.json", "not valid JSON"});
  expect_error_mentions<Error>([] { formats::parse_shard_index("{}", "index.json"); }, {"weight_map"});
  expect_error_mentions<Error>([] { formats::parse_shard_index(R"({"weight_map": {"a": 3}})", "i"); },
                               {"weight_map[\"a\"]", "number"});
  expect_error_mentions<Error>([] { formats::parse_shard_index(R"({"weight_map": {"a": "../x"}})", "i"); },
                               {"\"../x\"", "not a file name"});
  expect_error_mentions<Error>([] { formats::parse_shard_index(R"({"weight_map": {}})", "i"); }, {"names no tensor"});
}

}  // namespace
}  // namespace attend
