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

#include <memory>
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

// row_masks (N, or nullptr for every adapter on every row): row n takes the adapters whose slot bit it has.
// per_row: each row through its own products, so that a row's output is that row's alone, bit for bit
// (PerRowMatmuls).
void lora_forward(float* out, const float* inp, const Parameter& weight, int64_t N, int64_t C, int64_t OC,
                  const uint64_t* row_masks = nullptr, bool per_row = false, const LoraStream* drop = nullptr);
void lora_backward(float* dinp, const Parameter& weight, const float* dout, const float* inp, int64_t N, int64_t C,
                   int64_t OC, const LoraStream* drop = nullptr);

// Whether `parameter` belongs to the module `module` of LoraConfig::modules_to_save: "classifier", "pooler", or
// "embeddings" (the token embeddings, and the LM head where it is its own).
bool saved_module_holds(std::string_view module, std::string_view parameter);

// Whether `updates` (on consecutive rows of one weight) cover `rows` rows with one A between them: a fused module's
// single adapter (GPT-2's c_attn read from PEFT's file) split by target, which files write back as one adapter of
// that rank rather than block-diagonally.
bool share_one_a(const std::vector<const LowRankUpdate*>& updates, int64_t rows);

// The adapters a layer owns. Adding one registers it on its weight (Parameter::lora).
class LoraAdapters {
 public:
  // An adapter on `weight`'s output rows [row0, row0 + rows), named "<weight without .weight>.<label>lora_A.weight"
  // (label "" or "q." for a part of a fused matrix).
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
