// `attend train` (a run from run.json), `attend schedule` (print or plot a learning-rate schedule) and
// `attend plot` (training curves from a metrics file).
#include "commands.h"
#include "progress.h"
#include "signals.h"

#include <attend/distributed.h>
#include <attend/error.h>
#include <attend/io.h>
#include <attend/plot.h>
#include <attend/runtime.h>
#include <attend/log.h>
#include <attend/model.h>
#include <attend/model_dir.h>
#include <attend/schedule.h>
#include <attend/tokenizer.h>
#include <attend/train.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>

namespace attend::cli {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};  // the signal that stopped training (then g_stop)

// The exit status of a run stopped early, as an interrupted program's: 130 for Ctrl-C, 143 for SIGTERM (also on a
// rank that another rank's signal stopped).
int stopped_status() { return 128 + (g_signal != 0 ? g_signal.load() : SIGTERM); }

// One series per key of a metrics.jsonl file (one JSON object a line): (x_key, key) wherever both are numbers.
// Series are named after their key; a malformed line is an error naming the file and the line.
std::vector<Series> read_metrics(const std::string& path, const std::vector<std::string>& keys, const std::string& x_key) {
  std::vector<Series> out;
  for (const auto& k : keys) out.push_back({k, {}, {}});
  std::istringstream lines(read_file(path));
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      // A line nested deeper than a metrics line (two levels) is refused as it is read: the value would be printed
      // or copied recursively.
      j = nlohmann::json::parse(line, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        check(depth <= 8, "{}:{}: JSON nested deeper than a metrics line", path, number);
        return true;
      });
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(fmt::format("{}:{}: not a JSON object: {}", path, number, e.what()));
    }
    check(j.is_object() && j.contains(x_key) && j[x_key].is_number(), "{}:{}: no numeric '{}' field", path, number, x_key);
    for (size_t k = 0; k < keys.size(); ++k)
      if (j.contains(keys[k]) && j[keys[k]].is_number()) {
        out[k].x.push_back(j[x_key].get<double>());
        out[k].y.push_back(j[keys[k]].get<double>());
      }
  }
  return out;
}

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> sets;
  bool resume = false, help_config = false;
};

// One rank's (or the single process's) `attend train`.
void train_command(const TrainArgs& args, Communicator* group) {
  const int rank = group ? group->rank() : 0, ranks = group ? group->size() : 1;
  const bool leader = rank == 0;
  if (!leader) log::set_level(std::max(log::level(), log::Level::Warn));
  RunConfig run = args.config_path.empty() ? RunConfig{} : RunConfig::from_json(read_file(args.config_path), args.config_path);
  for (const std::string& s : args.sets) {
    const size_t eq = s.find('=');
    check(eq != std::string::npos && eq > 0, "--set '{}': expected SECTION.FIELD=VALUE", s);
    run.set(s.substr(0, eq), s.substr(eq + 1));
  }
  if (!run.model_given && !run.train.init_from.empty()) {
    // Fine-tuning a checkpoint (a downloaded Hugging Face one, say) without a model section: its own model, with
    // the --set model.FIELD options on top (a new head's n_classes, the dropouts).
    run.model = load_model_config(run.train.init_from);
    for (const std::string& s : args.sets)
      if (s.starts_with("model.")) run.set(s.substr(0, s.find('=')), s.substr(s.find('=') + 1));
    log::info("model: train.init_from {}'s own ({}, {} layer{}, d_model {})", run.train.init_from,
              architecture_name(run.model.architecture), run.model.n_layers, run.model.n_layers == 1 ? "" : "s",
              run.model.d_model);
  }
  check(!run.data.tokenizer.empty(), "data.tokenizer is empty: name a tokenizer.json, .model or directory");
  const Tokenizer tokenizer = Tokenizer::load(run.data.tokenizer);
  if (run.model.vocab_size < tokenizer.vocab_size()) {
    log::info("model.vocab_size {} is below the tokenizer's {}: using {}", run.model.vocab_size,
              tokenizer.vocab_size(), tokenizer.vocab_size());
    run.model.vocab_size = tokenizer.vocab_size();
  }
  if (run.train.precision == Precision::BF16 && !runtime_info().bf16_matmul_used) {
    // Without bf16 dot products (or where they are no faster than fp32's: Intel's cores without AMX,
    // kernels/gemm.h) the GEMMs widen their operands to fp32 first: the same work plus the conversions
    // (842 against 1,026 tokens/s on an AVX2 EPYC). fp32 is then both faster and more exact.
    log::warn("train.precision=bf16: this CPU has no bf16 matmul faster than its fp32 one (AVX-512 BF16; on "
              "Intel, AMX), so bf16 would train slower than fp32; training in fp32");
    run.train.precision = Precision::F32;
  }
  run.validate();
  check(run.data.batch_size >= ranks, "data.batch_size {} is below the {} ranks: each rank trains on its share of "
        "every batch's sequences", run.data.batch_size, ranks);
  const std::filesystem::path out = run.out;
  // Before the data is read and the model built (which took their time before this was found).
  check(!args.resume || Trainer::has_checkpoint(out),
        "{}: no checkpoint to resume from (--resume continues a run in its output directory, out)",
        (out / "checkpoint").string());
  std::filesystem::create_directories(out);
  // Rank 0 tokenizes first and leaves the token cache; the other ranks then read it (on a shared file system)
  // or make their own.
  std::string summary;
  std::unique_ptr<Dataset> data;
  if (leader) data = make_dataset(run, tokenizer, out / "data", &summary);
  if (group) barrier(*group);
  if (!leader) data = make_dataset(run, tokenizer, out / "data", &summary);
  if (leader) fmt::print(stderr, "data: {}\n", summary);
  Model model(run.model);
  if (leader)
    fmt::print(stderr, "model: {} parameters ({}, {} layer{}, d_model {})\n", model.count().total(),
               architecture_name(run.model.architecture), run.model.n_layers, run.model.n_layers == 1 ? "" : "s",
               run.model.d_model);
  if (leader && ranks > 1)
    fmt::print(stderr, "data parallel: {} ranks ({}), {} gradients in buckets of {} MB\n", ranks,
               group->transport(), run.train.allreduce == Precision::BF16 ? "bf16" : "f32", run.train.bucket_mb);
  Trainer trainer(std::move(model), *data, run.train, out, args.resume, &tokenizer, group);
  namespace fs = std::filesystem;
  if (!run.train.init_from.empty() && fs::is_directory(run.train.init_from) && fs::exists(run.data.tokenizer)) {
    // Fine-tuning a model with its own tokenizer (data.tokenizer is init_from's directory or a file in it): its
    // checkpoints keep the base's EOS ids and chat template, so that the result stops and chats as the base did.
    const fs::path tokenizer_dir = fs::is_directory(run.data.tokenizer) ? fs::path(run.data.tokenizer)
                                                                        : fs::path(run.data.tokenizer).parent_path();
    if (fs::equivalent(tokenizer_dir.empty() ? "." : tokenizer_dir, run.train.init_from))
      trainer.carry_generation_files(run.train.init_from);
  }
  // The first Ctrl-C (or SIGTERM) asks training to stop after the current step and write a checkpoint; a second one
  // ends the program at once (signals.h). Every rank listens: a scheduler's SIGTERM reaches them all, and a signal
  // to any one stops every rank at the same step (Trainer::run).
  std::optional<StopOnSignal> on_signal(std::in_place, [leader](int signal) {
    g_signal = signal;
    g_stop = true;
    if (leader)  // at once: a step can take seconds, and a silent Ctrl-C looks ignored
      std::fputs(signal == SIGINT ? "\ntrain: stopping after this step to write a checkpoint (Ctrl-C again: at once)\n"
                                  : "\ntrain: terminated: stopping after this step to write a checkpoint\n",
                 stderr);
  });
  if (!leader) {  // the others train; rank 0 reports
    trainer.run({}, &g_stop);
    if (trainer.steps_done() < run.train.steps) throw ExitStatus{stopped_status()};
    return;
  }
  write_file_atomic(out / "run.json", run.to_json());

  ProgressBar bar("train");
  // The rate counts the step's targets: tokens, but examples for classification (one label each).
  const char* rate_unit = run.data.task == Task::Classify ? "examples/s" : "tok/s";
  std::optional<double> last_val, last_val_per_byte;
  trainer.run(
      [&](const StepReport& r) {
        if (r.val_loss) last_val = r.val_loss, last_val_per_byte = r.val_loss_per_byte;
        bar.set_status(fmt::format("loss {:.3f}  lr {:.2e}  {:.0f} {}{}", r.loss, r.lr, r.tokens_per_s, rate_unit,
                                   last_val ? fmt::format("  val {:.3f}", *last_val) : ""));
        bar.update(r.step, r.steps);
      },
      &g_stop);
  bar.finish();
  on_signal.reset();
  // Stopped early: by this process's signal or, under mpirun, another rank's (the ranks agree on the step). A signal
  // after the last step stops nothing.
  const bool stopped = trainer.steps_done() < run.train.steps;
  if (stopped) fmt::print(stderr, "interrupted: checkpoint written at step {}\n", trainer.steps_done());
  if (last_val)
    fmt::print("validation loss {:.4f}, perplexity {:.2f}\n", *last_val, std::exp(*last_val));
  if (last_val_per_byte)
    fmt::print("per byte of text: {}\n", per_byte_summary(*last_val_per_byte));
  // The curves, beside the metrics.
  std::vector<Series> curves = read_metrics((out / "metrics.jsonl").string(), {"loss", "val_loss"}, "step");
  curves[0].name = "train loss";
  curves[1].name = "validation loss", curves[1].markers = true;
  write_file_atomic(out / "loss.svg", line_plot_svg(curves, {.title = run.out, .x_label = "step", .y_label = "loss"}));
  fmt::print("model: {}\nmetrics: {}\nplot: {}\n", (out / "checkpoint").string(), (out / "metrics.jsonl").string(),
             (out / "loss.svg").string());
  if (stopped) throw ExitStatus{stopped_status()};
}

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model from run.json: the model, the data and the optimisation (`--help-config` lists every field)");
  static TrainArgs args;
  cmd->add_option("--config", args.config_path, "run.json with model, data and train sections");
  cmd->add_option("--set", args.sets, "Override one field: SECTION.FIELD=VALUE (repeatable), e.g. --set train.steps=200");
  cmd->add_flag("--resume", args.resume, "Continue the run in the output directory from its last checkpoint (Ctrl-C or "
                "SIGTERM stops a run after its step with one, exit 130 or 143)");
  cmd->add_flag("--help-config", args.help_config, "Print every field of run.json with its default and meaning");
  cmd->callback([] {
    if (args.help_config) {
      fmt::print("{}", RunConfig::help());
      return;
    }
    // Under mpirun this process is one rank of a data-parallel run: rank 0 reads and writes the run directory
    // and prints; every rank's error stops them all.
    std::unique_ptr<Communicator> group;
    if (launched_by_mpirun()) {
      const char* timeout = std::getenv("ATTEND_MPI_CONNECT_TIMEOUT");  // seconds for every rank to answer
      group = mpi_communicator(timeout ? std::atof(timeout) : 60.0);
    }
    try {
      train_command(args, group.get());
    } catch (const Error& e) {
      if (!group || group->size() == 1) throw;
      group->abort(e.what());
    }
  });
}


void add_schedule(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "Print a learning-rate schedule step by step, or plot it as SVG");
  static std::string kind = "cosine", plot;
  static train::Schedule s;
  static int64_t every = 0;
  cmd->add_option("--kind", kind, "constant, warmup, cosine or inverse_sqrt")->capture_default_str();
  cmd->add_option("--lr", s.lr, "Peak learning rate (inverse_sqrt: a multiplier, 1 is the paper's)")->capture_default_str();
  cmd->add_option("--warmup", s.warmup_steps, "Warm-up steps")->capture_default_str();
  cmd->add_option("--steps", s.total_steps, "Total steps (cosine reaches --min-lr there)")->required();
  cmd->add_option("--min-lr", s.min_lr, "The cosine schedule's floor")->capture_default_str();
  cmd->add_option("--d-model", s.d_model, "inverse_sqrt: the model width in d_model^-0.5")->capture_default_str();
  cmd->add_option("--every", every, "Print every N-th step (default: about 20 lines)");
  cmd->add_option("--plot", plot, "Write the curve as an SVG file instead of printing");
  cmd->callback([] {
    s.kind = train::parse_schedule(kind);
    check(s.total_steps > 0, "--steps must be positive, got {}", s.total_steps);
    s.validate();
    if (!plot.empty()) {
      Series curve{kind, {}, {}};
      const int64_t stride = std::max<int64_t>(1, s.total_steps / 2000);  // enough points for a smooth curve
      for (int64_t t = 1; t <= s.total_steps; t += stride) curve.x.push_back(double(t)), curve.y.push_back(s.at(t));
      curve.x.push_back(double(s.total_steps)), curve.y.push_back(s.at(s.total_steps));
      write_file_atomic(plot, line_plot_svg({curve}, {.title = fmt::format("{} schedule", kind),
                                                      .x_label = "step", .y_label = "learning rate"}));
      fmt::print("{}: {} steps\n", plot, s.total_steps);
      return;
    }
    const int64_t stride = every > 0 ? every : std::max<int64_t>(1, s.total_steps / 20);
    fmt::print("step\tlr\n");
    for (int64_t t = 1; t <= s.total_steps; t += stride) fmt::print("{}\t{:.6g}\n", t, s.at(t));
    if ((s.total_steps - 1) % stride != 0) fmt::print("{}\t{:.6g}\n", s.total_steps, s.at(s.total_steps));
  });
}

// metrics.jsonl: one JSON object a line with "step" and any of "loss", "val_loss", "lr", ...
void add_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Draw training and validation loss from a metrics.jsonl file as SVG");
  static std::vector<std::string> inputs;
  static std::string out, x_key = "step";
  static std::vector<std::string> keys = {"loss", "val_loss"};
  static bool log_y = false;
  cmd->add_option("metrics", inputs, "metrics.jsonl files (each line a JSON object); several are drawn together")
      ->required();
  cmd->add_option("-o,--output", out, "The SVG file to write")->required();
  cmd->add_option("--y", keys, "Fields to draw")->capture_default_str();
  cmd->add_option("--x", x_key, "Field on the x axis, e.g. step, tokens or seconds")->capture_default_str();
  cmd->add_flag("--log", log_y, "Logarithmic y axis");
  cmd->callback([] {
    std::vector<Series> series;
    for (const std::string& path : inputs)
      for (Series& s : read_metrics(path, keys, x_key)) {
        if (inputs.size() > 1) s.name = fmt::format("{} ({})", s.name, path);
        s.markers = s.x.size() <= 30;
        if (!s.x.empty()) series.push_back(std::move(s));
      }
    check(!series.empty(), "{}: none of the fields {} appear", fmt::join(inputs, ", "), fmt::join(keys, ", "));
    write_file_atomic(out, line_plot_svg(series, {.title = "training", .x_label = x_key,
                                                  .y_label = fmt::format("{}", fmt::join(keys, ", ")), .log_y = log_y}));
    fmt::print("{}\n", out);
  });
}

}  // namespace

void add_train_commands(CLI::App& app) {
  add_train(app);
  add_schedule(app);
  add_plot(app);
}

}  // namespace attend::cli
