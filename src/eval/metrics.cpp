// Task metrics: edit distance, WER/PER, and classification scores.
#include <attend/error.h>
#include <attend/eval.h>

#include <algorithm>

namespace attend {

int64_t edit_distance(std::span<const std::string> a, std::span<const std::string> b) {
  // One row of the dynamic programme at a time: d[j] = distance between a[0..i) and b[0..j).
  std::vector<int64_t> d(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) d[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = d[0];
    d[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t above = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return d[b.size()];
}

TranscriptionScore score_transcriptions(const std::vector<std::vector<std::string>>& hypotheses,
                                        const std::vector<std::vector<std::vector<std::string>>>& references) {
  check(hypotheses.size() == references.size(), "scoring: {} hypotheses for {} words", hypotheses.size(),
        references.size());
  TranscriptionScore s;
  for (size_t w = 0; w < hypotheses.size(); ++w) {
    check(!references[w].empty(), "scoring: word {} has no reference", w);
    int64_t best = -1, best_length = 0;
    for (const auto& ref : references[w]) {
      const int64_t d = edit_distance(hypotheses[w], ref);
      if (best < 0 || d < best || (d == best && static_cast<int64_t>(ref.size()) < best_length))
        best = d, best_length = static_cast<int64_t>(ref.size());
    }
    ++s.words;
    s.wrong_words += best > 0;
    s.token_errors += best;
    s.tokens += best_length;
  }
  s.wer = s.words ? double(s.wrong_words) / double(s.words) : 0.0;
  s.per = s.tokens ? double(s.token_errors) / double(s.tokens) : 0.0;
  return s;
}

ClassificationScore score_classification(std::span<const int32_t> predicted, std::span<const int32_t> truth,
                                         int32_t positive) {
  check(predicted.size() == truth.size(), "scoring: {} predictions for {} labels", predicted.size(), truth.size());
  ClassificationScore s;
  s.n = static_cast<int64_t>(truth.size());
  int64_t right = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    right += predicted[i] == truth[i];
    const bool p = predicted[i] == positive, t = truth[i] == positive;
    s.true_positive += p && t, s.false_positive += p && !t, s.false_negative += !p && t, s.true_negative += !p && !t;
  }
  s.accuracy = s.n ? double(right) / double(s.n) : 0.0;
  const int64_t predicted_positive = s.true_positive + s.false_positive, actual_positive = s.true_positive + s.false_negative;
  s.precision = predicted_positive ? double(s.true_positive) / double(predicted_positive) : 0.0;
  s.recall = actual_positive ? double(s.true_positive) / double(actual_positive) : 0.0;
  s.f1 = s.precision + s.recall > 0.0 ? 2.0 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

}  // namespace attend
