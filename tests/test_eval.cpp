// Evaluation (004 §11.2): ECE on predictions with known answers, temperature scaling recovering a known
// temperature, and sliding-window perplexity against brute force.
#include "fixtures.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/eval.h>
#include <attend/model_dir.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace attend {
namespace {

TEST(Calibration, EceByHand) {
  // Ten predictions at 0.9 of which 7 are right (bin 13 of 15: |0.7 − 0.9| = 0.2), four at 0.55 of which
  // 2 are right (bin 8: |0.5 − 0.55| = 0.05): ECE = 10/14·0.2 + 4/14·0.05 = 0.157142857...
  std::vector<double> conf(10, 0.9);
  std::vector<uint8_t> right = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  for (int i = 0; i < 4; ++i) conf.push_back(0.55), right.push_back(i < 2);
  const Calibration c = expected_calibration_error(conf, right, 15);
  EXPECT_NEAR(c.ece, 10.0 / 14 * 0.2 + 4.0 / 14 * 0.05, 1e-12);
  EXPECT_EQ(c.bins[13].count, 10);
  EXPECT_NEAR(c.bins[13].accuracy, 0.7, 1e-12);
  EXPECT_EQ(c.bins[8].count, 4);
  // Perfectly calibrated: confidence 1 (the last bin) and always right gives 0.
  EXPECT_EQ(expected_calibration_error(std::vector<double>{1.0, 1.0}, std::vector<uint8_t>{1, 1}).ece, 0.0);
  testing::expect_error_mentions<Error>(
      [] { expected_calibration_error(std::vector<double>{1.5}, std::vector<uint8_t>{1}); }, {"outside [0, 1]"});
}

// Labels drawn from softmax(z/2): the NLL-minimising temperature is 2 up to sampling noise (4000 rows
// give a standard error of about 0.04), and scaling lowers the ECE of the over-confident raw logits.
TEST(Calibration, TemperatureScalingRecoversAKnownTemperature) {
  const int64_t N = 4000, V = 10;
  Rng rng(5);
  std::vector<float> logits(N * V);
  std::vector<int32_t> labels(N);
  for (int64_t r = 0; r < N; ++r) {
    double sum = 0.0;
    std::vector<double> p(V);
    for (int64_t j = 0; j < V; ++j) logits[r * V + j] = rng.normal(0.0f, 3.0f), sum += p[j] = std::exp(logits[r * V + j] / 2.0);
    double u = rng.uniform_double() * sum;
    int32_t y = 0;
    while (y < V - 1 && (u -= p[y]) > 0) ++y;
    labels[r] = y;
  }
  const double T = fit_temperature(logits.data(), labels.data(), N, V);
  EXPECT_NEAR(T, 2.0, 0.15);
  EXPECT_LT(mean_nll(logits.data(), labels.data(), N, V, T), mean_nll(logits.data(), labels.data(), N, V, 1.0));
  auto ece_at = [&](double t) {
    std::vector<double> conf;
    std::vector<uint8_t> right;
    for (int64_t r = 0; r < N; ++r) {
      const float* z = logits.data() + r * V;
      const int64_t arg = std::max_element(z, z + V) - z;
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp((z[j] - z[arg]) / t);
      conf.push_back(1.0 / sum), right.push_back(arg == labels[r]);
    }
    return expected_calibration_error(conf, right).ece;
  };
  EXPECT_GT(ece_at(1.0), 0.1);  // raw logits are twice too sharp
  EXPECT_LT(ece_at(T), 0.03);
}

// The sliding window against brute force: with stride 1 every token i ≥ W is predicted from exactly the
// W − 1 tokens before it, and tokens i < W from the start of the text.
TEST(Evaluation, SlidingWindowMatchesBruteForce) {
  Model model = load_model(testing::kModels / "gpt");  // context 16
  const int64_t W = 16, V = 37, n = 27;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(1 + (i * 7) % 36));
  // −log p(token i | tokens[from, i)) by a full forward, of softmax(z / T).
  auto nll_of = [&](int64_t from, int64_t i, double T = 1.0) {
    Batch b;
    b.B = 1, b.T = i - from;
    b.ids.assign(tokens.begin() + from, tokens.begin() + i);
    model.forward(b);
    const float* z = model.logits().data() + (b.T - 1) * V;
    double top = *std::max_element(z, z + V) / T, sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] / T - top);
    return top + std::log(sum) - z[tokens[i]] / T;
  };
  double expected = 0.0;
  for (int64_t i = 1; i < n; ++i) expected += nll_of(i < W ? 0 : i - W + 1, i);
  expected /= double(n - 1);
  const EvalResult r = evaluate_lm(model, tokens, {.stride = 1});
  EXPECT_EQ(r.tokens, n - 1);
  EXPECT_NEAR(r.loss, expected, 1e-5);
  EXPECT_NEAR(r.perplexity, std::exp(expected), 1e-4);
  // Every stride scores every token once; a stride of the whole context still predicts each window's first.
  for (int64_t stride : {4, 8, 15, 16}) EXPECT_EQ(evaluate_lm(model, tokens, {.stride = stride}).tokens, n - 1);
  // Calibration: T is fitted on the predictions of tokens 1 … n/2 and judged on tokens n/2 + 1 … n − 1. Both
  // held-out losses are the brute-force means at 1 and at T, and T minimises the first half's loss: it is no
  // lower at 1 or 2% either side (the search brackets log T in [log 0.05, log 20] to 1e-6).
  const EvalResult cal = evaluate_lm(model, tokens, {.stride = 1, .calibrate = true});
  ASSERT_TRUE(cal.temperature.has_value());
  const double T = *cal.temperature;
  auto mean_nll_over = [&](int64_t first, int64_t last, double temperature) {
    double sum = 0.0;
    for (int64_t i = first; i <= last; ++i) sum += nll_of(i < W ? 0 : i - W + 1, i, temperature);
    return sum / double(last - first + 1);
  };
  const int64_t half = n / 2;
  EXPECT_NEAR(cal.held_out_loss_before, mean_nll_over(half + 1, n - 1, 1.0), 1e-5);
  EXPECT_NEAR(cal.held_out_loss_after, mean_nll_over(half + 1, n - 1, T), 1e-5);
  const double fitted = mean_nll_over(1, half, T);
  EXPECT_LE(fitted, mean_nll_over(1, half, 1.0) + 1e-9);
  // At an edge of the search only the inside neighbour exists (this random fixture model does best near the
  // uniform guess, so its T is the upper edge, 20, and its first-half loss ln 37 = 3.61 against 5.16 at 1).
  if (T < 19.9) {
    EXPECT_LE(fitted, mean_nll_over(1, half, T * 1.02) + 1e-9);
  }
  if (T > 0.051) {
    EXPECT_LE(fitted, mean_nll_over(1, half, T / 1.02) + 1e-9);
  }
  testing::expect_error_mentions<Error>([&] { evaluate_lm(model, {1}); }, {"at least 2"});
  testing::expect_error_mentions<Error>([&] { evaluate_lm(model, {1, 99}); }, {"99", "position 1"});
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s + " ")
    if (c == ' ') {
      if (!w.empty()) out.push_back(w), w.clear();
    } else {
      w += c;
    }
  return out;
}

TEST(TaskMetrics, EditDistanceWerAndPerByHand) {
  EXPECT_EQ(edit_distance(words("K AE1 T"), words("K AE1 T")), 0);
  EXPECT_EQ(edit_distance(words("K AE1 T"), words("K AE1 T S")), 1);    // one insertion
  EXPECT_EQ(edit_distance(words("A B C"), words("X B")), 2);            // a substitution and a deletion
  EXPECT_EQ(edit_distance(words(""), words("A B")), 2);
  EXPECT_EQ(edit_distance(words("K IH1 T AH0 N"), words("S IH1 T IH0 NG")), 3);
  // Three words. "either" has two pronunciations and matches the second: right. "cat" is off by one
  // phoneme of 3: wrong. "a" is right. WER = 1/3; PER = (0 + 1 + 0) / (3 + 3 + 2), the closest references.
  const std::vector<std::vector<std::string>> hyp = {words("AY1 DH ER0"), words("K AE1 D"), words("AH0 EY")};
  const std::vector<std::vector<std::vector<std::string>>> refs = {
      {words("IY1 DH ER0"), words("AY1 DH ER0")}, {words("K AE1 T")}, {words("AH0 EY"), words("EY1")}};
  const TranscriptionScore s = score_transcriptions(hyp, refs);
  EXPECT_EQ(s.words, 3);
  EXPECT_EQ(s.wrong_words, 1);
  EXPECT_NEAR(s.wer, 1.0 / 3.0, 1e-15);
  EXPECT_EQ(s.token_errors, 1);
  EXPECT_EQ(s.tokens, 8);
  EXPECT_NEAR(s.per, 1.0 / 8.0, 1e-15);
}

TEST(TaskMetrics, PrecisionRecallAndF1ByHand) {
  // Positive class 1. Predictions against truth: TP 3, FP 1, FN 2, TN 4.
  const std::vector<int32_t> predicted = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  const std::vector<int32_t> truth = {1, 1, 1, 0, 1, 1, 0, 0, 0, 0};
  const ClassificationScore s = score_classification(predicted, truth, 1);
  EXPECT_EQ(s.true_positive, 3);
  EXPECT_EQ(s.false_positive, 1);
  EXPECT_EQ(s.false_negative, 2);
  EXPECT_EQ(s.true_negative, 4);
  EXPECT_NEAR(s.accuracy, 0.7, 1e-15);
  EXPECT_NEAR(s.precision, 0.75, 1e-15);
  EXPECT_NEAR(s.recall, 0.6, 1e-15);
  EXPECT_NEAR(s.f1, 2 * 0.75 * 0.6 / 1.35, 1e-15);  // 0.6667
  EXPECT_EQ(score_classification(std::vector<int32_t>{0}, std::vector<int32_t>{0}, 1).f1, 0.0);  // no positives
}

// evaluate_classifier batches the examples (padded, cut to the context): its predictions, scores and ECE are
// those of one forward per example; the positive class is found by name; calibrate fits on the first half.
TEST(Evaluation, ClassifierEqualsOneForwardPerExample) {
  ModelConfig c;
  c.architecture = Architecture::Encoder;
  c.vocab_size = 16, c.d_model = 16, c.n_layers = 1, c.n_heads = 2, c.max_seq_len = 8, c.seed = 4;
  c.n_classes = 3, c.class_names = {"a", "b", "c"};
  Model model(c);
  std::vector<std::vector<int32_t>> sources;
  std::vector<int32_t> labels;
  Rng rng(9);
  for (int i = 0; i < 21; ++i) {
    std::vector<int32_t> s(i == 0 ? 0 : 1 + rng.below(12));  // one empty source, some longer than the context
    for (int32_t& t : s) t = 1 + static_cast<int32_t>(rng.below(15));
    sources.push_back(s);
    labels.push_back(static_cast<int32_t>(rng.below(3)));
  }
  std::vector<int32_t> predicted;
  std::vector<double> confidence;
  std::vector<uint8_t> right;
  for (size_t i = 0; i < sources.size(); ++i) {
    Batch b;
    b.B = 1;
    b.ids = sources[i].empty() ? std::vector<int32_t>{0} : sources[i];
    if (b.ids.size() > 8) b.ids.resize(8);
    b.T = static_cast<int64_t>(b.ids.size());
    b.labels = {labels[i]};  // labels select the classification head
    model.forward(b);
    const float* z = model.logits().data();
    const auto arg = static_cast<int32_t>(std::max_element(z, z + 3) - z);
    double sum = 0.0;
    for (int k = 0; k < 3; ++k) sum += std::exp(double(z[k]) - double(z[arg]));
    predicted.push_back(arg), confidence.push_back(1.0 / sum), right.push_back(arg == labels[i]);
  }
  const ClassificationScore want = score_classification(predicted, labels, 0);
  const ClassifierEvaluation r =
      evaluate_classifier(model, sources, labels, c.class_names, {.positive = "a", .calibrate = true, .batch_size = 4});
  EXPECT_EQ(r.examples, 21);
  EXPECT_EQ(r.positive, "a");
  EXPECT_EQ(r.score.true_positive, want.true_positive);
  EXPECT_EQ(r.score.false_positive, want.false_positive);
  EXPECT_EQ(r.score.false_negative, want.false_negative);
  EXPECT_DOUBLE_EQ(r.score.accuracy, want.accuracy);
  EXPECT_NEAR(r.calibration.ece, expected_calibration_error(confidence, right).ece, 1e-5);
  ASSERT_TRUE(r.temperature.has_value());
  const std::vector<double> second(confidence.begin() + 10, confidence.end());
  const std::vector<uint8_t> second_right(right.begin() + 10, right.end());
  EXPECT_NEAR(r.held_out_before.ece, expected_calibration_error(second, second_right).ece, 1e-5);
  // Without a positive class named, the last one is positive.
  EXPECT_EQ(evaluate_classifier(model, sources, labels, c.class_names).positive, "c");
  testing::expect_error_mentions<Error>([&] { evaluate_classifier(model, sources, labels, c.class_names, {.positive = "d"}); },
                                        {"'d'", "a, b, c"});
  testing::expect_error_mentions<Error>(
      [&] { evaluate_classifier(model, sources, labels, std::vector<std::string>{"a", "b"}); }, {"2 class names", "3 classes"});
  std::vector<int32_t> bad = labels;
  bad[5] = 3;
  testing::expect_error_mentions<Error>([&] { evaluate_classifier(model, sources, bad, c.class_names); },
                                        {"example 5", "label 3"});
}

}  // namespace
}  // namespace attend
