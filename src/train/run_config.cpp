// run.json: the model, data and train sections of a training run, through the same field lists as
// config.json (core/json_fields.h).
#include <attend/error.h>
#include <attend/train.h>

#include "core/json_fields.h"

namespace attend {

template <>
std::span<const EnumName<train::ScheduleKind>> names_of();  // schedule.cpp
template <>
std::span<const EnumName<train::OptimizerKind>> names_of();  // optimizer.cpp
template <>
std::span<const EnumName<WeightType>> names_of();  // nn/config.cpp

constexpr EnumName<Task> kTasks[] = {
    {Task::LM, "lm"}, {Task::MLM, "mlm"}, {Task::Seq2Seq, "seq2seq"}, {Task::Classify, "classify"}};
template <>
std::span<const EnumName<Task>> names_of() {
  return kTasks;
}
const char* task_name(Task task) { return enum_name<Task>(kTasks, task); }

constexpr EnumName<Precision> kPrecisions[] = {
    {Precision::F32, "f32"}, {Precision::BF16, "bf16"}, {Precision::F16, "f16"}};
template <>
std::span<const EnumName<Precision>> names_of() {
  return kPrecisions;
}

namespace {

using json = nlohmann::json;

template <typename F>
void for_each_data_field(DataConfig& d, F&& f) {
  f("task", d.task, "lm (decoder, text files), mlm (encoder, text files), seq2seq (encoder-decoder, source<TAB>target lines) or classify (encoder, label<TAB>text lines)");
  f("train", d.train, "training text files (a list)");
  f("valid", d.valid, "a validation text file; empty: hold out valid_fraction of the documents");
  f("valid_fraction", d.valid_fraction, "share of documents (blank-line separated) held out, chosen by a hash of their text");
  f("tokenizer", d.tokenizer, "tokenizer.json, SentencePiece .model, or a directory holding one (required)");
  f("batch_size", d.batch_size, "sequences per micro-batch");
  f("seq_len", d.seq_len, "tokens per sequence (at most the model's max_seq_len)");
  f("seed", d.seed, "the shuffle's seed");
  f("max_valid_batches", d.max_valid_batches, "validation batches per evaluation");
  f("mask_probability", d.mask_probability, "mlm: share of tokens chosen (80% [MASK], 10% random, 10% kept)");
  f("max_target_len", d.max_target_len, "seq2seq: target tokens kept, EOS included");
}

// "zero" is true, false or "auto" (unset in the struct).
struct ZeroSwitch {
  std::optional<bool>& zero;
  void read(const nlohmann::json& v, const std::string& where) {
    check(v.is_boolean() || v == "auto", "{} is {}, expected true, false or \"auto\"", where, v.dump());
    zero = v.is_boolean() ? std::optional<bool>(v.get<bool>()) : std::nullopt;
  }
  nlohmann::ordered_json write() const { return zero ? nlohmann::ordered_json(*zero) : nlohmann::ordered_json("auto"); }
};

template <typename F>
void for_each_train_field(TrainConfig& t, F&& f) {
  ZeroSwitch zero{t.zero};
  f("steps", t.steps, "optimiser steps");
  f("grad_accum", t.grad_accum, "micro-batches per step (the same update as one batch that many times larger)");
  f("lr", t.schedule.lr, "peak learning rate (inverse_sqrt: a multiplier, 1 is the paper's)");
  f("schedule", t.schedule.kind, "constant, warmup, cosine (warm-up then cosine to min_lr) or inverse_sqrt");
  f("warmup_steps", t.schedule.warmup_steps, "linear warm-up steps");
  f("min_lr", t.schedule.min_lr, "the cosine schedule's floor");
  f("optimizer", t.optimizer.kind, "sgd, momentum, adam or adamw");
  f("momentum", t.optimizer.momentum, "momentum's β");
  f("momentum_ema", t.optimizer.momentum_ema, "momentum as v = βv + (1−β)g (the notes); false: v = βv + g");
  f("beta1", t.optimizer.beta1, "Adam's β₁");
  f("beta2", t.optimizer.beta2, "Adam's β₂");
  f("eps", t.optimizer.eps, "Adam's ε");
  f("weight_decay", t.optimizer.weight_decay, "AdamW: decoupled decay; others: L2. Never on norms or biases");
  f("decay_embeddings", t.optimizer.decay_embeddings, "also decay embeddings");
  f("beta2_initial", t.optimizer.beta2_initial, "β₂ warm-up: the first step's β₂ (e.g. 0.99); 0: off");
  f("beta2_warmup_steps", t.optimizer.beta2_warmup_steps, "β₂ warm-up: steps to reach beta2");
  f("clip_norm", t.clip_norm, "global gradient-norm clipping threshold; 0: off");
  f("label_smoothing", t.label_smoothing, "α in (1−α)·onehot + α/V");
  f("eval_every", t.eval_every, "validation loss every N steps (and at the end)");
  f("checkpoint_every", t.checkpoint_every, "checkpoint every N steps (and at the end and on Ctrl-C)");
  f("max_bad_steps", t.max_bad_steps, "stop after this many non-finite steps in a row");
  f("spike_factor", t.spike_factor, "log a loss above this × its running average (and 0.5 nats above it)");
  f("seed", t.seed, "dropout's seed");
  f("init_from", t.init_from, "fine-tuning: a checkpoint directory (Attend's or a Hugging Face one) whose parameters of the same names start the run; without a model section, its own model is trained");
  f("precision", t.precision, "matmul operands: f32, bf16 (mixed precision, fast with AVX-512 BF16) or f16 (loss-scaled)");
  f("loss_scale", t.loss_scale, "f16: the starting loss scale (halved on overflow)");
  f("loss_scale_window", t.loss_scale_window, "f16: steps without overflow before the scale doubles");
  f("zero", zero, "mpirun: ZeRO-1, each rank holds and updates 1/N of the optimizer state; auto: on with several ranks unless some parameters are frozen (LoRA)");
  f("allreduce", t.allreduce, "mpirun: the gradients' type on the wire, f32 or bf16 (half the bytes)");
  f("bucket_mb", t.bucket_mb, "mpirun: megabytes of fp32 gradients per bucket, sent while backward runs; 0: one bucket at the end");
  f("frozen_weights", t.frozen_weights, "LoRA: the frozen projections held as f32, bf16, f16, or quantized (q8_0, q4_k, ...: QLoRA)");
}

template <typename F>
void for_each_lora_field(TrainConfig& t, F&& f) {
  LoraConfig& l = t.lora;
  f("r", l.r, "the adapters' rank (0: no LoRA, the whole model trains)");
  f("alpha", l.alpha, "the adapters' output is scaled by alpha / r");
  f("dropout", l.dropout, "dropout on the adapters' input while training (PEFT's lora_dropout)");
  f("targets", l.targets, "the projections adapted, among q, k, v, o (attention), up, gate, down (FFN)");
  f("rslora", l.rslora, "scale by alpha / √r (rsLoRA) instead");
  f("layers", l.layers, "the blocks adapted, from 0 (in each stack of an encoder-decoder; PEFT's layers_to_transform); []: every block");
  f("modules_to_save", l.modules_to_save, "modules that train whole beside the adapters: classifier, pooler, embeddings (a classification head's by default)");
  f("from", t.lora_from, "a PEFT adapter directory or GGUF LoRA file to go on training, on train.init_from's base (r, alpha, targets, rslora and modules_to_save as it has them)");
}

}  // namespace

RunConfig RunConfig::from_json(std::string_view text, std::string_view origin) {
  const json j = parse_json(text, origin);
  check(j.is_object(), "{}: expected an object with model, data and train sections, found {}", origin, j.type_name());
  RunConfig c;
  for (const auto& [key, value] : j.items())
    check(key == "model" || key == "data" || key == "train" || key == "out",
          "{}: unknown section '{}' (expected model, data, train, out)", origin, key);
  if (j.contains("model")) c.model = ModelConfig::from_json(j["model"].dump(), fmt::format("{}: model", origin));
  c.model_given = j.contains("model");
  if (j.contains("data"))
    read_fields(j["data"], fmt::format("{}: data", origin), [&](auto&& f) { for_each_data_field(c.data, f); });
  if (j.contains("train")) {
    json train = j["train"];
    if (train.is_object() && train.contains("lora")) {  // a section of its own
      read_fields(train["lora"], fmt::format("{}: train.lora", origin),
                  [&](auto&& f) { for_each_lora_field(c.train, f); });
      train.erase("lora");
    }
    read_fields(train, fmt::format("{}: train", origin), [&](auto&& f) { for_each_train_field(c.train, f); });
  }
  if (j.contains("out")) read_field(c.out, j["out"], fmt::format("{}: 'out'", origin));
  return c;
}

std::string RunConfig::to_json() const {
  RunConfig copy = *this;
  nlohmann::ordered_json j;
  j["model"] = nlohmann::ordered_json::parse(model.to_json());
  j["data"] = write_fields([&](auto&& f) { for_each_data_field(copy.data, f); });
  j["train"] = write_fields([&](auto&& f) { for_each_train_field(copy.train, f); });
  if (train.lora.r > 0) j["train"]["lora"] = write_fields([&](auto&& f) { for_each_lora_field(copy.train, f); });
  j["out"] = out;
  return j.dump(2) + "\n";
}

void RunConfig::set(std::string_view key, std::string_view value) {
  const size_t dot = key.find('.');
  const std::string_view section = dot == std::string_view::npos ? key : key.substr(0, dot);
  const std::string_view field = dot == std::string_view::npos ? "" : key.substr(dot + 1);
  bool found = false;
  if (key == "out") {
    out = std::string(value), found = true;
  } else if (section == "model") {
    model.set(field, value);
    found = true;
  } else if (section == "data") {
    found = set_field(field, value, "--set data", [&](auto&& f) { for_each_data_field(data, f); });
  } else if (section == "train" && field.starts_with("lora.")) {
    found = set_field(field.substr(5), value, "--set train.lora", [&](auto&& f) { for_each_lora_field(train, f); });
  } else if (section == "train") {
    found = set_field(field, value, "--set train", [&](auto&& f) { for_each_train_field(train, f); });
  }
  check(found, "--set: unknown option '{}' (expected model.FIELD, data.FIELD, train.FIELD or out; "
               "`attend train --help-config` lists them)", key);
}

void RunConfig::validate() const {
  model.validate();
  const Architecture needed = data.task == Task::LM        ? Architecture::Decoder
                              : data.task == Task::Seq2Seq ? Architecture::EncoderDecoder
                                                           : Architecture::Encoder;
  check(model.architecture == needed, "run: data.task {} trains an {} model, model.architecture is {}",
        task_name(data.task), architecture_name(needed), architecture_name(model.architecture));
  check(data.task != Task::Classify || model.n_classes > 0, "run: data.task classify needs model.n_classes > 0");
  check(!data.train.empty(), "run: data.train names no text files");
  check(!data.tokenizer.empty(), "run: data.tokenizer is empty (a tokenizer.json, .model or directory)");
  check(data.seq_len >= 1 && data.seq_len <= model.max_seq_len,
        "run: data.seq_len {} must be in [1, model.max_seq_len = {}]", data.seq_len, model.max_seq_len);
  check(data.batch_size >= 1, "run: data.batch_size must be positive, got {}", data.batch_size);
  check(data.valid_fraction >= 0.0 && data.valid_fraction < 1.0, "run: data.valid_fraction must be in [0, 1), got {}",
        data.valid_fraction);
  check(train.steps >= 1 && train.grad_accum >= 1, "run: train.steps and train.grad_accum must be positive");
  check(train.label_smoothing >= 0.0f && train.label_smoothing < 1.0f, "run: train.label_smoothing must be in [0, 1)");
  check(train.loss_scale >= 1.0 && train.loss_scale_window >= 1,
        "run: train.loss_scale must be at least 1 and train.loss_scale_window positive, got {} and {}",
        train.loss_scale, train.loss_scale_window);
  check(train.allreduce != Precision::F16, "run: train.allreduce must be f32 or bf16, got f16");
  check(train.bucket_mb >= 0.0, "run: train.bucket_mb must be non-negative, got {}", train.bucket_mb);
  check(train.lora.r >= 0, "run: train.lora.r is {}, expected 0 (no LoRA) or a rank", train.lora.r);
  check(train.lora_from.empty() || (train.lora.r > 0 && !train.init_from.empty()), "run: train.lora.from ({}) needs "
        "train.init_from, the base the adapter was trained on, and train.lora's r, alpha and targets as the adapter "
        "has them", train.lora_from);
  if (train.lora.r > 0) {
    try {
      train.lora.validate();
    } catch (const Error& e) {
      throw Error(fmt::format("run: train.{}", e.what()));
    }
  }
  train::Schedule s = train.schedule;
  if (s.total_steps == 0) s.total_steps = train.steps;
  s.validate();
}

std::string RunConfig::help() {
  RunConfig d;
  std::string out = "run.json: {\"model\": {...}, \"data\": {...}, \"train\": {...}, \"out\": \"runs/NAME\"}\n\nmodel\n";
  out += ModelConfig::help("model.");
  out += "\ndata\n" + describe_fields("data.", [&](auto&& f) { for_each_data_field(d.data, f); });
  out += "\ntrain\n" + describe_fields("train.", [&](auto&& f) { for_each_train_field(d.train, f); });
  out += describe_fields("train.lora.", [&](auto&& f) { for_each_lora_field(d.train, f); });
  out += fmt::format("\n  {:<28} {:<14} {}\n", "out", "\"runs/run\"", "the run directory: checkpoint/, metrics.jsonl");
  return out;
}

}  // namespace attend
