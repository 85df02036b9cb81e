// Hugging Face checkpoints of BERT as published: BertModel, BertForMaskedLM (and BertForPreTraining's masked-LM
// half) and BertForSequenceClassification; config.json with BERT's keys, the weights in model.safetensors or shards,
// tensor names with the "bert." prefix of the heads' classes or without it (BertModel).
//
// What BERT is in Attend's options: an encoder of post-LN LayerNorm blocks with biases, learned positions, token
// type embeddings (type_vocab_size) summed with the tokens' and normed (embedding_norm), the exact GELU; its
// masked-LM head is Attend's (dense, GELU, LayerNorm, the tied embeddings, a bias); its classifier reads
// tanh(dense(h[CLS])) (pooler).
#pragma once

#include "formats/hf_checkpoint.h"

#include <attend/model.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace attend::formats {

// Whether a parsed config.json is BERT's (model_type "bert", or architectures naming a Bert class).
bool is_hf_bert_config(const nlohmann::json& config);
// Attend's configuration of such a config.json; missing keys take BertConfig's defaults. The heads come from
// `architectures` or, given the checkpoint's tensors, from which of them it holds. Errors name the key.
ModelConfig config_from_hf_bert(const nlohmann::json& config, const std::string& origin,
                                const CheckpointTensors* tensors = nullptr);
// Loads DIR (config.json; model.safetensors or its shards), its matrices as `matrices` (model_for_loading).
Model load_hf_bert(const std::filesystem::path& dir, const nlohmann::json& config,
                  WeightType matrices = WeightType::F32);
// BERT's tensors and where each lies in Attend's parameters; `prefix` begins the encoder's names ("bert." in the
// heads' classes, "" in BertModel's), `mlm_bias` names the masked-LM head's bias.
std::vector<RowMapping> bert_mappings(const ModelConfig& c, const std::string& prefix, const std::string& mlm_bias);

}  // namespace attend::formats
