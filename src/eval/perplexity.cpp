// Sliding-window evaluation of causal language models.
#include <attend/error.h>
#include <attend/eval.h>

#include <algorithm>
#include <cmath>

namespace attend {
namespace {

// Calls on_row(i, logits) once for every token i ≥ 1 with the logits that predict it: windows [b, b + W)
// for b = 0, stride, 2·stride, ..., each scoring only the tokens after those the previous window scored. A
// window never starts after the last scored token, so the next one always has a position to predict it
// from (a stride of W would otherwise skip the first token of every window).
template <typename F>
void for_each_prediction(const Model& model, const std::vector<int32_t>& tokens, int64_t stride, F&& on_row) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t W = model.config().max_seq_len, V = model.config().vocab_size;
  int64_t scored = 0;  // tokens [1, scored] have been scored
  ForwardState state(/*for_backward=*/false);
  for (int64_t b = 0;; b = std::min(b + stride, scored)) {
    const int64_t e = std::min(b + W, n);
    Batch batch;
    batch.B = 1, batch.T = e - b;
    batch.ids.assign(tokens.begin() + b, tokens.begin() + e);
    model.forward(batch, state);
    const float* logits = state.logits().data();
    for (int64_t i = 0; b + i + 1 < e; ++i)
      if (b + i + 1 > scored) on_row(b + i + 1, logits + i * V);
    scored = e - 1;
    if (e == n) break;
  }
}

struct Prediction {
  double confidence = 0.0, nll = 0.0;
  uint8_t correct = 0;
};

// The prediction of softmax(z/T) for target t: confidence of the argmax, whether it is t, and −log p_t.
Prediction predict(const float* z, int64_t V, int32_t target, double T) {
  const int64_t arg = std::max_element(z, z + V) - z;
  const double top = z[arg] / T;
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] / T - top);
  const double lse = top + std::log(sum);
  return {std::exp(top - lse), lse - z[target] / T, static_cast<uint8_t>(arg == target)};
}

Calibration calibration_of(const std::vector<Prediction>& p, int bins) {
  std::vector<double> confidence;
  std::vector<uint8_t> correct;
  for (const Prediction& x : p) confidence.push_back(x.confidence), correct.push_back(x.correct);
  return expected_calibration_error(confidence, correct, bins);
}

double mean_loss(const std::vector<Prediction>& p) {
  double sum = 0.0;
  for (const Prediction& x : p) sum += x.nll;
  return p.empty() ? 0.0 : sum / double(p.size());
}

}  // namespace

EvalResult evaluate_lm(const Model& model, const std::vector<int32_t>& tokens, const EvalOptions& o) {
  const ModelConfig& c = model.config();
  check(c.architecture == Architecture::Decoder, "eval: next-token evaluation needs a decoder model, this one is {}",
        architecture_name(c.architecture));
  check(tokens.size() >= 2, "eval: {} tokens, need at least 2 (one to predict)", tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    check(tokens[i] >= 0 && tokens[i] < c.vocab_size, "eval: token {} at position {} is outside the vocabulary [0, {})",
          tokens[i], i, c.vocab_size);
  const int64_t stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, c.max_seq_len / 2);
  check(stride <= c.max_seq_len, "eval: stride {} is longer than the context {}", stride, c.max_seq_len);
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t V = c.vocab_size;

  // Pass 1: every prediction; with calibrate, also logits rows of the first half to fit T on (at most
  // 2^24 floats, spread evenly).
  std::vector<Prediction> all(n);
  const int64_t half = n / 2, rows_cap = std::max<int64_t>(1, (int64_t{1} << 24) / V);
  const int64_t every = std::max<int64_t>(1, (half + rows_cap - 1) / rows_cap);
  std::vector<float> fit_logits;
  std::vector<int32_t> fit_targets;
  for_each_prediction(model, tokens, stride, [&](int64_t i, const float* z) {
    all[i] = predict(z, V, tokens[i], 1.0);
    if (o.calibrate && i <= half && i % every == 0) {
      fit_logits.insert(fit_logits.end(), z, z + V);
      fit_targets.push_back(tokens[i]);
    }
  });
  all.erase(all.begin());  // token 0 is never predicted
  EvalResult r;
  r.tokens = n - 1;
  r.loss = mean_loss(all);
  r.perplexity = std::exp(r.loss);
  r.calibration = calibration_of(all, o.bins);
  if (!o.calibrate) return r;

  check(n >= 4, "eval: calibration splits the tokens in two halves; {} tokens are too few", n);
  r.temperature = fit_temperature(fit_logits.data(), fit_targets.data(), static_cast<int64_t>(fit_targets.size()), V);
  // Pass 2: the second half under the fitted temperature.
  const std::vector<Prediction> before(all.begin() + half, all.end());
  std::vector<Prediction> after;
  for_each_prediction(model, tokens, stride, [&](int64_t i, const float* z) {
    if (i > half) after.push_back(predict(z, V, tokens[i], *r.temperature));
  });
  r.held_out_before = calibration_of(before, o.bins);
  r.held_out_after = calibration_of(after, o.bins);
  r.held_out_loss_before = mean_loss(before);
  r.held_out_loss_after = mean_loss(after);
  return r;
}

}  // namespace attend
