// The training loop: micro-batches weighted by their share of the targets (accumulation equals the big
// batch), global-norm clipping, the optimiser and the schedule, a divergence guard, metrics, checkpoints
// written atomically, and exact resume.
#include <attend/error.h>
#include <attend/io.h>
#include <attend/log.h>
#include <attend/safetensors.h>
#include <attend/tokenizer.h>
#include <attend/train.h>
#include <attend/model_dir.h>

#include "core/json_fields.h"
#include "train/clip.h"
#include "train/optimizer.h"
#include "train/resume.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

namespace attend {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// Whether token target i counts towards the loss: it has a target, at a real (not padded) position.
bool is_scored(const Batch& b, int64_t i) {
  return b.targets[i] != Batch::kIgnore && (b.lengths.empty() || i % b.T < b.lengths[i / b.T]);
}

// Targets that count towards the loss: labels, or scored token targets.
int64_t count_targets(const Batch& b) {
  if (!b.labels.empty()) return b.B;
  int64_t n = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(b.targets.size()); ++i) n += is_scored(b, i);
  return n;
}

// The first line where two config.json texts differ, for "checkpoint from a different model" errors.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (std::getline(sa, la) && std::getline(sb, lb))
    if (la != lb) return fmt::format("checkpoint has {}, the run has {}", la, lb);
  return "they differ";
}

}  // namespace

namespace train {

SavedState parse_trainer_state(std::string_view text, std::string_view origin) {
  const nlohmann::json j = parse_json(text, origin);
  check(j.is_object(), "{}: expected a JSON object, found {}", origin, j.type_name());
  SavedState s;
  auto field = [&](const char* key, auto& value) {
    if (auto it = j.find(key); it != j.end()) read_field(value, *it, fmt::format("{}: '{}'", origin, key));
  };
  check(j.contains("step"), "{}: has no 'step'", origin);
  field("step", s.step);
  check(s.step >= 0, "{}: 'step' is {}, expected a non-negative integer", origin, s.step);
  field("bad_streak", s.bad_streak);
  field("clean_steps", s.clean_steps);
  field("elapsed_s", s.elapsed_s);
  if (auto it = j.find("loss_average"); it != j.end() && !it->is_null()) field("loss_average", s.loss_average);
  if (j.contains("loss_scale")) {
    double scale = 0.0;
    field("loss_scale", scale);
    check(scale >= 1.0, "{}: 'loss_scale' is {}, expected at least 1", origin, scale);
    s.loss_scale = scale;
  }
  return s;
}

std::string metrics_up_to(std::string_view text, std::string_view origin, int64_t step) {
  std::string kept;
  size_t pos = 0;
  for (int64_t number = 1; pos < text.size(); ++number) {
    size_t end = text.find('\n', pos);
    const bool cut_short = end == std::string::npos;
    if (cut_short) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", origin, number);
    nlohmann::json j;
    try {
      j = parse_json(line, where);
    } catch (const Error&) {
      if (!cut_short) throw;
      log::warn("{}: the last line was cut short (an interrupted run); dropped", where);
      break;
    }
    check(j.is_object() && j.contains("step"), "{}: expected a JSON object with a \"step\", found {}", where,
          line.substr(0, 80));
    int64_t line_step = 0;
    read_field(line_step, j.at("step"), fmt::format("{}: 'step'", where));
    if (line_step <= step) kept.append(line).append("\n");
  }
  return kept;
}

}  // namespace train

struct Trainer::State {
  Model model;
  ForwardState activations;  // what each micro-batch's forward keeps for its backward
  const Dataset& data;
  TrainConfig config;
  fs::path dir;
  const Tokenizer* tokenizer = nullptr;
  std::unique_ptr<train::Optimizer> optimizer;
  int64_t step = 0, bad_streak = 0;
  double loss_average = NAN;  // for spike detection
  double loss_scale = 1.0;    // F16: dynamic loss scaling
  int64_t clean_steps = 0;    // F16: steps since the scale last changed or overflowed
  double elapsed_s = 0.0;     // over every run of this training, resumes included
  std::ofstream metrics;      // DIR/metrics.jsonl, a JSON object per step, appended
  std::vector<int32_t> token_bytes;  // per id, the bytes it decodes to (validation loss per byte)

  State(Model m, const Dataset& d, const TrainConfig& c, fs::path p, const Tokenizer* t)
      : model(std::move(m)), data(d), config(c), dir(std::move(p)), tokenizer(t) {}
  fs::path checkpoint() const { return dir / "checkpoint"; }
};

Trainer::Trainer(Model model, const Dataset& data, const TrainConfig& config, fs::path dir, bool resume,
                 const Tokenizer* tokenizer)
    : s_(std::make_unique<State>(std::move(model), data, config, std::move(dir), tokenizer)) {
  State& s = *s_;
  TrainConfig& c = s.config;
  check(c.steps >= 1, "train: steps must be at least 1, got {}", c.steps);
  check(c.clip_norm >= 0.0 && c.max_bad_steps >= 1, "train: clip_norm must be non-negative and max_bad_steps positive");
  check(c.loss_scale >= 1.0 && c.loss_scale_window >= 1,
        "train: loss_scale must be at least 1 and loss_scale_window positive, got {} and {}", c.loss_scale,
        c.loss_scale_window);
  s.loss_scale = c.precision == Precision::F16 ? c.loss_scale : 1.0;
  if (c.schedule.total_steps == 0) c.schedule.total_steps = c.steps;
  c.schedule.d_model = s.model.config().d_model;  // inverse_sqrt's d_model^(-1/2) is the model's width
  c.schedule.validate();
  std::error_code ec;
  fs::create_directories(s.dir, ec);
  check(fs::is_directory(s.dir), "{}: cannot create the run directory: {}", s.dir.string(), ec.message());
  // A crash between the two renames of save_checkpoint leaves only checkpoint.old: it is the last good one.
  if (!fs::exists(s.checkpoint()) && fs::exists(s.dir / "checkpoint.old"))
    fs::rename(s.dir / "checkpoint.old", s.checkpoint());

  if (resume) {
    check(fs::exists(s.checkpoint() / "trainer.json"), "{}: no checkpoint to resume from", s.checkpoint().string());
    Model saved = load_model(s.checkpoint());
    const std::string want = s.model.config().to_json(), have = saved.config().to_json();
    check(want == have, "{}: the checkpoint is of a different model: {}", s.checkpoint().string(),
          first_difference(have, want));
    s.model = std::move(saved);
  }
  s.optimizer = std::make_unique<train::Optimizer>(c.optimizer, s.model.parameters());
  check(c.grad_accum >= 1, "train: grad_accum must be at least 1, got {}", c.grad_accum);
  if (resume) {
    const fs::path ckpt = s.checkpoint();
    s.optimizer->load_state(SafetensorsReader(ckpt / "optimizer.safetensors"));
    const fs::path state_path = ckpt / "trainer.json", metrics_path = s.dir / "metrics.jsonl";
    const train::SavedState state = train::parse_trainer_state(read_file(state_path), state_path.string());
    s.step = state.step;
    s.bad_streak = state.bad_streak;
    s.loss_average = state.loss_average;
    s.elapsed_s = state.elapsed_s;
    if (c.precision == Precision::F16 && state.loss_scale) {  // a run that trained in f16 before
      s.loss_scale = *state.loss_scale;
      s.clean_steps = state.clean_steps;
    }
    // Keep the metrics up to the checkpoint's step: the steps after it are trained again.
    const std::string kept =
        fs::exists(metrics_path) ? train::metrics_up_to(read_file(metrics_path), metrics_path.string(), s.step) : "";
    write_file_atomic(metrics_path, kept);
    log::info("resuming {} at step {}", ckpt.string(), s.step);
  } else {
    check(!fs::exists(s.checkpoint()), "{}: already holds a checkpoint; resume it, or train into another directory",
          s.dir.string());
    if (!c.init_from.empty()) {
      Model source = load_model(c.init_from);
      source.ensure_values();  // a GGUF file's quantized matrices start the run as their blocks' values
      std::vector<std::string> kept;
      try {
        kept = s.model.copy_parameters_from(source);
      } catch (const Error& e) {
        throw Error(fmt::format("train.init_from {}: {}", c.init_from, e.what()));
      }
      log::info("init_from {}: {} of {} parameters copied; new: {}", c.init_from,
                s.model.parameters().size() - kept.size(), s.model.parameters().size(),
                kept.empty() ? std::string("none") : fmt::format("{}", fmt::join(kept, ", ")));
    }
    write_file_atomic(s.dir / "metrics.jsonl", "");
  }
  s.metrics.open(s.dir / "metrics.jsonl", std::ios::app);
  check(s.metrics.good(), "{}: cannot append to metrics.jsonl", s.dir.string());
}

Trainer::~Trainer() = default;

int64_t Trainer::steps_done() const { return s_->step; }
Model& Trainer::model() { return s_->model; }

StepReport Trainer::step() {
  State& s = *s_;
  const TrainConfig& c = s.config;
  const auto start = std::chrono::steady_clock::now();
  const int64_t t = s.step + 1;
  StepReport r;
  r.step = t;
  r.steps = c.steps;

  // Each micro-batch's mean loss is weighted by its share of the step's targets, so K micro-batches give
  // the gradient of the big batch's mean loss.
  std::vector<Batch> micro;
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < c.grad_accum; ++k) {
    micro.push_back(s.data.train_batch((t - 1) * c.grad_accum + k));
    counts.push_back(count_targets(micro.back()));
    r.tokens += counts.back();
  }
  check(r.tokens > 0, "train: step {} has no targets (every position is padding or ignored)", t);
  // F16: the loss (so every gradient) is multiplied by the scale, lifting small gradients out of fp16's
  // underflow; the gradients are divided by it again before clipping and the update.
  const bool scaling = c.precision == Precision::F16;
  const double scale = scaling ? s.loss_scale : 1.0;
  if (scaling) r.loss_scale = scale;
  s.model.zero_grad();
  for (int64_t k = 0; k < c.grad_accum; ++k) {
    const double share = double(counts[k]) / double(r.tokens);
    // Dropout's stream: a window of 2^32 numbers per micro-batch, so a step's masks depend only on (seed, t, k).
    // The forward checks that its masks fit the window (B·H·T² per layer can pass 2^32 for big micro-batches);
    // Philox's counter takes the whole 64-bit index, so windows past 2^32 do not wrap.
    constexpr uint64_t kDropoutWindow = uint64_t{1} << 32;
    const RunOptions options{.training = true, .label_smoothing = c.label_smoothing, .seed = c.seed,
                             .offset = static_cast<uint64_t>((t - 1) * c.grad_accum + k) * kDropoutWindow,
                             .rng_window = kDropoutWindow, .precision = c.precision};
    r.loss += share * s.model.forward(micro[k], s.activations, options).loss;
    s.model.backward(s.activations, share * scale);
  }
  r.moe = s.model.moe_stats(s.activations);
  const std::span<float> grads = s.model.gradient_buffer();
  if (scaling) train::scale_grads(grads, 1.0 / scale);
  r.grad_norm = c.clip_norm > 0.0 ? train::clip_grad_norm(grads, c.clip_norm) : train::global_grad_norm(grads);
  r.lr = c.schedule.at(t);
  // F16 overflow: a finite loss whose scaled gradients overflowed. The scale is too large; halve it and skip
  // the step (the divergence guard does not count it unless the scale is already at its floor of 1).
  const bool overflow = scaling && std::isfinite(r.loss) && !std::isfinite(r.grad_norm) && s.loss_scale > 1.0;
  if (overflow) {
    r.skipped = r.overflow = true;
    s.loss_scale = std::max(1.0, s.loss_scale / 2.0);
    s.clean_steps = 0;
    log::info("step {}: f16 gradients overflowed at loss scale {}: step skipped, scale now {}", t, scale,
              s.loss_scale);
  } else if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.skipped = true;
    ++s.bad_streak;
    log::warn("step {}: non-finite {} ({}): step skipped ({} in a row)", t, std::isfinite(r.loss) ? "gradient norm" : "loss",
              std::isfinite(r.loss) ? r.grad_norm : r.loss, s.bad_streak);
    if (s.bad_streak >= c.max_bad_steps) {
      throw Error(fmt::format("training diverged: {} steps in a row had a non-finite loss or gradient (step {}); "
                              "the last good checkpoint is {}; lower the learning rate or clip_norm and resume",
                              s.bad_streak, t, s.checkpoint().string()));
    }
  } else {
    s.bad_streak = 0;
    s.optimizer->step(r.lr);
    if (scaling && ++s.clean_steps >= c.loss_scale_window) {
      s.loss_scale *= 2.0;
      s.clean_steps = 0;
    }
    // Near zero loss one batch can triple without meaning anything: a spike must also rise 0.5 nats.
    constexpr double kSpikeRise = 0.5;
    if (std::isfinite(s.loss_average) && r.loss > c.spike_factor * s.loss_average && r.loss > s.loss_average + kSpikeRise)
      log::warn("step {}: loss spike: {:.4f} against a running average of {:.4f}", t, r.loss, s.loss_average);
    s.loss_average = std::isfinite(s.loss_average) ? 0.95 * s.loss_average + 0.05 * r.loss : r.loss;
  }
  s.step = t;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.elapsed_s += seconds;
  r.elapsed_s = s.elapsed_s;
  r.tokens_per_s = seconds > 0.0 ? double(r.tokens) / seconds : 0.0;
  return r;
}

double Trainer::validation_loss(std::optional<double>* per_byte) {
  State& s = *s_;
  const bool count_bytes = per_byte != nullptr && s.tokenizer != nullptr &&
                           s.model.config().architecture == Architecture::Decoder;
  if (count_bytes && s.token_bytes.empty())
    for (int32_t id = 0; id < s.tokenizer->vocab_size(); ++id)
      s.token_bytes.push_back(static_cast<int32_t>(s.tokenizer->text_bytes(id)));
  double sum = 0.0;
  int64_t n = 0, bytes = 0;
  for (int64_t i = 0; i < s.data.valid_batches(); ++i) {
    const Batch b = s.data.valid_batch(i);
    const ForwardResult r = s.model.forward(b, s.activations, {.precision = s.config.precision});
    sum += r.ce_loss * double(r.n_targets);
    n += r.n_targets;
    if (count_bytes)
      for (int64_t j = 0; j < static_cast<int64_t>(b.targets.size()); ++j)
        if (is_scored(b, j)) bytes += s.token_bytes.at(static_cast<size_t>(b.targets[j]));
  }
  if (count_bytes && bytes > 0) *per_byte = sum / double(bytes);
  return n > 0 ? sum / double(n) : NAN;
}

// DIR/checkpoint.tmp is written whole, then swapped in: checkpoint → checkpoint.old, checkpoint.tmp →
// checkpoint, checkpoint.old removed. At every moment a complete checkpoint exists under one of the names.
void Trainer::save_checkpoint() {
  State& s = *s_;
  const fs::path tmp = s.dir / "checkpoint.tmp", old = s.dir / "checkpoint.old";
  fs::remove_all(tmp);
  save_model(s.model, tmp, s.tokenizer);
  auto meta = s.optimizer->state_metadata();
  write_safetensors(tmp / "optimizer.safetensors", s.optimizer->state_tensors(), meta);
  json state = {{"step", s.step},
                {"bad_streak", s.bad_streak},
                {"loss_average", std::isfinite(s.loss_average) ? json(s.loss_average) : json(nullptr)},
                {"elapsed_s", s.elapsed_s},
                {"loss_scale", s.loss_scale},
                {"clean_steps", s.clean_steps},
                {"seed", s.config.seed}};
  write_file_atomic(tmp / "trainer.json", state.dump(2) + "\n");
  fs::remove_all(old);
  if (fs::exists(s.checkpoint())) fs::rename(s.checkpoint(), old);
  fs::rename(tmp, s.checkpoint());
  fs::remove_all(old);
}

void Trainer::run(const std::function<void(const StepReport&)>& on_step, const std::atomic<bool>* stop) {
  State& s = *s_;
  const TrainConfig& c = s.config;
  auto append_metrics = [&](const StepReport& r) {
    json line = {{"step", r.step},           {"loss", r.loss},   {"lr", r.lr},
                 {"grad_norm", r.grad_norm}, {"tokens", r.tokens}, {"tokens_per_s", r.tokens_per_s},
                 {"elapsed_s", r.elapsed_s}};
    if (r.val_loss) line["val_loss"] = *r.val_loss;
    if (r.val_loss_per_byte) line["val_loss_per_byte"] = *r.val_loss_per_byte;
    if (r.skipped) line["skipped"] = true;
    if (r.overflow) line["overflow"] = true;
    if (r.loss_scale > 0.0) line["loss_scale"] = r.loss_scale;
    if (!r.moe.empty()) {  // routing: tokens per expert of each MoE block, and choices refused for capacity
      json tokens = json::array();
      int64_t refused = 0;
      for (const MoEStats& m : r.moe) tokens.push_back(m.tokens_per_expert), refused += m.refused;
      line["moe_tokens_per_expert"] = tokens;
      line["moe_refused"] = refused;
    }
    for (auto& [k, v] : line.items())
      if (v.is_number_float() && !std::isfinite(v.get<double>())) v = nullptr;  // JSON has no NaN
    s.metrics << line.dump() << "\n" << std::flush;
  };
  while (s.step < c.steps && !(stop && stop->load())) {
    StepReport r = step();
    const bool last = s.step == c.steps || (stop && stop->load());
    if ((c.eval_every > 0 && s.step % c.eval_every == 0) || last) r.val_loss = validation_loss(&r.val_loss_per_byte);
    append_metrics(r);
    if (on_step) on_step(r);
    if ((c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0) || last) save_checkpoint();
  }
}

}  // namespace attend
