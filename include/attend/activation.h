// The element-wise activations Attend knows (000 §7.2, 001 §11).
#pragma once

namespace attend {

enum class Activation {
  ReLU,      // max(0, x)
  GELU,      // x·Φ(x) = ½x(1 + erf(x/√2)), exact
  GELUTanh,  // ½x(1 + tanh(√(2/π)(x + 0.044715x³))), GPT-2's "gelu_new"
  SiLU,      // x·σ(x), also called swish
};

// "relu", "gelu", "gelu_tanh", "silu".
const char* activation_name(Activation a);

}  // namespace attend
