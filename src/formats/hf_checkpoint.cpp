// Hugging Face checkpoint directories: one weights file or shards named by an index, and config keys.
#include "core/json_fields.h"
#include "formats/hf_checkpoint.h"

#include "kernels/convert.h"
#include "nn/layers.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/tokenizer.h>

#include <algorithm>
#include <map>
#include <set>

namespace attend::formats {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::map<std::string, std::string> parse_shard_index(std::string_view text, std::string_view origin) {
  check_json_depth(text, origin);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!j.is_discarded(), "{}: not valid JSON", origin);
  check(j.is_object(), "{}: expected a JSON object with a \"weight_map\"", origin);
  const auto map = j.find("weight_map");
  check(map != j.end() && map->is_object(), "{}: no \"weight_map\" object (tensor name → file)", origin);
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map->items()) {
    check(file.is_string(), "{}: weight_map[\"{}\"] is {}, expected a file name", origin, name, file.type_name());
    const std::string f = file.get<std::string>();
    check(!f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos && f != "." &&
              f != "..",
          "{}: weight_map[\"{}\"] = \"{}\" is not a file name in the checkpoint's directory", origin, name, f);
    out.emplace(name, f);
  }
  check(!out.empty(), "{}: the weight_map names no tensor", origin);
  return out;
}

CheckpointTensors::CheckpointTensors(const fs::path& dir) : dir_(dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single) || !fs::exists(index)) {
    check(fs::exists(single), "{}: no model.safetensors (nor model.safetensors.index.json for shards; Attend reads "
          "checkpoints in safetensors, not pytorch_model.bin)", dir.string());
    readers_.push_back(std::make_unique<SafetensorsReader>(single));
    for (const TensorInfo& t : readers_[0]->tensors()) where_.emplace(t.name, 0);
    return;
  }
  sharded_ = true;
  const std::map<std::string, std::string> weight_map = parse_shard_index(read_file(index), index.string());
  std::map<std::string, size_t> files;  // shard name → readers_ index
  for (const auto& [name, file] : weight_map) {
    auto [it, added] = files.emplace(file, readers_.size());
    if (added) {
      const fs::path shard = dir / file;
      check(fs::exists(shard), "{}: missing shard {} (model.safetensors.index.json names it for '{}')", dir.string(),
            file, name);
      readers_.push_back(std::make_unique<SafetensorsReader>(shard));
    }
    check(readers_[it->second]->find(name) != nullptr, "{}: the index puts '{}' in {}, which does not hold it",
          index.string(), name, file);
    where_.emplace(name, it->second);
  }
  for (const auto& [file, i] : files)
    for (const TensorInfo& t : readers_[i]->tensors())
      check(where_.contains(t.name) && where_.find(t.name)->second == i,
            "{}: {} holds '{}', which the index does not give it", index.string(), file, t.name);
}

const TensorInfo* CheckpointTensors::find(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : readers_[it->second]->find(name);
}

void CheckpointTensors::load_into(std::string_view name, TensorView out, std::string_view what_for) const {
  const auto it = where_.find(name);
  check(it != where_.end(), "{}: no tensor '{}', which {} has", dir_.string(), name, what_for);
  readers_[it->second]->load_into(name, out);
}

void CheckpointTensors::load_rows_into(std::string_view name, int64_t row0, int64_t rows, float* out,
                                       std::string_view what_for) const {
  const auto it = where_.find(name);
  check(it != where_.end(), "{}: no tensor '{}', which {} has", dir_.string(), name, what_for);
  readers_[it->second]->load_rows_into(name, row0, rows, out);
}

Tensor CheckpointTensors::load(std::string_view name, std::string_view what_for) const {
  const auto it = where_.find(name);
  check(it != where_.end(), "{}: no tensor '{}', which {} has", dir_.string(), name, what_for);
  return readers_[it->second]->load(name);
}

std::vector<std::string> CheckpointTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const std::string& CheckpointTensors::origin(std::string_view name) const {
  return readers_[where_.find(name)->second]->origin();
}

std::string decoder_block(int64_t i) { return fmt::format("decoder.layers.{}.", i); }

ModelConfig validated(const ModelConfig& c, const std::string& origin) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return c;
}

void ExportChecks::require(bool ok, std::string_view option, std::string_view found, std::string_view wanted) const {
  check(ok, "export {}: {} is {}, {} has {}", format_, option, found, family_, wanted);
}

void ExportChecks::decoder(const ModelConfig& c) const {
  require(c.architecture == Architecture::Decoder, "architecture", architecture_name(c.architecture), "decoder");
  require(c.pre_norm, "norm_placement", "post", "pre");
  require(c.n_experts == 0, "n_experts", std::to_string(c.n_experts), "dense FFNs");
  require(c.residual_scale == 1.0, "residual_scale", std::to_string(c.residual_scale), "1");
  require(c.attention_kernel != AttentionKernel::Linear, "attention_kernel", "linear", "softmax attention");
}

void ExportChecks::unscaled(const ModelConfig& c) const {
  require(c.attention_scale == 0.0, "attention_scale", std::to_string(c.attention_scale), "1/sqrt(d_head)");
  require(!c.scale_embeddings, "scale_embeddings", "true", "unscaled embeddings");
}

void ExportChecks::plain_norms(const ModelConfig& c) const {
  require(!c.sandwich_norm, "sandwich_norm", "true", "two norms a block");
  require(!c.norm_unit_offset, "norm_unit_offset", "true", "norms that multiply by their gain");
}

namespace {

// The shape of `rows` rows of parameter p: (rows, cols) for a matrix, (rows) for a vector.
Shape rows_of(const Parameter& p, int64_t rows) {
  return p.value.rank() == 2 ? Shape{rows, p.value.size(1)} : Shape{rows};
}

// Where mapping m's rows end: at the next mapping into the same parameter, or at the parameter's last row.
int64_t slice_end(const std::vector<RowMapping>& mappings, const RowMapping& m, const Parameter& p) {
  int64_t end = p.value.size(0);
  for (const RowMapping& other : mappings)
    if (other.attend == m.attend && other.row > m.row) end = std::min(end, other.row);
  return end;
}

Parameter& parameter_named(Model& model, const std::string& name) {
  Parameter* p = model.find(name);
  check(p != nullptr, "internal: no parameter '{}' to map a checkpoint tensor to", name);
  return *p;
}

}  // namespace

Model model_for_loading(const ModelConfig& c, WeightType matrices, const fs::path& dir) {
  const bool half = matrices == WeightType::BF16 || matrices == WeightType::F16;
  check(half || matrices == WeightType::F32, "{}: loading as {}: expected f32, bf16 or f16", dir.string(),
        weight_type_name(matrices));
  if (!half) return Model::for_loading(c);
  Model model = Model::for_loading(c, [&](const Parameter& p) { return Model::multiplies(p, c); });
  for (Parameter* p : model.parameters())
    if (!p->has_values()) p->storage = matrices, p->packed.resize(static_cast<size_t>(p->numel()));
  return model;
}

void fill_packed(Parameter& p, int64_t at, const float* x, int64_t n) {
  check(at >= 0 && at + n <= static_cast<int64_t>(p.packed.size()), "internal: {} values at {} past the {} of '{}'", n, at,
        p.packed.size(), p.name);
  kernels::round_to_half(nn::half_type(p.storage), p.packed.data() + at, x, n);  // half_type refuses other types
}

void load_packed_rows(const CheckpointTensors& tensors, std::string_view name, Parameter& p, int64_t row,
                      std::string_view what_for, std::vector<float>& scratch) {
  const TensorInfo* t = tensors.find(name);
  check(t != nullptr, "internal: no tensor '{}'", name);
  const int64_t rows = t->shape.rank() == 0 ? 1 : t->shape[0];
  const int64_t cols = rows == 0 ? 0 : t->shape.numel() / rows;
  const int64_t p_cols = p.value.rank() == 2 ? p.value.size(1) : 1;
  check(cols == p_cols && row >= 0 && row + rows <= p.value.size(0),
        "{}: tensor '{}' of shape {} does not fit rows {}.. of '{}' (shape {})", tensors.origin(name), name, t->shape,
        row, p.name, p.value.shape());
  const int64_t step = std::max<int64_t>(1, (int64_t{16} << 20) / std::max<int64_t>(cols, 1));
  scratch.resize(static_cast<size_t>(std::min(rows, step) * cols));
  for (int64_t r = 0; r < rows; r += step) {
    const int64_t n = std::min(step, rows - r);
    tensors.load_rows_into(name, r, n, scratch.data(), what_for);
    fill_packed(p, (row + r) * cols, scratch.data(), n * cols);
  }
}

void finish_loading(Model& model, WeightType matrices) {
  if (matrices != WeightType::F32) model.set_storage(matrices, [](const Parameter& p) { return p.has_values(); });
}

void load_mapped(const CheckpointTensors& tensors, Model& model, const std::vector<RowMapping>& mappings,
                 const std::function<bool(const std::string&)>& skipped, const std::string& what) {
  std::set<std::string> used;
  std::map<std::string, int64_t> covered;  // rows mapped into each parameter
  std::vector<float> scratch;              // for packed parameters
  for (const RowMapping& m : mappings) {
    Parameter& p = parameter_named(model, m.attend);
    const TensorInfo* t = tensors.find(m.hf);
    check(t != nullptr, "{}: no tensor '{}', which {} has", tensors.dir().string(), m.hf, what);
    const int64_t rows = slice_end(mappings, m, p) - m.row;
    const int64_t stride = p.value.rank() == 2 ? p.value.size(1) : 1;
    check(t->shape == rows_of(p, rows), "{}: tensor '{}' has shape {}, config.json implies {}", tensors.origin(m.hf),
          m.hf, t->shape, rows_of(p, rows));
    if (p.has_values()) tensors.load_into(m.hf, TensorView(p.value.data() + m.row * stride, t->shape), what);
    else load_packed_rows(tensors, m.hf, p, m.row, what, scratch);
    used.insert(m.hf);
    covered[m.attend] += rows;
  }
  for (const auto& [name, rows] : covered)
    check(rows == parameter_named(model, name).value.size(0), "internal: the checkpoint fills {} of {}'s {} rows",
          rows, name, parameter_named(model, name).value.size(0));
  for (const std::string& name : tensors.names())
    check(used.contains(name) || skipped(name), "{}: unexpected tensor '{}': not part of {}", tensors.origin(name),
          name, what);
}

const char* torch_dtype_name(DType dtype) {
  return dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
}

void write_mapped(const Model& model, const std::vector<RowMapping>& mappings, const fs::path& dir, DType dtype) {
  for (const Parameter* p : model.parameters())
    check(p->has_values(), "{}: '{}' is held as quantized blocks only; Hugging Face's layout holds float values "
          "(Model::ensure_values)", dir.string(), p->name);
  std::vector<Tensor> stored;
  stored.reserve(mappings.size());  // never reallocated: `tensors` points into it
  std::vector<NamedTensor> tensors;
  for (const RowMapping& m : mappings) {
    const Parameter* p = model.find(m.attend);
    check(p != nullptr, "internal: no parameter '{}' to export", m.attend);
    const int64_t end = slice_end(mappings, m, *p);
    const int64_t stride = p->value.rank() == 2 ? p->value.size(1) : 1;
    stored.push_back(Tensor(rows_of(*p, end - m.row),
                            std::span<const float>(p->value.data() + m.row * stride, (end - m.row) * stride)));
    tensors.push_back({m.hf, &stored.back()});
  }
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}}, dtype);
}

void create_export_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(fs::is_directory(dir), "{}: cannot create the directory: {}", dir.string(), ec.message());
}

void write_hf_extras(const Tokenizer* tokenizer, const fs::path& dir, nlohmann::ordered_json& config) {
  if (tokenizer == nullptr) return;
  if (const auto bos = tokenizer->special_id(SpecialRole::Bos)) config["bos_token_id"] = *bos;
  if (const auto eos = tokenizer->special_id(SpecialRole::Eos)) config["eos_token_id"] = *eos;
  tokenizer->save(dir / "tokenizer.json");
}

int64_t ConfigKeys::integer(const char* key) const {
  check(j_.contains(key) && j_[key].is_number_integer(), "{}: needs an integer '{}'", origin_, key);
  return j_[key].get<int64_t>();
}

}  // namespace attend::formats
