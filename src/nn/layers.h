// The layers a block is built from: Linear, Norm, Dropout, FeedForward and the Mixture-of-Experts FFN
// (000 §3, §7; 001 §8, §11; 002 §6.4). Each works on rows: an input (N, C) gives an output (N, C'), and
// keeps what its backward needs. Backward returns the input's gradient and adds into parameter grads.
#pragma once

#include <attend/model.h>
#include <attend/parameter.h>
#include <attend/rng.h>
#include <attend/tensor.h>

#include <string>
#include <vector>

namespace attend::nn {

// out = inp·Wᵀ + b for N rows; reads the weight's bf16 copy when it has one and N is small (decoding). With
// mixed precision (weight.precision), inp and W are rounded to bf16 or fp16 and multiplied with fp32 sums.
void linear_forward(float* out, const float* inp, const Parameter& weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC);
// dinp += dout·W;  W.grad += doutᵀ·inp;  dbias += Σ dout. dinp and dbias may be nullptr. Mixed precision
// rounds dout, inp and W as the forward did.
void linear_backward(float* dinp, Parameter& weight, float* dbias, const float* dout, const float* inp, int64_t N,
                     int64_t C, int64_t OC);

// y = x·Wᵀ + b, W (out, in) as nn.Linear.
class Linear {
 public:
  Linear() = default;
  // The weight has `role`, the bias (when there is one) `bias_role`.
  Linear(const std::string& name, int64_t in, int64_t out, bool bias, Role role, Role bias_role);

  Tensor forward(const Tensor& x);  // (N, in) → (N, out)
  Tensor backward(const Tensor& dout);
  void collect(std::vector<Parameter*>& out);
  int64_t in() const { return weight.value.size(1); }
  int64_t out() const { return weight.value.size(0); }

  Parameter weight, bias;

 private:
  int64_t rows_ = 0;
  Tensor x_;                            // the input, saved for backward (f32)
  std::vector<uint16_t> x_rounded_;     // or, in mixed precision, the input rounded as the matmul read it
};

// LayerNorm (γ, β) or RMSNorm (γ) over the last dimension (000 §3.3-3.4).
class Norm {
 public:
  Norm() = default;
  Norm(const std::string& name, NormKind kind, int64_t C, double eps, Role gain_role = Role::NormGain,
       Role bias_role = Role::NormBias);

  Tensor forward(const Tensor& x);  // (N, C)
  Tensor backward(const Tensor& dout);
  void collect(std::vector<Parameter*>& out);

  Parameter weight, bias;

 private:
  NormKind kind_ = NormKind::LayerNorm;
  float eps_ = 1e-5f;
  Tensor x_, mean_, rstd_;
};

// Inverted dropout whose mask is a pure function of (seed, offset + i): backward regenerates it (003 §12.1).
class Dropout {
 public:
  explicit Dropout(float p = 0.0f) : p_(p) {}
  // In place. Draws its numbers from `rng` when training with p > 0; otherwise the identity.
  void forward(Tensor& x, bool training, Rng* rng);
  void backward(Tensor& dx) const;  // in place
  bool active() const { return active_; }  // the last forward dropped anything

 private:
  float p_ = 0.0f;
  bool active_ = false;
  uint64_t seed_ = 0, offset_ = 0;
};

// FFN(x) = down(drop(act(up(x)))), or with SwiGLU down(drop(SiLU(gate(x)) ⊙ up(x)))   (001 §11).
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(const std::string& name, const ModelConfig& config);

  Tensor forward(const Tensor& x, bool training, Rng* rng);  // (N, C) → (N, C)
  Tensor backward(const Tensor& dout);
  void collect(std::vector<Parameter*>& out);

 private:
  FfnKind kind_ = FfnKind::GELU;
  Linear up_, gate_, down_;
  Dropout dropout_;
  Tensor u_, g_;  // up(x) and gate(x), before the activation
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

  // x (N, C); valid (N) marks real tokens (nullptr: all). Returns y (N, C); aux() is the balance loss.
  Tensor forward(const Tensor& x, const uint8_t* valid, bool training, Rng* rng);
  // dout (N, C) and daux = ∂loss/∂aux (the aux loss weight) → dx.
  Tensor backward(const Tensor& dout, double daux);
  void collect(std::vector<Parameter*>& out);
  double aux() const { return aux_; }
  MoEStats stats() const;

 private:
  struct Choice {
    int64_t row;      // index into the valid rows
    int64_t expert;
    int64_t slot;     // row of the expert's batch, or −1 when refused
    double weight;    // w_j
  };

  std::string name_;
  int64_t E_ = 0, k_ = 0;
  double capacity_factor_ = 0.0;
  bool normalize_ = true;
  Linear router_;
  std::vector<FeedForward> experts_;

  // Saved by forward.
  int64_t N_ = 0;                    // all rows
  std::vector<int64_t> rows_;        // the valid rows' indices into x
  Tensor probs_;                     // (rows, E)
  std::vector<Choice> choices_;      // (rows, k), rank-major within each row
  std::vector<std::vector<int64_t>> expert_rows_;  // per expert: the valid-row index of each slot
  std::vector<Tensor> expert_out_;   // per expert: (slots, C) outputs, for ∂loss/∂w
  std::vector<double> fraction_;     // f_e
  double aux_ = 0.0;
  int64_t refused_ = 0;
};

}  // namespace attend::nn
