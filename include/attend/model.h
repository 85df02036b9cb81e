// A transformer model of any of the three families, from one configuration   (001 §6-8, §11-12).
//
//   auto model = attend::load_model("runs/brown-gpt");          // attend/model_dir.h
//   attend::Batch batch = ...;                                   // ids, lengths, targets
//   attend::ForwardState state;                                  // what the forward keeps for backward
//   auto result = model.forward(batch, state, {.training = true});  // logits and loss
//   model.backward(state);                                       // adds ∂loss/∂θ into every grad
//
// A Model holds weights only. Forwards keep their activations in a ForwardState the caller owns, and
// generation runs in Sessions (attend/session.h) that own their KV caches, so one model serves many at once:
// running it (forward, sessions) takes it as const; only backward (into the gradients), the optimiser (through
// parameter_buffer) and loading write it.
//
// The configuration's fields, the tensor names of model.safetensors and what the model computes are
// documented in docs/FORMATS.md ("The model directory"); this header is the code's side of that page.
#pragma once

#include <attend/parameter.h>
#include <attend/tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attend {

class Tokenizer;

enum class Architecture { Decoder, Encoder, EncoderDecoder };  // GPT, BERT, T5
enum class NormKind { LayerNorm, RMSNorm };
// SwiGLU: SiLU(gate(x)) ⊙ up(x); GeGLU: GELU_tanh(gate(x)) ⊙ up(x) (Gemma, T5 v1.1's gated-gelu).
enum class FfnKind { ReLU, GELU, GELUTanh, SwiGLU, GeGLU };
constexpr bool is_gated(FfnKind k) { return k == FfnKind::SwiGLU || k == FfnKind::GeGLU; }
enum class PositionKind { None, Learned, Sinusoidal, RoPE, ALiBi, T5 };
enum class Pooling { CLS, Mean };
enum class InitScheme { GPT2, Xavier };
// How attention scores are computed. Flash is exact and O(T·d) in memory; Reference materialises the scores
// (the oracle); Linear replaces softmax by φ(q)ᵀφ(k) with φ = elu + 1, a different model.
enum class AttentionKernel { Flash, Reference, Linear };
// How the KV cache stores keys and values: F16 halves its memory and the bytes each generated token reads
// (relative error ≤ 2⁻¹¹ per element); Int8 keeps one byte per element and a scale per (position, head).
enum class CacheType { F32, F16, Int8 };

// LoRA (Hu et al. 2021, as PEFT does it): W x + (alpha/r)·B A x on the chosen projections, A (r, in)
// Kaiming-uniform and B (out, r) zero at the start; rsLoRA scales by alpha/√r instead.
struct LoraConfig {
  int64_t r = 8;
  double alpha = 16.0;
  // Projections: q, k, v, o (attention, self and cross), up, gate, down (the FFN; gate in gated FFNs only).
  std::vector<std::string> targets = {"q", "v"};
  bool rslora = false;
  uint64_t seed = 0;  // A's draw
  // Training: inverted dropout on the adapters' input, B(A·drop(x)), as PEFT's lora_dropout (the weight's own
  // product sees x whole); each adapter draws its own mask.
  double dropout = 0.0;
  // Modules that train whole beside the adapters (PEFT's modules_to_save): "classifier", "pooler", "embeddings"
  // (the token embeddings, and the LM head where it is its own: a new domain's vocabulary). Empty on a
  // model with a classification head: that head (classifier, and the pooler where there is one), as PEFT's
  // SEQ_CLS task does.
  std::vector<std::string> modules_to_save;
  // "": the model's own adapters (trained, recorded in config.json as lora_*, tensors "….lora_A.weight"). A
  // name: further adapters beside them for running (several --lora at once; the server's per-request
  // adapters), tensors "….lora_A.<name>.weight", not recorded in config.json.
  std::string name;
  double multiplier = 1.0;  // DIR:SCALE on the command line: scale()'s factor
  // Ranks and alphas module by module (a PEFT adapter's rank_pattern, alpha_pattern or layers_to_transform; a GGUF
  // LoRA file's pairs): when not empty, exactly the modules it names take adapters, each at its own rank and alpha
  // (r and alpha above adapt none of them; for the model's own set config.json records them all the same). A
  // module's key is its adapter's name before ".lora_A": "decoder.layers.3.attn.qkv.q", "decoder.layers.3.ffn.down";
  // a key that is no projection of config.targets in the model is an error before the model changes.
  struct Rank {
    int64_t r = 8;
    double alpha = 16.0;
    bool operator==(const Rank&) const = default;
  };
  std::map<std::string, Rank> per_module;
  // The blocks to adapt, numbered from 0 in each stack (PEFT's layers_to_transform); empty: every block. add_lora
  // makes them per_module's entries at r and alpha.
  std::vector<int64_t> layers;
  double unit_scale() const;  // alpha / r, or alpha / √r with rslora
  double scale() const;       // unit_scale() · multiplier
  bool adapts_ffn() const;  // a target is up, gate or down
  void validate() const;  // r ≥ 1, alpha > 0, known targets: errors name the field
};

struct ModelConfig {
  Architecture architecture = Architecture::Decoder;
  int64_t vocab_size = 256;       // V, e.g. 50257
  int64_t d_model = 512;          // C, e.g. 768
  int64_t n_layers = 6;           // blocks of the decoder (decoder-only) or the encoder; e.g. 12
  int64_t n_decoder_layers = 0;   // encoder-decoder: decoder blocks; 0 means n_layers
  int64_t n_heads = 8;            // e.g. 12
  int64_t n_kv_heads = 0;         // 0 means n_heads (MHA); 1 is MQA; a divisor of n_heads is GQA
  int64_t head_dim = 0;           // channels per head; 0 means d_model / n_heads (Qwen3 sets its own, e.g. 128)
  int64_t d_ff = 0;               // 0 means 4·d_model, or ⌈8/3·d_model⌉ to a multiple of ffn_multiple_of when gated
  int64_t ffn_multiple_of = 32;   // e.g. 256 in LLaMA
  FfnKind activation = FfnKind::GELU;
  int64_t max_seq_len = 1024;     // the context, e.g. 1024
  PositionKind position = PositionKind::Learned;
  double rope_base = 10000.0;
  double rope_base_scale = 1.0;
  double rope_ntk_factor = 1.0;
  double rope_position_scale = 1.0;
  double rope_llama3_factor = 0.0;  // Llama 3.1's frequency-dependent scaling (kernels::RopeScaling); 0: off
  double rope_llama3_low_freq_factor = 1.0;
  double rope_llama3_high_freq_factor = 4.0;
  double rope_dynamic_factor = 0.0;  // dynamic NTK scaling; 0: off
  int64_t rope_original_context = 0; // L₀ of both
  double rope_local_base = 0.0;      // θ of the sliding-window blocks' RoPE, unscaled (Gemma 3: 10000); 0: as the others
  int64_t sliding_window = 0;        // causal self-attention sees only the newest W keys (Mistral, Gemma); 0: all
  int64_t sliding_window_pattern = 0;  // with a window, blocks k−1, 2k−1, ... see everything (Gemma 3: 6); 0: none do
  int32_t t5_num_buckets = 32;
  int32_t t5_max_distance = 128;
  bool t5_shared_bias = false;    // one T5 table per stack, block 0's, added in every block (Hugging Face's T5)
  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;
  bool pre_norm = true;           // config.json: "norm_placement": "pre" | "post"
  bool sandwich_norm = false;     // pre-LN blocks also normalise each branch's output before adding it (Gemma 2, 3)
  bool norm_unit_offset = false;  // every norm multiplies by 1 + γ, γ starting at 0 (Gemma)
  double residual_scale = 1.0;    // α in x + α·F(x)
  bool bias = true;               // biases on the attention and FFN projections
  bool qkv_bias = false;          // biases on the q, k, v projections only, when `bias` is off (Qwen2)
  bool qk_norm = false;           // RMSNorm of each head's q and k (a gain of d_head, shared by the heads) before RoPE (Qwen3)
  double attention_scale = 0.0;   // 0 means 1/√d_head; T5 uses 1
  AttentionKernel attention_kernel = AttentionKernel::Flash;  // config.json: "flash", "reference", "linear"
  bool scale_embeddings = false;  // token embeddings × √d_model
  bool tie_embeddings = true;
  double lm_head_scale = 1.0;     // the LM head reads the top state × this (T5 with tied embeddings: d_model^−½)
  float embedding_dropout = 0.0f;  // e.g. 0.1
  float attention_dropout = 0.0f;
  float residual_dropout = 0.0f;
  float ffn_dropout = 0.0f;
  int64_t n_experts = 0;          // 0: dense FFNs; e.g. 8
  int64_t moe_top_k = 2;
  double moe_capacity_factor = 1.25;  // 0: no limit
  double moe_aux_loss_weight = 0.01;
  bool moe_normalize_weights = true;
  int64_t moe_every = 1;          // block i has an MoE FFN when (i + 1) % moe_every == 0
  Pooling pooling = Pooling::CLS;
  int64_t n_classes = 0;          // encoder: classification classes (0: no classification head)
  bool pooler = false;            // classification: tanh(dense(pooled)) before the classifier (BERT's pooler)
  bool mlm_head = true;           // encoder: the masked-LM head (BertModel and BERT classifiers come without)
  int64_t type_vocab_size = 0;    // token type (segment) embeddings added to the tokens' (BERT: 2); 0: none
  bool embedding_norm = false;    // a norm of the model's kind over the summed embeddings, before dropout (BERT)
  std::vector<std::string> class_names;  // the classes' names by id, e.g. {"ham", "spam"}; empty: unnamed
  InitScheme init = InitScheme::GPT2;
  double init_std = 0.02;
  double init_qk_scale = 1.0;     // multiplies the σ of W_Q and W_K
  uint64_t seed = 0;
  // LoRA adapters (Model::add_lora) on every block: r > 0 gives the model them, with every other parameter
  // frozen; a checkpoint of a LoRA run holds them beside the base weights.
  int64_t lora_r = 0;
  double lora_alpha = 16.0;
  std::vector<std::string> lora_targets = {"q", "v"};
  bool lora_rslora = false;
  double lora_dropout = 0.0;
  std::vector<std::string> lora_modules_to_save;
  // Ranks and alphas module by module (LoraConfig::per_module): when not empty, exactly these modules have
  // adapters, each at its own rank and alpha (a PEFT adapter's rank_pattern or layers, a GGUF LoRA's pairs, trained
  // on); lora_r and lora_alpha then only say the set has adapters.
  std::map<std::string, LoraConfig::Rank> lora_per_module;
  LoraConfig lora() const;  // the fields above, A drawn from seed

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t d_head() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  int64_t ffn_hidden() const;      // d_ff with its default applied
  int64_t decoder_layers() const;  // encoder-decoder: n_decoder_layers or n_layers
  bool has_encoder() const { return architecture != Architecture::Decoder; }
  bool has_decoder() const { return architecture != Architecture::Encoder; }
  bool is_moe_block(int64_t i) const { return n_experts > 0 && (i + 1) % moe_every == 0; }
  // Whether block i's causal self-attention has a sliding window (it is "local").
  bool is_local_block(int64_t i) const {
    return sliding_window > 0 && (sliding_window_pattern == 0 || (i + 1) % sliding_window_pattern != 0);
  }

  // Throws attend::Error naming the field when sizes are inconsistent or out of range.
  void validate() const;
  // config.json: every field, with the architecture named. `from_json` rejects unknown keys and wrong
  // types, naming `origin` (the file) and the field; missing keys keep their defaults.
  std::string to_json() const;
  static ModelConfig from_json(std::string_view text, std::string_view origin = "config.json");
  // Sets one field from its config.json name and a JSON value ("d_model", "768"; "norm", "\"rmsnorm\"" or
  // "rmsnorm"), as `attend train --set` does.
  void set(std::string_view key, std::string_view value);
  // One line per field: name (with `prefix`), default, description.
  static std::string help(std::string_view prefix = "");
};

const char* architecture_name(Architecture a);  // "decoder", "encoder", "encoder-decoder"
const char* cache_type_name(CacheType t);       // "f32", "f16", "int8"
const char* attention_kernel_name(AttentionKernel k);  // "flash", "reference", "linear"
// The inverse of cache_type_name; attend::Error naming the accepted words otherwise.
CacheType parse_cache_type(std::string_view name);

// One batch of B sequences of T tokens, padded on the right. Encoder-only and decoder-only models read
// ids; encoder-decoder models read src_* (the encoder's input) and ids (the decoder's).
struct Batch {
  static constexpr int32_t kIgnore = -100;  // a target that has no loss (PyTorch's ignore_index)

  int64_t B = 0, T = 0;
  std::vector<int32_t> ids;      // (B, T)
  std::vector<int32_t> lengths;  // (B): real tokens per sequence; empty means all T
  std::vector<int32_t> targets;  // (B, T): the token to predict at each position, or kIgnore; empty: none
  std::vector<int32_t> token_types;  // (B, T): encoder-only models' segment ids (< type_vocab_size); empty: all 0
  std::vector<int32_t> labels;   // (B): encoder classification labels; empty: none
  int64_t src_T = 0;
  std::vector<int32_t> src_ids;      // (B, src_T)
  std::vector<int32_t> src_lengths;  // (B); empty means all src_T
};

struct RunOptions {
  bool training = false;        // dropout on
  float label_smoothing = 0.0f; // e.g. 0.1
  uint64_t seed = 0;            // dropout's stream (with offset)
  uint64_t offset = 0;
  // How many numbers of the stream, from offset on, this forward may draw (0: no limit). A caller that gives
  // consecutive forwards consecutive windows (the trainer: 2^32 per micro-batch) sets it, so a forward that
  // would run into the next window, whose masks would then repeat these, is an error instead.
  uint64_t rng_window = 0;
  // Mixed precision (003 §13.2): every matmul rounds its weight and input (and in backward its output
  // gradient) to bf16 or fp16 and sums in fp32; weights, gradients, norms, softmax, the loss and MoE routers
  // (Switch Transformer's selective precision) stay fp32. BF16 is about twice sgemm's rate on CPUs with
  // AVX-512 BF16; F16 overflows past 65504 and needs loss scaling (Trainer does it). Needs a ForwardState
  // that keeps activations (the rounded weights are kept for backward there).
  Precision precision = Precision::F32;
};

struct ForwardResult {
  double loss = 0.0;       // ce_loss + moe_aux_loss_weight · aux_loss
  double ce_loss = 0.0;    // mean cross-entropy over the positions (or sequences) with a target
  double aux_loss = 0.0;   // MoE load-balancing loss, summed over MoE blocks
  int64_t n_targets = 0;   // the mean's denominator
};

// Tokens each expert took in the last forward, per MoE block.
struct MoEStats {
  std::string block;                     // e.g. "decoder.layers.1.ffn"
  std::vector<int64_t> tokens_per_expert;
  int64_t refused = 0;                   // choices turned away by the capacity limit
};

// Parameters by part, and the memory training needs (fp32 weights, grads, and AdamW's two moments).
struct ParameterCount {
  int64_t embeddings = 0, attention = 0, ffn = 0, norms = 0, heads = 0, adapters = 0;
  int64_t total() const { return embeddings + attention + ffn + norms + heads + adapters; }
};

// What one forward keeps for its backward, and its logits. The trainer owns one per micro-batch; evaluation
// owns one made with for_backward = false, which keeps the logits only (no activations, no backward, no MoE
// balance loss or expert counts, and fp32 matmuls only). Mixed precision's rounded weights live here too, so forwards never share them.
class ForwardState {
 public:
  explicit ForwardState(bool for_backward = true);
  ~ForwardState();
  ForwardState(ForwardState&&) noexcept;
  ForwardState& operator=(ForwardState&&) noexcept;

  // The forward's logits: (B, T, V) for decoders, (rows with a target, V) for the MLM head, (B, n_classes)
  // for classification.
  const Tensor& logits() const;

  struct Impl;  // src/nn/transformer.h

 private:
  std::unique_ptr<Impl> impl_;
  friend class Model;
};

class Model {
 public:
  // A freshly initialised model (config.init, config.seed).
  explicit Model(const ModelConfig& config);
  // The same network without drawing initial weights, for loaders that fill every parameter. The parameters
  // `blocks_only` picks get no float values: the loader gives them quantized blocks (nn::set_quantized).
  static Model for_loading(const ModelConfig& config, const std::function<bool(const Parameter&)>& blocks_only = {}) {
    return Model(config, Uninitialized{}, blocks_only);
  }
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const;
  // Every parameter, in a fixed order (the order of model.safetensors).
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  Parameter* find(std::string_view name);
  const Parameter* find(std::string_view name) const;
  ParameterCount count() const;
  // Every parameter's value, and every gradient, as one array each: parameters() in order, each one's slice
  // right after the one before (the layout of model.safetensors' data as save_model writes it in f32); the
  // gradients of the parameters that train only (all of them unless some are frozen).
  // Clipping, the optimiser and (across processes) the gradient all-reduce work on these; each Parameter's
  // value and grad are views into them. The gradients are allocated on first use (gradient_buffer,
  // zero_grad, backward): a model that only runs never holds them.
  std::span<float> parameter_buffer();
  std::span<const float> parameter_buffer() const;
  std::span<float> gradient_buffer();
  void zero_grad();
  // Freezes the parameters `which` picks and unfreezes the others (Parameter::frozen): only the unfrozen keep
  // gradients, so gradient_buffer() holds theirs alone, in parameters() order (a frozen matrix may then be
  // held as quantized blocks only), and backward skips every frozen weight's own gradient.
  void freeze(const std::function<bool(const Parameter&)>& which);
  // The parameters that train (not frozen), in parameters() order.
  std::vector<Parameter*> trainable_parameters();
  // LoRA: adapters on config.targets of every block (each in the block's parameters, after its weight), A
  // drawn from config.seed and B zero, and every other parameter frozen. The values move into a new buffer
  // (a mapped checkpoint's are copied). merge_lora folds each adapter into its weight (W += scale·B·A) and
  // drops them; a weight held as stored (16 bits, quantized) becomes fp32 for it. A model holds one unnamed set (its own) and any number of named ones (LoraConfig::name), each
  // with its slot: the index in adapters() that a session's adapter mask selects by (SessionOptions::adapters).
  // Returns the new adapters' slot.
  int add_lora(const LoraConfig& config);
  void merge_lora();
  bool has_lora() const;
  // The model's own adapters have ranks or alphas module by module (LoraConfig::per_module; config.json's
  // lora_per_module).
  bool lora_per_module() const;
  const std::vector<std::string>& adapters() const;  // by slot: "" for the model's own, else the name
  // Loading without a copy: the parameter values become `values` (laid out as parameter_buffer), memory that
  // `owner` keeps alive, such as a private writable mapping of model.safetensors (pages are read from the
  // file when first touched and copied only if written: training such a model never changes the file).
  void adopt_parameter_buffer(std::span<float> values, std::shared_ptr<const void> owner);
  // Re-draws every parameter from `seed` with the configured scheme.
  void initialize(uint64_t seed);
  // Fine-tuning from a pre-trained model (an MLM encoder under a new classification head): copies every
  // parameter of `source` that this model has under the same name. Returns the names of this model's
  // parameters that kept their own values (the new head). A parameter of another shape is an error naming it,
  // and so is a source that shares no parameter with this model.
  std::vector<std::string> copy_parameters_from(const Model& source);

  // Runs the model on the batch into `state` (what backward needs, and the logits); computes the loss when the
  // batch has targets or labels. Errors name the batch field at fault (ids out of range, lengths, shapes, a
  // sequence longer than max_seq_len). Const: many forwards may run at once, each with its own state.
  ForwardResult forward(const Batch& batch, ForwardState& state, const RunOptions& options = {}) const;
  // The last stack's output (B, T, C) (after its final norm when pre-LN): the states the heads read, and what
  // embeddings are pooled from. Encoder-only and decoder-only models; batch.ids, lengths and token_types; with
  // the LoRA adapter sets whose slot bits `adapters` has, at the multipliers `adapter_scales` gives in place of
  // those they were loaded with (SessionOptions::adapters and adapter_scales).
  Tensor hidden_states(const Batch& batch, uint64_t adapters = ~uint64_t{0},
                       std::span<const std::optional<double>> adapter_scales = {}) const;
  // Adds scale × the gradient of that forward's loss into every parameter's grad. Gradient accumulation
  // weights each micro-batch by its share of the targets; fp16 training multiplies by the loss scale.
  // gradients_final(offset), when given, is called as backward goes (after each block) with an offset into
  // gradient_buffer() from which on every gradient has its final value for this backward: data-parallel
  // training starts sending those while the earlier layers are still being differentiated. The offsets
  // decrease; the whole buffer is final when backward returns.
  void backward(const ForwardState& state, double scale = 1.0,
                const std::function<void(int64_t offset)>& gradients_final = {});
  // Tokens each expert took in that forward, per MoE block.
  std::vector<MoEStats> moe_stats(const ForwardState& state) const;

  // The same with the model's own state, for one forward at a time (tests, worked examples).
  ForwardResult forward(const Batch& batch, const RunOptions& options = {});
  void backward(double scale = 1.0);
  const Tensor& logits() const;  // of the last forward(batch)
  std::vector<MoEStats> moe_stats() const;


  // How the weights are stored for running (Parameter::storage). BF16 or F16: every weight is rounded to that
  // type, the model a checkpoint of that dtype holds, and the multiplied matrices (never the position table or
  // a router) are kept packed, so that decoding reads half the bytes per token and prompts run 16-bit GEMMs.
  // F32 drops the packed copies; the rounding stays. Call it before sessions start. `which`, when given, picks the
  // parameters to store so (the others stay as they are): QLoRA's frozen projections (TrainConfig::frozen_weights),
  // which training multiplies as stored and takes input gradients through (their blocks' values, dequantized
  // piece by piece), with no gradient of their own.
  void set_storage(WeightType storage, const std::function<bool(const Parameter&)>& which = nullptr);
  // Whether set_storage keeps p packed: a matrix the forward multiplies by (a projection other than a router, or
  // the token table when it is the tied LM head), of a model of configuration c.
  static bool multiplies(const Parameter& p, const ModelConfig& c);
  // Whether any matrix is held as quantized blocks (Parameter::quantized: a GGUF file's, or set_storage's).
  bool holds_quantized() const;
  // Whether any matrix is held other than as fp32: quantized, or packed in 16 bits (a GGUF file's F16 or BF16
  // matrices as the file stores them, or set_storage's).
  bool holds_packed() const;
  // Drops the float values of every matrix held as stored (packed in 16 bits, or quantized blocks), which then
  // runs as it is stored: decoding reads the 16-bit or block rows as before, prompts widen a piece of rows at a
  // time for their GEMM, lookups widen their rows. The model then takes the memory its stored matrices do (a 16-bit
  // matrix its 2 bytes a weight, not 2 + 4). For running, before sessions start (as set_storage); a GGUF file's
  // 16-bit and quantized matrices load so.
  void hold_as_stored();
  // Gives every matrix held as stored alone (quantized blocks, or 16-bit values without float ones) its float values
  // (the stored values, widened; what is stored stays), for what reads them: training, saving, exporting to float
  // types. Nothing when every parameter has them.
  void ensure_values();
  struct Impl;  // the network (src/nn/transformer.h)

 private:
  friend class Session;  // runs the network through its own KV cache (attend/session.h)
  struct Uninitialized {};
  // Zero weights (norm gains 1); those blocks_only picks without values.
  Model(const ModelConfig& config, Uninitialized, const std::function<bool(const Parameter&)>& blocks_only);

  std::unique_ptr<Impl> impl_;
};

// The mean square of each input column of every matrix a model multiplies, gathered over the forward passes run
// while a RecordInputs is alive (llama.cpp's "importance matrix"): importance-weighted quantization weighs the
// error of column j by it, so the columns that meet large activations are kept closest.
struct InputStatistics {
  struct Entry {
    std::vector<double> sum_squares;  // Σ over input rows of x_j²
    int64_t rows = 0;
  };
  std::map<std::string, Entry, std::less<>> by_weight;  // by parameter name
  // The mean squares of `name`'s input columns; empty when no forward pass multiplied it.
  std::vector<float> mean_squares(std::string_view name) const;
};
// While alive, every fp32 or mixed-precision matrix product of any model in this process adds its input rows
// to `stats` (one recorder at a time; products on several threads are serialised).
class RecordInputs {
 public:
  explicit RecordInputs(InputStatistics& stats);
  ~RecordInputs();
  RecordInputs(const RecordInputs&) = delete;
  RecordInputs& operator=(const RecordInputs&) = delete;
};

}  // namespace attend
