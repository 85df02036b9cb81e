// Models from GGUF files (formats/gguf_model.cpp): a Llama-layout model written under llama.cpp's tensor names and
// keys (F32 norms, F16 embeddings, Q/K/V of three different block types as llama.cpp's mixes give them) loads as
// the model of those values, its Q/K/V blocks kept as segments of the fused matrix. (A file written by llama.cpp
// itself was checked by hand: gpt2-Q4_K_M.gguf from llama-quantize gives llama-simple's greedy tokens; see
// docs/FORMATS.md.)
#include "formats/gguf.h"
#include "kernels/convert.h"
#include "kernels/quant.h"
#include "nn/layers.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/model_dir.h>
#include <attend/session.h>

#include <filesystem>

namespace attend {
namespace {

namespace fs = std::filesystem;

std::vector<float> values(const Parameter& p, int64_t row0, int64_t rows) {
  const int64_t C = p.value.size(-1);
  return std::vector<float>(p.value.data() + row0 * C, p.value.data() + (row0 + rows) * C);
}

TEST(GgufModel, LlamaLayoutLoadsWithMixedBlockTypes) {
  ModelConfig c;
  c.architecture = Architecture::Decoder, c.vocab_size = 40, c.d_model = 256, c.n_layers = 2, c.n_heads = 4;
  c.n_kv_heads = 2, c.activation = FfnKind::SwiGLU, c.d_ff = 512, c.position = PositionKind::RoPE;
  c.norm = NormKind::RMSNorm, c.max_seq_len = 32, c.bias = false, c.tie_embeddings = false, c.rope_base = 500000;
  Model source(c);
  source.initialize(3);
  const int64_t C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(), D = c.d_head();

  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.context_length", 32);
  w.set_uint32("llama.embedding_length", 256);
  w.set_uint32("llama.block_count", 2);
  w.set_uint32("llama.feed_forward_length", 512);
  w.set_uint32("llama.attention.head_count", 4);
  w.set_uint32("llama.attention.head_count_kv", 2);
  w.set_float32("llama.rope.freq_base", 500000.0f);
  w.set_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::vector<uint8_t>> keep;
  auto f32 = [&](const std::string& name, const Parameter& p, int64_t row0, int64_t rows) {
    const auto v = values(p, row0, rows);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    std::vector<int64_t> dims = p.value.rank() == 1 ? std::vector<int64_t>{p.value.size(0)} : std::vector<int64_t>{p.value.size(-1), rows};
    w.add_tensor(name, dims, gguf::tensor_type::F32, std::move(bytes));
  };
  auto f16 = [&](const std::string& name, const Parameter& p) {
    const auto v = values(p, 0, p.numel() / p.value.size(-1));
    std::vector<uint16_t> h(v.size());
    kernels::float_to_half(h.data(), v.data(), static_cast<int64_t>(v.size()));
    std::vector<uint8_t> bytes(h.size() * 2);
    std::memcpy(bytes.data(), h.data(), bytes.size());
    w.add_tensor(name, {p.value.size(-1), p.value.size(0)}, gguf::tensor_type::F16, std::move(bytes));
  };
  auto quant = [&](const std::string& name, const Parameter& p, int64_t row0, int64_t rows, kernels::QuantType type,
                   uint32_t id) {
    const auto v = values(p, row0, rows);
    const int64_t cols = p.value.size(-1), row_bytes = kernels::quant_row_bytes(type, cols);
    std::vector<uint8_t> bytes(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) kernels::quantize_row(type, bytes.data() + r * row_bytes, v.data() + r * cols, cols);
    w.add_tensor(name, {cols, rows}, id, std::move(bytes));
  };
  namespace t = gguf::tensor_type;
  using kernels::QuantType;
  f16("token_embd.weight", *source.find("embed.tokens.weight"));
  for (int64_t i = 0; i < 2; ++i) {
    const std::string g = fmt::format("blk.{}.", i), a = fmt::format("decoder.layers.{}.", i);
    const Parameter& qkv = *source.find(a + "attn.qkv.weight");
    quant(g + "attn_q.weight", qkv, 0, H * D, QuantType::Q4_K, t::Q4_K);
    quant(g + "attn_k.weight", qkv, H * D, Hkv * D, QuantType::Q4_K, t::Q4_K);
    quant(g + "attn_v.weight", qkv, (H + Hkv) * D, Hkv * D, QuantType::Q6_K, t::Q6_K);
    quant(g + "attn_output.weight", *source.find(a + "attn.o.weight"), 0, C, QuantType::Q8_0, t::Q8_0);
    quant(g + "ffn_gate.weight", *source.find(a + "ffn.gate.weight"), 0, 512, QuantType::Q4_0, t::Q4_0);
    quant(g + "ffn_up.weight", *source.find(a + "ffn.up.weight"), 0, 512, QuantType::Q5_K, t::Q5_K);
    f32(g + "ffn_down.weight", *source.find(a + "ffn.down.weight"), 0, C);
    f32(g + "attn_norm.weight", *source.find(a + "attn_norm.weight"), 0, 1);
    f32(g + "ffn_norm.weight", *source.find(a + "ffn_norm.weight"), 0, 1);
  }
  f32("output_norm.weight", *source.find("decoder.norm.weight"), 0, 1);
  quant("output.weight", *source.find("lm_head.weight"), 0, 40, QuantType::Q8_0, t::Q8_0);
  const fs::path path = fs::temp_directory_path() / "attend_test_llama.gguf";
  w.write(path);

  ASSERT_TRUE(is_gguf_file(path));
  EXPECT_FALSE(is_gguf_file(fs::path(ATTEND_TEST_DATA) / "models" / "llama" / "config.json"));
  const ModelConfig loaded_config = load_model_config(path);
  EXPECT_EQ(loaded_config.n_kv_heads, 2);
  EXPECT_EQ(loaded_config.rope_base, 500000.0);
  EXPECT_FALSE(loaded_config.tie_embeddings);
  Model model = load_model(path);
  fs::remove(path);
  const Parameter& qkv = *model.find("decoder.layers.1.attn.qkv.weight");
  // Q and K (both Q4_K, one after the other in the file) one segment, V (Q6_K) another, where they lie.
  ASSERT_EQ(qkv.quantized.size(), 2u);
  EXPECT_EQ(qkv.quantized[0].type, WeightType::Q4_K);
  EXPECT_EQ(qkv.quantized[0].rows, (H + Hkv) * D);
  EXPECT_EQ(qkv.quantized[1].type, WeightType::Q6_K);
  EXPECT_EQ(qkv.quantized[1].rows, Hkv * D);
  // Used where they lie: the file's mapping holds the blocks (the file is gone, its mapping is not), and the
  // matrix has no float values of its own; nor has the token table (F16 in the file), held as its 16-bit values,
  // which lookups widen. The norms and the F32 matrix have values.
  for (const QuantizedRows& s : qkv.quantized) EXPECT_NE(s.owner, nullptr);
  EXPECT_FALSE(qkv.has_values());
  EXPECT_FALSE(model.find("lm_head.weight")->has_values());
  const Parameter& table = *model.find("embed.tokens.weight");
  EXPECT_FALSE(table.has_values());
  EXPECT_EQ(table.storage, WeightType::F16);
  EXPECT_EQ(table.packed.size(), static_cast<size_t>(table.numel()));
  EXPECT_TRUE(model.find("decoder.layers.0.ffn.down.weight")->has_values());
  EXPECT_TRUE(model.find("decoder.norm.weight")->has_values());
  EXPECT_EQ(model.parameter_buffer().size(),
            static_cast<size_t>(model.find("decoder.norm.weight")->numel() +
                                2 * (2 * C + model.find("decoder.layers.0.ffn.down.weight")->numel())));
  std::vector<float> rows(static_cast<size_t>(table.numel())), rounded(rows.size());
  std::vector<uint16_t> bits(rows.size());
  nn::dequantize_values(table, rows.data());
  kernels::float_to_half(bits.data(), source.find("embed.tokens.weight")->value.data(), table.numel());
  kernels::half_to_float(rounded.data(), bits.data(), table.numel());
  EXPECT_EQ(rows, rounded);  // the source's values rounded to fp16, as the file holds them
  EXPECT_EQ(model.find("decoder.layers.0.ffn.up.weight")->storage, WeightType::Q5_K);
  EXPECT_EQ(model.find("decoder.layers.0.ffn.down.weight")->storage, WeightType::F32);
  EXPECT_EQ(model.find("lm_head.weight")->storage, WeightType::Q8_0);
  // The values are the blocks' (each within its type's error of the source) and the fp16 table's.
  const auto& src_qkv = source.find("decoder.layers.1.attn.qkv.weight")->value;
  std::vector<float> values(static_cast<size_t>(qkv.numel()));
  nn::dequantize_values(qkv, values.data());
  double err = 0, power = 0;
  for (int64_t i = 0; i < src_qkv.numel(); ++i) err += std::pow(values[i] - src_qkv[i], 2), power += std::pow(src_qkv[i], 2);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(std::sqrt(err / power), 0.1);
  // The model runs: a prompt, then tokens, close to the source model's logits (the weights' own quantization).
  Session a(model, {.max_T = 8}), b(source, {.max_T = 8});
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3};
  const auto la = a.step(prompt);
  const auto lb = b.step(prompt);
  double largest = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) largest = std::max(largest, double(std::abs(la[i] - lb[i]))), scale = std::max(scale, double(std::abs(lb[i])));
  EXPECT_LT(largest, 0.2 * scale);
}

TEST(GgufModel, BadModelFilesNameTheProblem) {
  const fs::path path = fs::temp_directory_path() / "attend_test_bad.gguf";
  {
    gguf::Writer w;
    w.set_string("general.architecture", "mamba");
    w.write(path);
  }
  testing::expect_error_mentions<Error>([&] { (void)load_model(path); }, {"general.architecture", "mamba", "gpt2", "llama"});
  {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    std::vector<uint8_t> table(32 * 4 * 8);
    w.add_tensor("token_embd.weight", {32, 8}, gguf::tensor_type::F32, std::move(table));
    w.write(path);
  }
  testing::expect_error_mentions<Error>([&] { (void)load_model(path); }, {"llama.embedding_length"});
  fs::remove(path);
}

}  // namespace
}  // namespace attend
