// Optimisers (003 §4.1, 004 §9.1-9.2): SGD, SGD with momentum (the notes' EMA form or the classic form),
// Adam with bias correction, and AdamW with decoupled weight decay; β₂ warm-up. The optimiser borrows the
// model's parameters and owns their state (moments), which it saves and restores for checkpoints.
#pragma once

#include <attend/parameter.h>
#include <attend/safetensors.h>
#include <attend/train.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attend::train {

// Whether weight decay applies to a parameter: matrices yes; biases and norm gains never; embeddings
// (token, position, T5 relative bias) when decay_embeddings.
bool decays(const Parameter& p, const OptimizerConfig& config);

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, std::vector<Parameter*> params);

  // One update from the parameters' current gradients with learning rate lr.
  void step(double lr);
  int64_t steps() const { return step_; }
  const OptimizerConfig& config() const { return config_; }
  // β₂ at step t (1-based), following the warm-up.
  double beta2_at(int64_t t) const;

  // The state for a checkpoint: moment tensors named "<param>.m" / "<param>.v" / "<param>.velocity", and
  // the scalars (step, Π β₂) as strings for the safetensors metadata.
  std::vector<NamedTensor> state_tensors();
  std::map<std::string, std::string> state_metadata() const;
  // Restores what state_tensors/state_metadata saved; errors name the missing or mismatched tensor.
  void load_state(const SafetensorsReader& reader);

 private:
  // Calls f(name, tensor) for each state tensor, in a fixed order.
  template <typename F>
  void for_each_state(F&& f);

  OptimizerConfig config_;
  std::vector<Parameter*> params_;
  std::vector<Tensor> m_, v_;  // Adam's moments, or momentum's velocity in m_
  int64_t step_ = 0;
  double beta2_product_ = 1.0;  // Π_s β₂(s), for the second moment's bias correction
};

}  // namespace attend::train
