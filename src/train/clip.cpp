#include "train/clip.h"

#include "kernels/elementwise.h"

#include <cmath>

namespace attend::train {

double sum_of_squares(std::span<const float> grads) {
  return kernels::sum_squares(grads.data(), static_cast<int64_t>(grads.size()));
}

double global_grad_norm(std::span<const float> grads) { return std::sqrt(sum_of_squares(grads)); }

void scale_grads(std::span<float> grads, double factor) {
  kernels::scale(grads.data(), static_cast<int64_t>(grads.size()), static_cast<float>(factor));
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  scale_grads(grads, max_norm / norm);
  return norm;
}

}  // namespace attend::train
