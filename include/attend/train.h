// Training (003 §4, §12-13; 004 §9): the options, the data a trainer draws batches from, and the trainer
// with gradient accumulation, clipping, a divergence guard, checkpoints and exact resume.
//
//   attend::LmDataset data(train_ids, valid_ids, {.batch_size = 8, .seq_len = 256, .seed = 1});
//   attend::Trainer trainer(std::move(model), data, config, "runs/gpt");
//   trainer.run([](const attend::StepReport& r) { ... });   // progress, metrics
#pragma once

#include <attend/communicator.h>
#include <attend/model.h>
#include <attend/schedule.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace attend {

namespace train {

enum class OptimizerKind { SGD, Momentum, Adam, AdamW };
const char* optimizer_name(OptimizerKind kind);  // "sgd", "momentum", "adam", "adamw"
OptimizerKind parse_optimizer(std::string_view name);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;
  double momentum = 0.9;           // β of SGD with momentum
  bool momentum_ema = true;        // v ← βv + (1−β)g (the notes) or v ← βv + g (classic, PyTorch)
  double beta1 = 0.9;
  double beta2 = 0.999;            // e.g. 0.95 for large language models
  double eps = 1e-8;
  double weight_decay = 0.0;       // AdamW: decoupled (θ ← (1 − ηλ)θ); SGD, momentum, Adam: L2 (g + λθ); e.g. 0.1
  bool decay_embeddings = false;   // whether embeddings (and T5's bias tables) are decayed; norms and biases never are
  double beta2_initial = 0.0;      // β₂ warm-up: start here (e.g. 0.99) and move linearly to beta2; 0 = off
  int64_t beta2_warmup_steps = 0;  // e.g. 1000
};

}  // namespace train

// Where batches come from. Training micro-batch i (counted from 0 over the whole run) is a pure function of
// i: resuming needs no other data position, and a run gives the same batches on any machine.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual Batch train_batch(int64_t i) const = 0;
  // Data parallelism: share `part` of `parts` of micro-batch i, its sequences [B·part/parts, B·(part+1)/parts)
  // (padded to the whole batch's lengths, so that each row is what it is in train_batch). The default cuts
  // train_batch(i); the datasets here read only their share (the windows, or the examples, of its rows).
  virtual Batch train_share(int64_t i, int part, int parts) const;
  virtual int64_t valid_batches() const = 0;
  virtual Batch valid_batch(int64_t i) const = 0;
};

struct LmDataOptions {
  int64_t batch_size = 8;   // sequences per micro-batch
  int64_t seq_len = 256;    // T: each sequence is T + 1 tokens, inputs and shifted targets
  uint64_t seed = 0;        // the shuffle
  int64_t max_valid_batches = 50;
};

// Item i of a run visits items in epochs, each a Fisher-Yates order of [0, n) drawn from (seed, epoch): a
// pure function of i, so any position of the run can be recomputed. The last epoch's order is kept, under a
// lock: a dataset's const methods may be called from several threads (ranks of a local group).
class EpochOrder {
 public:
  EpochOrder(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  EpochOrder(const EpochOrder& other) : n_(other.n_), seed_(other.seed_) {}
  EpochOrder& operator=(const EpochOrder& other) {
    n_ = other.n_, seed_ = other.seed_, epoch_ = -1;
    return *this;
  }
  int64_t operator()(int64_t i) const;  // the item at position i of the run
  int64_t size() const { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> order_;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
};

// Rows [first, last) of a batch: every per-sequence field cut, the lengths T and src_T kept.
Batch batch_rows(const Batch& batch, int64_t first, int64_t last);

// Causal LM over a token stream (000 §8.1): the stream is cut into non-overlapping windows of T + 1 tokens;
// each epoch visits them in a Fisher-Yates order drawn from (seed, epoch). Validation uses the valid
// stream's windows in order.
class LmDataset : public Dataset {
 public:
  LmDataset(std::vector<int32_t> train, std::vector<int32_t> valid, const LmDataOptions& options);
  Batch train_batch(int64_t i) const override;
  Batch train_share(int64_t i, int part, int parts) const override;  // reads only those windows
  int64_t valid_batches() const override;
  Batch valid_batch(int64_t i) const override;
  int64_t windows() const { return windows_; }

 private:
  Batch window_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts) const;
  std::vector<int32_t> train_, valid_;
  LmDataOptions options_;
  int64_t windows_ = 0;
  EpochOrder order_;
};

// Masked LM for encoders (001 §8): windows of T tokens; each position is chosen with probability
// mask_probability (15%) and becomes a target; its input is [MASK] 80% of the time, a random token 10%,
// and itself 10%. Special tokens are never chosen. Choices are drawn from (seed, sequence, position).
struct MlmOptions {
  int64_t batch_size = 8, seq_len = 128;
  uint64_t seed = 0;
  double mask_probability = 0.15;
  int32_t mask_id = 0, vocab_size = 0;
  std::vector<int32_t> special_ids;  // never masked, never drawn as the random replacement
  int64_t max_valid_batches = 50;
};

class MlmDataset : public Dataset {
 public:
  MlmDataset(std::vector<int32_t> train, std::vector<int32_t> valid, const MlmOptions& options);
  Batch train_batch(int64_t i) const override;
  Batch train_share(int64_t i, int part, int parts) const override;  // masks only its windows
  int64_t valid_batches() const override;
  Batch valid_batch(int64_t i) const override;

 private:
  Batch masked(const std::vector<int32_t>& tokens, const std::vector<int64_t>& windows, uint64_t stream) const;
  std::vector<int32_t> train_, valid_;
  MlmOptions options_;
  EpochOrder order_;
};

// Labelled sequences: seq2seq pairs (source ids → target ids) or classification examples (ids → label).
struct Example {
  std::vector<int32_t> source;  // encoder input (seq2seq, classification)
  std::vector<int32_t> target;  // seq2seq: the target sequence (without BOS/EOS)
  int32_t label = 0;            // classification
};

struct ExampleOptions {
  int64_t batch_size = 8;
  uint64_t seed = 0;
  int64_t max_source_len = 128, max_target_len = 128;  // longer sequences are cut
  int32_t bos_id = 0, eos_id = 0;                        // seq2seq: decoder input [BOS] y, targets y [EOS]
  int64_t max_valid_batches = 50;
  // Length bucketing: the examples of this many consecutive batches are sorted by length and cut into
  // batches again (visited in a seeded order), so a batch pads to similar lengths. 1 turns it off.
  int64_t bucket_batches = 32;
};

// Seq2seq (teacher forcing: the decoder reads [BOS] y₁ … y_n and predicts y₁ … y_n [EOS]) or classification
// batches, padded on the right to the longest sequence of the batch.
class ExampleDataset : public Dataset {
 public:
  enum class Kind { Seq2Seq, Classify };
  ExampleDataset(Kind kind, std::vector<Example> train, std::vector<Example> valid, const ExampleOptions& options);
  Batch train_batch(int64_t i) const override;
  Batch train_share(int64_t i, int part, int parts) const override;  // collates only its examples
  int64_t valid_batches() const override;
  Batch valid_batch(int64_t i) const override;

 private:
  // The examples as a batch, padded to the longest of `batch` (the whole batch they are a share of) or their own.
  Batch collate(const std::vector<const Example*>& examples, const std::vector<const Example*>* batch = nullptr) const;
  // Batch i's examples, as indices into train_ (length-bucketed).
  std::vector<int64_t> batch_items(int64_t i) const;
  Kind kind_;
  std::vector<Example> train_, valid_;
  ExampleOptions options_;
  EpochOrder order_;
};

struct TrainConfig {
  int64_t steps = 1000;
  int64_t grad_accum = 1;             // micro-batches per optimiser step
  train::Schedule schedule;           // its total_steps is `steps` when left 0
  train::OptimizerConfig optimizer;
  double clip_norm = 1.0;             // global-norm clipping (003 §13.3); 0 = off
  float label_smoothing = 0.0f;       // e.g. 0.1
  int64_t eval_every = 100;           // validation loss every N steps (and at the end); 0 = only at the end
  int64_t checkpoint_every = 500;     // 0 = only at the end
  int64_t max_bad_steps = 5;          // non-finite loss or gradient this many steps in a row stops training
  double spike_factor = 3.0;          // a loss above this × its running average (+0.5 nats) is logged
  uint64_t seed = 0;                  // dropout's stream
  // Fine-tuning: a checkpoint directory whose parameters (by name; shapes must agree) replace the fresh
  // model's before the first step. Parameters it lacks, such as a new classification head, keep their
  // initialisation. Ignored on resume (the run's own checkpoint holds them).
  std::string init_from;
  // Mixed precision (003 §13.2, RunOptions::precision): F32, BF16 (the fast one on AVX-512 BF16 CPUs) or F16
  // with dynamic loss scaling: the loss is multiplied by the scale before backward and the gradients divided
  // after; a step whose gradients overflow is skipped and halves the scale, and loss_scale_window clean steps
  // in a row double it.
  Precision precision = Precision::F32;
  double loss_scale = 65536.0;        // F16: the starting scale (2^16)
  int64_t loss_scale_window = 2000;   // F16: clean steps before the scale doubles
  // Data parallelism (a Trainer given a Communicator of several ranks; `mpirun -np N attend train`): each rank
  // trains on its share of every micro-batch and the gradients are summed across ranks in buckets of
  // bucket_mb megabytes, started while backward runs; F32 or BF16 on the wire. ZeRO-1 splits the optimizer
  // state across the ranks (each updates its share of the parameters, then they are gathered): the same
  // gradient sums and update but for the clipping norm's sum (each rank's share, then the ranks': a rounding
  // apart), 1/N of the optimizer's memory and of its update's work. Unset ("auto"), it is on wherever it
  // applies: several ranks and no frozen parameters (a LoRA run's base has no optimizer state to split).
  std::optional<bool> zero;
  Precision allreduce = Precision::F32;
  double bucket_mb = 25.0;            // 0: one bucket, sent after the whole backward
  // LoRA fine-tuning (run.json's "train": {"lora": {"r", "alpha", "dropout", "targets", "rslora"}}): r > 0 gives
  // the model these adapters (Model::add_lora, A drawn from the model's seed) before init_from's weights are
  // copied, and freezes everything else; the checkpoint's config.json records them (lora_*). A model with
  // adapters of its own must have these.
  LoraConfig lora{.r = 0};
  // LoRA: a PEFT adapter directory or llama.cpp GGUF LoRA file (train.lora.from) whose adapters start the run's, on
  // init_from's base (required): the run goes on training a downloaded adapter. Its rank, scale (alpha / r or / √r),
  // targets and saved modules must be train.lora's (an error names each that differs, with the adapter's value).
  // Ignored on resume.
  std::string lora_from;
  // How the frozen projections are held while training: F32, BF16 or F16 (the base's numbers rounded so; BF16's
  // products forward and their input gradients run the bf16 GEMM where the CPU has one, as QLoRA computes in
  // bf16), or a quantized type (QLoRA: Q8_0, Q4_K, ...; their fp32 values go, the blocks are what the matmuls
  // read, forward and backward). Checkpoints hold the blocks' values in fp32; a resumed run quantizes them again.
  WeightType frozen_weights = WeightType::F32;
};

// What a run trains the model to do, which fixes the architecture it needs and how the data files read.
enum class Task {
  LM,        // "lm": next-token prediction on text files (decoder)
  MLM,       // "mlm": masked-token prediction on text files (encoder)
  Seq2Seq,   // "seq2seq": source<TAB>target lines (encoder-decoder)
  Classify,  // "classify": label<TAB>text lines (encoder with a classification head)
};
const char* task_name(Task task);  // "lm", "mlm", "seq2seq", "classify"

// Where the training text comes from and how it is cut into batches.
struct DataConfig {
  Task task = Task::LM;
  std::vector<std::string> train;       // text files
  std::string valid;                    // a text file; empty: hold out valid_fraction of the documents
  double valid_fraction = 0.05;         // without `valid`: documents (or TSV lines) held out by a hash of their text
  std::string tokenizer;                // tokenizer.json, SentencePiece .model, or a directory
  int64_t batch_size = 8;
  int64_t seq_len = 128;
  uint64_t seed = 0;                    // the shuffle
  int64_t max_valid_batches = 50;
  double mask_probability = 0.15;       // mlm
  int64_t max_target_len = 128;         // seq2seq: target tokens (with EOS)
};

// A whole run: run.json's "model", "data" and "train" sections and the output directory.
struct RunConfig {
  ModelConfig model;
  // Whether run.json has a model section. Without one, `attend train` builds train.init_from's own model (a
  // downloaded checkpoint's configuration, with --set model.FIELD on top), or else the defaults.
  bool model_given = false;
  DataConfig data;
  TrainConfig train;
  std::string out = "runs/run";

  // Unknown keys and wrong types are errors naming `origin` and the field.
  static RunConfig from_json(std::string_view text, std::string_view origin = "run.json");
  std::string to_json() const;
  // KEY is section.field (model.d_model, train.lr, data.seq_len) or out.
  void set(std::string_view key, std::string_view value);
  void validate() const;
  // Every field with its default and meaning (`attend train --help-config`).
  static std::string help();
};

// Token streams for causal LM: each text file is split into documents at blank lines; a document goes to
// validation when the hash of its text falls below valid_fraction (stable across runs and machines), or all
// of `valid` does when given. Documents are joined with the tokenizer's EOS token when it has one. The ids
// are cached in cache_dir (keyed by the files' sizes and times, the tokenizer and the split) and reused.
struct TokenStreams {
  std::vector<int32_t> train, valid;
  int64_t train_documents = 0, valid_documents = 0;
  bool from_cache = false;
};
TokenStreams load_token_streams(const DataConfig& data, const Tokenizer& tokenizer,
                                const std::filesystem::path& cache_dir);

// Examples from TSV files: "source<TAB>target" lines (seq2seq) or "label<TAB>text" lines (classify). A line
// goes to validation by the hash of its text (or every line of `valid` does). Sources are cut to
// data.seq_len tokens; classification sources start with [CLS] when the tokenizer has one. Labels are
// numbered by `classes` (a model's class_names), where a label outside them is an error naming its file and
// line; without classes, in sorted order of the labels the files hold.
struct ExampleSets {
  std::vector<Example> train, valid;
  std::vector<std::string> labels;  // classify: the class names, by id
};
ExampleSets load_examples(const DataConfig& data, const Tokenizer& tokenizer, std::span<const std::string> classes = {});

// The dataset a run's task needs, built from its files. Classification numbers the labels by
// run.model.class_names when given, and records the classes there (the model saves them in config.json).
std::unique_ptr<Dataset> make_dataset(RunConfig& run, const Tokenizer& tokenizer,
                                      const std::filesystem::path& cache_dir, std::string* summary = nullptr);

struct StepReport {
  int64_t step = 0, steps = 0;
  double loss = 0.0, lr = 0.0, grad_norm = 0.0;
  double tokens_per_s = 0.0, elapsed_s = 0.0;
  int64_t tokens = 0;                 // target tokens in this step
  std::optional<double> val_loss;
  // Decoder language models trained with a tokenizer: the validation loss per byte of the predicted
  // tokens' text (Σ nll / Σ bytes; special tokens such as a document's end have no bytes), comparable
  // across tokenizers. exp of it is the perplexity per byte.
  std::optional<double> val_loss_per_byte;
  bool skipped = false;               // non-finite loss or gradient: no update
  bool overflow = false;              // F16: the scaled gradients overflowed (skipped; the scale was halved)
  double loss_scale = 0.0;            // F16: the scale this step's backward used; 0 otherwise
  std::vector<MoEStats> moe;          // MoE models: tokens per expert and refusals of the last micro-batch
  // Data parallelism: what this rank sent to the others this step, the time it waited for them after backward
  // (the communication not hidden behind it, and any wait for a slower rank), the time of forward and
  // backward before that wait, and the part of it spent moving transfers on from backward's hook.
  int64_t comm_bytes = 0;
  double comm_wait_s = 0.0, compute_s = 0.0, comm_overlap_s = 0.0;
};

class Trainer {
 public:
  // Trains `model` on `data` and writes DIR/metrics.jsonl and DIR/checkpoint/ (the model directory plus
  // optimizer.safetensors and trainer.json). With resume, the model, optimiser and step come from
  // DIR/checkpoint, which must hold the same model configuration.
  //
  // With a group of several ranks (attend/communicator.h), this is one rank of a data-parallel run: every rank
  // builds the Trainer with the same model configuration, data and config; rank 0 alone reads and writes DIR
  // (the checkpoint, metrics) and sends the others the starting parameters and optimizer state. Each step
  // trains on this rank's share of every micro-batch (Dataset::train_share) and sums the gradients across
  // ranks (config.allreduce, bucket_mb, zero), so that the update is the one a single process makes from
  // the whole batch (summed in another order: equal to rounding). Checkpoints hold the whole state, so a run
  // resumes with any number of ranks.
  Trainer(Model model, const Dataset& data, const TrainConfig& config, std::filesystem::path dir, bool resume = false,
          const Tokenizer* tokenizer = nullptr, Communicator* group = nullptr);
  ~Trainer();

  // Every checkpoint written from now on carries `source`'s generation files (copy_generation_files: EOS ids, the
  // chat template): fine-tuning a downloaded model with its own tokenizer keeps how it is prompted and stops.
  void carry_generation_files(const std::filesystem::path& source);

  // Whether DIR holds a checkpoint a resume can continue: DIR/checkpoint, or DIR/checkpoint.old where a crash
  // came between save_checkpoint's two renames (the Trainer renames it back).
  static bool has_checkpoint(const std::filesystem::path& dir);

  // Runs until config.steps, or until *stop becomes true (Ctrl-C), then writes a checkpoint. Calls
  // on_step after every step. Throws attend::Error when max_bad_steps non-finite steps come in a row (the
  // last checkpoint is left as it was).
  void run(const std::function<void(const StepReport&)>& on_step = {}, const std::atomic<bool>* stop = nullptr);

  // One optimisation step (forward and backward over every micro-batch, clip, update); exposed for tests.
  StepReport step();
  // The mean loss over the validation batches; with per_byte (decoder language models with a tokenizer
  // only; otherwise left alone) also the loss per byte of the target tokens' text.
  double validation_loss(std::optional<double>* per_byte = nullptr);
  void save_checkpoint();
  int64_t steps_done() const;
  Model& model();
  // Whether this run splits the optimizer state across its ranks (ZeRO-1: config.zero, or "auto").
  bool zero() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace attend
