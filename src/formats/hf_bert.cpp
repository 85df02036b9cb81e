// Hugging Face's BERT checkpoints: config.json's keys to ModelConfig and back, and one table of tensor names (query,
// key and value stacked into Attend's fused rows) that serves both loading and export.
#include "formats/hf_bert.h"

#include "formats/hf_llama.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/tokenizer.h>

#include <charconv>
#include <map>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

// BERT's tensors and where each lies in Attend's parameters; `p` begins the encoder's names ("bert." or "").
std::vector<RowMapping> bert_mappings(const ModelConfig& c, const std::string& p, const std::string& mlm_bias) {
  const int64_t C = c.d_model;
  std::vector<RowMapping> m = {{p + "embeddings.word_embeddings.weight", "embed.tokens.weight"},
                               {p + "embeddings.position_embeddings.weight", "embed.positions.weight"}};
  if (c.type_vocab_size > 0) m.push_back({p + "embeddings.token_type_embeddings.weight", "embed.token_types.weight"});
  m.push_back({p + "embeddings.LayerNorm.weight", "embed.norm.weight"});
  m.push_back({p + "embeddings.LayerNorm.bias", "embed.norm.bias"});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string hf = fmt::format("{}encoder.layer.{}.", p, i), at = fmt::format("encoder.layers.{}.", i);
    for (const char* kind : {"weight", "bias"}) {
      m.push_back({hf + "attention.self.query." + kind, at + "attn.qkv." + kind, 0});
      m.push_back({hf + "attention.self.key." + kind, at + "attn.qkv." + kind, C});
      m.push_back({hf + "attention.self.value." + kind, at + "attn.qkv." + kind, 2 * C});
      m.push_back({hf + "attention.output.dense." + kind, at + "attn.o." + kind});
      m.push_back({hf + "attention.output.LayerNorm." + kind, at + "attn_norm." + kind});
      m.push_back({hf + "intermediate.dense." + kind, at + "ffn.up." + kind});
      m.push_back({hf + "output.dense." + kind, at + "ffn.down." + kind});
      m.push_back({hf + "output.LayerNorm." + kind, at + "ffn_norm." + kind});
    }
  }
  if (c.pooler)
    for (const char* kind : {"weight", "bias"}) m.push_back({p + "pooler.dense." + kind, std::string("pooler.dense.") + kind});
  if (c.mlm_head) {
    for (const char* kind : {"weight", "bias"}) {
      m.push_back({std::string("cls.predictions.transform.dense.") + kind, std::string("mlm.dense.") + kind});
      m.push_back({std::string("cls.predictions.transform.LayerNorm.") + kind, std::string("mlm.norm.") + kind});
    }
    m.push_back({mlm_bias, "mlm.bias"});
    if (!c.tie_embeddings) m.push_back({"cls.predictions.decoder.weight", "lm_head.weight"});
  }
  if (c.n_classes > 0)
    for (const char* kind : {"weight", "bias"}) m.push_back({std::string("classifier.") + kind, std::string("classifier.") + kind});
  return m;
}


bool is_hf_bert_config(const json& config) {
  if (!config.is_object()) return false;
  const auto type = config.find("model_type");
  if (type != config.end() && type->is_string()) return *type == "bert";
  return names_architecture(config, {"BertModel", "BertForMaskedLM", "BertForPreTraining",
                                     "BertForSequenceClassification"});
}

ModelConfig config_from_hf_bert(const json& j, const std::string& origin, const CheckpointTensors* tensors) {
  const ConfigKeys k(j, origin);
  ModelConfig c;
  c.architecture = Architecture::Encoder;
  c.vocab_size = k.optional<int64_t>("vocab_size", 30522);
  c.d_model = k.optional<int64_t>("hidden_size", 768);
  c.n_layers = k.optional<int64_t>("num_hidden_layers", 12);
  c.n_heads = k.optional<int64_t>("num_attention_heads", 12);
  c.d_ff = k.optional<int64_t>("intermediate_size", 3072);
  c.max_seq_len = k.optional<int64_t>("max_position_embeddings", 512);
  c.type_vocab_size = k.optional<int64_t>("type_vocab_size", 2);
  const std::string act = k.optional<std::string>("hidden_act", "gelu");
  if (act == "gelu") c.activation = FfnKind::GELU;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.activation = FfnKind::GELUTanh;
  else if (act == "relu") c.activation = FfnKind::ReLU;
  else throw Error(fmt::format("{}: hidden_act '{}': expected gelu, gelu_new or relu", origin, act));
  const std::string positions = k.optional<std::string>("position_embedding_type", "absolute");
  check(positions == "absolute", "{}: position_embedding_type '{}': Attend's BERT has absolute (learned) positions",
        origin, positions);
  c.position = PositionKind::Learned;
  c.norm = NormKind::LayerNorm;
  c.norm_eps = k.optional("layer_norm_eps", 1e-12);
  c.pre_norm = false;
  c.bias = true;
  c.embedding_norm = true;
  c.tie_embeddings = k.optional("tie_word_embeddings", true);
  c.embedding_dropout = c.residual_dropout = static_cast<float>(k.optional("hidden_dropout_prob", 0.1));
  c.attention_dropout = static_cast<float>(k.optional("attention_probs_dropout_prob", 0.1));
  c.init_std = k.optional("initializer_range", 0.02);
  c.pooling = Pooling::CLS;
  // The heads: the architectures named, or (given the tensors) what the checkpoint holds.
  const bool mlm = tensors != nullptr ? tensors->find("cls.predictions.transform.dense.weight") != nullptr
                                      : names_architecture(j, {"BertForMaskedLM", "BertForPreTraining"});
  const bool classify = tensors != nullptr ? tensors->find("classifier.weight") != nullptr
                                           : names_architecture(j, {"BertForSequenceClassification"});
  c.mlm_head = mlm;
  check(!mlm || c.activation == FfnKind::GELU, "{}: hidden_act '{}': the masked-LM head of Attend's BERT is GELU",
        origin, act);
  if (classify) {
    const std::string problem = k.optional<std::string>("problem_type", "single_label_classification");
    check(problem == "single_label_classification", "{}: problem_type '{}': Attend's classifiers are single-label",
          origin, problem);
    std::map<int64_t, std::string> names;
    if (k.has("id2label")) {
      const json& labels = j["id2label"];
      check(labels.is_object(), "{}: id2label is {}, expected an object of \"id\": \"name\"", origin, labels.type_name());
      for (const auto& [id, name] : labels.items()) {
        int64_t n = -1;
        const auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), n);
        check(error == std::errc() && end == id.data() + id.size() && n >= 0 && n < 100000 && name.is_string(),
              "{}: id2label[\"{}\"] = {}: expected a class number and its name", origin, id, name.dump());
        names[n] = name.get<std::string>();
      }
    }
    c.n_classes = k.optional<int64_t>("num_labels", static_cast<int64_t>(names.size() > 0 ? names.size() : 2));
    for (int64_t i = 0; i < c.n_classes && static_cast<int64_t>(names.size()) == c.n_classes; ++i) {
      check(names.contains(i), "{}: id2label has no class {} of its {}", origin, i, c.n_classes);
      c.class_names.push_back(names[i]);
    }
  }
  c.pooler = tensors != nullptr ? (tensors->find("bert.pooler.dense.weight") != nullptr ||
                                   tensors->find("pooler.dense.weight") != nullptr)
                                : classify || names_architecture(j, {"BertModel"});
  check(!classify || c.pooler, "{}: a BERT classifier without its pooler (bert.pooler.dense)", origin);
  return validated(c, origin);
}

Model load_hf_bert(const fs::path& dir, const json& config, WeightType matrices) {
  const CheckpointTensors tensors(dir);
  const ModelConfig c = config_from_hf_bert(config, (dir / "config.json").string(), &tensors);
  const std::string prefix = tensors.find("bert.embeddings.word_embeddings.weight") != nullptr ? "bert." : "";
  // The masked-LM bias is cls.predictions.bias, saved once; some files keep its tied copy under the decoder's name.
  const std::string mlm_bias =
      tensors.find("cls.predictions.bias") != nullptr ? "cls.predictions.bias" : "cls.predictions.decoder.bias";
  Model model = model_for_loading(c, matrices, dir);
  auto skipped = [&](const std::string& name) {
    return name == prefix + "embeddings.position_ids" || name == "cls.predictions.decoder.bias" ||
           (c.tie_embeddings && name == "cls.predictions.decoder.weight") ||
           name.starts_with("cls.seq_relationship.");  // BertForPreTraining's next-sentence head
  };
  load_mapped(tensors, model, bert_mappings(c, prefix, mlm_bias), skipped,
              fmt::format("a BERT of this config ({} layers, hidden_size {})", c.n_layers, c.d_model));
  finish_loading(model, matrices);
  return model;
}

}  // namespace attend::formats

namespace attend {

void export_hf_bert(const Model& model, const std::filesystem::path& dir, const Tokenizer* tokenizer, DType dtype) {
  const ModelConfig& c = model.config();
  const formats::ExportChecks checks("hf-bert", "BERT");
  auto require = [&](bool ok, std::string_view option, std::string_view found, std::string_view wanted) {
    checks.require(ok, option, found, wanted);
  };
  require(c.architecture == Architecture::Encoder, "architecture", architecture_name(c.architecture), "encoder");
  require(!c.pre_norm && c.norm == NormKind::LayerNorm && c.embedding_norm && !c.sandwich_norm && !c.norm_unit_offset,
          "norms", "not BERT's", "post-LN LayerNorm blocks and a LayerNorm over the embeddings");
  require(c.position == PositionKind::Learned, "position", "not learned", "learned positions");
  require(c.bias && c.kv_heads() == c.n_heads && c.head_dim == 0 && !c.qk_norm, "attention", "not BERT's",
          "biases, one key/value head per head, d_model / n_heads channels each");
  require(c.activation == FfnKind::GELU || c.activation == FfnKind::GELUTanh || c.activation == FfnKind::ReLU,
          "activation", "gated", "gelu, gelu_new or relu");
  require(c.n_experts == 0 && c.residual_scale == 1.0 && c.attention_scale == 0.0 && !c.scale_embeddings,
          "n_experts, residual_scale, attention_scale or scale_embeddings", "set", "none of them");
  require(c.n_classes == 0 || (c.pooler && c.pooling == Pooling::CLS), "pooler", "off", "the [CLS] state pooled by tanh(dense)");

  formats::create_export_directory(dir);
  // The class: a classifier is BertForSequenceClassification (its masked-LM head, if any, stays behind), a masked-LM
  // head BertForMaskedLM, neither BertModel, which names its tensors without "bert.".
  ModelConfig written = c;
  if (c.n_classes > 0) written.mlm_head = false;
  const bool bare = c.n_classes == 0 && !c.mlm_head;
  formats::write_mapped(model, formats::bert_mappings(written, bare ? "" : "bert.", "cls.predictions.bias"), dir, dtype);
  const char* architecture = c.n_classes > 0 ? "BertForSequenceClassification"
                             : c.mlm_head    ? "BertForMaskedLM"
                                             : "BertModel";
  const char* act = c.activation == FfnKind::GELU ? "gelu" : c.activation == FfnKind::GELUTanh ? "gelu_new" : "relu";
  nlohmann::ordered_json config = {{"architectures", {architecture}},
                                   {"model_type", "bert"},
                                   {"vocab_size", c.vocab_size},
                                   {"hidden_size", c.d_model},
                                   {"num_hidden_layers", c.n_layers},
                                   {"num_attention_heads", c.n_heads},
                                   {"intermediate_size", c.ffn_hidden()},
                                   {"hidden_act", act},
                                   {"hidden_dropout_prob", c.residual_dropout},
                                   {"attention_probs_dropout_prob", c.attention_dropout},
                                   {"max_position_embeddings", c.max_seq_len},
                                   {"type_vocab_size", c.type_vocab_size},
                                   {"initializer_range", c.init_std},
                                   {"layer_norm_eps", c.norm_eps},
                                   {"position_embedding_type", "absolute"},
                                   {"tie_word_embeddings", c.tie_embeddings},
                                   {"torch_dtype", formats::torch_dtype_name(dtype)}};
  if (c.n_classes > 0) {
    nlohmann::ordered_json id2label = nlohmann::ordered_json::object(), label2id = nlohmann::ordered_json::object();
    for (int64_t i = 0; i < c.n_classes; ++i) {
      const std::string name = c.class_names.empty() ? fmt::format("LABEL_{}", i) : c.class_names[i];
      id2label[std::to_string(i)] = name;
      label2id[name] = i;
    }
    config["id2label"] = id2label;
    config["label2id"] = label2id;
  }
  formats::write_hf_extras(tokenizer, dir, config);
  if (tokenizer != nullptr)
    if (const auto pad = tokenizer->special_id(SpecialRole::Pad)) config["pad_token_id"] = *pad;
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace attend
