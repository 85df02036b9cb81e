// Element-wise activations and the gated FFN's gate (SwiGLU, GeGLU), forward and backward   (000 §7.2, 001 §11).
#pragma once

#include <attend/activation.h>

#include <cstdint>

namespace attend::kernels {

template <typename T>
void activation_forward(Activation a, T* out, const T* inp, int64_t n);

// dinp += dout · f'(inp), with
//   ReLU:  1[x > 0]
//   GELU:  Φ(x) + x·φ(x)
//   tanh:  ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²),  u = √(2/π)(x + 0.044715x³)
//   SiLU:  σ(x)(1 + x(1 − σ(x)))
template <typename T>
void activation_backward(Activation a, T* dinp, const T* dout, const T* inp, int64_t n);

// A gated FFN's gate: out = f(gate) ⊙ up, with f = SiLU for SwiGLU (the FFN is W₂·(SiLU(xW_g) ⊙ xW_u),
// 001 §11) and f = GELU_tanh for GeGLU.
template <typename T>
void gated_forward(Activation a, T* out, const T* gate, const T* up, int64_t n);

// dgate += dout ⊙ up ⊙ f'(gate);  dup += dout ⊙ f(gate).
template <typename T>
void gated_backward(Activation a, T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

}  // namespace attend::kernels
