// Parameter: a trainable tensor and its gradient, of the same shape.
//
// The model owns every Parameter; layers and optimizers borrow them. Optimizer state (moments) lives in
// the optimizer, not here.
#pragma once

#include <attend/tensor.h>

#include <string>
#include <vector>

namespace attend {

// The precision the matmuls of training read their operands in (003 §13.2): F32, or mixed precision with
// weights, inputs and output gradients rounded to bf16 or fp16 (products and sums stay fp32, and so do the
// master weights, gradients and optimiser state).
enum class Precision { F32, BF16, F16 };

struct Parameter {
  Parameter() = default;
  Parameter(std::string name, Shape shape) : name(std::move(name)), value(shape), grad(shape) {}

  std::string name;  // e.g. "h.3.attn.c_attn.weight"
  Tensor value;
  Tensor grad;
  // Inference only: value rounded to bf16 (the top half of each float), which small matmuls (decoding) read
  // instead of value: half the bytes. Empty unless Model::set_decode_weights asked for it.
  std::vector<uint16_t> bf16;
  // Mixed precision (Model::set_precision): the matmuls that read this weight read `rounded`, value rounded
  // to `precision`. It is made on first use after each Model::forward starts (which sets rounded_stale), and
  // the forward's backward reuses it.
  Precision precision = Precision::F32;
  mutable std::vector<uint16_t> rounded;
  mutable bool rounded_stale = true;

  void zero_grad() { grad.zero(); }
  int64_t numel() const { return value.numel(); }
};

}  // namespace attend
