// The layers a block is built from: Linear, Norm, Dropout, FeedForward and the Mixture-of-Experts FFN
// (000 §3, §7; 001 §8, §11; 002 §6.4). Each works on rows: an input (N, C) gives an output (N, C').
//
// A layer holds only its weights: forward is const and writes what its backward needs into a Saved the
// caller owns (nullptr when nothing will run backward: evaluation, sessions), so one model runs from many
// threads at once. Backward reads that Saved, returns the input's gradient and adds into parameter grads.
#pragma once

#include <attend/model.h>
#include <attend/parameter.h>
#include <attend/rng.h>
#include <attend/tensor.h>

#include "kernels/gemm.h"
#include "kernels/quant.h"
#include "nn/lora.h"

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace attend::nn {

// out = inp·Wᵀ + b for N rows, as the weight is stored: fp32, or its packed bf16/fp16 matrix (few rows, as in
// decoding, widen it inside the gemv; more rows round the input to the same type and run the 16-bit GEMM).
// Mixed precision (precision ≠ F32, training's forwards; never for a router) rounds inp and W to bf16 or fp16
// and multiplies with fp32 sums; the rounded W goes to *w_rounded, which the backward reads.
// `drop`: a training forward's adapter dropout (lora_dropout_stream), which the backward takes again.
void linear_forward(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, Precision precision = Precision::F32, std::vector<uint16_t>* w_rounded = nullptr,
                    const LoraStream* drop = nullptr);
// Whether linear_forward (fp32) of `rows` rows on `weight` takes the per-row (decoding) kernels without a
// PerRowMatmuls: few rows, a 16-bit weight's short prompt on the gemv, a quantized weight's on the int8 kernels
// (not a weight with LoRA adapters). Such rows then come out the same bits among any others under one.
bool rows_take_per_row_kernels(const Parameter& weight, int64_t rows);
// While one is alive, linear_forward on this thread multiplies any number of rows with the per-row (decoding)
// kernels, so that each row's outputs are those of that row alone, bit for bit (step_row_invariant's decoding
// rows). Not for prompts: the per-row kernels run far below the GEMM's rate at many rows.
class PerRowMatmuls {
 public:
  PerRowMatmuls();
  ~PerRowMatmuls();
  PerRowMatmuls(const PerRowMatmuls&) = delete;
  PerRowMatmuls& operator=(const PerRowMatmuls&) = delete;

 private:
  bool outer_;
};
// While one is alive, linear_forward on this thread applies LoRA adapters row by row: row n of every matmul (of
// row_masks.size() rows, the step's) takes the adapter sets whose slot bit (LowRankUpdate::adapter) row_masks[n]
// has, each at the multiplier row_scales[n][slot] where row_scales is given, row_scales[n] is not nullptr (then one
// per slot of the model) and the multiplier is not NaN (lora_forward). Without one, every adapter applies to every
// row. A session step over requests with different adapters, or the same at other scales.
class SelectAdapters {
 public:
  explicit SelectAdapters(std::span<const uint64_t> row_masks, std::span<const double* const> row_scales = {});
  ~SelectAdapters();
  SelectAdapters(const SelectAdapters&) = delete;
  SelectAdapters& operator=(const SelectAdapters&) = delete;

 private:
  std::span<const uint64_t> outer_;
  std::span<const double* const> outer_scales_;
};
// The precision a matmul with `weight` runs in a forward of `precision`: routers stay fp32 (Switch
// Transformer's selective precision).
// A quantized weight (QLoRA's frozen base) runs on its own kernels, whatever the forward's precision.
inline Precision precision_for(const Parameter& weight, Precision precision) {
  // A matrix held as stored (quantized, or 16-bit without float values) has no values to round: it runs as stored.
  return weight.role == Role::Router || !weight.quantized.empty() || !weight.has_values() ? Precision::F32 : precision;
}
// dinp += dout·W;  W.grad += doutᵀ·inp;  dbias += Σ dout. dinp and dbias may be nullptr. Mixed precision
// rounds dout and inp as the forward did and reads the forward's rounded W. A frozen weight held as stored alone
// (quantized blocks, or 16 bits without float values) gives dinp through its rows' values, widened a piece at a time.
void linear_backward(float* dinp, Parameter& weight, float* dbias, const float* dout, const float* inp, int64_t N,
                     int64_t C, int64_t OC, Precision precision = Precision::F32,
                     const std::vector<uint16_t>* w_rounded = nullptr, const LoraStream* drop = nullptr);

// The block type of a quantized weight type (kernels/quant.h).
kernels::QuantType quant_type(WeightType t);
// The 16-bit format of WeightType::BF16 or F16 (kernels::round_to_half and widen_half); an error for another type.
kernels::Half half_type(WeightType t);
// The type llama.cpp's quantizer takes for rows that are not whole blocks of `t`: the K types' 256-value blocks
// give way to Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0 (32-value blocks); Q8_0 for the others, which fit no better.
WeightType block_fallback(WeightType t);
// Stores `p` (a matrix of rows of C values) as `type`'s blocks, the rows quantized here (with `importance`, C
// values or nullptr: activation statistics per input column), and its value as the blocks' values. False, and
// nothing changed, when C is not a multiple of the type's block.
bool quantize_parameter(Parameter& p, WeightType type, const float* importance = nullptr);
// The same in segments of consecutive rows, each of its own type (a fused Q, K, V whose parts llama.cpp's mixes
// quantize differently): `plan` is (rows, type) pairs adding up to p's rows. False, and nothing changed, when
// some type's block does not divide C.
bool quantize_parameter(Parameter& p, std::span<const std::pair<int64_t, WeightType>> plan,
                        const float* importance = nullptr);
// Stores `p` as the given segments (their rows adding up to p's; Q4_0 and Q8_0 rows are also repacked for the
// decoding kernels). Where p has values (a parameter of its own, or quantize_parameter's), they become the
// blocks' values; a model then drops them (Model::set_storage, the GGUF loader never makes them).
void set_quantized(Parameter& p, std::vector<QuantizedRows> segments);
// Whether p is held as stored: quantized blocks, or values packed in 16 bits. Such a matrix may have no float
// values (Model::hold_as_stored, a GGUF file's quantized matrices); these functions read what it stores.
bool held_as_stored(const Parameter& p);
// Row r of a matrix held as stored, in fp32 (its columns' worth, into `out`).
void stored_row(const Parameter& p, int64_t r, float* out);
// All of the values of a matrix held as stored, row after row, into `out` (p.numel() values).
void dequantize_values(const Parameter& p, float* out);

// y = x·Wᵀ + b, W (out, in) as nn.Linear.
class Linear {
 public:
  Linear() = default;
  // The weight has `role`, the bias (when there is one) `bias_role`.
  Linear(const std::string& name, int64_t in, int64_t out, bool bias, Role role, Role bias_role);

  struct Saved {
    int64_t rows = 0;
    Precision precision = Precision::F32;
    Tensor x;                         // the input (f32)
    std::vector<uint16_t> x_rounded;  // or, in mixed precision, the input rounded as the matmul read it
    std::vector<uint16_t> w_rounded;  // and the weight
    LoraStream lora_drop;             // the adapters' dropout
  };

  // (N, in) → (N, out), with the matmul in `precision` (mixed precision needs a Saved). Training with adapter
  // dropout draws from rng.
  Tensor forward(const Tensor& x, Precision precision, Saved* saved, bool training = false, Rng* rng = nullptr) const;
  Tensor backward(const Tensor& dout, const Saved& saved);
  void collect(std::vector<Parameter*>& out);
  int64_t in() const { return weight.value.size(1); }
  int64_t out() const { return weight.value.size(0); }

  Parameter weight, bias;
  LoraAdapters lora;  // on weight (Model::add_lora)
};

// The gain a norm multiplies by: γ itself, or 1 + γ (computed in fp32, as Hugging Face's Gemma RMSNorm does)
// when the model stores its gains as offsets from 1. `scratch` holds 1 + γ. ∂/∂γ is the same either way.
const float* norm_gain(const Parameter& gain, bool unit_offset, std::vector<float>& scratch);

// LayerNorm (γ, β) or RMSNorm (γ) over the last dimension (000 §3.3-3.4). With unit_offset the layer multiplies by
// 1 + γ and γ starts at 0 (Gemma).
class Norm {
 public:
  Norm() = default;
  Norm(const std::string& name, NormKind kind, int64_t C, double eps, bool unit_offset = false,
       Role gain_role = Role::NormGain, Role bias_role = Role::NormBias);

  struct Saved {
    Tensor x, mean, rstd;
  };

  Tensor forward(const Tensor& x, Saved* saved) const;  // (N, C)
  Tensor backward(const Tensor& dout, const Saved& saved);
  void collect(std::vector<Parameter*>& out);

  Parameter weight, bias;

 private:
  NormKind kind_ = NormKind::LayerNorm;
  float eps_ = 1e-5f;
  bool unit_offset_ = false;
};

// Inverted dropout whose mask is a pure function of (seed, offset + i): backward regenerates it (003 §12.1).
class Dropout {
 public:
  struct Saved {
    bool active = false;  // the forward dropped anything
    uint64_t seed = 0, offset = 0;
  };

  explicit Dropout(float p = 0.0f) : p_(p) {}
  // In place. Draws its numbers from `rng` when training with p > 0; otherwise the identity. Training needs
  // a Saved (backward regenerates the mask from it).
  void forward(Tensor& x, bool training, Rng* rng, Saved* saved) const;
  void backward(Tensor& dx, const Saved& saved) const;  // in place

 private:
  float p_ = 0.0f;
};

// FFN(x) = down(drop(act(up(x)))), or gated: down(drop(act(gate(x)) ⊙ up(x))) with SiLU (SwiGLU, 001 §11) or
// GELU_tanh (GeGLU).
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(const std::string& name, const ModelConfig& config);

  struct Saved {
    Linear::Saved up, gate, down;
    Dropout::Saved dropout;
    Tensor u, g;  // up(x) and gate(x), before the activation
  };

  Tensor forward(const Tensor& x, bool training, Rng* rng, Precision precision, Saved* saved) const;  // (N, C)
  Tensor backward(const Tensor& dout, const Saved& saved);
  void collect(std::vector<Parameter*>& out);
  void add_lora(const LoraConfig& config);  // on its up, gate and down projections, as config.targets says
  void merge_lora();

 private:
  FfnKind kind_ = FfnKind::GELU;
  Linear up_, gate_, down_;
  Dropout dropout_;
};

// Mixture-of-Experts FFN (002 §6.4, 001 §8): a softmax router picks the top-k of E experts per token.
//
//   p = softmax(x·W_rᵀ);  w_j = p_{e_j} / Σ_{j'} p_{e_j'} over the k chosen;  y = Σ_j w_j·Expert_{e_j}(x)
//
// Each expert takes at most c = ⌈factor·N·k/E⌉ of the N tokens; choices are accepted rank by rank (all
// first choices in token order, then all second choices, ...) and a refused choice adds nothing.
// Load balancing (Switch Transformer): aux = E·Σ_e f_e·P_e, f_e the fraction of the N·k choices that picked
// e (a constant), P_e the mean router probability of e. Padding rows are not routed and give 0.
class MixtureOfExperts {
 public:
  MixtureOfExperts() = default;
  MixtureOfExperts(const std::string& name, const ModelConfig& config);

  struct Choice {
    int64_t row;      // index into the valid rows
    int64_t expert;
    int64_t slot;     // row of the expert's batch, or −1 when refused
    double weight;    // w_j
  };
  struct Saved {
    int64_t N = 0;                    // all rows
    std::vector<int64_t> rows;        // the valid rows' indices into x
    Linear::Saved router;
    Tensor probs;                     // (rows, E)
    std::vector<Choice> choices;      // (rows, k), rank-major within each row
    std::vector<std::vector<int64_t>> expert_rows;  // per expert: the valid-row index of each slot
    std::vector<Tensor> expert_out;   // per expert: (slots, C) outputs, for ∂loss/∂w
    std::vector<FeedForward::Saved> experts;
    std::vector<double> fraction;     // f_e
    double aux = 0.0;                 // the balance loss
    int64_t refused = 0;
  };

  // x (N, C); valid (N) marks real tokens (nullptr: all). Returns y (N, C); the balance loss is saved->aux.
  Tensor forward(const Tensor& x, const uint8_t* valid, bool training, Rng* rng, Precision precision,
                 Saved* saved) const;
  // dout (N, C) and daux = ∂loss/∂aux (the aux loss weight) → dx.
  Tensor backward(const Tensor& dout, double daux, const Saved& saved);
  void collect(std::vector<Parameter*>& out);
  MoEStats stats(const Saved& saved) const;

 private:
  std::string name_;
  int64_t E_ = 0, k_ = 0;
  double capacity_factor_ = 0.0;
  bool normalize_ = true;
  Linear router_;
  std::vector<FeedForward> experts_;
};

}  // namespace attend::nn
