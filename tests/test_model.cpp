// Whole models: PyTorch golden tests of the three architectures (and MoE, LLaMA-style), a finite-difference
// check of whole-model gradients, the notes' parameter-count formulas, initialisation, padding, the model
// directory (save/load bit-exact) and the errors for bad configurations, batches and files.
#include "fixtures.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/safetensors.h>
#include <attend/model_dir.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace attend {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::expect_error_mentions;

using testing::batch_from_json;
using testing::kModels;
using testing::expect_finite_differences;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attend_test_" + name);
  fs::remove_all(dir);
  return dir;
}

// fp32 against PyTorch's fp64 on the same fp32 weights. Logits and losses are sums of O(C·d_ff) rounded
// products of O(1) values: a few float ulps each, so 2e-5 relative (with 1 as the floor of the scale).
// Gradients are compared against the largest gradient of their tensor, to 1e-4 of it: fp32 backward runs
// through two to six blocks of reductions of length ≤ 64.
constexpr double kLogitTolerance = 2e-5;
constexpr double kGradTolerance = 1e-4;

void expect_grads_match(Model& model, const fs::path& grads_file, const std::string& what) {
  const SafetensorsReader reader(grads_file);
  ASSERT_EQ(reader.tensors().size(), model.parameters().size()) << what;
  for (Parameter* p : model.parameters()) {
    const Tensor expected = reader.load(p->name);
    double scale = 1e-6;
    for (int64_t i = 0; i < expected.numel(); ++i) scale = std::max(scale, double(std::abs(expected[i])));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < expected.numel(); ++i)
      if (std::abs(double(p->grad[i]) - double(expected[i])) > kGradTolerance * scale && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0) << what << ": gradient of " << p->name << ": " << bad << " of " << expected.numel()
                      << " elements differ; first at " << first << ": got " << (first >= 0 ? p->grad[first] : 0.0f)
                      << ", PyTorch " << (first >= 0 ? expected[first] : 0.0f) << " (scale " << scale << ")";
  }
}

class ModelGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGolden, LogitsLossAndEveryGradientMatchPyTorch) {
  const fs::path dir = kModels / GetParam();
  Model model = load_model(dir);
  const json golden = json::parse(read_file(dir / "golden.json"));
  for (const json& c : golden["cases"]) {
    const std::string what = GetParam() + "/" + c["name"].get<std::string>();
    const Batch batch = batch_from_json(c["batch"]);
    model.zero_grad();
    const ForwardResult r = model.forward(batch, {.label_smoothing = c["label_smoothing"].get<float>()});
    EXPECT_TRUE(testing::close(r.loss, c["loss"].get<double>(), kLogitTolerance)) << what << ": loss " << r.loss;
    EXPECT_TRUE(testing::close(r.ce_loss, c["ce_loss"].get<double>(), kLogitTolerance)) << what;
    EXPECT_TRUE(testing::close(r.aux_loss, c["aux_loss"].get<double>(), kLogitTolerance)) << what;
    const auto shape = c["logits_shape"].get<std::vector<int64_t>>();
    EXPECT_EQ(model.logits().shape(), Shape(std::span<const int64_t>(shape))) << what;
    const std::vector<float> logits(model.logits().span().begin(), model.logits().span().end());
    testing::expect_all_close(logits, c["logits"].get<std::vector<double>>(), kLogitTolerance, what + ": logits");
    model.backward();
    expect_grads_match(model, dir / c["grads"].get<std::string>(), what);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGolden,
                         ::testing::Values("gpt", "llama", "bert", "t5", "moe", "encoder_mean"),
                         [](const auto& info) { return info.param; });

// ---- Finite differences ----------------------------------------------------------------------------

// The fixture model with ReLU replaced by GELU: a step of h must not cross ReLU's kink, where the loss has
// no derivative (the smallest |ReLU input| in the t5 fixture is 2e-4).
// `adjust` may change other options that leave the parameters as they are (dropout).
Model smooth_model(const std::string& name, const std::function<void(ModelConfig&)>& adjust = {}) {
  Model relu = load_model(kModels / name);
  ModelConfig config = relu.config();
  if (config.activation == FfnKind::ReLU) config.activation = FfnKind::GELU;
  if (adjust) adjust(config);
  Model model(config);
  auto from = relu.parameters(), to = model.parameters();
  for (size_t i = 0; i < from.size(); ++i) std::memcpy(to[i]->value.data(), from[i]->value.data(), from[i]->numel() * 4);
  return model;
}

TEST(ModelGradients, WholeModelsAgreeWithFiniteDifferences) {
  // MoE is left out: a step of h can change which experts a token picks, where the loss is not smooth.
  for (const std::string name : {"gpt", "llama", "bert", "t5", "encoder_mean"}) {
    Model model = smooth_model(name);
    const json golden = json::parse(read_file(kModels / name / "golden.json"));
    for (const json& c : golden["cases"])
      expect_finite_differences(model, batch_from_json(c["batch"]),
                                {.label_smoothing = c["label_smoothing"].get<float>()},
                                name + "/" + c["name"].get<std::string>());
  }
}

// Found by UBSan: a logits-only state keeps no per-block state, and summing the MoE balance loss read it.
// Such a forward gives the same logits and cross-entropy as one that keeps everything, and no aux loss.
TEST(ModelForwardState, ALogitsOnlyStateGivesTheSameLogitsAndNoAuxLoss) {
  const Model model = load_model(kModels / "moe");
  const json golden = json::parse(read_file(kModels / "moe" / "golden.json"));
  const Batch batch = batch_from_json(golden["cases"][0]["batch"]);
  ForwardState full, logits_only(/*for_backward=*/false);
  const ForwardResult a = model.forward(batch, full), b = model.forward(batch, logits_only);
  EXPECT_GT(a.aux_loss, 0.0);
  EXPECT_EQ(b.aux_loss, 0.0);
  EXPECT_EQ(a.ce_loss, b.ce_loss);
  EXPECT_EQ(std::vector<float>(full.logits().span().begin(), full.logits().span().end()),
            std::vector<float>(logits_only.logits().span().begin(), logits_only.logits().span().end()));
  EXPECT_TRUE(model.moe_stats(logits_only).empty());
}

// GeGLU (Gemma's and T5 v1.1's gated GELU): the LLaMA-style fixture with its SwiGLU gate swapped for
// GELU_tanh, every gradient against finite differences, and not the SwiGLU model's loss.
TEST(ModelGradients, GegluAgreesWithFiniteDifferences) {
  Model swiglu = smooth_model("llama");
  Model geglu = smooth_model("llama", [](ModelConfig& c) { c.activation = FfnKind::GeGLU; });
  const json golden = json::parse(read_file(kModels / "llama" / "golden.json"));
  const Batch batch = batch_from_json(golden["cases"][0]["batch"]);
  EXPECT_NE(geglu.forward(batch).loss, swiglu.forward(batch).loss);
  expect_finite_differences(geglu, batch, {}, "llama with geglu");
}

// Qwen2's q/k/v biases and Qwen3's per-head q/k norms with a head_dim of its own (the Hugging Face fixtures of
// tests/data/hf-llama): every gradient, the norms' gains and the biases included, against finite differences.
TEST(ModelGradients, QwenBiasesAndHeadNormsAgreeWithFiniteDifferences) {
  for (const std::string name : {"qwen2", "qwen3"}) {
    Model model = load_model(fs::path(ATTEND_TEST_DATA) / "hf-llama" / name);
    const auto prompt = json::parse(read_file(fs::path(ATTEND_TEST_DATA) / "hf-llama" / name / "golden.json"))["prompt_ids"]
                            .get<std::vector<int32_t>>();
    Batch b;
    b.B = 2, b.T = 5;
    b.ids.assign(prompt.begin(), prompt.begin() + 10);
    b.targets.assign(prompt.begin() + 1, prompt.begin() + 11);
    b.lengths = {5, 3};
    expect_finite_differences(model, b, {}, name);
  }
}

// Gemma 3 (tests/data/hf-gemma3/pattern): norms of 1 + γ, four a block (the post norms on each branch's output),
// per-head q/k norms, scaled embeddings and scores, GeGLU, and sliding windows of 4 in three of four layers over
// sequences of 7 (the windows cut): every gradient against finite differences.
TEST(ModelGradients, GemmaSandwichNormsAndWindowsAgreeWithFiniteDifferences) {
  Model model = load_model(fs::path(ATTEND_TEST_DATA) / "hf-gemma3" / "pattern");
  ASSERT_EQ(model.config().sliding_window, 4);
  const auto prompt = json::parse(read_file(fs::path(ATTEND_TEST_DATA) / "hf-gemma3" / "pattern" / "golden.json"))
                          ["prompt_ids"].get<std::vector<int32_t>>();
  Batch b;
  b.B = 2, b.T = 7;
  b.ids.assign(prompt.begin(), prompt.begin() + 14);
  b.targets.assign(prompt.begin() + 1, prompt.begin() + 14);
  b.targets.push_back(3);
  b.lengths = {7, 6};
  expect_finite_differences(model, b, {}, "gemma3");
}

// T5 as Hugging Face has it (tests/data/hf-t5/v1_1): the relative position table of block 0 added in every block
// of its stack (its gradient the sum over the blocks), unscaled scores, gated GELU, cross-attention; every
// gradient against finite differences. v1_0 too, with its tied head scaled by d_model^−½ (ReLU replaced by GELU,
// whose loss has no kinks).
TEST(ModelGradients, HuggingFaceT5SharedBiasAndHeadScaleAgreeWithFiniteDifferences) {
  for (const std::string name : {"v1_1", "v1_0"}) {
    const fs::path dir = fs::path(ATTEND_TEST_DATA) / "hf-t5" / name;
    Model loaded = load_model(dir);
    ModelConfig config = loaded.config();
    config.activation = config.activation == FfnKind::ReLU ? FfnKind::GELU : config.activation;
    config.embedding_dropout = config.attention_dropout = config.residual_dropout = config.ffn_dropout = 0.0f;
    Model model(config);
    auto from = loaded.parameters(), to = model.parameters();
    ASSERT_EQ(from.size(), to.size());
    for (size_t i = 0; i < from.size(); ++i) std::memcpy(to[i]->value.data(), from[i]->value.data(), from[i]->numel() * 4);
    const json golden = json::parse(read_file(dir / "golden.json"));
    Batch b;
    b.B = 1, b.src_T = 12, b.T = 10;
    b.src_ids = golden["src_ids"].get<std::vector<int32_t>>();
    b.ids = golden["decoder_ids"].get<std::vector<int32_t>>();
    b.targets = golden["labels"].get<std::vector<int32_t>>();
    // Unscaled scores make this loss sharply curved along a direction through every weight: at a step of 1e-2
    // the 5-point stencil's truncation error reached 3%; at 2.5e-3 it is far inside the tolerance.
    expect_finite_differences(model, b, {}, "hf t5 " + name, 2.5e-3);
  }
}

// BERT as Hugging Face has it (tests/data/hf-bert): token type embeddings and a LayerNorm over the summed
// embeddings, post-LN blocks; the masked-LM head over a sentence pair, and the classifier behind tanh(pooler)
// over a padded batch: every gradient against finite differences.
TEST(ModelGradients, HuggingFaceBertTypesEmbeddingNormAndPoolerAgreeWithFiniteDifferences) {
  const fs::path dir = fs::path(ATTEND_TEST_DATA) / "hf-bert";
  auto without_dropout = [](const fs::path& d) {
    Model loaded = load_model(d);
    ModelConfig config = loaded.config();
    config.embedding_dropout = config.attention_dropout = config.residual_dropout = 0.0f;
    Model model(config);
    auto from = loaded.parameters(), to = model.parameters();
    for (size_t i = 0; i < from.size(); ++i) std::memcpy(to[i]->value.data(), from[i]->value.data(), from[i]->numel() * 4);
    return model;
  };
  Model mlm = without_dropout(dir / "mlm");
  const json m = json::parse(read_file(dir / "mlm" / "golden.json"));
  Batch b;
  b.B = 1, b.ids = m["ids"].get<std::vector<int32_t>>(), b.T = static_cast<int64_t>(b.ids.size());
  b.token_types = m["token_types"].get<std::vector<int32_t>>();
  b.targets = m["labels"].get<std::vector<int32_t>>();
  expect_finite_differences(mlm, b, {}, "hf bert mlm");
  Model classifier = without_dropout(dir / "classifier");
  const json c = json::parse(read_file(dir / "classifier" / "golden.json"));
  Batch k;
  k.B = 2, k.T = 9;
  for (const auto& seq : c["ids"]) for (int32_t id : seq.get<std::vector<int32_t>>()) k.ids.push_back(id);
  k.lengths = c["lengths"].get<std::vector<int32_t>>();
  k.labels = c["labels"].get<std::vector<int32_t>>();
  k.token_types = {0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0};
  expect_finite_differences(classifier, k, {}, "hf bert classifier");
}

// Dropout on the embeddings, attention probabilities, residual branches and FFN hidden units. Its masks
// are a pure function of (seed, offset), so a training forward with a fixed seed is a deterministic function
// of the weights and finite differences apply; another seed drops other units.
TEST(ModelGradients, DropoutEverywhereIsReproducibleAndDifferentiated) {
  for (const std::string name : {"gpt", "t5"}) {
    Model model = smooth_model(name, [](ModelConfig& c) {
      c.embedding_dropout = c.attention_dropout = c.residual_dropout = c.ffn_dropout = 0.2f;
    });
    const json golden = json::parse(read_file(kModels / name / "golden.json"));
    const Batch batch = batch_from_json(golden["cases"][0]["batch"]);
    const double eval = model.forward(batch).loss;
    const double a = model.forward(batch, {.training = true, .seed = 5}).loss;
    EXPECT_EQ(model.forward(batch, {.training = true, .seed = 5}).loss, a) << name;
    EXPECT_NE(model.forward(batch, {.training = true, .seed = 6}).loss, a) << name;
    EXPECT_NE(a, eval) << name;
    EXPECT_EQ(model.forward(batch).loss, eval) << name << ": evaluation is deterministic and dropout-free";
    expect_finite_differences(model, batch, {.training = true, .seed = 5}, name + " with dropout");
  }
}

// ---- Padding ---------------------------------------------------------------------------------------

TEST(ModelPadding, PaddingChangesNothingAndGetsNoGradient) {
  Model model = load_model(kModels / "gpt");
  const json golden = json::parse(read_file(kModels / "gpt" / "golden.json"));
  Batch batch = batch_from_json(golden["cases"][0]["batch"]);
  model.zero_grad();
  const double loss = model.forward(batch).loss;
  const std::vector<float> logits(model.logits().span().begin(), model.logits().span().end());
  model.backward();
  // The second sequence has 4 real tokens; its padding (id 0) must not receive any gradient through the
  // position table rows 4.. of that sequence alone. Change the padding's ids: nothing real may change.
  for (int64_t t = batch.lengths[1]; t < batch.T; ++t) batch.ids[batch.T + t] = 30;
  model.zero_grad();
  EXPECT_EQ(model.forward(batch).loss, loss);
  for (int64_t b = 0; b < batch.B; ++b)
    for (int64_t t = 0; t < batch.lengths[b]; ++t)
      for (int64_t v = 0; v < 37; ++v) {
        const int64_t i = (b * batch.T + t) * 37 + v;
        ASSERT_EQ(model.logits()[i], logits[i]) << "logit of a real position changed with the padding";
      }
  // Padding gets no gradient: in the untied llama fixture, id 0 appears only at padding positions, so
  // its embedding row (which only the input side uses) must have an exactly zero gradient.
  Model llama = load_model(kModels / "llama");
  const Batch lb = batch_from_json(json::parse(read_file(kModels / "llama" / "golden.json"))["cases"][0]["batch"]);
  for (int64_t b = 0; b < lb.B; ++b)
    for (int64_t t = 0; t < lb.T; ++t) ASSERT_EQ(lb.ids[b * lb.T + t] == 0, t >= lb.lengths[b]) << "id 0 is padding";
  llama.zero_grad();
  llama.forward(lb);
  llama.backward();
  const Parameter* tokens = llama.find("embed.tokens.weight");
  for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(tokens->grad[c], 0.0f) << "padding got a gradient";
  EXPECT_NE(tokens->grad[lb.ids[0] * 16], 0.0f);
}

// ---- Parameter counts (002 §3.3, 001 §11) ----------------------------------------------------------

ModelConfig tiny(Architecture a) {
  ModelConfig c;
  c.architecture = a;
  c.vocab_size = 100;
  c.d_model = 64;
  c.n_layers = 3;
  c.n_heads = 4;
  c.max_seq_len = 32;
  c.bias = false;
  return c;
}

TEST(ModelParameters, CountsFollowTheNotesFormulas) {
  const int64_t d = 64, V = 100, L = 3, T = 32;
  {  // GPT without biases: 4d² attention and 8d² FFN per block; LayerNorms 2d each, two per block and a final one.
    Model m(tiny(Architecture::Decoder));
    const ParameterCount n = m.count();
    EXPECT_EQ(n.attention, L * 4 * d * d);
    EXPECT_EQ(n.ffn, L * 8 * d * d);
    EXPECT_EQ(n.norms, (2 * L + 1) * 2 * d);
    EXPECT_EQ(n.embeddings, V * d + T * d);
    EXPECT_EQ(n.heads, 0);  // tied
    EXPECT_EQ(n.total(), 12 * L * d * d + V * d + T * d + (2 * L + 1) * 2 * d);
  }
  {  // GQA (2 of 4 heads): W_K and W_V shrink to d·(d/2); SwiGLU: three d × d_ff matrices; RMSNorm: d each; untied.
    ModelConfig c = tiny(Architecture::Decoder);
    c.n_kv_heads = 2;
    c.activation = FfnKind::SwiGLU;
    c.norm = NormKind::RMSNorm;
    c.position = PositionKind::RoPE;
    c.tie_embeddings = false;
    Model m(c);
    const int64_t d_ff = c.ffn_hidden();
    EXPECT_EQ(d_ff, 192);  // ⌈8/3·64⌉ = 171, rounded up to a multiple of 32
    EXPECT_EQ(m.count().attention, L * (2 * d * d + 2 * d * (d / 2)));
    EXPECT_EQ(m.count().ffn, L * 3 * d * d_ff);
    EXPECT_EQ(m.count().norms, (2 * L + 1) * d);
    EXPECT_EQ(m.count().embeddings, V * d);
    EXPECT_EQ(m.count().heads, V * d);
  }
  {  // Biases add 4d per attention and 5d (d_ff + d) per FFN.
    ModelConfig c = tiny(Architecture::Decoder);
    c.bias = true;
    Model m(c);
    EXPECT_EQ(m.count().attention, L * (4 * d * d + 4 * d));
    EXPECT_EQ(m.count().ffn, L * (8 * d * d + 5 * d));
  }
  {  // MoE: E experts of 8d² and a d × E router in every second block.
    ModelConfig c = tiny(Architecture::Decoder);
    c.n_experts = 4;
    c.moe_every = 2;
    Model m(c);
    EXPECT_EQ(m.count().ffn, 2 * 8 * d * d + 1 * (4 * 8 * d * d + 4 * d));
  }
  {  // Encoder-decoder: the decoder's blocks add cross-attention (4d²) and a third norm.
    ModelConfig c = tiny(Architecture::EncoderDecoder);
    c.n_decoder_layers = 2;
    c.position = PositionKind::None;
    Model m(c);
    EXPECT_EQ(m.count().attention, L * 4 * d * d + 2 * 8 * d * d);
    EXPECT_EQ(m.count().norms, ((2 * L + 1) + (3 * 2 + 1)) * 2 * d);
  }
  {  // BERT: MLM head d² + d + 2d + V, classifier 3d + 3.
    ModelConfig c = tiny(Architecture::Encoder);
    c.n_classes = 3;
    Model m(c);
    EXPECT_EQ(m.count().heads, d * d + d + 2 * d + V + 3 * d + 3);
  }
}

TEST(ModelParameters, Gpt2SmallHasItsPublishedCount) {
  // GPT-2 124M: 124,439,808 parameters (Radford et al.; Hugging Face's gpt2), counted from the config alone.
  ModelConfig c;
  c.vocab_size = 50257, c.d_model = 768, c.n_layers = 12, c.n_heads = 12, c.max_seq_len = 1024;
  c.activation = FfnKind::GELUTanh;
  const int64_t d = 768, L = 12;
  const int64_t per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d;
  EXPECT_EQ(50257 * d + 1024 * d + L * per_block + 2 * d, 124439808);
  // The built model agrees (a smaller vocabulary and context keep the test fast; the blocks are full size).
  c.vocab_size = 10, c.max_seq_len = 8, c.n_layers = 1;
  Model m(c);
  EXPECT_EQ(m.count().total(), 10 * d + 8 * d + per_block + 2 * d);
}

// ---- Initialisation (004 §8.1) ---------------------------------------------------------------------

double stddev(const Tensor& t, int64_t begin = 0, int64_t end = -1) {
  if (end < 0) end = t.numel();
  double s = 0.0, s2 = 0.0;
  for (int64_t i = begin; i < end; ++i) s += t[i], s2 += double(t[i]) * t[i];
  const double n = double(end - begin), mean = s / n;
  return std::sqrt(s2 / n - mean * mean);
}

TEST(ModelInit, Gpt2XavierAndQkScaleHaveTheirVariances) {
  ModelConfig c = tiny(Architecture::Decoder);
  c.d_model = 128, c.n_layers = 8, c.bias = true, c.init_qk_scale = 0.5;
  Model m(c);
  const double n = 1.0 / std::sqrt(2.0 * 8);
  const Tensor& qkv = m.find("decoder.layers.0.attn.qkv.weight")->value;  // (3·128, 128): q, k rows scaled
  EXPECT_NEAR(stddev(qkv, 0, 256 * 128), 0.02 * 0.5, 0.0005);
  EXPECT_NEAR(stddev(qkv, 256 * 128, 384 * 128), 0.02, 0.0008);
  EXPECT_NEAR(stddev(m.find("decoder.layers.3.attn.o.weight")->value), 0.02 * n, 0.0004);
  EXPECT_NEAR(stddev(m.find("decoder.layers.3.ffn.down.weight")->value), 0.02 * n, 0.0003);
  EXPECT_NEAR(stddev(m.find("decoder.layers.3.ffn.up.weight")->value), 0.02, 0.0004);
  EXPECT_NEAR(stddev(m.find("embed.tokens.weight")->value), 0.02, 0.001);
  EXPECT_EQ(m.find("decoder.layers.0.attn_norm.weight")->value[5], 1.0f);
  EXPECT_EQ(m.find("decoder.layers.0.attn.qkv.bias")->value[5], 0.0f);
  // Xavier: N(0, 2/(fan_in + fan_out)); the FFN's up matrix is (512, 128).
  c.init = InitScheme::Xavier;
  Model x(c);
  EXPECT_NEAR(stddev(x.find("decoder.layers.2.ffn.up.weight")->value), std::sqrt(2.0 / (512 + 128)), 0.002);
  // Seeded: the same seed gives the same weights, another seed others.
  Model again(c);
  EXPECT_EQ(std::memcmp(again.find("embed.tokens.weight")->value.data(), x.find("embed.tokens.weight")->value.data(),
                        100 * 128 * 4),
            0);
  c.seed = 1;
  Model other(c);
  EXPECT_NE(other.find("embed.tokens.weight")->value[0], x.find("embed.tokens.weight")->value[0]);
}

// Every weight's role says what the tensor names used to say (the rules below are the name matching that
// initialisation, counting, weight decay, mixed precision and packing did before roles), in models that
// have every kind of weight; and renaming every tensor changes no initial value.
TEST(ModelRoles, SayWhatTheNamesSaidAndRenamingChangesNothing) {
  std::vector<ModelConfig> configs;
  ModelConfig gpt = tiny(Architecture::Decoder);
  gpt.bias = true, gpt.tie_embeddings = false;
  configs.push_back(gpt);
  ModelConfig llama = tiny(Architecture::Decoder);
  llama.norm = NormKind::RMSNorm, llama.activation = FfnKind::SwiGLU, llama.position = PositionKind::RoPE;
  llama.n_kv_heads = 2, llama.n_experts = 4, llama.moe_every = 2;
  configs.push_back(llama);
  ModelConfig bert = tiny(Architecture::Encoder);
  bert.bias = true, bert.n_classes = 3;
  configs.push_back(bert);
  ModelConfig t5 = tiny(Architecture::EncoderDecoder);
  t5.position = PositionKind::T5, t5.norm = NormKind::RMSNorm, t5.n_decoder_layers = 2;
  configs.push_back(t5);
  auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  int checked = 0;
  for (const ModelConfig& c : configs) {
    Model model(c);
    for (const Parameter* p : model.parameters()) {
      const std::string& n = p->name;
      const Role r = p->role;
      SCOPED_TRACE(n + " (" + role_name(r) + ")");
      const bool bias = n.ends_with(".bias") || n == "mlm.bias";
      EXPECT_EQ(is_bias(r), bias);
      EXPECT_EQ(is_norm_gain(r), !bias && has(n, "norm."));
      const Part part = n.starts_with("embed.") ? Part::Embeddings
                        : n.starts_with("lm_head") || n.starts_with("mlm.") || n.starts_with("classifier") ? Part::Heads
                        : has(n, "norm.") ? Part::Norms
                        : has(n, ".attn.") || has(n, ".cross_attn.") ? Part::Attention
                                                                     : Part::Ffn;
      EXPECT_EQ(part_of(r), part);
      EXPECT_EQ(is_projection(r), !bias && !has(n, "norm.") && p->value.rank() == 2 && !n.starts_with("embed.") &&
                                      !n.ends_with("relative_attention_bias"));
      EXPECT_EQ(r == Role::AttentionOutput || r == Role::FfnOut, n.ends_with("attn.o.weight") || n.ends_with("down.weight"));
      EXPECT_EQ(r == Role::Router, n.ends_with(".router.weight"));
      EXPECT_EQ(r == Role::PositionTable, n == "embed.positions.weight");
      EXPECT_EQ(r == Role::AttentionQkv, n.ends_with(".attn.qkv.weight"));
      EXPECT_EQ(r == Role::AttentionQuery, n.ends_with(".cross_attn.q.weight"));
      EXPECT_EQ(r == Role::AttentionKeyValue, n.ends_with(".cross_attn.kv.weight"));
      if (p->stack_blocks > 0)
        EXPECT_EQ(p->stack_blocks, n.starts_with("decoder.") ? c.decoder_layers() : c.n_layers);
      else
        EXPECT_FALSE(n.starts_with("encoder.") || n.starts_with("decoder."));
      ++checked;
    }
    Model renamed(c);
    int i = 0;
    for (Parameter* p : renamed.parameters()) p->name = fmt::format("t{}", i++);
    renamed.initialize(c.seed);
    const auto before = model.parameters(), after = renamed.parameters();
    for (size_t k = 0; k < before.size(); ++k)
      EXPECT_EQ(std::memcmp(before[k]->value.data(), after[k]->value.data(), 4 * size_t(before[k]->numel())), 0)
          << before[k]->name;
    EXPECT_EQ(renamed.count().total(), model.count().total());
    EXPECT_EQ(renamed.count().heads, model.count().heads);
  }
  EXPECT_GT(checked, 100);
}

// Parameters and gradients live in one buffer each: every parameter's value and grad are views into them,
// in order, one right after the other (model.safetensors' layout); the gradients exist only once something
// asks for them; zero_grad clears the one buffer, backward writes into it, and moving the model keeps the views.
TEST(ModelBuffers, EveryParameterIsASliceOfOneBuffer) {
  ModelConfig c = tiny(Architecture::EncoderDecoder);
  c.bias = true;
  Model moved(c);
  Model model = std::move(moved);
  for (const Parameter* p : model.parameters()) EXPECT_EQ(p->grad.numel(), 0) << p->name << ": no gradient yet";
  const std::span<float> values = model.parameter_buffer(), grads = model.gradient_buffer();
  ASSERT_EQ(values.size(), grads.size());
  int64_t end = 0;
  for (Parameter* p : model.parameters()) {
    EXPECT_EQ(p->value.data() - values.data(), end) << p->name << " does not follow the one before";
    EXPECT_EQ(p->grad.data() - grads.data(), end) << p->name;
    end += p->numel();
  }
  EXPECT_EQ(end, int64_t(values.size()));
  EXPECT_EQ(end, model.count().total());
  Batch b;
  b.B = 2, b.T = 5, b.src_T = 6;
  for (int i = 0; i < 10; ++i) b.ids.push_back(i + 1), b.targets.push_back(i + 2);
  for (int i = 0; i < 12; ++i) b.src_ids.push_back(3 * i % 50);
  model.forward(b);
  model.backward();
  double by_parameter = 0.0, whole = 0.0;
  for (const Parameter* p : model.parameters())
    for (float g : p->grad.span()) by_parameter += double(g) * g;
  for (float g : grads) whole += double(g) * g;
  EXPECT_GT(whole, 0.0);
  EXPECT_NEAR(whole, by_parameter, 1e-12 * whole);
  model.zero_grad();
  EXPECT_TRUE(std::all_of(grads.begin(), grads.end(), [](float g) { return g == 0.0f; }));
}

// The mapping of this process that holds `address` ("/path" or "" for anonymous memory), from /proc/self/maps.
std::string mapping_of(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) != 2 || at < begin || at >= end) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? std::string() : line.substr(slash);
  }
  return "not mapped";
}

// Loading an f32 model directory maps model.safetensors as the parameter buffer: no weight is copied (the
// values lie in the file's mapping), the numbers are the saved ones, and writing them (a training step)
// changes the process's copy of the page, never the file. A bf16 file cannot be the fp32 buffer: it is read
// and widened into the model's own memory.
TEST(ModelDirectory, AnF32FileIsMappedNotCopiedAndWritesNeverReachIt) {
  Model model = load_model(kModels / "gpt");
  const fs::path dir = temp_dir("mapped");
  save_model(model, dir);
  const fs::path file = fs::canonical(dir / "model.safetensors");
  std::vector<float> saved(model.parameter_buffer().begin(), model.parameter_buffer().end());
  {
    Model mapped = load_model(dir);
    EXPECT_EQ(mapping_of(mapped.parameter_buffer().data()), file.string());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mapped.parameter_buffer().data()) % 64, 0u);  // the padded header
    EXPECT_EQ(std::memcmp(mapped.parameter_buffer().data(), saved.data(), saved.size() * 4), 0);
    for (const Parameter* p : mapped.parameters()) EXPECT_EQ(p->grad.numel(), 0) << p->name << ": a loaded model runs without gradients";
    for (float& v : mapped.parameter_buffer()) v += 1.0f;  // as an optimiser step would
    EXPECT_EQ(mapped.parameter_buffer()[0], saved[0] + 1.0f);
  }
  Model again = load_model(dir);
  EXPECT_EQ(std::memcmp(again.parameter_buffer().data(), saved.data(), saved.size() * 4), 0) << "the file changed";

  save_model(model, dir, nullptr, WeightType::BF16);
  Model widened = load_model(dir);
  EXPECT_EQ(mapping_of(widened.parameter_buffer().data()), "") << "a bf16 file is widened into the model's memory";
  fs::remove_all(dir);
}

// ---- The model directory ---------------------------------------------------------------------------

TEST(ModelDirectory, SaveThenLoadIsBitExact) {
  for (const std::string name : {"t5", "moe", "bert"}) {
    Model model = load_model(kModels / name);
    const fs::path dir = temp_dir("save_" + name);
    save_model(model, dir);
    Model again = load_model(dir);
    EXPECT_EQ(again.config().to_json(), model.config().to_json());
    auto a = model.parameters(), b = again.parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]->name, b[i]->name);
      EXPECT_EQ(std::memcmp(a[i]->value.data(), b[i]->value.data(), a[i]->numel() * 4), 0) << a[i]->name;
    }
    fs::remove_all(dir);
  }
}

TEST(ModelDirectory, ReadsBf16AndFp16Weights) {
  Model model = load_model(kModels / "gpt");
  const fs::path dir = temp_dir("bf16");
  save_model(model, dir, nullptr, WeightType::BF16);
  EXPECT_EQ(SafetensorsReader(dir / "model.safetensors").tensors()[0].dtype, DType::BF16);
  Model bf16 = load_model(dir);
  const Tensor& w = bf16.find("decoder.layers.1.ffn.up.weight")->value;
  const Tensor& w0 = model.find("decoder.layers.1.ffn.up.weight")->value;
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_NEAR(w[i], w0[i], std::abs(w0[i]) * 0x1p-8f) << i;
  save_model(model, dir, nullptr, WeightType::F16);  // fp16 keeps 10 mantissa bits
  Model fp16 = load_model(dir);
  const Tensor& h = fp16.find("decoder.layers.1.ffn.up.weight")->value;
  for (int64_t i = 0; i < h.numel(); ++i) ASSERT_NEAR(h[i], w0[i], std::abs(w0[i]) * 0x1p-11f + 1e-7f) << i;
  fs::remove_all(dir);
}

TEST(ModelDirectory, MismatchedWeightsAreErrorsNamingTheTensor) {
  Model model = load_model(kModels / "gpt");
  const fs::path dir = temp_dir("mismatch");
  save_model(model, dir);
  const std::string config = read_file(dir / "config.json");
  // A config that implies other shapes.
  std::string wider = config;
  wider.replace(wider.find("\"d_ff\": 0"), 9, "\"d_ff\": 32");
  write_file_atomic(dir / "config.json", wider);
  expect_error_mentions<Error>([&] { load_model(dir); },
                               {"model.safetensors", "decoder.layers.0.ffn.up.weight", "[64, 16]", "implies [32, 16]"});
  // A tensor the config does not have, and a missing one.
  write_file_atomic(dir / "config.json", config);
  std::vector<NamedTensor> tensors;
  Tensor extra({3});
  for (const Parameter* p : model.parameters())
    if (p->name != "decoder.norm.bias") tensors.push_back({p->name, &p->value});
  write_safetensors(dir / "model.safetensors", tensors);
  expect_error_mentions<Error>([&] { load_model(dir); }, {"no tensor 'decoder.norm.bias'", "[16]"});
  tensors.push_back({"decoder.norm.bias", &model.find("decoder.norm.bias")->value});
  tensors.push_back({"h.0.attn.masked_bias", &extra});
  write_safetensors(dir / "model.safetensors", tensors);
  expect_error_mentions<Error>([&] { load_model(dir); }, {"unexpected tensor 'h.0.attn.masked_bias'"});
  // Missing files and a truncated weights file.
  fs::remove(dir / "model.safetensors");
  expect_error_mentions<Error>([&] { load_model(dir); }, {"missing model.safetensors"});
  const std::string bytes = read_file(kModels / "gpt" / "model.safetensors");
  write_file_atomic(dir / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_error_mentions<Error>([&] { load_model(dir); }, {"model.safetensors", "truncated"});
  expect_error_mentions<Error>([&] { load_model(dir / "nowhere"); }, {"not a model directory"});
  // A training run's directory (its model is in checkpoint/) is named as such.
  const fs::path run = dir / "run";
  fs::create_directories(run / "checkpoint");
  write_file_atomic(run / "checkpoint" / "config.json", read_file(kModels / "gpt" / "config.json"));
  expect_error_mentions<Error>([&] { load_model(run); }, {"training run's directory", "checkpoint"});
  fs::remove_all(dir);
}

// ---- Configuration errors --------------------------------------------------------------------------

TEST(ModelConfigErrors, NameTheFieldAndWhatWasExpected) {
  const std::string good = ModelConfig{}.to_json();
  EXPECT_EQ(ModelConfig::from_json(good).to_json(), good);
  auto with = [&](const std::string& key, const std::string& value) {
    json j = json::parse(good);
    j[key] = json::parse(value);
    return j.dump();
  };
  struct Case {
    std::string text;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {with("d_modle", "768"), {"run.json", "unknown option 'd_modle'"}},
      {with("architecture", "\"gpt\""), {"'architecture'", "'gpt'", "decoder, encoder, encoder-decoder"}},
      {with("d_model", "\"768\""), {"'d_model'", "expected an integer"}},
      {with("bias", "1"), {"'bias'", "expected true or false"}},
      {with("d_model", "100"), {"d_model 100 is not divisible by n_heads 8"}},
      {with("n_kv_heads", "3"), {"n_heads 8 is not a multiple of n_kv_heads 3"}},
      {with("norm_placement", "\"middle\""), {"'norm_placement'", "\"middle\", expected \"pre\" or \"post\""}},
      {with("position", "\"rotary\""), {"'position'", "learned, sinusoidal, rope, alibi, t5"}},
      {with("n_experts", "4") + "", {}},  // valid: a control
      {with("residual_dropout", "1.5"), {"residual_dropout must be in [0, 1)"}},
      {with("n_classes", "2"), {"n_classes applies to encoder models"}},
      {"[1, 2]", {"expected a JSON object"}},
      {"{\"d_model\": ", {"not valid JSON"}},
      {"{\"vocab_size\": 31e308}", {"not valid JSON", "number overflow"}},  // found by fuzz/fuzz_model_config
      // Found by fuzz/fuzz_model_config's long run: the default d_ff (4·d_model) overflowed int64 (UBSan).
      {"{\"d_model\": 4846744073709551616}", {"d_model = 4846744073709551616 is beyond any model"}},
      {with("vocab_size", "2147483648"), {"vocab_size = 2147483648", "at most 2147483647"}},
  };
  for (const Case& c : cases) {
    if (c.mentions.empty()) {
      EXPECT_NO_THROW(ModelConfig::from_json(c.text, "run.json"));
      continue;
    }
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back("run.json");
    expect_error_mentions<Error>([&] { ModelConfig::from_json(c.text, "run.json"); }, mentions);
  }
  json moe = json::parse(with("n_experts", "4"));
  moe["moe_top_k"] = 5;
  expect_error_mentions<Error>([&] { ModelConfig::from_json(moe.dump()); }, {"moe_top_k must be in [1, n_experts = 4]"});
  ModelConfig c;
  c.set("norm", "rmsnorm");
  c.set("d_model", "768");
  EXPECT_EQ(c.norm, NormKind::RMSNorm);
  EXPECT_EQ(c.d_model, 768);
  expect_error_mentions<Error>([&] { c.set("d_model", "big"); }, {"'d_model'", "expected an integer"});
  expect_error_mentions<Error>([&] { c.set("dmodel", "1"); }, {"unknown option 'dmodel'"});
}

TEST(ModelBatchErrors, NameTheFieldAndPosition) {
  Model model = load_model(kModels / "gpt");
  Batch b;
  b.B = 1, b.T = 3, b.ids = {1, 2, 99};
  expect_error_mentions<Error>([&] { model.forward(b); }, {"ids[0][2] = 99", "[0, 37)"});
  b.ids = {1, 2};
  expect_error_mentions<Error>([&] { model.forward(b); }, {"ids has 2 ids", "B·T"});
  b.ids = {1, 2, 3}, b.lengths = {4};
  expect_error_mentions<Error>([&] { model.forward(b); }, {"lengths[0] = 4", "[1, 3]"});
  b.lengths = {}, b.targets = {1, 2, 40};
  expect_error_mentions<Error>([&] { model.forward(b); }, {"targets[0][2] = 40"});
  b.targets = {}, b.labels = {1};
  expect_error_mentions<Error>([&] { model.forward(b); }, {"no classification head"});
  Batch long_batch;
  long_batch.B = 1, long_batch.T = 17, long_batch.ids.assign(17, 1);
  expect_error_mentions<Error>([&] { model.forward(long_batch); }, {"17 tokens", "max_seq_len 16"});
  Batch no_targets;
  no_targets.B = 1, no_targets.T = 2, no_targets.ids = {1, 2};
  model.forward(no_targets);
  expect_error_mentions<Error>([&] { model.backward(); }, {"no loss"});
}

TEST(ModelMoE, ReportsTokensPerExpertAndRefusals) {
  Model model = load_model(kModels / "moe");
  const json golden = json::parse(read_file(kModels / "moe" / "golden.json"));
  model.forward(batch_from_json(golden["cases"][0]["batch"]));
  const auto stats = model.moe_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].block, "decoder.layers.0.ffn");
  int64_t refused = 0;
  for (const auto& s : stats) {
    int64_t taken = 0;
    for (int64_t n : s.tokens_per_expert) {
      EXPECT_LE(n, 6);  // capacity ⌈1.0 · 11 tokens · 2 / 4⌉ = 6
      taken += n;
    }
    EXPECT_EQ(taken + s.refused, 11 * 2);  // 11 real tokens, 2 choices each
    refused += s.refused;
  }
  EXPECT_EQ(refused, 5);  // as the PyTorch fixture script counted
}

}  // namespace
}  // namespace attend

namespace attend {
namespace {

// Frozen parameters (LoRA's base weights) keep no gradient and backward computes none for them; every other
// gradient is the one of the unfrozen model, bit for bit (the same sums: skipping a weight's own gradient
// changes nothing that flows through it). The gradient buffer holds the trainable ones alone, in order.
TEST(ModelGradients, FrozenParametersKeepNoGradientAndLeaveTheOthersExact) {
  for (const std::string name : {"gpt", "llama", "bert", "t5", "moe"}) {
    SCOPED_TRACE(name);
    Model full = smooth_model(name), part = smooth_model(name);
    const json golden = json::parse(read_file(kModels / name / "golden.json"));
    const Batch batch = batch_from_json(golden["cases"][0]["batch"]);
    // Freeze every other parameter, the token embedding and every norm gain among them.
    int64_t index = 0;
    part.freeze([&](const Parameter& p) {
      return index++ % 2 == 0 || p.role == Role::TokenEmbedding || is_norm_gain(p.role);
    });
    full.zero_grad();
    part.zero_grad();
    full.forward(batch);
    full.backward();
    part.forward(batch);
    part.backward();
    int64_t trainable = 0;
    const std::vector<Parameter*> a = full.parameters(), b = part.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      if (b[i]->frozen) {
        EXPECT_EQ(b[i]->grad.numel(), 0) << b[i]->name;
        continue;
      }
      trainable += b[i]->numel();
      ASSERT_EQ(b[i]->grad.data(), part.gradient_buffer().data() + (trainable - b[i]->numel())) << b[i]->name;
      for (int64_t k = 0; k < b[i]->numel(); ++k) ASSERT_EQ(b[i]->grad[k], a[i]->grad[k]) << b[i]->name << " at " << k;
    }
    EXPECT_EQ(static_cast<int64_t>(part.gradient_buffer().size()), trainable);
    EXPECT_EQ(part.trainable_parameters().size(), static_cast<size_t>(std::count_if(
        b.begin(), b.end(), [](const Parameter* p) { return !p->frozen; })));
    // Unfreezing gives every parameter its gradient again.
    part.freeze([](const Parameter&) { return false; });
    EXPECT_EQ(part.gradient_buffer().size(), full.gradient_buffer().size());
  }
}

}  // namespace
}  // namespace attend
