// Optimisers (003 §4.1, 004 §9.1-9.2): SGD, SGD with momentum (the notes' EMA form or the classic form),
// Adam with bias correction, and AdamW with decoupled weight decay; β₂ warm-up. The optimiser borrows the
// model's parameters and owns their state (moments), which it saves and restores for checkpoints.
#pragma once

#include <attend/parameter.h>
#include <attend/safetensors.h>
#include <attend/train.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attend::train {

// Whether weight decay applies to a parameter: matrices yes; biases and norm gains never; embeddings
// (token, position, T5 relative bias) when decay_embeddings.
bool decays(const Parameter& p, const OptimizerConfig& config);

// Elements [begin, begin + length) of one parameter (flattened): ZeRO-1 gives each rank such runs.
struct Segment {
  // Three values always (a braced list of Parameter pointers stays the whole-parameter constructor's).
  Segment(Parameter* p, int64_t first, int64_t n) : param(p), begin(first), length(n) {}
  Parameter* param = nullptr;
  int64_t begin = 0, length = 0;
};

class Optimizer {
 public:
  // Every element of every parameter.
  Optimizer(const OptimizerConfig& config, std::vector<Parameter*> params);
  // ZeRO-1: only these elements, whose state this optimizer holds and whose values step() updates.
  Optimizer(const OptimizerConfig& config, std::vector<Segment> segments);

  // One update from the parameters' current gradients with learning rate lr.
  void step(double lr);
  int64_t steps() const { return step_; }
  double beta2_product() const { return beta2_product_; }
  void set_counters(int64_t steps, double beta2_product);
  const std::vector<Segment>& segments() const { return segments_; }
  // Floats of state per element: 0 (SGD), 1 (momentum's velocity), 2 (Adam's m and v).
  int states_per_element() const;

  // Moving a sharded state: the state of `segments` (each inside one of this optimizer's), segment by
  // segment, each as its states one after the other (m, then v); and back into this optimizer's own segments.
  std::vector<float> pack(const std::vector<Segment>& segments) const;
  void unpack(std::span<const float> packed);
  // Writes `packed` (the state of `segments`, as pack gives it) into this optimizer's.
  void unpack(const std::vector<Segment>& segments, std::span<const float> packed);
  const OptimizerConfig& config() const { return config_; }
  // β₂ at step t (1-based), following the warm-up.
  double beta2_at(int64_t t) const;

  // The state for a checkpoint (an optimizer of whole parameters only): moment tensors named "<param>.m" / "<param>.v" / "<param>.velocity", and
  // the scalars (step, Π β₂) as strings for the safetensors metadata.
  std::vector<NamedTensor> state_tensors();
  std::map<std::string, std::string> state_metadata() const;
  // Restores what state_tensors/state_metadata saved (into whole parameters or segments); errors name the
  // missing or mismatched tensor.
  void load_state(const SafetensorsReader& reader);

 private:
  // Calls f(name, tensor) for each state tensor, in a fixed order.
  template <typename F>
  void for_each_state(F&& f);

  OptimizerConfig config_;
  // Where segment i's state lies in m_[i], v_[i]: whole parameters keep their shapes (checkpoint tensors).
  std::pair<float*, int64_t> state_of(const Segment& segment, int which) const;

  std::vector<Segment> segments_;
  bool whole_ = true;          // every segment is a whole parameter
  std::vector<Tensor> m_, v_;  // per segment: Adam's moments, or momentum's velocity in m_
  int64_t step_ = 0;
  double beta2_product_ = 1.0;  // Π_s β₂(s), for the second moment's bias correction
};

}  // namespace attend::train
