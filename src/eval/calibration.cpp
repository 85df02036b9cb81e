#include <attend/error.h>
#include <attend/eval.h>

#include <algorithm>
#include <cmath>

namespace attend {

Calibration expected_calibration_error(std::span<const double> confidence, std::span<const uint8_t> correct, int bins) {
  check(confidence.size() == correct.size(), "calibration: {} confidences and {} outcomes", confidence.size(),
        correct.size());
  check(bins >= 1, "calibration: need at least one bin, got {}", bins);
  Calibration c;
  c.bins.resize(bins);
  std::vector<double> sum_conf(bins, 0.0), sum_correct(bins, 0.0);
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double p = confidence[i];
    check(p >= 0.0 && p <= 1.0, "calibration: confidence {} at {} is outside [0, 1]", p, i);
    const int m = std::min(bins - 1, static_cast<int>(p * bins));
    ++c.bins[m].count;
    sum_conf[m] += p;
    sum_correct[m] += correct[i] ? 1.0 : 0.0;
  }
  const double n = static_cast<double>(confidence.size());
  for (int m = 0; m < bins; ++m) {
    CalibrationBin& b = c.bins[m];
    b.lower = double(m) / bins, b.upper = double(m + 1) / bins;
    if (b.count == 0) continue;
    b.confidence = sum_conf[m] / double(b.count);
    b.accuracy = sum_correct[m] / double(b.count);
    c.ece += double(b.count) / n * std::abs(b.accuracy - b.confidence);
  }
  return c;
}

double mean_nll(const float* logits, const int32_t* targets, int64_t N, int64_t V, double T) {
  double total = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    const float* z = logits + r * V;
    const double top = *std::max_element(z, z + V) / T;
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] / T - top);
    total += top + std::log(sum) - z[targets[r]] / T;
  }
  return N > 0 ? total / double(N) : 0.0;
}

// NLL(T) is convex in β = 1/T (a log-sum-exp minus a linear term), hence unimodal in log T: golden-section
// search over log T finds the minimum to 1e-6 in log T.
double fit_temperature(const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  check(N > 0, "temperature scaling: no predictions to fit");
  double a = std::log(0.05), b = std::log(20.0);
  const double phi = (std::sqrt(5.0) - 1.0) / 2.0;
  double c = b - phi * (b - a), d = a + phi * (b - a);
  double fc = mean_nll(logits, targets, N, V, std::exp(c)), fd = mean_nll(logits, targets, N, V, std::exp(d));
  while (b - a > 1e-6) {
    if (fc < fd) {
      b = d, d = c, fd = fc;
      c = b - phi * (b - a);
      fc = mean_nll(logits, targets, N, V, std::exp(c));
    } else {
      a = c, c = d, fc = fd;
      d = a + phi * (b - a);
      fd = mean_nll(logits, targets, N, V, std::exp(d));
    }
  }
  return std::exp((a + b) / 2.0);
}

}  // namespace attend
