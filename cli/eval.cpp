// `attend eval`: loss, perplexity and calibration of a decoder model over a text or token file.
#include "commands.h"

#include <attend/error.h>
#include <attend/eval.h>
#include <attend/io.h>
#include <attend/model.h>
#include <attend/plot.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attend::cli {

namespace {

Series reliability_series(const std::string& name, const Calibration& c) {
  Series s{name, {}, {}, true};
  for (const CalibrationBin& b : c.bins)
    if (b.count > 0) s.x.push_back(b.confidence), s.y.push_back(b.accuracy);
  return s;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity and calibration (ECE, temperature scaling) of a decoder model");
  static std::string model_dir, data, token_file, reliability;
  static EvalOptions options;
  static bool json_output = false;
  cmd->add_option("--model", model_dir, "A model directory (with its tokenizer for --data)")->required();
  auto* text = cmd->add_option("--data", data, "A text file, tokenised with the model's tokenizer");
  auto* ids = cmd->add_option("--tokens", token_file, "A file of whitespace-separated token ids");
  text->excludes(ids);
  cmd->add_option("--stride", options.stride, "Sliding-window step for texts longer than the context (0: half of it)");
  cmd->add_flag("--calibrate", options.calibrate,
                "Fit a temperature on the first half by minimising NLL; report ECE before and after on the second");
  cmd->add_option("--bins", options.bins, "Equal-width confidence bins of the ECE")->capture_default_str();
  cmd->add_option("--reliability", reliability, "Write a reliability diagram (accuracy against confidence) as SVG");
  cmd->add_flag("--json", json_output, "Print one JSON object");
  cmd->callback([] {
    check(!data.empty() || !token_file.empty(), "give the data with --data TEXTFILE or --tokens IDSFILE");
    Model model = Model::load(model_dir);
    const std::vector<int32_t> tokens = data.empty() ? parse_ids(read_file(token_file), token_file)
                                                     : Tokenizer::load(model_dir).encode(read_file(data));
    const EvalResult r = evaluate_lm(model, tokens, options);
    if (!reliability.empty()) {
      std::vector<Series> series = {reliability_series("all tokens", r.calibration)};
      if (r.temperature) {
        series.push_back(reliability_series("held-out, before", r.held_out_before));
        series.push_back(reliability_series(fmt::format("held-out, T = {:.3f}", *r.temperature), r.held_out_after));
      }
      write_file_atomic(reliability, line_plot_svg(series, {.title = "reliability", .x_label = "confidence",
                                                             .y_label = "accuracy", .diagonal = true}));
    }
    if (json_output) {
      nlohmann::ordered_json j = {
          {"tokens", r.tokens}, {"loss", r.loss}, {"perplexity", r.perplexity}, {"ece", r.calibration.ece}};
      if (r.temperature) {
        j["temperature"] = *r.temperature;
        j["ece_before"] = r.held_out_before.ece;
        j["ece_after"] = r.held_out_after.ece;
        j["loss_before"] = r.held_out_loss_before;
        j["loss_after"] = r.held_out_loss_after;
      }
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("tokens {}\nloss {:.4f} nats\nperplexity {:.2f}\nECE {:.4f} ({} bins)\n", r.tokens, r.loss, r.perplexity,
               r.calibration.ece, options.bins);
    if (r.temperature)
      fmt::print("temperature {:.4f} (fitted on the first half)\nsecond half: ECE {:.4f} -> {:.4f}, loss {:.4f} -> {:.4f}\n",
                 *r.temperature, r.held_out_before.ece, r.held_out_after.ece, r.held_out_loss_before,
                 r.held_out_loss_after);
  });
}

}  // namespace attend::cli
