// Global-norm gradient clipping (003 §13.3, 004 §9.4):  g̃ = min(1, c/‖g‖₂) · g,
// where ‖g‖₂ is the norm of all parameters' gradients taken together: a model's one gradient buffer
// (Model::gradient_buffer), so each is one pass over one array.
#pragma once

#include <span>

namespace attend::train {

// ‖g‖₂, summed in double.
double global_grad_norm(std::span<const float> grads);
// Σ g², in double (data parallelism with ZeRO-1: each rank's share of ‖g‖²).
double sum_of_squares(std::span<const float> grads);

// g ← factor·g (dividing out the loss scale of f16 training).
void scale_grads(std::span<float> grads, double factor);

// Scales the gradients by min(1, max_norm/‖g‖₂) and returns ‖g‖₂ before clipping.
// A non-finite norm is returned as is and nothing is scaled: the caller decides to skip the step.
double clip_grad_norm(std::span<float> grads, double max_norm);

}  // namespace attend::train
