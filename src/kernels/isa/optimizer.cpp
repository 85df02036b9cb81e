// The optimisers' element-wise updates (optimizer.h), streamed through the parameters and their state.
#include "kernels/isa/isa.h"
#include "kernels/parallel.h"

#include <cmath>

namespace attend::kernels::ATTEND_ISA {
namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

void sgd_update(float* param, const float* grad, int64_t n, float lr, float weight_decay) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) param[i] -= lr * (grad[i] + weight_decay * param[i]);
  });
}

void momentum_update(float* param, float* velocity, const float* grad, int64_t n, float lr, float beta, float gain,
                     float weight_decay) {
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      velocity[i] = beta * velocity[i] + gain * (grad[i] + weight_decay * param[i]);
      param[i] -= lr * velocity[i];
    }
  });
}

void adam_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamStep& s) {
  // In float, in PyTorch's order: θ ← (1 − ηλ)θ;  θ ← θ − (η/c₁)·m / (√v/√c₂ + ε). Double would be no more
  // right (the moments are float) and its vector square root and divide cost twice the memory traffic's time.
  const float step = static_cast<float>(double(s.lr) / s.correction1);
  const float rsqrt_c2 = static_cast<float>(1.0 / std::sqrt(s.correction2));
  const float shrink = static_cast<float>(1.0 - double(s.lr) * s.decoupled);
  // The factors in locals: read through `s`, GCC would load them again after every store (they might alias).
  const float l2 = s.l2, beta1 = s.beta1, beta2 = s.beta2, gain1 = s.gain1, gain2 = s.gain2, eps = s.eps;
  parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float g = grad[i] + l2 * param[i];
      m[i] = beta1 * m[i] + gain1 * g;
      v[i] = beta2 * v[i] + gain2 * g * g;
      param[i] = shrink * param[i] - step * m[i] / (std::sqrt(v[i]) * rsqrt_c2 + eps);
    }
  });
}

}  // namespace attend::kernels::ATTEND_ISA
