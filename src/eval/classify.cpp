// A classifier on labelled examples: accuracy, precision, recall and F1 of one class, calibration (ECE), and
// temperature scaling fitted on the first half and judged on the second.
#include <attend/error.h>
#include <attend/eval.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace attend {

namespace {

// The arg-max class of each row of logits (N, K) at temperature T, with its probability and whether it is right.
struct Predictions {
  std::vector<int32_t> predicted;
  std::vector<double> confidence;
  std::vector<uint8_t> right;
};

Predictions predict(const std::vector<float>& logits, std::span<const int32_t> truth, int64_t from, int64_t to,
                    int64_t K, double T) {
  Predictions p;
  for (int64_t r = from; r < to; ++r) {
    const float* z = logits.data() + r * K;
    const auto arg = static_cast<int32_t>(std::max_element(z, z + K) - z);
    double sum = 0.0;  // p(arg) = 1 / Σ_k exp((z_k − z_arg) / T)
    for (int64_t k = 0; k < K; ++k) sum += std::exp((z[k] - z[arg]) / T);
    p.predicted.push_back(arg), p.confidence.push_back(1.0 / sum), p.right.push_back(arg == truth[r]);
  }
  return p;
}

}  // namespace

ClassifierEvaluation evaluate_classifier(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                         std::span<const int32_t> labels, std::span<const std::string> classes,
                                         const ClassifierEvalOptions& options) {
  const ModelConfig& c = model.config();
  check(c.architecture == Architecture::Encoder && c.n_classes > 0,
        "evaluate_classifier: the model has no classification head (an encoder with n_classes > 0)");
  const int64_t K = c.n_classes, n = static_cast<int64_t>(sources.size());
  check(static_cast<int64_t>(classes.size()) == K, "evaluate_classifier: {} class names ({}), the model has {} classes",
        classes.size(), fmt::join(classes, ", "), K);
  check(static_cast<int64_t>(labels.size()) == n, "evaluate_classifier: {} labels for {} examples", labels.size(), n);
  check(n > 0, "evaluate_classifier: no examples");
  check(options.batch_size >= 1, "evaluate_classifier: batch_size must be positive, got {}", options.batch_size);
  for (int64_t i = 0; i < n; ++i)
    check(labels[i] >= 0 && labels[i] < K, "evaluate_classifier: example {} has label {}, outside [0, {})", i, labels[i], K);
  ClassifierEvaluation out;
  out.examples = n;
  int32_t positive = static_cast<int32_t>(K - 1);
  if (!options.positive.empty()) {
    const auto it = std::find(classes.begin(), classes.end(), options.positive);
    check(it != classes.end(), "--positive '{}': the classes are {}", options.positive, fmt::join(classes, ", "));
    positive = static_cast<int32_t>(it - classes.begin());
  }
  out.positive = classes[positive];

  // Batches of consecutive examples, padded on the right; a source is cut to the model's context, and an empty
  // one is a single pad token (as in training).
  std::vector<float> logits;
  ForwardState state(/*for_backward=*/false);
  logits.reserve(static_cast<size_t>(n * K));
  for (int64_t at = 0; at < n; at += options.batch_size) {
    Batch b;
    b.B = std::min(options.batch_size, n - at);
    auto length = [&](int64_t i) {
      return std::max<int64_t>(1, std::min<int64_t>(static_cast<int64_t>(sources[i].size()), c.max_seq_len));
    };
    for (int64_t i = at; i < at + b.B; ++i) b.T = std::max(b.T, length(i));
    b.ids.assign(b.B * b.T, 0);
    for (int64_t k = 0; k < b.B; ++k) {
      const auto& s = sources[at + k];
      std::copy_n(s.begin(), std::min<int64_t>(static_cast<int64_t>(s.size()), b.T), b.ids.begin() + k * b.T);
      b.lengths.push_back(static_cast<int32_t>(length(at + k)));
      b.labels.push_back(labels[at + k]);
    }
    model.forward(b, state);
    logits.insert(logits.end(), state.logits().span().begin(), state.logits().span().end());
  }

  const Predictions all = predict(logits, labels, 0, n, K, 1.0);
  out.score = score_classification(all.predicted, labels, positive);
  out.calibration = expected_calibration_error(all.confidence, all.right, options.bins);
  if (options.calibrate) {
    check(n >= 4, "evaluate_classifier: {} examples are too few to fit a temperature on half of them", n);
    const int64_t half = n / 2;
    const double T = fit_temperature(logits.data(), labels.data(), half, K);
    const Predictions before = predict(logits, labels, half, n, K, 1.0), after = predict(logits, labels, half, n, K, T);
    out.temperature = T;
    out.held_out_before = expected_calibration_error(before.confidence, before.right, options.bins);
    out.held_out_after = expected_calibration_error(after.confidence, after.right, options.bins);
  }
  return out;
}

}  // namespace attend
