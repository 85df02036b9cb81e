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
#include "nn/lora.h"
#include "train/clip.h"
#include "train/collective.h"
#include "train/optimizer.h"
#include "train/resume.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace attend {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The modules of ranks module by module (ModelConfig::lora_per_module), in order.
std::vector<std::string> module_names(const std::map<std::string, LoraConfig::Rank>& per_module) {
  std::vector<std::string> names;
  for (const auto& entry : per_module) names.push_back(entry.first);
  return names;
}

// `model` rebuilt with ranks and alphas module by module `per_module` (train.lora.from's): its adapters drawn anew.
void adopt_modules(Model& model, const std::map<std::string, LoraConfig::Rank>& per_module) {
  ModelConfig config = model.config();
  config.lora_per_module = per_module;
  model = Model(config);
}

// train.lora.from: the adapter file's adapters onto `base` (init_from's model, made the run's: its head too), as the
// run's own; their options must be the run's (`run`: the model train.lora made), each that differs named with the
// adapter's value. The scale is compared, not alpha and rsLoRA apart (a GGUF file holds rsLoRA's as alpha·√r, in
// float32), and the targets as a set of what the model has. An adapter with ranks or alphas module by module (some
// blocks, rank_pattern) trains as it is: its ranks and alphas replace train.lora's r and alpha.
void adapters_from(Model& base, const std::string& adapter, const ModelConfig& run) {
  try {
    load_peft_adapter(base, adapter);
  } catch (const Error& e) {
    throw Error(fmt::format("train.lora.from: {}", e.what()));
  }
  const ModelConfig& a = base.config();
  auto unit = [](const ModelConfig& m) {
    return m.lora_rslora ? m.lora_alpha / std::sqrt(double(m.lora_r)) : m.lora_alpha / double(m.lora_r);
  };
  auto targets = [](const ModelConfig& m) {  // in Attend's order, gate only where the FFN has one
    std::set<std::string> has(m.lora_targets.begin(), m.lora_targets.end());
    if (!is_gated(m.activation)) has.erase("gate");
    return nn::in_target_order(has);
  };
  std::vector<std::string> differ;
  const bool per_module = base.lora_per_module();
  if (per_module) {
    std::set<int64_t> ranks;
    for (const auto& entry : a.lora_per_module) ranks.insert(entry.second.r);
    log::info("train.lora.from {}: ranks and alphas module by module ({} modules, ranks {}): they train as they are, "
              "in place of train.lora's r and alpha", adapter, a.lora_per_module.size(), fmt::join(ranks, ", "));
    if (a.lora_rslora != run.lora_rslora)
      differ.push_back(fmt::format("rslora {} (train.lora {})", a.lora_rslora, run.lora_rslora));
  }
  if (!per_module && a.lora_r != run.lora_r) differ.push_back(fmt::format("r {} (train.lora {})", a.lora_r, run.lora_r));
  if (!per_module && std::abs(unit(a) - unit(run)) > 1e-6 * std::abs(unit(run)))
    differ.push_back(fmt::format("the scale {}{} = {} (train.lora {})", a.lora_alpha,
                                 a.lora_rslora ? " / √r" : " / r", unit(a), unit(run)));
  if (targets(a) != targets(run))
    differ.push_back(fmt::format("targets {} (train.lora {})", fmt::join(targets(a), ","), fmt::join(targets(run), ",")));
  if (!run.lora_per_module.empty()) {  // train.lora.layers: the adapter's modules must be those blocks'
    const std::vector<std::string> theirs = module_names(a.lora_per_module), ours = module_names(run.lora_per_module);
    if (theirs != ours)
      differ.push_back(fmt::format("{} (train.lora.layers: {})", theirs.empty() ? "every block" :
                                   fmt::format("the modules {}", fmt::join(theirs, ", ")), fmt::join(ours, ", ")));
  }
  if (a.lora_modules_to_save != run.lora_modules_to_save)
    differ.push_back(fmt::format("modules_to_save {} (train.lora {})", fmt::join(a.lora_modules_to_save, ","),
                                 fmt::join(run.lora_modules_to_save, ",")));
  check(differ.empty(), "train.lora.from {}: the adapter has {}: give train.lora as the adapter has it", adapter,
        fmt::join(differ, "; "));
}

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
  // A line of config.json is `  "key": value,`: shown as key = value.
  auto shown = [](std::string line) {
    const size_t start = line.find_first_not_of(' ');
    line = start == std::string::npos ? "" : line.substr(start);
    if (line.ends_with(",")) line.pop_back();
    if (const size_t colon = line.find("\": "); line.starts_with('"') && colon != std::string::npos)
      line = line.substr(1, colon - 1) + " = " + line.substr(colon + 3);
    return line;
  };
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (std::getline(sa, la) && std::getline(sb, lb))
    if (la != lb) return fmt::format("the checkpoint has {}, the run {}", shown(la), shown(lb));
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
  fs::path generation_source;  // carry_generation_files
  const Tokenizer* tokenizer = nullptr;
  std::unique_ptr<train::Optimizer> optimizer;
  int64_t step = 0, bad_streak = 0;
  double loss_average = NAN;  // for spike detection
  double loss_scale = 1.0;    // F16: dynamic loss scaling
  int64_t clean_steps = 0;    // F16: steps since the scale last changed or overflowed
  double elapsed_s = 0.0;     // over every run of this training, resumes included
  std::ofstream metrics;      // DIR/metrics.jsonl, a JSON object per step, appended
  std::vector<int32_t> token_bytes;  // per id, the bytes it decodes to (validation loss per byte)
  // Data parallelism: the group (null, or one rank: a single process) and the gradient reduction.
  Communicator* group = nullptr;
  std::unique_ptr<train::GradientReducer> reducer;
  bool zero = false;  // ZeRO-1 in use: config.zero, or by default where it applies

  State(Model m, const Dataset& d, const TrainConfig& c, fs::path p, const Tokenizer* t, Communicator* g)
      : model(std::move(m)), data(d), config(c), dir(std::move(p)), tokenizer(t), group(g) {}
  fs::path checkpoint() const { return dir / "checkpoint"; }
  bool parallel() const { return group != nullptr && group->size() > 1; }
  int rank() const { return group ? group->rank() : 0; }
  int ranks() const { return group ? group->size() : 1; }
  bool leader() const { return rank() == 0; }
  // The optimizer segments of what `rank` owns under ZeRO-1, or every parameter whole.
  std::vector<train::Segment> segments_of(int rank);
  // Rank 0's checkpointed optimizer state to every rank's optimizer (a run resumed with any number of ranks).
  void share_optimizer_state(const SafetensorsReader* reader);
  // Every rank's optimizer state on rank 0, as one optimizer of whole parameters (ZeRO-1's checkpoint).
  std::unique_ptr<train::Optimizer> gather_optimizer_state();
};

std::vector<train::Segment> Trainer::State::segments_of(int r) {
  std::vector<train::Segment> out;
  const std::vector<Parameter*> params = model.trainable_parameters();
  if (!zero) {
    for (Parameter* p : params) out.push_back({p, 0, p->numel()});
    return out;
  }
  const float* base = model.gradient_buffer().data();  // ranges of the gradient buffer: the trainable ones'
  for (const train::Range& range : reducer->owned_by(r))
    for (Parameter* p : params) {
      const int64_t begin = p->grad.data() - base, end = begin + p->numel();
      const int64_t lo = std::max(begin, range.begin), hi = std::min(end, range.end);
      if (lo < hi) out.push_back({p, lo - begin, hi - lo});
    }
  return out;
}

void Trainer::State::share_optimizer_state(const SafetensorsReader* reader) {
  if (!parallel()) {
    optimizer->load_state(*reader);
    return;
  }
  double counters[2] = {0.0, 0.0};
  if (leader()) {
    train::Optimizer whole(config.optimizer, model.trainable_parameters());
    whole.load_state(*reader);
    counters[0] = double(whole.steps()), counters[1] = whole.beta2_product();
    for (int r = 1; r < ranks(); ++r) {
      std::vector<float> packed = whole.pack(segments_of(r));
      train::send_floats(*group, r, packed);
    }
    optimizer->unpack(whole.pack(optimizer->segments()));
  } else {
    std::vector<float> packed(optimizer->pack(optimizer->segments()).size());
    train::receive_floats(*group, 0, packed);
    optimizer->unpack(packed);
  }
  train::broadcast(*group, std::as_writable_bytes(std::span(counters)));
  optimizer->set_counters(static_cast<int64_t>(counters[0]), counters[1]);
}

std::unique_ptr<train::Optimizer> Trainer::State::gather_optimizer_state() {
  if (!leader()) {
    std::vector<float> packed = optimizer->pack(optimizer->segments());
    train::send_floats(*group, 0, packed);
    return nullptr;
  }
  auto whole = std::make_unique<train::Optimizer>(config.optimizer, model.trainable_parameters());
  whole->set_counters(optimizer->steps(), optimizer->beta2_product());
  whole->unpack(optimizer->segments(), optimizer->pack(optimizer->segments()));
  for (int r = 1; r < ranks(); ++r) {
    const std::vector<train::Segment> theirs = segments_of(r);
    std::vector<float> packed(whole->pack(theirs).size());
    train::receive_floats(*group, r, packed);
    whole->unpack(theirs, packed);
  }
  return whole;
}

Trainer::Trainer(Model model, const Dataset& data, const TrainConfig& config, fs::path dir, bool resume,
                 const Tokenizer* tokenizer, Communicator* group)
    : s_(std::make_unique<State>(std::move(model), data, config, std::move(dir), tokenizer, group)) {
  State& s = *s_;
  TrainConfig& c = s.config;
  check(c.steps >= 1, "train: steps must be at least 1, got {}", c.steps);
  check(c.clip_norm >= 0.0 && c.max_bad_steps >= 1, "train: clip_norm must be non-negative and max_bad_steps positive");
  check(c.loss_scale >= 1.0 && c.loss_scale_window >= 1,
        "train: loss_scale must be at least 1 and loss_scale_window positive, got {} and {}", c.loss_scale,
        c.loss_scale_window);
  check(c.grad_accum >= 1, "train: grad_accum must be at least 1, got {}", c.grad_accum);
  check(c.allreduce != Precision::F16 && c.bucket_mb >= 0.0,
        "train: allreduce must be f32 or bf16 and bucket_mb non-negative");
  s.loss_scale = c.precision == Precision::F16 ? c.loss_scale : 1.0;
  if (c.schedule.total_steps == 0) c.schedule.total_steps = c.steps;
  c.schedule.d_model = s.model.config().d_model;  // inverse_sqrt's d_model^(-1/2) is the model's width
  c.schedule.validate();
  if (c.lora.r > 0) {  // train.lora: the adapters, before init_from's weights or the checkpoint's are compared
    const ModelConfig& m = s.model.config();
    if (m.lora_r == 0) {
      LoraConfig lora = c.lora;
      lora.seed = m.seed, lora.name.clear(), lora.multiplier = 1.0;
      s.model.add_lora(lora);
    } else {
      // Each field that differs, the model's (config.json's lora_*) against train.lora's.
      std::vector<std::string> differ;
      if (m.lora_r != c.lora.r) differ.push_back(fmt::format("r {} against {}", m.lora_r, c.lora.r));
      if (m.lora_targets != c.lora.targets)
        differ.push_back(fmt::format("targets {} against {}", fmt::join(m.lora_targets, ","), fmt::join(c.lora.targets, ",")));
      if (m.lora_alpha != c.lora.alpha) differ.push_back(fmt::format("alpha {} against {}", m.lora_alpha, c.lora.alpha));
      if (m.lora_rslora != c.lora.rslora) differ.push_back(fmt::format("rslora {} against {}", m.lora_rslora, c.lora.rslora));
      if (m.lora_dropout != c.lora.dropout)
        differ.push_back(fmt::format("dropout {} against {}", m.lora_dropout, c.lora.dropout));
      if (!c.lora.layers.empty()) {  // the modules train.lora.layers picks against those the model adapts
        const std::vector<std::string> have = module_names(m.lora_per_module),
                                       want = module_names(nn::modules_of_layers(s.model, c.lora));
        if (have != want)
          differ.push_back(fmt::format("the modules {} against train.lora.layers' {}",
                                       have.empty() ? "of every block" : fmt::format("{}", fmt::join(have, ", ")),
                                       want.empty() ? "every block" : fmt::format("{}", fmt::join(want, ", "))));
      }
      check(differ.empty(), "train.lora: the model has adapters of its own already, not train.lora's: {} (the model's "
            "config.json lora_* against train.lora; give train.lora as the model has it, or train from its base)",
            fmt::join(differ, "; "));
    }
  }

  // Rank 0 alone reads and writes the run directory; the others get what it read.
  std::string state_text;  // trainer.json, on resume
  std::optional<SafetensorsReader> optimizer_file;
  if (s.leader()) {
    std::error_code ec;
    fs::create_directories(s.dir, ec);
    check(fs::is_directory(s.dir), "{}: cannot create the run directory: {}", s.dir.string(), ec.message());
    // A crash between the two renames of save_checkpoint leaves only checkpoint.old: it is the last good one.
    if (!fs::exists(s.checkpoint()) && fs::exists(s.dir / "checkpoint.old"))
      fs::rename(s.dir / "checkpoint.old", s.checkpoint());
    if (resume) {
      check(fs::exists(s.checkpoint() / "trainer.json"), "{}: no checkpoint to resume from", s.checkpoint().string());
      Model saved = load_model(s.checkpoint());
      ModelConfig run_model = s.model.config();
      if (!c.lora_from.empty()) {  // the file's ranks and alphas, trained on; the modules train.lora.layers' if given
        std::map<std::string, LoraConfig::Rank>& mine = run_model.lora_per_module;
        const std::map<std::string, LoraConfig::Rank>& theirs = saved.config().lora_per_module;
        if (mine.empty() || module_names(mine) == module_names(theirs)) mine = theirs;
      }
      const std::string want = run_model.to_json(), have = saved.config().to_json();
      check(want == have, "{}: the checkpoint is of a different model: {}", s.checkpoint().string(),
            first_difference(have, want));
      std::set<std::string> frozen;  // the run's choice of what trains holds for the loaded weights too
      for (const Parameter* p : s.model.parameters())
        if (p->frozen) frozen.insert(p->name);
      if (!frozen.empty()) saved.freeze([&](const Parameter& p) { return frozen.count(p.name) > 0; });
      s.model = std::move(saved);
      optimizer_file.emplace(s.checkpoint() / "optimizer.safetensors");
      state_text = read_file(s.checkpoint() / "trainer.json");
    } else {
      check(!fs::exists(s.checkpoint()), "{}: already holds a checkpoint; resume it, or train into another directory",
            s.dir.string());
      if (!c.init_from.empty()) {
        Model source = load_model(c.init_from);
        source.ensure_values();  // a GGUF file's quantized matrices start the run as their blocks' values
        if (!c.lora_from.empty()) {  // onto the run's model without adapters (a new head: a classifier adapter's)
          ModelConfig plain = s.model.config();
          plain.lora_r = 0, plain.lora_modules_to_save.clear(), plain.lora_per_module.clear();
          Model headed(plain);
          try {
            headed.copy_parameters_from(source);
          } catch (const Error& e) {
            throw Error(fmt::format("train.init_from {}: {}", c.init_from, e.what()));
          }
          adapters_from(headed, c.lora_from, s.model.config());
          if (headed.lora_per_module()) adopt_modules(s.model, headed.config().lora_per_module);  // the file's
          source = std::move(headed);
        }
        std::vector<std::string> kept;
        try {
          kept = s.model.copy_parameters_from(source);
        } catch (const Error& e) {
          throw Error(fmt::format("train.init_from {}: {}", c.init_from, e.what()));
        }
        // A LoRA model's adapters are new by design: named by count, not one by one.
        const size_t adapters =
            std::erase_if(kept, [&](const std::string& n) { return is_adapter(s.model.find(n)->role); });
        log::info("init_from {}: {} of {} parameters copied; new: {}{}", c.init_from,
                  s.model.parameters().size() - kept.size() - adapters, s.model.parameters().size(),
                  kept.empty() && adapters == 0 ? std::string("none") : fmt::format("{}", fmt::join(kept, ", ")),
                  adapters > 0 ? fmt::format("{}{} LoRA adapter tensors", kept.empty() ? "" : ", ", adapters) : "");
      }
    }
  }
  if (s.parallel()) {
    // Every rank must build the same model (train.lora.from's ranks module by module, which rank 0 alone read, are
    // rank 0's); then all start from rank 0's parameters.
    const std::string leaders = train::broadcast(*group, s.model.config().to_json());
    if (!c.lora_from.empty()) {
      const ModelConfig theirs = ModelConfig::from_json(leaders, "rank 0's model");
      if (theirs.lora_per_module != s.model.config().lora_per_module) adopt_modules(s.model, theirs.lora_per_module);
    }
    const std::string mine = s.model.config().to_json();
    check(mine == leaders, "rank {}: the model differs from rank 0's: {}", s.rank(), first_difference(leaders, mine));
    train::broadcast(*group, s.model.parameter_buffer());
  }
  if (c.frozen_weights != WeightType::F32) {
    // QLoRA: the frozen projections held as c.frozen_weights (a quantized type drops their fp32 values); training
    // multiplies them as stored and takes the input gradients through their values. Under a quantized type the
    // embeddings and the LM head stay fp32, as QLoRA keeps them; a 16-bit type holds a frozen LM head (or the
    // frozen token table it is tied to, whose lookups then read its 16-bit values) in 16 bits too, as a model
    // loaded in that dtype is. Norms stay fp32. Every rank quantizes the same starting values alike.
    check(s.model.trainable_parameters().size() != s.model.parameters().size(), "train.frozen_weights {}: nothing "
          "is frozen (give the model LoRA adapters: train.lora.r)", weight_type_name(c.frozen_weights));
    const bool head_too = !is_quantized(c.frozen_weights), tied = s.model.config().tie_embeddings;
    auto held = [&](const Parameter& p) {
      if (!p.frozen || p.role == Role::Router) return false;
      if (p.role == Role::HeadMatrix || (p.role == Role::TokenEmbedding && tied)) return head_too;
      return is_projection(p.role);
    };
    int64_t count = 0;
    for (const Parameter* p : s.model.parameters())
      if (held(*p)) count += p->numel();
    s.model.set_storage(c.frozen_weights, held);
    if (s.leader())
      log::info("train.frozen_weights {}: {} frozen projection weights held as {} ({:.1f} MB in fp32)",
                weight_type_name(c.frozen_weights), count, weight_type_name(c.frozen_weights), count * 4 / 1e6);
  }
  if (s.parallel()) {
    const bool frozen = s.model.trainable_parameters().size() != s.model.parameters().size();
    check(!(c.zero == true && frozen), "train.zero: ZeRO-1 splits the state of every parameter, and some are frozen "
          "(their optimizer state is small then: leave train.zero off or \"auto\")");
    s.zero = c.zero.value_or(!frozen);
    if (s.leader() && s.zero)
      log::info("train.zero: ZeRO-1, the optimizer state split across the {} ranks", s.ranks());
    const double bucket = c.bucket_mb * 1e6 / sizeof(float);
    s.reducer = std::make_unique<train::GradientReducer>(
        *group, static_cast<int64_t>(s.model.gradient_buffer().size()),
        train::ReducerOptions{.zero = s.zero, .bf16_wire = c.allreduce == Precision::BF16,
                              .bucket_elements = static_cast<int64_t>(bucket)});
  }
  s.optimizer = std::make_unique<train::Optimizer>(c.optimizer, s.segments_of(s.rank()));
  if (resume) {
    s.share_optimizer_state(optimizer_file ? &*optimizer_file : nullptr);
    if (s.parallel()) state_text = train::broadcast(*group, state_text);
    const fs::path state_path = s.checkpoint() / "trainer.json";
    const train::SavedState state = train::parse_trainer_state(state_text, state_path.string());
    s.step = state.step;
    s.bad_streak = state.bad_streak;
    s.loss_average = state.loss_average;
    s.elapsed_s = state.elapsed_s;
    if (c.precision == Precision::F16 && state.loss_scale) {  // a run that trained in f16 before
      s.loss_scale = *state.loss_scale;
      s.clean_steps = state.clean_steps;
    }
  }
  if (!s.leader()) return;
  const fs::path metrics_path = s.dir / "metrics.jsonl";
  if (resume) {
    // Keep the metrics up to the checkpoint's step: the steps after it are trained again.
    const std::string kept =
        fs::exists(metrics_path) ? train::metrics_up_to(read_file(metrics_path), metrics_path.string(), s.step) : "";
    write_file_atomic(metrics_path, kept);
    log::info("resuming {} at step {}{}", s.checkpoint().string(), s.step,
              s.parallel() ? fmt::format(" on {} ranks", s.ranks()) : "");
  } else {
    write_file_atomic(metrics_path, "");
  }
  s.metrics.open(metrics_path, std::ios::app);
  check(s.metrics.good(), "{}: cannot append to metrics.jsonl", s.dir.string());
}

Trainer::~Trainer() = default;

int64_t Trainer::steps_done() const { return s_->step; }
Model& Trainer::model() { return s_->model; }
bool Trainer::zero() const { return s_->zero; }

StepReport Trainer::step() {
  State& s = *s_;
  const TrainConfig& c = s.config;
  const auto start = std::chrono::steady_clock::now();
  const int64_t t = s.step + 1;
  StepReport r;
  r.step = t;
  r.steps = c.steps;

  // Each micro-batch's mean loss is weighted by its share of the step's targets, so K micro-batches give
  // the gradient of the big batch's mean loss. Across ranks: each rank's share of a micro-batch is weighted
  // by its targets over the whole step's (every rank's) targets, and the sum over ranks is that gradient.
  std::vector<Batch> micro;
  std::vector<double> counts;
  for (int64_t k = 0; k < c.grad_accum; ++k) {
    const int64_t index = (t - 1) * c.grad_accum + k;
    micro.push_back(s.parallel() ? s.data.train_share(index, s.rank(), s.ranks()) : s.data.train_batch(index));
    check(micro.back().B > 0, "train: rank {} has no sequences of micro-batch {}: data.batch_size is below the {} ranks",
          s.rank(), index, s.ranks());
    counts.push_back(double(count_targets(micro.back())));
  }
  double all_targets = 0.0;
  {
    std::vector<double> totals = counts;
    if (s.parallel()) train::sum_in_rank_order(*s.group, totals);
    for (double n : totals) all_targets += n;
  }
  r.tokens = static_cast<int64_t>(all_targets);
  check(r.tokens > 0, "train: step {} has no targets (every position is padding or ignored)", t);
  // F16: the loss (so every gradient) is multiplied by the scale, lifting small gradients out of fp16's
  // underflow; the gradients are divided by it again before clipping and the update.
  const bool scaling = c.precision == Precision::F16;
  const double scale = scaling ? s.loss_scale : 1.0;
  if (scaling) r.loss_scale = scale;
  s.model.zero_grad();
  const std::span<float> grads = s.model.gradient_buffer();
  if (s.reducer) s.reducer->start(grads);
  for (int64_t k = 0; k < c.grad_accum; ++k) {
    const double share = counts[k] / all_targets;
    // Dropout's stream: a window of 2^32 numbers per micro-batch (per rank's share of it), so a step's masks
    // depend only on (seed, t, k, rank). The forward checks that its masks fit the window (B·H·T² per layer can
    // pass 2^32 for big micro-batches); Philox's counter takes the whole 64-bit index, so windows past 2^32 do
    // not wrap.
    constexpr uint64_t kDropoutWindow = uint64_t{1} << 32;
    const uint64_t window = static_cast<uint64_t>(((t - 1) * c.grad_accum + k) * s.ranks() + s.rank());
    const RunOptions options{.training = true, .label_smoothing = c.label_smoothing, .seed = c.seed,
                             .offset = window * kDropoutWindow, .rng_window = kDropoutWindow,
                             .precision = c.precision};
    r.loss += share * s.model.forward(micro[k], s.activations, options).loss;
    // The last micro-batch's backward finishes the gradients: their buckets start as its blocks are done.
    const bool last = k + 1 == c.grad_accum;
    s.model.backward(s.activations, share * scale,
                     last && s.reducer ? std::function<void(int64_t)>([&](int64_t from) { s.reducer->ready(from); })
                                       : nullptr);
  }
  r.moe = s.model.moe_stats(s.activations);
  // Owned: the gradients this rank holds summed over ranks (with ZeRO-1 its own ranges, otherwise all).
  std::vector<std::span<float>> owned;
  if (s.reducer) {
    r.compute_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.reducer->finish();
    if (s.zero)
      for (const train::Range& range : s.reducer->owned()) owned.push_back(grads.subspan(range.begin, range.size()));
    double loss = r.loss;
    train::sum_in_rank_order(*s.group, std::span(&loss, 1));
    r.loss = loss;
  }
  if (owned.empty()) owned.push_back(grads);
  if (scaling)
    for (std::span<float> g : owned) train::scale_grads(g, 1.0 / scale);
  if (owned.size() == 1 && owned[0].size() == grads.size()) {
    r.grad_norm = c.clip_norm > 0.0 ? train::clip_grad_norm(grads, c.clip_norm) : train::global_grad_norm(grads);
  } else {  // ZeRO-1: ‖g‖² summed over the ranks' shares
    double squares = 0.0;
    for (std::span<float> g : owned) squares += train::sum_of_squares(g);
    train::sum_in_rank_order(*s.group, std::span(&squares, 1));
    r.grad_norm = std::sqrt(squares);
    if (c.clip_norm > 0.0 && std::isfinite(r.grad_norm) && r.grad_norm > c.clip_norm)
      for (std::span<float> g : owned) train::scale_grads(g, c.clip_norm / r.grad_norm);
  }
  r.lr = c.schedule.at(t);
  // F16 overflow: a finite loss whose scaled gradients overflowed. The scale is too large; halve it and skip
  // the step (the divergence guard does not count it unless the scale is already at its floor of 1).
  const bool overflow = scaling && std::isfinite(r.loss) && !std::isfinite(r.grad_norm) && s.loss_scale > 1.0;
  if (overflow) {
    r.skipped = r.overflow = true;
    s.loss_scale = std::max(1.0, s.loss_scale / 2.0);
    s.clean_steps = 0;
    if (s.leader())
      log::info("step {}: f16 gradients overflowed at loss scale {}: step skipped, scale now {}", t, scale,
                s.loss_scale);
  } else if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.skipped = true;
    ++s.bad_streak;
    if (s.leader())
      log::warn("step {}: non-finite {} ({}): step skipped ({} in a row)", t,
                std::isfinite(r.loss) ? "gradient norm" : "loss", std::isfinite(r.loss) ? r.grad_norm : r.loss,
                s.bad_streak);
    if (s.bad_streak >= c.max_bad_steps) {
      throw Error(fmt::format("training diverged: {} steps in a row had a non-finite loss or gradient (step {}); "
                              "the last good checkpoint is {}; lower the learning rate or clip_norm and resume",
                              s.bad_streak, t, s.checkpoint().string()));
    }
  } else {
    s.bad_streak = 0;
    s.optimizer->step(r.lr);
    if (s.zero) s.reducer->gather_values(s.model.parameter_buffer());
    if (scaling && ++s.clean_steps >= c.loss_scale_window) {
      s.loss_scale *= 2.0;
      s.clean_steps = 0;
    }
    // Near zero loss one batch can triple without meaning anything: a spike must also rise 0.5 nats.
    constexpr double kSpikeRise = 0.5;
    if (s.leader() && std::isfinite(s.loss_average) && r.loss > c.spike_factor * s.loss_average &&
        r.loss > s.loss_average + kSpikeRise)
      log::warn("step {}: loss spike: {:.4f} against a running average of {:.4f}", t, r.loss, s.loss_average);
    s.loss_average = std::isfinite(s.loss_average) ? 0.95 * s.loss_average + 0.05 * r.loss : r.loss;
  }
  if (s.reducer) {
    const train::ReducerStats stats = s.reducer->take_stats();
    r.comm_bytes = stats.bytes_sent;
    r.comm_wait_s = stats.wait_s;
    r.comm_overlap_s = stats.overlap_s;
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
  // Several ranks take the batches in turn and add up their sums.
  double totals[3] = {0.0, 0.0, 0.0};  // Σ nll, targets, bytes
  for (int64_t i = s.rank(); i < s.data.valid_batches(); i += s.ranks()) {
    const Batch b = s.data.valid_batch(i);
    const ForwardResult r = s.model.forward(b, s.activations, {.precision = s.config.precision});
    totals[0] += r.ce_loss * double(r.n_targets);
    totals[1] += double(r.n_targets);
    if (count_bytes)
      for (int64_t j = 0; j < static_cast<int64_t>(b.targets.size()); ++j)
        if (is_scored(b, j)) totals[2] += s.token_bytes.at(static_cast<size_t>(b.targets[j]));
  }
  if (s.parallel()) train::sum_in_rank_order(*s.group, totals);
  if (count_bytes && totals[2] > 0) *per_byte = totals[0] / totals[2];
  return totals[1] > 0 ? totals[0] / totals[1] : NAN;
}

void Trainer::carry_generation_files(const fs::path& source) { s_->generation_source = source; }

bool Trainer::has_checkpoint(const fs::path& dir) {
  return fs::exists(dir / "checkpoint" / "trainer.json") || fs::exists(dir / "checkpoint.old" / "trainer.json");
}

// DIR/checkpoint.tmp is written whole, then swapped in: checkpoint → checkpoint.old, checkpoint.tmp →
// checkpoint, checkpoint.old removed. At every moment a complete checkpoint exists under one of the names.
// Data parallelism: rank 0 writes it; with ZeRO-1 the others send it their shares of the optimizer state first.
void Trainer::save_checkpoint() {
  State& s = *s_;
  std::unique_ptr<train::Optimizer> gathered;
  if (s.zero) gathered = s.gather_optimizer_state();  // every rank takes part
  if (!s.leader()) return;
  train::Optimizer& optimizer = gathered ? *gathered : *s.optimizer;
  const fs::path tmp = s.dir / "checkpoint.tmp", old = s.dir / "checkpoint.old";
  fs::remove_all(tmp);
  save_model(s.model, tmp, s.tokenizer);
  if (!s.generation_source.empty()) copy_generation_files(s.generation_source, tmp);
  auto meta = optimizer.state_metadata();
  write_safetensors(tmp / "optimizer.safetensors", optimizer.state_tensors(), meta);
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
    if (s.parallel()) {
      line["ranks"] = s.ranks();
      line["comm_bytes"] = r.comm_bytes;
      line["comm_wait_s"] = r.comm_wait_s;
      line["compute_s"] = r.compute_s;
      line["comm_overlap_s"] = r.comm_overlap_s;
    }
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
  // Whether to stop after this step: any rank's Ctrl-C stops every rank at the same step.
  auto stopping = [&] {
    double asked = stop && stop->load() ? 1.0 : 0.0;
    if (s.parallel()) train::sum_in_rank_order(*s.group, std::span(&asked, 1));
    return asked > 0.0;
  };
  bool stopped = stopping();
  while (s.step < c.steps && !stopped) {
    StepReport r = step();
    stopped = stopping();
    const bool last = s.step == c.steps || stopped;
    const bool validate = (c.eval_every > 0 && s.step % c.eval_every == 0) || last;
    if (validate && s.data.valid_batches() > 0) r.val_loss = validation_loss(&r.val_loss_per_byte);
    if (s.leader()) append_metrics(r);
    if (on_step) on_step(r);
    if ((c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0) || last) save_checkpoint();
  }
}

}  // namespace attend
