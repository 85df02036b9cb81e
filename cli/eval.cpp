// `attend eval`: loss, perplexity and calibration of a decoder model over a text or token file.
#include "commands.h"

#include <attend/error.h>
#include <attend/eval.h>
#include <attend/io.h>
#include <attend/log.h>
#include <attend/model.h>
#include <attend/plot.h>
#include <attend/generate.h>
#include <attend/tokenizer.h>
#include <attend/train.h>
#include <attend/model_dir.h>

#include "progress.h"

#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attend::cli {

std::string per_byte_summary(double loss_per_byte) {
  return fmt::format("loss {:.4f} nats ({:.4f} bits), perplexity {:.3f}", loss_per_byte, loss_per_byte / std::log(2.0),
                     std::exp(loss_per_byte));
}

namespace {

Series reliability_series(const std::string& name, const Calibration& c) {
  Series s{name, {}, {}, true};
  for (const CalibrationBin& b : c.bins)
    if (b.count > 0) s.x.push_back(b.confidence), s.y.push_back(b.accuracy);
  return s;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// `attend eval-seq2seq`: decodes every distinct source of a source<TAB>target file and scores the outputs
// against all of its targets (WER: right if equal to any; PER: edit distance to the closest).
void add_eval_seq2seq(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval-seq2seq", "Word and token error rates of an encoder-decoder model on source<TAB>target lines");
  static std::string model_dir, data;
  static int64_t beam = 0, max_new = 64, limit = 0, batch = 32;
  static double length_penalty = 1.0;
  static bool json_output = false, strip_stress = false;
  cmd->add_option("--model", model_dir, "An encoder-decoder model directory with its tokenizer")->required();
  static std::vector<std::string> lora;
  cmd->add_option("--lora", lora, kLoraHelp);
  cmd->add_flag("--strip-stress", strip_stress,
                "Score without the stress digits of ARPAbet vowels (AH0 = AH1 = AH): the 39-phoneme set of the "
                "standard CMUdict benchmark");
  cmd->add_option("--data", data, "source<TAB>target lines; a source may appear with several targets")->required();
  cmd->add_option("--beam", beam, "Beam width (0: greedy, batched)")->capture_default_str();
  cmd->add_option("--length-penalty", length_penalty, "Beam search: a finished output scores log p / length^α")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", max_new, "Longest output")->capture_default_str();
  cmd->add_option("--batch", batch, "Sources decoded together (greedy)")->capture_default_str();
  cmd->add_option("--limit", limit, "Score only the first N sources (0: all)")->capture_default_str();
  cmd->add_flag("--json", json_output, "Print {\"words\", \"wer\", \"per\"}");
  cmd->callback([] {
    Model model = load_model(model_dir);
    apply_lora(model, lora);
    check(model.config().architecture == Architecture::EncoderDecoder,
          "eval-seq2seq: {} is a {} model, expected encoder-decoder", model_dir, architecture_name(model.config().architecture));
    const Tokenizer tokenizer = Tokenizer::load(model_dir);
    // Sources in order of first appearance, each with its references.
    std::vector<std::string> sources;
    std::map<std::string, size_t> index;
    std::vector<std::vector<std::vector<std::string>>> references;
    std::istringstream lines(read_file(data));
    int64_t number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      if (line.empty()) continue;
      const size_t tab = line.find('\t');
      check(tab != std::string::npos, "{}:{}: expected source<TAB>target, found no tab", data, number);
      const std::string source = line.substr(0, tab);
      auto [it, fresh] = index.emplace(source, sources.size());
      if (fresh) sources.push_back(source), references.emplace_back();
      references[it->second].push_back(split_words(line.substr(tab + 1)));
    }
    if (limit > 0 && static_cast<int64_t>(sources.size()) > limit) sources.resize(limit), references.resize(limit);
    check(!sources.empty(), "{}: no source<TAB>target lines", data);
    GenerateOptions options{.max_new_tokens = max_new, .sampling = {.greedy = true}};
    set_special_tokens(&tokenizer, read_generation_defaults(model_dir), model, options);
    const int64_t context = model.config().max_seq_len;
    std::vector<std::vector<std::string>> hypotheses;
    ProgressBar bar("decode");
    for (size_t at = 0; at < sources.size();) {
      const size_t n = beam > 0 ? 1 : std::min<size_t>(batch, sources.size() - at);
      std::vector<std::vector<int32_t>> inputs;
      for (size_t i = at; i < at + n; ++i) {
        auto ids = tokenizer.encode(sources[i]);
        if (static_cast<int64_t>(ids.size()) > context) ids.resize(context);
        inputs.push_back(ids.empty() ? std::vector<int32_t>{0} : ids);
      }
      if (beam > 0) {
        const auto best = beam_search(model, inputs[0], max_new, options.eos,
                                      {.width = beam, .length_penalty = length_penalty,
                                       .decoder_start = options.decoder_start});
        hypotheses.push_back(split_words(tokenizer.decode(best[0].ids)));
      } else {
        for (const Generation& g : generate_batch(model, &tokenizer, inputs, options))
          hypotheses.push_back(split_words(g.text));
      }
      at += n;
      bar.update(static_cast<int64_t>(at), static_cast<int64_t>(sources.size()));
    }
    bar.finish();
    if (strip_stress) {
      auto strip = [](std::vector<std::string>& tokens) {
        for (std::string& t : tokens)
          while (t.size() > 1 && std::isdigit(static_cast<unsigned char>(t.back()))) t.pop_back();
      };
      for (auto& h : hypotheses) strip(h);
      for (auto& refs : references)
        for (auto& r : refs) strip(r);
    }
    const TranscriptionScore s = score_transcriptions(hypotheses, references);
    if (json_output) {
      fmt::print("{}\n", nlohmann::ordered_json{{"words", s.words}, {"wer", s.wer}, {"per", s.per}}.dump());
      return;
    }
    fmt::print("words {}\nWER {:.4f} ({} wrong)\nPER {:.4f} ({} of {} tokens)\n", s.words, s.wer, s.wrong_words, s.per,
               s.token_errors, s.tokens);
  });
}

// `attend eval-classify`: accuracy, precision, recall and F1 of an encoder's classification head on
// label<TAB>text lines, and its calibration (ECE, temperature scaling fitted on the first half).
void add_eval_classify(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval-classify", "Accuracy, precision, recall, F1 and calibration of a classifier on label<TAB>text lines");
  static std::string model_dir, data, positive, reliability;
  static bool calibrate = false, json_output = false;
  cmd->add_option("--model", model_dir, "An encoder model directory with a classification head and its tokenizer")->required();
  static std::vector<std::string> lora;
  cmd->add_option("--lora", lora, kLoraHelp);
  cmd->add_option("--data", data, "label<TAB>text lines, each label one of the model's classes (its config.json's class_names)")
      ->required();
  cmd->add_option("--positive", positive, "The class that precision, recall and F1 are about (default: the last)");
  cmd->add_flag("--calibrate", calibrate, "Fit a temperature on the first half; ECE before and after on the second");
  cmd->add_option("--reliability", reliability, "Write a reliability diagram as SVG");
  cmd->add_flag("--json", json_output, "Print one JSON object");
  cmd->callback([] {
    Model model = load_model(model_dir);
    apply_lora(model, lora);  // a PEFT classifier's head too (modules_to_save)
    const ModelConfig& c = model.config();
    check(c.architecture == Architecture::Encoder && c.n_classes > 0,
          "eval-classify: {} has no classification head (an encoder with n_classes > 0)", model_dir);
    const Tokenizer tokenizer = Tokenizer::load(model_dir);
    DataConfig d;
    d.task = Task::Classify, d.train = {data}, d.valid_fraction = 0.0, d.seq_len = c.max_seq_len;
    // A label the model was not trained on is an error naming it; a model saved before class names were
    // recorded numbers the file's labels in sorted order, as its training did.
    const ExampleSets sets = load_examples(d, tokenizer, c.class_names);
    if (c.class_names.empty())
      log::warn("{}: config.json has no class_names; numbering the labels of {} in sorted order ({})", model_dir, data,
                fmt::join(sets.labels, ", "));
    check(static_cast<int64_t>(sets.labels.size()) == c.n_classes, "{}: {} classes ({}), the model has {}", data,
          sets.labels.size(), fmt::join(sets.labels, ", "), c.n_classes);
    std::vector<std::vector<int32_t>> sources;
    std::vector<int32_t> labels;
    for (const Example& e : sets.train) sources.push_back(e.source), labels.push_back(e.label);
    const ClassifierEvaluation r =
        evaluate_classifier(model, sources, labels, sets.labels, {.positive = positive, .calibrate = calibrate});
    const ClassificationScore& s = r.score;
    nlohmann::ordered_json j = {{"examples", r.examples}, {"accuracy", s.accuracy}, {"precision", s.precision},
                                {"recall", s.recall},     {"f1", s.f1},             {"positive", r.positive},
                                {"ece", r.calibration.ece}};
    std::vector<Series> series = {reliability_series("all", r.calibration)};
    if (r.temperature) {
      j["temperature"] = *r.temperature, j["ece_before"] = r.held_out_before.ece, j["ece_after"] = r.held_out_after.ece;
      series.push_back(reliability_series("second half, before", r.held_out_before));
      series.push_back(reliability_series(fmt::format("second half, T = {:.3f}", *r.temperature), r.held_out_after));
    }
    if (!reliability.empty())
      write_file_atomic(reliability, line_plot_svg(series, {.title = "reliability", .x_label = "confidence",
                                                             .y_label = "accuracy", .diagonal = true}));
    if (json_output) {
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("examples {}\naccuracy {:.4f}\n{}: precision {:.4f}, recall {:.4f}, F1 {:.4f}\nECE {:.4f}\n", r.examples,
               s.accuracy, r.positive, s.precision, s.recall, s.f1, r.calibration.ece);
    if (r.temperature)
      fmt::print("temperature {:.4f} (fitted on the first half)\nsecond half: ECE {:.4f} -> {:.4f}\n", *r.temperature,
                 r.held_out_before.ece, r.held_out_after.ece);
  });
}

}  // namespace

void add_eval_command(CLI::App& app) {
  add_eval_seq2seq(app);
  add_eval_classify(app);
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity and calibration (ECE, temperature scaling) of a decoder model");
  static std::string model_dir, data, token_file, reliability;
  static EvalOptions options;
  static bool json_output = false;
  cmd->add_option("--model", model_dir, "A model directory or GGUF file (with its tokenizer for --data)")->required();
  static std::vector<std::string> lora;
  cmd->add_option("--lora", lora, kLoraHelp);
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
    Model model = load_model(model_dir);
    apply_lora(model, lora);
    std::vector<int32_t> tokens;
    int64_t bytes = 0;  // --data: the bytes of the scored tokens' text, for the figures per byte
    if (data.empty()) {
      tokens = parse_ids(read_file(token_file), token_file);
    } else {
      const std::optional<Tokenizer> tokenizer = model_tokenizer(model_dir);
      check(tokenizer.has_value(), "{}: no tokenizer to read --data with; give --tokens", model_dir);
      tokens = tokenizer->encode(read_file(data));
      std::vector<int64_t> id_bytes(static_cast<size_t>(tokenizer->vocab_size()), -1);  // text_bytes decodes: once an id
      for (size_t i = 1; i < tokens.size(); ++i) {  // the scored tokens
        int64_t& b = id_bytes[static_cast<size_t>(tokens[i])];
        if (b < 0) b = tokenizer->text_bytes(tokens[i]);
        bytes += b;
      }
    }
    const EvalResult r = evaluate_lm(model, tokens, options);
    const double loss_per_byte = bytes > 0 ? r.loss * double(r.tokens) / double(bytes) : 0.0;
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
      if (bytes > 0) {
        j["bytes"] = bytes;
        j["loss_per_byte"] = loss_per_byte;
        j["bits_per_byte"] = loss_per_byte / std::log(2.0);
        j["perplexity_per_byte"] = std::exp(loss_per_byte);
      }
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
    if (bytes > 0)
      fmt::print("per byte ({} bytes): {}\n", bytes, per_byte_summary(loss_per_byte));
    if (r.temperature)
      fmt::print("temperature {:.4f} (fitted on the first half)\nsecond half: ECE {:.4f} -> {:.4f}, loss {:.4f} -> {:.4f}\n",
                 *r.temperature, r.held_out_before.ece, r.held_out_after.ece, r.held_out_loss_before,
                 r.held_out_loss_after);
  });
}

}  // namespace attend::cli
