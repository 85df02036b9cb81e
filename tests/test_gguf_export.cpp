// Writing GGUF files (export_gguf) and llama.cpp's quantization schemes. A file written here and read back is the
// model it was written from: bit for bit in F32, rounded in F16/BF16, each quantized matrix the blocks
// quantize_row gives its rows (qwen2's Q and K rows permuted to Hugging Face's halves and back). The q4_k_m and
// q5_k_m mixes give each tensor llama.cpp's type. (llama.cpp itself was run on the files by hand: see
// docs/FORMATS.md.)
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "kernels/convert.h"
#include "kernels/quant.h"
#include "nn/layers.h"
#include "tokenize/sentencepiece.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/generate.h>
#include <attend/model_dir.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include <attend/io.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

namespace attend {
namespace {

namespace fs = std::filesystem;

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("attend_test_export_" + name + ".gguf");
}

ModelConfig gpt2_like() {
  ModelConfig c;
  c.architecture = Architecture::Decoder, c.vocab_size = 300, c.d_model = 64, c.n_layers = 2, c.n_heads = 4;
  c.max_seq_len = 32, c.activation = FfnKind::GELUTanh;  // d_ff left to its default, 4 · d_model
  return c;
}

ModelConfig llama_like(int64_t layers = 2, int64_t d_model = 256) {
  ModelConfig c;
  c.architecture = Architecture::Decoder, c.vocab_size = 300, c.d_model = d_model, c.n_layers = layers, c.n_heads = 4;
  c.n_kv_heads = 2, c.activation = FfnKind::SwiGLU, c.d_ff = 512, c.position = PositionKind::RoPE;
  c.norm = NormKind::RMSNorm, c.max_seq_len = 32, c.bias = false, c.tie_embeddings = false, c.rope_base = 500000;
  return c;
}

ModelConfig qwen2_like() {
  ModelConfig c = llama_like();
  c.qkv_bias = true, c.tie_embeddings = true;
  return c;
}

ModelConfig qwen3_like() {  // head norms, and a head size other than d_model / heads
  ModelConfig c = llama_like();
  c.qk_norm = true, c.head_dim = 96;
  return c;
}

// Gemma 3's layout: GELU-gated FFNs, four norms a block of 1 + γ, head norms, scaled embeddings, sliding-window
// layers (every second one global) with their own RoPE base, the global layers' positions scaled linearly.
ModelConfig gemma3_like() {
  ModelConfig c = llama_like();
  c.activation = FfnKind::GeGLU, c.sandwich_norm = true, c.norm_unit_offset = true, c.qk_norm = true;
  c.scale_embeddings = true, c.head_dim = 96, c.tie_embeddings = true, c.rope_base = 1000000;
  c.sliding_window = 4, c.sliding_window_pattern = 2, c.rope_local_base = 10000, c.rope_position_scale = 0.5;
  return c;
}

ModelConfig llama31_like() {  // Llama 3.1's RoPE scaling
  ModelConfig c = llama_like();
  c.rope_llama3_factor = 8, c.rope_llama3_low_freq_factor = 1, c.rope_llama3_high_freq_factor = 4;
  c.rope_original_context = 8192;
  return c;
}

Model initialized(const ModelConfig& c) {
  Model m(c);
  m.initialize(7);
  // Non-zero biases and gains, so that a misplaced one shows; of few bits, so that Gemma's 1 + γ is exact.
  for (Parameter* p : m.parameters())
    if (p->value.rank() == 1)
      for (int64_t i = 0; i < p->numel(); ++i) p->value[i] = 0.5f + static_cast<float>(i % 17) / 64.0f;
  return m;
}

std::vector<float> logits(Model& m) {
  Session s(m, {.max_T = 8});
  const std::span<const float> out = s.step(std::vector<int32_t>{3, 1, 4, 1, 5, 9});
  return {out.begin(), out.end()};
}

// The parameter `name` of `loaded`, which a tied model's LM head reads from lm_head once gpt2 has written it
// as its own output tensor.
const Parameter& same_place(const Model& loaded, const std::string& name) { return *loaded.find(name); }

TEST(GgufExport, F32RoundTripIsExactForEachArchitecture) {
  for (const auto& [arch, c] : {std::pair{"gpt2", gpt2_like()}, {"llama", llama_like()}, {"qwen2", qwen2_like()},
                                {"qwen3", qwen3_like()}, {"gemma3", gemma3_like()}, {"llama", llama31_like()}}) {
    SCOPED_TRACE(arch);
    Model source = initialized(c);
    EXPECT_EQ(gguf_architecture(c), arch);
    const fs::path path = temp_file(std::string("f32_") + arch);
    export_gguf(source, path);
    EXPECT_EQ(gguf::Reader(path).get_string("general.architecture"), arch);
    Model loaded = load_model(path);
    fs::remove(path);
    for (const Parameter* p : source.parameters()) {
      const Parameter& q = same_place(loaded, p->name);
      ASSERT_EQ(q.numel(), p->numel()) << p->name;
      for (int64_t i = 0; i < p->numel(); ++i) ASSERT_EQ(q.value[i], p->value[i]) << p->name << " [" << i << "]";
    }
    // gpt2 files always carry an output tensor: one holding the embedding's bytes is the embedding, so a tied model
    // comes back tied (it came back untied, its head a second copy: twice the matrix in memory and in merges).
    EXPECT_EQ(loaded.config().tie_embeddings, c.tie_embeddings);
    EXPECT_EQ(loaded.find("lm_head.weight") == nullptr, c.tie_embeddings);
    EXPECT_EQ(logits(loaded), logits(source));
  }
}

// What GGUF holds of the configuration comes back: Gemma 3's norms (stored as 1 + γ), windows, bases and scales,
// Llama 3.1's scaling (as a rope_freqs tensor of llama.cpp's factors) and linear scaling.
TEST(GgufExport, ConfigurationsComeBack) {
  ModelConfig linear = llama_like();
  linear.rope_position_scale = 0.25;
  // Trained contexts that are not Llama 3.1's: the factors come back (a 16-position context, as the tied-llama3
  // fixture's, could not be read back; low 2 is the same factors as a context half as long with low 1 and high
  // halved).
  ModelConfig short_context = llama31_like(), low_two = llama31_like();
  short_context.rope_original_context = 16;
  low_two.rope_original_context = 24, low_two.rope_llama3_low_freq_factor = 2, low_two.rope_llama3_high_freq_factor = 6;
  for (const ModelConfig& c : {gemma3_like(), llama31_like(), linear, short_context, low_two}) {
    Model source = initialized(c);
    const fs::path path = temp_file("config");
    export_gguf(source, path);
    const gguf::Reader file(path);
    const ModelConfig back = load_model_config(path);
    EXPECT_EQ(back.rope_position_scale, c.rope_position_scale);
    EXPECT_EQ(back.rope_llama3_factor, c.rope_llama3_factor);
    if (c.rope_llama3_factor > 0) {
      const std::vector<float> want = formats::llama3_rope_factors(c), got = formats::llama3_rope_factors(back);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "frequency " << i;
    }
    if (c.rope_original_context == 8192) {  // Llama 3.1's own: the published parameters
      EXPECT_EQ(back.rope_llama3_low_freq_factor, c.rope_llama3_low_freq_factor);
      EXPECT_EQ(back.rope_llama3_high_freq_factor, c.rope_llama3_high_freq_factor);
      EXPECT_EQ(back.rope_original_context, c.rope_original_context);
    }
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    EXPECT_EQ(back.sliding_window_pattern, c.sliding_window_pattern);
    EXPECT_EQ(back.rope_local_base, c.rope_local_base);
    EXPECT_EQ(back.norm_unit_offset, c.norm_unit_offset);
    EXPECT_EQ(back.sandwich_norm, c.sandwich_norm);
    EXPECT_EQ(back.scale_embeddings, c.scale_embeddings);
    EXPECT_EQ(back.activation, c.activation);
    EXPECT_EQ(back.d_head(), c.d_head());
    if (c.norm_unit_offset) {  // llama.cpp's Gemma norms: 1 + γ
      std::vector<float> stored(static_cast<size_t>(c.d_model));
      std::memcpy(stored.data(), file.tensor("blk.0.post_ffw_norm.weight")->data, stored.size() * sizeof(float));
      for (int64_t i = 0; i < c.d_model; ++i)
        ASSERT_EQ(stored[i], 1.0f + source.find("decoder.layers.0.ffn_post_norm.weight")->value[i]);
    }
    const gguf::TensorInfo* freqs = file.tensor("rope_freqs.weight");
    ASSERT_EQ(freqs != nullptr, c.rope_llama3_factor > 0);
    if (freqs != nullptr && c.rope_original_context == 8192) {  // 1 for the highest frequencies, the factor for the lowest
      std::vector<float> f(static_cast<size_t>(c.d_head() / 2));
      std::memcpy(f.data(), freqs->data, f.size() * sizeof(float));
      EXPECT_EQ(f.front(), 1.0f);
      EXPECT_FLOAT_EQ(f.back(), 8.0f);
    }
    fs::remove(path);
  }
  // A gemma3 file from a later llama.cpp gives the pattern as one flag a layer.
  {
    Model source = initialized(gemma3_like());
    const fs::path path = temp_file("pattern");
    export_gguf(source, path);
    gguf::Writer w;
    const gguf::Reader file(path);
    for (const auto& [k, v] : file.metadata()) w.set(k, v);
    std::vector<gguf::Value> flags;
    for (int64_t i = 0; i < 2; ++i) flags.push_back(gguf::Value::make_bool(i % 2 == 0));  // layer 1 global
    w.set("gemma3.attention.sliding_window_pattern", gguf::Value::make_array(gguf::ValueType::Bool, flags));
    for (const gguf::TensorInfo& t : file.tensors()) w.add_tensor(t.name, t.dims, t.type, t.data, t.bytes);
    const fs::path flagged = temp_file("pattern_flags");
    w.write(flagged);
    EXPECT_EQ(load_model_config(flagged).sliding_window_pattern, 2);
    flags[1] = gguf::Value::make_bool(true);  // every layer slides
    w.set("gemma3.attention.sliding_window_pattern", gguf::Value::make_array(gguf::ValueType::Bool, flags));
    w.write(flagged);
    EXPECT_EQ(load_model_config(flagged).sliding_window_pattern, 0);
    flags[0] = flags[1] = gguf::Value::make_bool(false);  // global, global: a period of 1
    w.set("gemma3.attention.sliding_window_pattern", gguf::Value::make_array(gguf::ValueType::Bool, flags));
    w.write(flagged);
    EXPECT_EQ(load_model_config(flagged).sliding_window_pattern, 1);
    flags[1] = gguf::Value::make_bool(true);  // global, sliding: no one period
    w.set("gemma3.attention.sliding_window_pattern", gguf::Value::make_array(gguf::ValueType::Bool, flags));
    w.write(flagged);
    testing::expect_error_mentions<Error>([&] { (void)load_model_config(flagged); },
                                          {"sliding_window_pattern", "layer 1", "period 1"});
    fs::remove(path), fs::remove(flagged);
  }
}

// BERT as llama.cpp's bert (tests/data/hf-bert, PyTorch's numbers in golden.json): the classifier checkpoint
// written to GGUF and read back gives PyTorch's logits (pooler as cls, classifier as cls.output, class names as
// the output labels), the base checkpoint its hidden states; Q8_0 stays near them.
TEST(GgufExport, BertRoundTripsWithPyTorchsNumbers) {
  const fs::path bert = fs::path(ATTEND_TEST_DATA) / "hf-bert";
  {
    const Model source = load_model(bert / "classifier");
    EXPECT_EQ(gguf_architecture(source.config()), "bert");
    const fs::path path = temp_file("bert_classifier");
    export_gguf(source, path);
    const gguf::Reader file(path);
    EXPECT_NE(file.tensor("cls.output.weight"), nullptr);
    EXPECT_NE(file.tensor("token_types.weight"), nullptr);
    const Model model = load_model(path);
    EXPECT_EQ(model.config().class_names, std::vector<std::string>({"negative", "neutral", "positive"}));
    EXPECT_EQ(model.config().type_vocab_size, source.config().type_vocab_size);
    EXPECT_EQ(model.config().pooling, source.config().pooling);
    testing::expect_error_mentions<Error>([&] { Session s(model); }, {"encoder model does not generate text"});
    const auto golden = nlohmann::json::parse(read_file(bert / "classifier" / "golden.json"));
    Batch b;
    b.B = 2, b.T = 9;
    for (const auto& seq : golden["ids"]) for (int32_t id : seq.get<std::vector<int32_t>>()) b.ids.push_back(id);
    b.lengths = golden["lengths"].get<std::vector<int32_t>>();
    b.labels = golden["labels"].get<std::vector<int32_t>>();
    ForwardState state(/*for_backward=*/false);
    EXPECT_NEAR(model.forward(b, state).ce_loss, golden["loss"].get<double>(), 1e-5 * golden["loss"].get<double>());
    testing::expect_all_close(std::vector<float>(state.logits().span().begin(), state.logits().span().end()),
                              golden["logits"].get<std::vector<double>>(), 1e-4, "bert classifier from GGUF: logits");
    fs::remove(path);
  }
  for (const char* type : {"f32", "q8_0"}) {
    SCOPED_TRACE(type);
    const Model source = load_model(bert / "base");
    const fs::path path = temp_file("bert_base");
    export_gguf(source, path, nullptr, {.type = type});
    const Model model = load_model(path);
    EXPECT_EQ(model.holds_quantized(), std::string(type) == "q8_0");
    const auto golden = nlohmann::json::parse(read_file(bert / "base" / "golden.json"));
    Batch b;
    b.B = 1, b.ids = golden["ids"].get<std::vector<int32_t>>(), b.T = static_cast<int64_t>(b.ids.size());
    const Tensor h = model.hidden_states(b);
    const std::vector<double> want = golden["hidden"].get<std::vector<double>>();
    if (std::string(type) == "f32") {
      testing::expect_all_close(std::vector<float>(h.span().begin(), h.span().end()), want, 1e-4,
                                "bert base from GGUF: hidden states");
    } else {  // 8-bit weights and int8 inputs: a few percent of the largest state at most, as for the decoders
      double largest = 0, scale = 0;
      for (size_t i = 0; i < want.size(); ++i)
        largest = std::max(largest, std::abs(h[static_cast<int64_t>(i)] - want[i])), scale = std::max(scale, std::abs(want[i]));
      EXPECT_GT(largest, 0.0);
      EXPECT_LT(largest, 0.03 * scale);
    }
    fs::remove(path);
  }
  ModelConfig mlm = load_model_config(bert / "mlm");
  testing::expect_error_mentions<Error>([&] { (void)gguf_architecture(mlm); }, {"gguf", "mlm_head", "bert"});
}

// A WordPiece tokenizer as llama.cpp's bert kind (phantom space: a word's first piece with ▁, a continuing piece
// without its ##) and back: the same ids for texts, [CLS] … [SEP] around them, the special tokens' ids.
TEST(GgufTokenizer, WordPieceGoesThroughPhantomSpace) {
  nlohmann::json vocab = nlohmann::json::object();
  const std::vector<std::string> pieces = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "jury", "said",
                                           "un", "##believ", "##able", ".", ",", "##s", "a", "caf", "##e"};
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 5; ++i)
    added.push_back({{"id", i}, {"content", pieces[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  const nlohmann::json j = {
      {"version", "1.0"}, {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                      {"strip_accents", nullptr}, {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  const Tokenizer source = Tokenizer::from_json(j.dump(), "test");
  ModelConfig c;
  c.architecture = Architecture::Encoder, c.vocab_size = 17, c.d_model = 32, c.n_layers = 1, c.n_heads = 2;
  c.max_seq_len = 16, c.pre_norm = false, c.embedding_norm = true, c.type_vocab_size = 2, c.activation = FfnKind::GELU;
  c.mlm_head = false;
  const Model model(c);
  const fs::path path = temp_file("wordpiece");
  export_gguf(model, path, &source);
  const gguf::Reader file(path);
  const std::vector<std::string> tokens = file.get_strings("tokenizer.ggml.tokens");
  EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "bert");
  EXPECT_EQ(tokens[2], "[CLS]");
  EXPECT_EQ(tokens[6], "\xe2\x96\x81jury");
  EXPECT_EQ(tokens[9], "believ");
  EXPECT_EQ(file.get_uint("tokenizer.ggml.cls_token_id"), 2u);
  EXPECT_EQ(file.get_uint("tokenizer.ggml.seperator_token_id"), 3u);
  const std::optional<Tokenizer> back = load_gguf_tokenizer(path);
  ASSERT_TRUE(back.has_value());
  for (const std::string text : {"The jury said, unbelievable.", "A Café", "juries"}) {
    EXPECT_EQ(back->encode_prompt(text), source.encode_prompt(text)) << text;
    EXPECT_EQ(back->encode_prompt(text).front(), 2) << text;
    EXPECT_EQ(back->encode_prompt(text).back(), 3) << text;
  }
  EXPECT_EQ(back->encode_prompt("the jury said"), (std::vector<int32_t>{2, 5, 6, 7, 3}));
  fs::remove(path);
}

// Two files hold the same tensors: names, types and bytes.
void expect_same_tensors(const gguf::Reader& a, const gguf::Reader& b) {
  ASSERT_EQ(b.tensors().size(), a.tensors().size());
  for (const gguf::TensorInfo& t : a.tensors()) {
    const gguf::TensorInfo* u = b.tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    ASSERT_EQ(u->bytes, t.bytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.bytes), 0) << t.name;
  }
}

TEST(GgufExport, HalfTypesRoundTheMatricesOnly) {
  for (const char* type : {"f16", "bf16"}) {
    SCOPED_TRACE(type);
    Model source = initialized(qwen2_like());
    const fs::path path = temp_file(type);
    export_gguf(source, path, nullptr, {.type = type});
    const gguf::Reader file(path);
    const uint32_t want = std::string(type) == "f16" ? gguf::tensor_type::F16 : gguf::tensor_type::BF16;
    EXPECT_EQ(file.tensor("blk.0.attn_q.weight")->type, want);
    EXPECT_EQ(file.tensor("blk.0.attn_q.bias")->type, gguf::tensor_type::F32);
    EXPECT_EQ(file.tensor("output_norm.weight")->type, gguf::tensor_type::F32);
    Model loaded = load_model(path);
    const WeightType half = std::string(type) == "f16" ? WeightType::F16 : WeightType::BF16;
    Model rounded = initialized(qwen2_like());
    rounded.set_storage(half);
    for (const Parameter* p : rounded.parameters()) {
      const Parameter& q = *loaded.find(p->name);
      const Parameter& s = *source.find(p->name);
      std::vector<float> values(static_cast<size_t>(q.numel()));
      if (q.has_values()) std::copy(q.value.data(), q.value.data() + q.numel(), values.data());
      else nn::dequantize_values(q, values.data());
      for (int64_t i = 0; i < p->numel(); ++i)  // matrices rounded, vectors exact
        ASSERT_EQ(values[i], p->value.rank() == 1 ? s.value[i] : p->value[i]) << p->name << " [" << i << "]";
      // The file's 16-bit matrices are run as stored: packed as set_storage packs them, without fp32 values (the
      // token table too, whose rows lookups widen).
      if (p->value.rank() == 1) {
        EXPECT_EQ(q.storage, WeightType::F32) << p->name;
        continue;
      }
      EXPECT_EQ(q.storage, half) << p->name;
      EXPECT_FALSE(q.has_values()) << p->name;
      if (!p->packed.empty()) {
        EXPECT_EQ(q.packed, p->packed) << p->name;
      }
    }
    EXPECT_TRUE(loaded.holds_packed());
    EXPECT_FALSE(loaded.holds_quantized());
    EXPECT_EQ(logits(loaded), logits(rounded));
    // Written again as held (no type given): the same tensors, byte for byte, and the same file type.
    const fs::path again = temp_file(std::string(type) + "_again");
    export_gguf(loaded, again);
    const gguf::Reader back(again);
    EXPECT_EQ(back.get_uint("general.file_type"), file.get_uint("general.file_type"));
    expect_same_tensors(file, back);
    fs::remove(path);
    fs::remove(again);
  }
}

// Every quantized matrix of `loaded` holds, row by row, the blocks quantize_row makes of `source`'s row.
void expect_blocks_of_source(const Model& loaded, const Model& source) {
  int64_t matrices = 0;
  for (const Parameter* p : loaded.parameters()) {
    if (p->quantized.empty()) continue;
    ++matrices;
    const Parameter& s = *source.find(p->name == "lm_head.weight" && source.config().tie_embeddings
                                          ? "embed.tokens.weight" : p->name);
    const int64_t C = p->value.size(-1);
    int64_t row = 0;
    for (const QuantizedRows& seg : p->quantized) {
      const kernels::QuantType q = nn::quant_type(seg.type);
      const int64_t row_bytes = kernels::quant_row_bytes(q, C);
      std::vector<uint8_t> want(static_cast<size_t>(row_bytes));
      for (int64_t r = 0; r < seg.rows; ++r) {
        kernels::quantize_row(q, want.data(), s.value.data() + (row + r) * C, C);
        ASSERT_EQ(std::memcmp(want.data(), seg.data + r * row_bytes, row_bytes), 0)
            << p->name << " row " << row + r << " (" << weight_type_name(seg.type) << ")";
      }
      row += seg.rows;
    }
  }
  EXPECT_GT(matrices, 0);
}

TEST(GgufExport, QuantizedMatricesAreTheirRowsBlocks) {
  for (const auto& [scheme, c] : {std::pair{"q8_0", qwen2_like()}, {"q4_k_m", llama_like()}, {"q5_k_m", gpt2_like()},
                                  {"q4_0", gpt2_like()}, {"q6_k", qwen2_like()}, {"q4_k_m", qwen3_like()}}) {
    SCOPED_TRACE(scheme);
    Model source = initialized(c);
    const fs::path path = temp_file(std::string("q_") + scheme);
    export_gguf(source, path, nullptr, {.type = scheme});
    Model loaded = load_model(path);
    expect_blocks_of_source(loaded, source);
    // Written again as it is held: the same bytes.
    const fs::path again = temp_file(std::string("again_") + scheme);
    export_gguf(loaded, again);
    const gguf::Reader a(path), b(again);
    expect_same_tensors(a, b);
    fs::remove(path);
    fs::remove(again);
  }
}

std::string type_of(const gguf::Reader& file, const std::string& name) {
  const gguf::TensorInfo* t = file.tensor(name);
  return t == nullptr ? "absent" : gguf::type_traits(t->type)->name;
}

TEST(GgufExport, MixesGiveLlamaCppsTypes) {
  // Eight layers: llama.cpp's use_more_bits picks layers 0 (first eighth), 7 (last eighth), 3 and 6 (every third).
  Model llama = initialized(llama_like(8));
  const fs::path path = temp_file("mix_llama");
  export_gguf(llama, path, nullptr, {.type = "q4_k_m"});
  {
    const gguf::Reader f(path);
    EXPECT_EQ(f.get_uint("general.file_type"), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    EXPECT_EQ(type_of(f, "token_embd.weight"), "q4_K");
    EXPECT_EQ(type_of(f, "output.weight"), "q6_K");
    for (int i = 0; i < 8; ++i) {
      const bool more = i == 0 || i == 3 || i == 6 || i == 7;
      const std::string b = fmt::format("blk.{}.", i);
      EXPECT_EQ(type_of(f, b + "attn_v.weight"), more ? "q6_K" : "q4_K") << i;
      EXPECT_EQ(type_of(f, b + "ffn_down.weight"), more ? "q6_K" : "q4_K") << i;
      EXPECT_EQ(type_of(f, b + "attn_q.weight"), "q4_K");
      EXPECT_EQ(type_of(f, b + "ffn_gate.weight"), "q4_K");
      EXPECT_EQ(type_of(f, b + "attn_norm.weight"), "f32");
    }
  }
  // A tied llama has no output tensor: the embedding is the head, and takes the head's Q6_K. Q8_0 keeps Q8_0.
  ModelConfig tied = llama_like(2);
  tied.tie_embeddings = true;
  export_gguf(initialized(tied), path, nullptr, {.type = "q4_0"});
  EXPECT_EQ(type_of(gguf::Reader(path), "output.weight"), "absent");
  EXPECT_EQ(type_of(gguf::Reader(path), "token_embd.weight"), "q6_K");
  export_gguf(initialized(tied), path, nullptr, {.type = "q8_0"});
  EXPECT_EQ(type_of(gguf::Reader(path), "token_embd.weight"), "q8_0");
  // gpt2 under q5_k_m: the fused attn_qkv Q6_K; rows of 64 are not whole 256-value blocks, so the K types fall back
  // (Q5_K → Q5_1, Q6_K → Q8_0); the position table stays F32.
  export_gguf(initialized(gpt2_like()), path, nullptr, {.type = "q5_k_m"});
  {
    const gguf::Reader f(path);
    EXPECT_EQ(type_of(f, "blk.0.attn_qkv.weight"), "q8_0");
    EXPECT_EQ(type_of(f, "blk.1.attn_output.weight"), "q5_1");
    EXPECT_EQ(type_of(f, "position_embd.weight"), "f32");
    EXPECT_EQ(type_of(f, "output.weight"), "q8_0");
  }
  ModelConfig wide = gpt2_like();
  wide.d_model = 256, wide.d_ff = 1024;
  export_gguf(initialized(wide), path, nullptr, {.type = "q4_k_m"});
  {
    const gguf::Reader f(path);
    EXPECT_EQ(type_of(f, "blk.0.attn_qkv.weight"), "q5_K");
    EXPECT_EQ(type_of(f, "blk.1.ffn_down.weight"), "q6_K");  // layer 1 of 2 is in the last eighth
    EXPECT_EQ(type_of(f, "blk.1.ffn_up.weight"), "q4_K");
  }
  fs::remove(path);
}

TEST(GgufExport, TokenizerRoundTrips) {
  TokenizerTrainOptions o;
  o.vocab_size = 300;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox jumps over the lazy dog, again and again: 12345 times!\n";
  const Tokenizer tok = Tokenizer::train_from_text(text, o);
  ModelConfig c = gpt2_like();
  c.vocab_size = tok.vocab_size() + 5;  // room the tokenizer does not fill: [PAD] tokens in the file
  Model m = initialized(c);
  const fs::path path = temp_file("tokenizer");
  export_gguf(m, path, &tok);
  const std::optional<Tokenizer> back = load_gguf_tokenizer(path);
  ASSERT_TRUE(back.has_value());
  for (const std::string s : {"the quick brown fox", "  jumps!! over\n\nthe 9876 lazy dogs", "<|endoftext|>again"})
    EXPECT_EQ(back->encode(s), tok.encode(s)) << s;
  EXPECT_EQ(back->special_id(SpecialRole::Eos), tok.special_id(SpecialRole::Eos));
  const gguf::Reader f(path);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").back(), fmt::format("[PAD{}]", c.vocab_size - 1));
  fs::remove(path);
}

// A llama-kind vocabulary (SentencePiece BPE: tokens, scores, types) encodes as SentencePiece's own model of the
// same pieces, and a prompt starts with BOS (llama.cpp's default for it).
TEST(GgufTokenizer, SentencePieceVocabularyEncodesAsTheModelFile) {
  const fs::path model_file = fs::path(ATTEND_TEST_DATA) / "spm" / "bpe.model";
  const std::string bytes = read_file(model_file);
  const tokenize::SentencePieceModel sp = tokenize::parse_sentencepiece(bytes, model_file.string());
  ASSERT_EQ(sp.model_type, 2);
  gguf::Writer w;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const tokenize::UnigramPiece& p : sp.pieces)
    tokens.push_back(p.text), scores.push_back(static_cast<float>(p.score)), types.push_back(static_cast<int32_t>(p.type));
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_floats("tokenizer.ggml.scores", scores);
  w.set_int32s("tokenizer.ggml.token_type", types);
  w.set_bool("tokenizer.ggml.remove_extra_whitespaces", sp.normalizer.remove_extra_whitespaces);
  const Tokenizer reference = Tokenizer::from_sentencepiece(bytes, model_file.string());
  const std::optional<int32_t> bos = reference.token_to_id("<s>");
  ASSERT_TRUE(bos.has_value());
  w.set_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
  const fs::path path = temp_file("spm");
  w.write(path);
  const std::optional<Tokenizer> tok = load_gguf_tokenizer(path);
  fs::remove(path);
  ASSERT_TRUE(tok.has_value());
  for (const std::string s : {"the quick brown fox", "Hello world.  Two  spaces", "numbers 12345 and sym#bols!"})
    EXPECT_EQ(tok->encode(s), reference.encode(s)) << s;
  const std::vector<int32_t> prompt = tok->encode_prompt("hello");
  ASSERT_FALSE(prompt.empty());
  EXPECT_EQ(prompt.front(), *bos);
  EXPECT_EQ(tok->special_id(SpecialRole::Bos), bos);
}

// tests/data/gguf (tools/make_gguf_fixtures.sh): a small trained GPT-2-layout model as an F16 file Attend wrote and
// Q8_0 and Q4_K_M files llama.cpp's llama-quantize made from it, with llama-simple's greedy continuations.
const fs::path kGgufData = fs::path(ATTEND_TEST_DATA) / "gguf";

TEST(GgufFixtures, LlamaCppsFilesHoldTheSameWeightsAndTypes) {
  Model f16 = load_model(kGgufData / "brown-tiny-F16.gguf");
  const std::optional<Tokenizer> tok = load_gguf_tokenizer(kGgufData / "brown-tiny-F16.gguf");
  ASSERT_TRUE(tok.has_value());
  // Relative RMS error bounds per type: a level step of the type's bits over a block's range, with room; a wrong
  // nibble, bit or scale gives errors near 1.
  const std::map<std::string, double> bound = {{"q8_0", 0.01}, {"q6_K", 0.03}, {"q5_K", 0.05}, {"q4_K", 0.1}};
  for (const auto& [name, scheme] : {std::pair{"brown-tiny-Q8_0.gguf", "q8_0"}, {"brown-tiny-Q4_K_M.gguf", "q4_k_m"}}) {
    SCOPED_TRACE(name);
    const gguf::Reader theirs(kGgufData / name);
    // Attend's choice of types for the same model and scheme is llama-quantize's, tensor by tensor (but the
    // position table, which llama-quantize leaves in the source's F16 and Attend writes in F32).
    const fs::path ours_path = temp_file(std::string("fixture_") + scheme);
    export_gguf(f16, ours_path, &*tok, {.type = scheme});
    const gguf::Reader ours(ours_path);
    ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
    for (const gguf::TensorInfo& t : theirs.tensors()) {
      const gguf::TensorInfo* mine = ours.tensor(t.name);
      ASSERT_NE(mine, nullptr) << t.name;
      if (t.name != "position_embd.weight") {
        EXPECT_EQ(type_of(ours, t.name), type_of(theirs, t.name)) << t.name;
      }
    }
    fs::remove(ours_path);
    // Read back: each quantized matrix is the F16 model's within its type's error. (The F16 model, held as its
    // 16-bit values, gets fp32 ones for the comparison: the first export above ran without them, the second with.)
    f16.ensure_values();
    Model q = load_model(kGgufData / name);
    EXPECT_TRUE(q.holds_quantized());
    q.ensure_values();  // the quantized matrices' values, next to their blocks
    for (const gguf::TensorInfo& t : theirs.tensors()) {
      const std::string type = type_of(theirs, t.name);
      if (!bound.contains(type)) continue;
      const std::string attend_name = t.name == "token_embd.weight" ? "embed.tokens.weight"
                                      : t.name == "output.weight"   ? "lm_head.weight"
                                                                    : "";
      if (attend_name.empty() && !t.name.starts_with("blk.0.")) continue;
      const std::string mapped = !attend_name.empty() ? attend_name
          : "decoder.layers.0." + std::string(t.name.find("attn_qkv") != std::string::npos ? "attn.qkv.weight"
                                          : t.name.find("attn_output") != std::string::npos ? "attn.o.weight"
                                          : t.name.find("ffn_up") != std::string::npos ? "ffn.up.weight"
                                                                                      : "ffn.down.weight");
      // A file whose head holds its embedding's bytes (the F16 file, and the Q8_0 one, both quantized alike) is read
      // as the tied model it is: its head is the embedding.
      auto find = [&](const Model& m) {
        const Parameter* p = m.find(mapped);
        return p == nullptr && mapped == "lm_head.weight" ? m.find("embed.tokens.weight") : p;
      };
      ASSERT_NE(find(q), nullptr) << mapped;
      ASSERT_NE(find(f16), nullptr) << mapped;
      const Parameter& a = *find(q);
      const Parameter& b = *find(f16);
      double err = 0, power = 0;
      for (int64_t i = 0; i < a.numel(); ++i) err += std::pow(a.value[i] - b.value[i], 2), power += std::pow(b.value[i], 2);
      EXPECT_GT(err, 0.0) << t.name;
      EXPECT_LT(std::sqrt(err / power), bound.at(type)) << t.name << " (" << type << ")";
    }
  }
}

// Attend's greedy continuations of the golden prompts on each of `files` (DIR/FILE.gguf, with llama.cpp's default
// fp16 KV cache) against llama-simple's in DIR/golden.json; returns how many were compared.
int expect_llama_simples_continuations(const fs::path& dir, std::initializer_list<const char*> files) {
  const auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
  const int64_t new_tokens = golden["new_tokens"].get<int64_t>();
  int checked = 0;
  for (const char* file : files) {
    const fs::path path = dir / (std::string(file) + ".gguf");
    const Model model = load_model(path);
    const std::optional<Tokenizer> tok = load_gguf_tokenizer(path);
    EXPECT_TRUE(tok.has_value()) << file;
    if (!tok) continue;
    GenerateOptions options;
    options.max_new_tokens = new_tokens;
    options.sampling.greedy = true;
    options.cache = CacheType::F16;  // llama.cpp's default KV cache
    if (const auto eos = tok->special_id(SpecialRole::Eos)) options.eos = {*eos};
    for (const std::string prompt : {"The jury said", "In the morning", "The president of the"}) {
      const Generation g = generate(model, &*tok, tok->encode_prompt(prompt), options);
      EXPECT_EQ(g.text, golden["continuations"][std::string(file) + "|" + prompt].get<std::string>()) << file << ": " << prompt;
      ++checked;
    }
  }
  return checked;
}

TEST(GgufFixtures, GreedyTokensAreLlamaSimples) {
  EXPECT_EQ(expect_llama_simples_continuations(kGgufData, {"brown-tiny-F16", "brown-tiny-Q8_0", "brown-tiny-Q4_K_M"}), 9);
}

// Attend's K-type fits are llama-quantize's (kernels/quant.cpp, quantize_k and quantize_q6_k: Q4_K's and Q5_K's
// sub-blocks weighted by their own RMS + |x|, the fans of scales, the offset each better candidate moves; Q6_K's
// values weighted by x²): quantizing the F16 fixture's rows gives llama-quantize's Q4_K and Q6_K blocks of the same
// rows in brown-tiny-Q4_K_M.gguf byte for byte, but where a fit's sums round otherwise (llama.cpp sums in fp32,
// Attend in fp64, and two near-equal candidates can fall either way; 2026-11, the Zen 4: 1,078 of 1,088 Q4_K
// blocks the same, 809 of 832 Q6_K). Attend's earlier searches of its own (the row's RMS for both, a fixed
// offset) gave 46 of the Q4_K blocks.
TEST(GgufFixtures, KBlocksAreLlamaQuantizes) {
  const gguf::Reader source(kGgufData / "brown-tiny-F16.gguf"), llama(kGgufData / "brown-tiny-Q4_K_M.gguf");
  constexpr uint32_t kF16 = 1;
  const std::map<uint32_t, kernels::QuantType> types = {{12, kernels::QuantType::Q4_K}, {14, kernels::QuantType::Q6_K}};
  std::map<uint32_t, std::pair<int64_t, int64_t>> count;  // type: blocks, the same
  for (const gguf::TensorInfo& t : llama.tensors()) {
    if (!types.contains(t.type)) continue;
    const kernels::QuantType type = types.at(t.type);
    const gguf::TensorInfo* f16 = source.tensor(t.name);
    ASSERT_NE(f16, nullptr) << t.name;
    ASSERT_EQ(f16->type, kF16) << t.name;
    const int64_t C = t.dims[0], rows = t.numel() / C, row_bytes = kernels::quant_row_bytes(type, C);
    const int64_t block_bytes = kernels::quant_format(type).bytes;
    std::vector<uint16_t> bits(static_cast<size_t>(C));
    std::vector<float> row(static_cast<size_t>(C));
    std::vector<uint8_t> mine(static_cast<size_t>(row_bytes));
    auto& [blocks, same] = count[t.type];
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(bits.data(), f16->data + r * C * 2, static_cast<size_t>(C) * 2);
      kernels::half_to_float(row.data(), bits.data(), C);
      kernels::quantize_row(type, mine.data(), row.data(), C);
      for (int64_t b = 0; b < C / 256; ++b, ++blocks)
        same += std::memcmp(mine.data() + b * block_bytes, t.data + r * row_bytes + b * block_bytes, block_bytes) == 0;
    }
  }
  ASSERT_EQ(count.size(), 2u);
  for (const auto& [type, c] : count) {
    EXPECT_GT(c.first, 200) << kernels::quant_format(types.at(type)).name;
    EXPECT_GE(c.second, c.first * 95 / 100) << c.second << " of " << c.first << " " << kernels::quant_format(types.at(type)).name
                                 << " blocks are llama-quantize's";
  }
}

// tests/data/gguf/arch (tools/make_gguf_arch_fixtures.sh): a trained qwen3 and a trained gemma3 (head norms, heads
// of another size, RoPE's halves; Gemma's 1 + γ norms, GELU-gated FFNs, a sliding window the continuation runs
// past) written by Attend, with llama-quantize's Q8_0 of each: Attend's greedy tokens are llama-simple's, with
// llama.cpp's default fp16 KV cache.
TEST(GgufFixtures, ArchitecturesGreedyTokensAreLlamaSimples) {
  const fs::path dir = kGgufData / "arch";
  const auto files = {"qwen3-tiny-F16", "qwen3-tiny-Q8_0", "gemma3-tiny-F16", "gemma3-tiny-Q8_0"};
  for (const std::string file : files)
    EXPECT_EQ(gguf::Reader(dir / (file + ".gguf")).get_string("general.architecture"), file.substr(0, file.find('-')));
  EXPECT_EQ(expect_llama_simples_continuations(dir, files), 12);
}

// tests/data/gguf/arch/bert-* (tools/make_gguf_arch_fixtures.sh): a trained BERT classifier (post-norm, token
// types, the embedding norm, a WordPiece vocabulary) written by Attend, and llama-quantize's Q8_0 of it. llama.cpp's
// tokenizer gives Attend's ids, and llama-embedding's final hidden states (--pooling none) are Attend's within
// the coarser of the two engines' roundings of a product's inputs, relative to the largest state: llama.cpp rounds
// them to fp16 for F16 weights (2^-11; Attend keeps fp32), to int8 blocks for Q8_0 (half a step of 1/127 of the
// block's largest, 2^-8) where Attend's prompt products take bf16 (2^-8 too). LayerNorm passes a relative error
// through unchanged, and GELU's forms (llama.cpp's tanh from an fp16 table, Attend's erf) differ by less. Measured
// at 2026-11: 6·10^-5 (F16) and 3·10^-4 (Q8_0). The states of two positions differ by far more (checked), so the
// comparison would see a wrong mask, position or token type.
TEST(GgufFixtures, BertStatesAreLlamaEmbeddings) {
  const fs::path dir = kGgufData / "arch";
  const auto golden = nlohmann::json::parse(read_file(dir / "bert-golden.json"));
  int checked = 0;
  for (const std::string file : {"bert-tiny-F16", "bert-tiny-Q8_0"}) {
    const fs::path path = dir / (file + ".gguf");
    const Model model = load_model(path);
    const std::optional<Tokenizer> tok = load_gguf_tokenizer(path);
    ASSERT_TRUE(tok.has_value());
    const double bound = file.ends_with("F16") ? 0x1p-11 : 0x1p-8;
    for (const auto& [key, want] : golden["states"].items()) {
      if (!key.starts_with(file + "|")) continue;
      const std::string text = key.substr(file.size() + 1);
      Batch b;
      b.B = 1, b.ids = tok->encode_prompt(text), b.T = static_cast<int64_t>(b.ids.size());
      EXPECT_EQ(b.ids, want["ids"].get<std::vector<int32_t>>()) << key;
      const std::vector<double> states = want["hidden"].get<std::vector<double>>();
      const Tensor h = model.hidden_states(b);
      ASSERT_EQ(static_cast<size_t>(h.numel()), states.size()) << key;
      const int64_t D = model.config().d_model;
      double largest = 0, error = 0, apart = 0;
      for (int64_t i = 0; i < h.numel(); ++i) {
        largest = std::max(largest, std::abs(states[static_cast<size_t>(i)]));
        error = std::max(error, std::abs(h[i] - states[static_cast<size_t>(i)]));
        if (i >= D) apart = std::max(apart, std::abs(states[static_cast<size_t>(i)] - states[static_cast<size_t>(i - D)]));
      }
      EXPECT_LT(error, bound * largest) << key << ": largest difference " << error << " of " << largest;
      EXPECT_GT(apart, 30 * bound * largest) << key;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

// Found by the gguf fuzz target: a token that is not UTF-8 made the rebuilt tokenizer.json throw nlohmann's
// type_error (316) out of load_gguf_tokenizer. Now an attend::Error names the token.
TEST(GgufTokenizer, TokensThatAreNotUtf8AreNamed) {
  for (const char* kind : {"gpt2", "llama"}) {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", kind);
    w.set_strings("tokenizer.ggml.tokens", {"<unk>", "a", std::string("b\xff", 2)});
    w.set_floats("tokenizer.ggml.scores", {0, -1, -2});
    w.set_int32s("tokenizer.ggml.token_type", {2, 1, 1});
    const fs::path path = temp_file(std::string("utf8_") + kind);
    w.write(path);
    testing::expect_error_mentions<Error>([&] { (void)load_gguf_tokenizer(path); },
                                          {"tokenizer.ggml.tokens[2]", "not valid UTF-8"});
    fs::remove(path);
  }
}

TEST(GgufExport, WhatGgufCannotHoldIsAnError) {
  ModelConfig t5;
  t5.architecture = Architecture::EncoderDecoder, t5.vocab_size = 50, t5.d_model = 32, t5.n_layers = 1, t5.n_heads = 2;
  t5.max_seq_len = 16;
  testing::expect_error_mentions<Error>([&] { (void)gguf_architecture(t5); }, {"gguf", "architecture", "decoder"});
  ModelConfig ln_rope = gpt2_like();
  ln_rope.position = PositionKind::RoPE;
  testing::expect_error_mentions<Error>([&] { (void)gguf_architecture(ln_rope); }, {"gguf", "norm", "rmsnorm"});
  testing::expect_error_mentions<Error>([&] { export_gguf(Model(gpt2_like()), temp_file("type"), nullptr, {.type = "q3_k"}); },
                                        {"type 'q3_k'", "q4_k_m"});
  EXPECT_FALSE(fs::exists(temp_file("type")));
  ModelConfig gemma_scaled = gemma3_like();  // llama.cpp fixes Gemma 3's score scale by the layer count
  gemma_scaled.attention_scale = 0.1;
  testing::expect_error_mentions<Error>([&] { (void)gguf_architecture(gemma_scaled); },
                                        {"gguf", "attention_scale", "gemma3", "62 layers"});
  ModelConfig dynamic = llama_like();
  dynamic.rope_dynamic_factor = 2, dynamic.rope_original_context = 16;
  testing::expect_error_mentions<Error>([&] { (void)gguf_architecture(dynamic); }, {"gguf", "RoPE scaling", "dynamic"});
  // Reading: RoPE factors that no Llama 3.1 scaling gives, and a scaling type Attend does not read.
  Model source = initialized(llama31_like());
  const fs::path path = temp_file("bad_rope");
  export_gguf(source, path);
  const gguf::Reader file(path);
  gguf::Writer w;
  for (const auto& [k, v] : file.metadata()) w.set(k, v);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name != "rope_freqs.weight") {
      w.add_tensor(t.name, t.dims, t.type, t.data, t.bytes);
      continue;
    }
    std::vector<float> f(static_cast<size_t>(t.dims[0]), 2.0f);  // a factor falling again: no scaling does that
    f[0] = 1.0f, f[1] = 3.0f;
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor(t.name, t.dims, t.type, std::move(bytes));
  }
  const fs::path bad = temp_file("bad_rope_written");
  w.write(bad);
  testing::expect_error_mentions<Error>([&] { (void)load_model_config(bad); }, {"rope_freqs.weight", "Llama 3.1"});
  w.set("llama.rope.scaling.type", gguf::Value::make_string("yarn"));
  w.write(bad);
  testing::expect_error_mentions<Error>([&] { (void)load_model_config(bad); }, {"llama.rope.scaling.type", "yarn"});
  fs::remove(path), fs::remove(bad);
}

TEST(GgufExport, InputStatisticsAreTheColumnsMeanSquares) {
  Parameter w("w", {2, 3}, Role::FfnIn);
  const std::vector<float> x = {1, 2, 3, -1, 0, 5};  // two rows of three
  std::vector<float> y(4);
  InputStatistics stats;
  {
    const RecordInputs recording(stats);
    nn::linear_forward(y.data(), x.data(), w, nullptr, 2, 3, 2);
    nn::linear_forward(y.data(), x.data() + 3, w, nullptr, 1, 3, 2);
  }
  nn::linear_forward(y.data(), x.data(), w, nullptr, 2, 3, 2);  // not recorded
  EXPECT_EQ(stats.by_weight.at("w").rows, 3);
  const std::vector<float> m = stats.mean_squares("w");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_FLOAT_EQ(m[0], (1 + 1 + 1) / 3.0f);
  EXPECT_FLOAT_EQ(m[1], (4 + 0 + 0) / 3.0f);
  EXPECT_FLOAT_EQ(m[2], (9 + 25 + 25) / 3.0f);
  EXPECT_TRUE(stats.mean_squares("other").empty());
}

}  // namespace
}  // namespace attend
