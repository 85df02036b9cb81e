// Parameter: a trainable tensor and its gradient, of the same shape.
//
// The model owns every Parameter; layers and optimizers borrow them. Optimizer state (moments) lives in
// the optimizer, not here.
#pragma once

#include <attend/tensor.h>

#include <string>
#include <vector>

namespace attend {

struct Parameter {
  Parameter() = default;
  Parameter(std::string name, Shape shape) : name(std::move(name)), value(shape), grad(shape) {}

  std::string name;  // e.g. "h.3.attn.c_attn.weight"
  Tensor value;
  Tensor grad;
  // Inference only: value rounded to bf16 (the top half of each float), which small matmuls (decoding) read
  // instead of value: half the bytes. Empty unless Model::set_decode_weights asked for it.
  std::vector<uint16_t> bf16;

  void zero_grad() { grad.zero(); }
  int64_t numel() const { return value.numel(); }
};

}  // namespace attend
