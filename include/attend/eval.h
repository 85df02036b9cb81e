// Evaluation and calibration (003 §10.2, 004 §11.2): loss and perplexity over long token streams with a
// sliding window, expected calibration error of next-token predictions, and temperature scaling; task metrics
// (WER/PER, precision/recall/F1) and a classifier's evaluation.
#pragma once

#include <attend/model.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace attend {

struct CalibrationBin {
  double lower = 0.0, upper = 0.0;  // confidence range [lower, upper)
  int64_t count = 0;
  double confidence = 0.0;          // mean confidence of the bin's predictions
  double accuracy = 0.0;            // share of them that were right
};

struct Calibration {
  double ece = 0.0;  // Σ_m |B_m|/n · |acc(B_m) − conf(B_m)|
  std::vector<CalibrationBin> bins;
};

// ECE over equal-width bins of [0, 1] (the last bin includes 1). confidence[i] is the probability the model
// gave its prediction; correct[i] whether that prediction was right.
Calibration expected_calibration_error(std::span<const double> confidence, std::span<const uint8_t> correct,
                                       int bins = 15);

// Mean negative log-likelihood of softmax(z/T) for rows (N, V) with targets (N).
double mean_nll(const float* logits, const int32_t* targets, int64_t N, int64_t V, double temperature);
// The T > 0 that minimises mean_nll (golden-section search over log T in [1/20, 20]; the NLL is convex in 1/T).
double fit_temperature(const float* logits, const int32_t* targets, int64_t N, int64_t V);

struct EvalOptions {
  int64_t stride = 0;        // sliding-window step; 0 means half the context
  bool calibrate = false;    // fit a temperature on the first half of the tokens, report on the second
  int bins = 15;
};

struct EvalResult {
  int64_t tokens = 0;        // predictions scored
  double loss = 0.0;         // mean next-token cross-entropy, nats
  double perplexity = 0.0;   // exp(loss)
  Calibration calibration;   // over every scored token
  // With calibrate: the fitted temperature, and on the second half ECE and loss before and after it.
  std::optional<double> temperature;
  Calibration held_out_before, held_out_after;
  double held_out_loss_before = 0.0, held_out_loss_after = 0.0;
};

// Scores every token of `tokens` after the first, each predicted with as much context as the window
// allows: windows of max_seq_len tokens, `stride` apart; each scores only the tokens earlier windows
// did not. Decoder-only models.
EvalResult evaluate_lm(const Model& model, const std::vector<int32_t>& tokens, const EvalOptions& options = {});

// ---- Task metrics ----------------------------------------------------------------------------------

// Levenshtein distance between token sequences: the fewest insertions, deletions and substitutions.
int64_t edit_distance(std::span<const std::string> a, std::span<const std::string> b);

// Sequence transduction scored as in grapheme-to-phoneme work: a word is right when its hypothesis equals
// any of its references (WER = wrong words / words); PER = Σ over words of the edit distance to the closest
// reference / Σ of that reference's length.
struct TranscriptionScore {
  int64_t words = 0, wrong_words = 0;
  int64_t tokens = 0, token_errors = 0;
  double wer = 0.0, per = 0.0;
};
TranscriptionScore score_transcriptions(const std::vector<std::vector<std::string>>& hypotheses,
                                        const std::vector<std::vector<std::vector<std::string>>>& references);

struct ClassificationScore {
  int64_t n = 0, true_positive = 0, false_positive = 0, false_negative = 0, true_negative = 0;
  double accuracy = 0.0, precision = 0.0, recall = 0.0, f1 = 0.0;  // of the positive class
};
ClassificationScore score_classification(std::span<const int32_t> predicted, std::span<const int32_t> truth,
                                         int32_t positive);

struct ClassifierEvalOptions {
  std::string positive;       // the class precision, recall and F1 are about; empty: the last
  bool calibrate = false;     // fit a temperature on the first half of the examples, ECE before and after on the second
  int64_t batch_size = 16;
  int bins = 15;
};

struct ClassifierEvaluation {
  int64_t examples = 0;
  std::string positive;       // the positive class's name
  ClassificationScore score;
  Calibration calibration;    // of the predicted class's probability, over every example
  // With calibrate: the temperature fitted on the first half, and the second half's ECE before and after it.
  std::optional<double> temperature;
  Calibration held_out_before, held_out_after;
};

// An encoder's classification head on examples: sources[i] (token ids, cut to the model's context) has class
// labels[i], an id into `classes` (the classes' names, as many as the model's n_classes).
ClassifierEvaluation evaluate_classifier(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                         std::span<const int32_t> labels, std::span<const std::string> classes,
                                         const ClassifierEvalOptions& options = {});

}  // namespace attend
