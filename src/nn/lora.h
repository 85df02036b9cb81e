// LoRA adapters (Hu et al. 2021; PEFT's layout): the layers that own a weight own its adapters too
// (LoraAdapters), and every matmul with the weight applies them (lora_forward, lora_backward, called by
// linear_forward and linear_backward), in fp32:
//
//   y[:, row0:row0+rows] += s · (x·Aᵀ)·Bᵀ                          A (r, in), B (rows, r), s = alpha/r
//   ∂B += s · dy_rowsᵀ·(x·Aᵀ);   t = dy_rows·B;   ∂A += s · tᵀ·x;   ∂x += s · t·A
#pragma once

#include <attend/model.h>
#include <attend/parameter.h>
#include <attend/rng.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attend::nn {

// A's start: PyTorch's nn.Linear default that PEFT keeps, Kaiming-uniform with a = √5, U(−1/√in, 1/√in), from
// numbers offset… of stream `seed`.
void draw_lora_a(Parameter& a, uint64_t seed, uint64_t offset);

// Adapter dropout's numbers for one matmul of a training forward: backward regenerates the masks from them. Each
// adapter with dropout p > 0 on the weight takes N·in numbers from `rng` (in the order of weight.lora).
struct LoraStream {
  bool active = false;
  uint64_t seed = 0, offset = 0;
};
LoraStream lora_dropout_stream(const Parameter& weight, int64_t N, bool training, Rng* rng);

// row_masks (N, or nullptr for every adapter on every row): row n takes the adapters whose slot bit it has;
// row_scales (N, or nullptr): where row_scales[n] is not nullptr and row_scales[n][k] not NaN, the adapters of slot
// k run on row n at the multiplier row_scales[n][k] in place of the one they were loaded with (LowRankUpdate::unit
// times it, as LoraConfig::scale computes it: the bits of the adapter loaded so). per_row: each row through its
// own products, so that a row's output is that row's alone, bit for bit (PerRowMatmuls).
void lora_forward(float* out, const float* inp, const Parameter& weight, int64_t N, int64_t C, int64_t OC,
                  const uint64_t* row_masks = nullptr, bool per_row = false, const LoraStream* drop = nullptr,
                  const double* const* row_scales = nullptr);
void lora_backward(float* dinp, const Parameter& weight, const float* dout, const float* inp, int64_t N, int64_t C,
                   int64_t OC, const LoraStream* drop = nullptr);

// Whether `parameter` belongs to the module `module` of LoraConfig::modules_to_save: "classifier", "pooler", or
// "embeddings" (the token embeddings, and the LM head where it is its own).
bool saved_module_holds(std::string_view module, std::string_view parameter);

// `wanted` (a slot mask: SessionOptions::adapters) cut to the slots the model has.
uint64_t adapter_mask(const Model& model, uint64_t wanted);
// SessionOptions::adapter_scales checked (finite) and laid out one per slot of the model, NaN where a slot runs at
// the multiplier it was loaded with; empty when every slot does (lora_forward's row_scales then needs none).
std::vector<double> adapter_multipliers(const Model& model, std::span<const std::optional<double>> scales);
// What SelectAdapters takes for `rows` rows that all run with the adapter sets of `mask` at `multipliers`
// (adapter_multipliers'): each row's mask and multipliers, or nothing where that is every set of the model at the
// scale it was loaded with.
struct SameAdapters {
  SameAdapters(const Model& model, uint64_t mask, const std::vector<double>& multipliers, int64_t rows);
  std::vector<uint64_t> masks;
  std::vector<const double*> scales;
};
// LoraConfig::r's bound.
inline constexpr int64_t kMaxLoraRank = 65536;
// The projections LoRA adapts (LoraConfig::targets), in Attend's order.
inline constexpr std::array<std::string_view, 7> kLoraTargets = {"q", "k", "v", "o", "up", "gate", "down"};
// Those of `targets`, in that order.
std::vector<std::string> in_target_order(const std::set<std::string>& targets);

// The slot of the model's own adapter set (Model::adapters' ""), or adapters().size() when it has none.
int own_adapter_slot(const Model& model);

// Writing adapters to a file whose tensor holds rows [row0, row0 + rows) of one of Attend's weights (a PEFT
// module, a GGUF tensor): the updates of set `slot` on those rows; one that straddles them is an error naming
// `tensor`.
std::vector<const LowRankUpdate*> updates_on_rows(const Parameter& weight, int slot, int64_t row0, int64_t rows,
                                                  std::string_view tensor);
// Those updates as the tensor's one adapter: A (rank, in) and B (rows, rank), A's stacked and B block-diagonal, or,
// where they share one A over all the rows (a fused module read from a file, GPT-2's c_attn, split by target),
// that A with their B rows side by side. stacked_rank is the rank that takes; stack_updates writes it into a and
// b (zeros where no adapter is; a larger `rank` pads with zeros), B's part of update u times factor(u).
int64_t stacked_rank(const std::vector<const LowRankUpdate*>& updates, int64_t rows);
void stack_updates(const std::vector<const LowRankUpdate*>& updates, int64_t row0, int64_t rows, int64_t rank,
                   float* a, float* b, const std::function<float(const LowRankUpdate&)>& factor = nullptr);

// The targets (q, k, v, o, up, gate, down) whose rows the weight of this name holds, as the layers adapt them
// (self-attention's qkv: q, k and v; cross-attention's q and kv; o; the FFN's up, gate and down); none for others.
std::vector<std::string> lora_targets_of(std::string_view weight);
// The key of LoraConfig::per_module for the adapter of `target` on `weight` (a name such as
// "decoder.layers.3.attn.qkv.weight"): its adapter's name before ".lora_A" ("decoder.layers.3.attn.qkv.q").
std::string lora_module_key(std::string_view weight, std::string_view target);
// The block of a module key ("decoder.layers.3.attn.qkv.q": 3), -1 for none.
int64_t lora_module_layer(std::string_view key);
// The modules of config.targets in the blocks config.layers names, each at config's r and alpha (per_module's
// entries); empty when it names every block. A block the model lacks is an error.
std::map<std::string, LoraConfig::Rank> modules_of_layers(const Model& model, const LoraConfig& config);
// The keys of every projection of `targets` the model holds, each block's: what a set adapting `targets` on every
// block adapts.
std::set<std::string> lora_module_keys(const Model& model, const std::vector<std::string>& targets);
// The one rank and alpha of `per_module`, where it names exactly those projections (every block of `targets`) and
// gives them all the same: a set a LoRA run's own config can describe. nullopt otherwise.
std::optional<LoraConfig::Rank> one_rank_on_every_block(const Model& model, const std::vector<std::string>& targets,
                                                        const std::map<std::string, LoraConfig::Rank>& per_module);

// The adapters a layer owns. Adding one registers it on its weight (Parameter::lora).
class LoraAdapters {
 public:
  // An adapter on `weight`'s output rows [row0, row0 + rows), named "<weight without .weight>.<label>lora_A.weight"
  // (label "" or "q." for a part of a fused matrix); where config.per_module is not empty, at the rank and alpha it
  // gives this module, or none where it names the module not.
  void add(Parameter& weight, const std::string& label, int64_t row0, int64_t rows, const LoraConfig& config);
  // `weight`'s adapters' parameters, A then B each, in the order they were added.
  void collect(const Parameter& weight, std::vector<Parameter*>& out) const;
  // W += s·B·A for each adapter, which then goes.
  void merge();
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    Parameter* weight;
    std::unique_ptr<Parameter> A, B;
  };
  std::vector<Entry> entries_;
};

}  // namespace attend::nn
