// The element-wise activations Attend knows (000 §7.2, 001 §11).
#pragma once

#include <string_view>

namespace attend {

enum class Activation {
  ReLU,      // max(0, x)
  GELU,      // x·Φ(x) = ½x(1 + erf(x/√2)), exact
  GELUTanh,  // ½x(1 + tanh(√(2/π)(x + 0.044715x³))), GPT-2's "gelu_new"
  SiLU,      // x·σ(x), also called swish
};

// "relu", "gelu", "gelu_tanh", "silu".
const char* activation_name(Activation a);
// Accepts the names above and the Hugging Face aliases "gelu_new", "gelu_pytorch_tanh" and "swish";
// throws attend::Error naming the accepted values otherwise.
Activation parse_activation(std::string_view name);

}  // namespace attend
