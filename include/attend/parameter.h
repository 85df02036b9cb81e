// Parameter: a trainable tensor and its gradient, of the same shape.
//
// The model owns every Parameter; layers and optimizers borrow them. Optimizer state (moments) lives in
// the optimizer, not here.
#pragma once

#include <attend/tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace attend {

// The precision the matmuls of training read their operands in (003 §13.2): F32, or mixed precision with
// weights, inputs and output gradients rounded to bf16 or fp16 (products and sums stay fp32, and so do the
// master weights, gradients and optimiser state).
enum class Precision { F32, BF16, F16 };

// How a weight is stored for running: fp32, a 16-bit type (a checkpoint's dtype, Model::set_storage), or ggml's
// block-quantized types (GGUF files, attend quantize): 8.5 (Q8_0) down to 4.5 (Q4_0, Q4_K) bits a weight.
enum class WeightType { F32, BF16, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };
constexpr bool is_quantized(WeightType t) { return t != WeightType::F32 && t != WeightType::BF16 && t != WeightType::F16; }
const char* weight_type_name(WeightType t);  // "f32", "bf16", "f16", "q8_0", ..., "q6_k"
// The type a name names ("f32", "bf16", "f16", "q8_0", ... "q6_k"; case ignored); false for another name.
bool parse_weight_type(const std::string& name, WeightType& out);

// std::vector's allocator for the streamed matrices: allocate_weights (tensor.h).
template <typename T>
struct WeightAllocator {
  using value_type = T;
  WeightAllocator() = default;
  template <typename U>
  WeightAllocator(const WeightAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_weights(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { free_weights(p, n * sizeof(T)); }
  friend bool operator==(const WeightAllocator&, const WeightAllocator&) { return true; }
};
// A matrix packed in 16 bits (Parameter::packed).
using PackedBits = std::vector<uint16_t, WeightAllocator<uint16_t>>;

// Consecutive rows of a quantized matrix that share one block type: its rows' blocks, row after row. A GGUF
// file's Q, K and V (one fused matrix here) are three such segments, each of its own type where llama.cpp's
// mixes give them one. The blocks are used where they lie: in a GGUF file's mapping (which `owner` keeps
// mapped), or in memory of their own (owning()).
struct QuantizedRows {
  int64_t rows = 0;
  WeightType type = WeightType::Q8_0;
  const uint8_t* data = nullptr;      // rows × the type's row bytes
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive
  // Q4_0, Q8_0: the rows eight at a time for decoding (kernels/quant.h); else empty.
  std::vector<uint8_t, WeightAllocator<uint8_t>> repacked;

  static QuantizedRows owning(int64_t rows, WeightType type, std::vector<uint8_t> blocks);
  std::span<const uint8_t> blocks() const { return {data, static_cast<size_t>(bytes)}; }
};

// What a weight is in the network, fixed when the model is built. Initialisation, counting, weight decay,
// mixed precision and packing read the role, never the name, so renaming a tensor changes no number.
enum class Role : uint8_t {
  TokenEmbedding,        // E (V, C); also the LM head when tied
  PositionTable,         // learned absolute positions (max_seq_len, C)
  AttentionQkv,          // self-attention's fused [W_Q; W_K; W_V]
  AttentionQuery,        // cross-attention's W_Q
  AttentionKeyValue,     // cross-attention's fused [W_K; W_V]
  AttentionOutput,       // W_O: a residual output projection
  AttentionBias,         // a bias of any attention projection
  RelativePositionBias,  // T5's bucket table (buckets, heads)
  FfnIn,                 // the FFN's up (and SwiGLU's gate) projection, experts' too
  FfnOut,                // the FFN's down projection: a residual output projection
  FfnBias,
  Router,                // an MoE router: kept in fp32 under mixed precision and in 16-bit storage
  NormGain,              // a norm's γ (1 at initialisation)
  NormBias,              // a LayerNorm's β
  HeadMatrix,            // the untied LM head, the MLM transform, the classifier
  HeadBias,
  HeadNormGain,          // the MLM head's norm
  HeadNormBias,
  LoraA,                 // a LoRA adapter's down projection A (r, in): Kaiming-uniform, as PEFT starts it
  LoraB,                 // its up projection B (rows, r): zero at the start, so the adapter starts as nothing
};

// The parts `attend inspect` counts parameters by.
enum class Part { Embeddings, Attention, Ffn, Norms, Heads, Adapters };
constexpr Part part_of(Role r) {
  switch (r) {
    case Role::TokenEmbedding: case Role::PositionTable: return Part::Embeddings;
    case Role::AttentionQkv: case Role::AttentionQuery: case Role::AttentionKeyValue: case Role::AttentionOutput:
    case Role::AttentionBias: case Role::RelativePositionBias: return Part::Attention;
    case Role::FfnIn: case Role::FfnOut: case Role::FfnBias: case Role::Router: return Part::Ffn;
    case Role::NormGain: case Role::NormBias: return Part::Norms;
    case Role::HeadMatrix: case Role::HeadBias: case Role::HeadNormGain: case Role::HeadNormBias: return Part::Heads;
    case Role::LoraA: case Role::LoraB: return Part::Adapters;
  }
  return Part::Ffn;
}
constexpr bool is_bias(Role r) {
  return r == Role::AttentionBias || r == Role::FfnBias || r == Role::NormBias || r == Role::HeadBias ||
         r == Role::HeadNormBias;
}
constexpr bool is_norm_gain(Role r) { return r == Role::NormGain || r == Role::HeadNormGain; }
constexpr bool is_adapter(Role r) { return r == Role::LoraA || r == Role::LoraB; }
// A matrix multiplied with the activations (not a table looked up by index, not a vector).
constexpr bool is_projection(Role r) {
  return r == Role::AttentionQkv || r == Role::AttentionQuery || r == Role::AttentionKeyValue ||
         r == Role::AttentionOutput || r == Role::FfnIn || r == Role::FfnOut || r == Role::Router || r == Role::HeadMatrix;
}
const char* role_name(Role r);  // "token_embedding", "attention_qkv", ...

struct Parameter;

// A low-rank update (LoRA, Hu et al. 2021) of a weight W (out, in): its output rows [row0, row0 + rows) gain
// scale · (x·Aᵀ)·Bᵀ, A (r, in), B (rows, r). The layer that owns W owns A and B; every matmul with W applies
// it (nn::linear_forward and linear_backward), in fp32.
struct LowRankUpdate {
  Parameter* A = nullptr;
  Parameter* B = nullptr;
  int64_t row0 = 0;
  double scale = 1.0;  // lora_alpha / r, or lora_alpha / √r (rsLoRA), times the user's multiplier
  float dropout = 0.0f;  // training: dropout on the adapter's input (LoraConfig::dropout)
  int32_t adapter = 0;  // the adapter set's slot in the model (Model::adapters; a session's mask selects by it)
  double unit = 1.0;     // lora_alpha / r (or / √r): `scale` at a multiplier of 1, which a session's own multiplies
};

struct Parameter {
  Parameter() = default;
  // A zero value and gradient of `shape`; without memory while a DeferParameterStorage is alive.
  Parameter(std::string name, Shape shape, Role role);

  std::string name;  // e.g. "decoder.layers.3.attn.qkv.weight": the tensor's name in model.safetensors
  Role role = Role::FfnIn;
  int64_t stack_blocks = 0;  // blocks of the stack (encoder or decoder) it belongs to; 0 outside the stacks
  Tensor value;
  Tensor grad;
  // Excluded from training (Model::freeze; LoRA's base weights): no gradient is kept (grad stays empty),
  // backward computes none for it, and the optimiser never sees it. Gradients still flow through it.
  bool frozen = false;
  // LoRA adapters on this weight (Model::add_lora), applied wherever it multiplies.
  std::vector<LowRankUpdate> lora;
  // How the weight is stored for running (Model::set_storage). F32: the matmuls read `value`. BF16 or F16:
  // the matrix is also kept packed in that type (`packed`), which the matmuls read (half the bytes), and
  // `value` holds exactly the same numbers widened, which lookups, norms and training read.
  WeightType storage = WeightType::F32;
  PackedBits packed;
  // A quantized type (is_quantized(storage)): the matrix's rows as blocks, in segments, which the matmuls
  // (dequantizing a prompt's weights piece by piece) and the token lookup read. A model's quantized matrix has
  // no values (value.data() is nullptr, the shape stays): Model::ensure_values gives it its blocks' values
  // for whatever needs floats (training, saving, requantizing).
  std::vector<QuantizedRows> quantized;

  void zero_grad() { grad.zero(); }
  int64_t numel() const { return value.numel(); }
  bool has_values() const { return value.data() != nullptr || value.numel() == 0; }
};

// While one is alive on this thread, Parameters are made without memory (a value of the shape and no data, no
// gradient): a Model builds its layers so, then lays every value out in one buffer (Model::parameter_buffer)
// instead of allocating and zeroing each parameter first.
class DeferParameterStorage {
 public:
  DeferParameterStorage();
  ~DeferParameterStorage();
  DeferParameterStorage(const DeferParameterStorage&) = delete;
  DeferParameterStorage& operator=(const DeferParameterStorage&) = delete;
};

}  // namespace attend
