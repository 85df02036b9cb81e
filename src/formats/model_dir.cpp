// The model directory: config.json + model.safetensors (+ tokenizer.json), docs/FORMATS.md.
#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/runtime.h>
#include <attend/safetensors.h>
#include <attend/tokenizer.h>

#include "core/json_fields.h"
#include "formats/gguf_model.h"
#include "formats/hf_checkpoint.h"
#include "formats/hf_gpt2.h"
#include "formats/hf_bert.h"
#include "formats/hf_gemma3.h"
#include "formats/hf_llama.h"
#include "formats/hf_t5.h"
#include "nn/layers.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace attend {

namespace fs = std::filesystem;

void copy_generation_files(const fs::path& source, const fs::path& out) {
  if (!fs::is_directory(source)) return;
  for (const char* name : {"generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
    if (fs::exists(source / name) && !fs::exists(out / name)) write_file_atomic(out / name, read_file(source / name));
}

void save_model(const Model& model, const fs::path& dir, const Tokenizer* tokenizer, WeightType weights) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec && fs::is_directory(dir), "{}: cannot create the model directory: {}", dir.string(), ec.message());
  std::vector<NamedTensor> tensors;
  std::vector<Tensor> dequantized;  // a matrix held as blocks only (QLoRA's frozen base): its blocks' values
  dequantized.reserve(model.parameters().size());
  for (const Parameter* p : model.parameters()) {
    if (p->has_values()) {
      tensors.push_back({p->name, &p->value});
      continue;
    }
    dequantized.push_back(Tensor::uninitialized(p->value.shape()));
    nn::dequantize_values(*p, dequantized.back().data());
    tensors.push_back({p->name, &dequantized.back()});
  }
  write_safetensors(dir / "model.safetensors", tensors,
                    {{"format", "pt"}, {"producer", fmt::format("attend {}", version())},
                     {"architecture", architecture_name(model.config().architecture)}},
                    weights == WeightType::BF16 ? DType::BF16 : weights == WeightType::F16 ? DType::F16 : DType::F32);
  write_file_atomic(dir / "config.json", model.config().to_json());
  if (tokenizer != nullptr) tokenizer->save(dir / "tokenizer.json");
}

namespace {

using json = nlohmann::json;

// Hugging Face's families, as load_model tries them: which config.json is theirs, its configuration, its loader.
struct Family {
  bool (*is)(const json& config);
  ModelConfig (*config)(const fs::path& dir, const json& config);
  Model (*load)(const fs::path& dir, const json& config, WeightType matrices);  // straight into `matrices`
  std::vector<std::string> architectures;  // the classes of config.json's "architectures" it reads
};

std::string config_origin(const fs::path& dir) { return (dir / "config.json").string(); }

const Family kFamilies[] = {
    {formats::is_hf_gpt2_config,
     [](const fs::path& d, const json& j) { return formats::config_from_hf_gpt2(j, config_origin(d)); },
     formats::load_hf_gpt2, {"GPT2LMHeadModel", "GPT2Model"}},
    {formats::is_hf_llama_config,
     [](const fs::path& d, const json& j) { return formats::config_from_hf_llama(j, config_origin(d)); },
     formats::load_hf_llama, {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}},
    {formats::is_hf_gemma3_config,
     [](const fs::path& d, const json& j) { return formats::config_from_hf_gemma3(j, config_origin(d)); },
     formats::load_hf_gemma3, {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}},
    {formats::is_hf_t5_config,
     [](const fs::path& d, const json& j) { return formats::config_from_hf_t5(j, config_origin(d)); },
     formats::load_hf_t5, {"T5ForConditionalGeneration", "MT5ForConditionalGeneration", "T5WithLMHeadModel"}},
    {formats::is_hf_bert_config,  // which heads BERT has, its tensors say
     [](const fs::path& d, const json& j) {
       const formats::CheckpointTensors tensors(d);
       return formats::config_from_hf_bert(j, config_origin(d), &tensors);
     },
     formats::load_hf_bert,
     {"BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"}},
};

// config.json's model_type and architectures, as a message names them: "model_type 'phi3' (Phi3ForCausalLM)".
std::string hf_kind(const json& config) {
  std::string kind;
  if (const auto t = config.find("model_type"); t != config.end()) kind = "model_type " + t->dump();
  if (const auto a = config.find("architectures"); a != config.end() && a->is_array() && !a->empty()) {
    std::string names;
    for (const json& n : *a) names += (names.empty() ? "" : ", ") + (n.is_string() ? n.get<std::string>() : n.dump());
    kind += kind.empty() ? "architectures " + names : " (" + names + ")";
  }
  return kind;
}

// DIR's config.json, checked to be a model directory's (errors name what is missing), and its Hugging Face family.
std::pair<std::string, const Family*> read_config(const fs::path& dir) {
  check(fs::is_directory(dir), "{}: not a model directory (expected a directory holding config.json and "
                               "model.safetensors)", dir.string());
  // `attend train` writes its model to OUT/checkpoint: name it when given the run's directory.
  check(!fs::exists(dir / "checkpoint" / "config.json"),
        "{}: a training run's directory; its model is {}", dir.string(), (dir / "checkpoint").string());
  check(fs::exists(dir / "config.json"), "{}: missing config.json", dir.string());
  std::string text = read_file(dir / "config.json");
  check_json_depth(text, config_origin(dir));
  const auto parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  for (const Family& f : kFamilies) {
    if (!f.is(parsed)) continue;
    // A class of the family that Attend does not read (Qwen3ForSequenceClassification beside model_type qwen3)
    // would load as the causal LM and drop its head.
    if (const auto a = parsed.find("architectures"); a != parsed.end() && a->is_array())
      for (const json& name : *a)
        check(name.is_string() && std::find(f.architectures.begin(), f.architectures.end(), name.get<std::string>()) !=
                                       f.architectures.end(),
              "{}: architectures names {}, which Attend does not read; of this family it reads {}", config_origin(dir),
              name.dump(), fmt::join(f.architectures, ", "));
    return {std::move(text), &f};
  }
  // Attend's own config.json has neither key: a Hugging Face model of a family Attend does not read.
  check(!(parsed.is_object() && (parsed.contains("model_type") || parsed.contains("architectures"))),
        "{}: {} is not a model Attend reads; it reads Hugging Face's GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma 3, T5 "
        "(and mT5) and BERT checkpoints (docs/FORMATS.md)",
        config_origin(dir), hf_kind(parsed));
  return {std::move(text), nullptr};
}

}  // namespace

ModelConfig load_model_config(const fs::path& dir) {
  if (formats::is_gguf_file(dir)) return formats::config_from_gguf(gguf::Reader(dir));
  const auto [text, family] = read_config(dir);
  if (family != nullptr) return family->config(dir, json::parse(text));
  return ModelConfig::from_json(text, config_origin(dir));
}

bool is_gguf_file(const fs::path& path) { return formats::is_gguf_file(path); }
std::optional<Tokenizer> load_gguf_tokenizer(const fs::path& path) { return formats::load_gguf_tokenizer(path); }
std::optional<std::string> gguf_chat_template(const fs::path& path) { return formats::gguf_chat_template(path); }

namespace {

// The model as set_storage(matrices) and hold_as_stored() make it; as it is for F32.
Model stored_as(Model model, WeightType matrices) {
  if (matrices == WeightType::F32) return model;
  model.set_storage(matrices);
  model.hold_as_stored();
  return model;
}

}  // namespace

Model load_model(const fs::path& dir, WeightType matrices) {
  check(matrices == WeightType::F32 || matrices == WeightType::BF16 || matrices == WeightType::F16,
        "load_model: matrices must be f32, bf16 or f16, got {}", weight_type_name(matrices));
  if (formats::is_gguf_file(dir)) return stored_as(formats::load_gguf_model(dir), matrices);  // llama.cpp's file
  // Hugging Face checkpoints are read as published (formats/hf_*.cpp).
  const auto [config_text, family] = read_config(dir);
  if (family != nullptr) {
    Model model = family->load(dir, json::parse(config_text), matrices);
    release_cached_memory();  // the loader's scratch tensors
    return model;
  }
  const fs::path config_path = dir / "config.json", weights_path = dir / "model.safetensors";
  check(fs::exists(weights_path), "{}: missing model.safetensors", dir.string());
  const ModelConfig config = ModelConfig::from_json(config_text, config_path.string());
  // 16 bits: the matrices packed with no fp32 values, read through a scratch as Hugging Face's directories are.
  Model model = formats::model_for_loading(config, matrices, dir);
  const formats::CheckpointTensors tensors(dir);  // model.safetensors, its header parsed once for all below
  const SafetensorsReader& reader = *tensors.single();
  std::set<std::string> expected;
  // The file maps straight into the parameter buffer when it is that buffer: every tensor F32, in the
  // model's order, one after the other (what save_model writes in f32), and the data float-aligned.
  bool mappable = reader.data_start() % alignof(float) == 0;
  uint64_t next = 0;
  for (const Parameter* p : model.parameters()) {
    expected.insert(p->name);
    const TensorInfo* t = reader.find(p->name);
    check(t != nullptr, "{}: no tensor '{}' of shape {}, which config.json implies ({} {})", weights_path.string(),
          p->name, p->value.shape(), architecture_name(config.architecture),
          fmt::format("d_model {}, {} layers", config.d_model, config.n_layers));
    check(t->shape == p->value.shape(), "{}: tensor '{}' has shape {}, config.json implies {}", weights_path.string(),
          p->name, t->shape, p->value.shape());
    mappable = mappable && t->dtype == DType::F32 && t->begin == next;
    next = t->end;
  }
  for (const TensorInfo& t : reader.tensors())
    check(expected.contains(t.name), "{}: unexpected tensor '{}' ({} {}): config.json implies no such parameter",
          weights_path.string(), t.name, dtype_name(t.dtype), t.shape);
  if (matrices != WeightType::F32) {
    const std::string what = fmt::format("this {} model", architecture_name(config.architecture));
    std::vector<float> scratch;
    for (Parameter* p : model.parameters()) {
      if (p->has_values()) tensors.load_into(p->name, p->value.view(), what);
      else formats::load_packed_rows(tensors, p->name, *p, 0, what, scratch);
    }
    formats::finish_loading(model, matrices);
  } else if (mappable) {
    std::shared_ptr<FileMapping> mapping = map_private(weights_path);
    check(mapping->size >= reader.data_start() + next, "{}: changed while it was being loaded", weights_path.string());
    auto* values = reinterpret_cast<float*>(static_cast<unsigned char*>(mapping->base) + reader.data_start());
    model.adopt_parameter_buffer(std::span<float>(values, next / sizeof(float)), std::move(mapping));
  } else {
    for (Parameter* p : model.parameters()) reader.load_into(p->name, p->value.view());
  }
  release_cached_memory();  // the buffers the model was built in, which loading replaced
  return model;
}

void export_hf(const Model& model, const fs::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  if (c.architecture == Architecture::EncoderDecoder) return export_hf_t5(model, dir, tokenizer, dtype);
  if (c.architecture == Architecture::Encoder) return export_hf_bert(model, dir, tokenizer, dtype);
  if (c.sandwich_norm || c.norm_unit_offset) return export_hf_gemma3(model, dir, tokenizer, dtype);
  if (c.position == PositionKind::RoPE) return export_hf_llama(model, dir, tokenizer, dtype);
  export_hf_gpt2(model, dir, tokenizer, dtype);
}

}  // namespace attend
