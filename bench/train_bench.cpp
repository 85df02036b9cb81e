// Training throughput: forward + backward + AdamW step of a GPT, one shape per process.
//
//   build/bench/attend_train_bench --shape S [--steps 6 --threads 2]
//   build/bench/attend_train_bench --shape gpt2 --steps 4 [--precision f32|bf16|f16]
//
// Shapes (issue 6): S = 6 layers, d_model 384, 6 heads, vocabulary 8192, T 256, batch 8;
// gpt2 = 12 layers, d_model 768, 12 heads, vocabulary 50257, T 256, batch 4 (GPT-2 124M).
// Prints one JSON line: median tokens/s over the steps after the first (warm-up), the model FLOPs
// utilisation (6·N + 12·L·d·T FLOPs per token, N without the position table, over the sgemm rate measured
// in the same process), and peak RSS. bench/train.sh runs it beside PyTorch (bench/train_torch.py).
#include "kernels/gemm.h"

#include <attend/model.h>
#include <attend/rng.h>
#include <attend/runtime.h>
#include <attend/train.h>

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The sgemm rate on the shape that dominates training (a 2048-row activation block times a d×4d weight).
double sgemm_gflops() {
  const int64_t M = 2048, N = 3072, K = 768;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    attend::kernels::gemm<float>(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * M * N * K / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "S";
  int64_t steps = 6;
  int threads = 2;
  std::string precision = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--shape") shape = value;
    else if (flag == "--steps") steps = std::atoll(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--precision") precision = value;
  }
  attend::set_num_threads(threads);
  attend::ModelConfig c;
  int64_t B = 8, T = 256;
  c.activation = attend::FfnKind::GELUTanh;
  c.max_seq_len = 1024;
  if (shape == "S") {
    c.n_layers = 6, c.d_model = 384, c.n_heads = 6, c.vocab_size = 8192;
  } else if (shape == "gpt2") {
    c.n_layers = 12, c.d_model = 768, c.n_heads = 12, c.vocab_size = 50257, B = 4;
  } else {
    fmt::print(stderr, "--shape: expected S or gpt2, got {}\n", shape);
    return 1;
  }
  const double gflops = sgemm_gflops();
  attend::Model model(c);
  const attend::ParameterCount n = model.count();
  const double N = double(n.total() - c.max_seq_len * c.d_model);
  const double flops_per_token = 6.0 * N + 12.0 * c.n_layers * c.d_model * T;

  attend::Rng rng(1);
  std::vector<int32_t> tokens((steps + 1) * B * T + 1);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(c.vocab_size));
  attend::LmDataset data(tokens, {}, {.batch_size = B, .seq_len = T});
  attend::TrainConfig config;
  config.steps = steps;
  config.precision = precision == "bf16" ? attend::Precision::BF16
                     : precision == "f16" ? attend::Precision::F16
                                          : attend::Precision::F32;
  config.schedule = {.kind = attend::train::ScheduleKind::Constant, .lr = 1e-4};
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("attend_train_bench_{}", getpid());
  std::vector<double> rates;
  {
    attend::Trainer trainer(std::move(model), data, config, dir);
    for (int64_t s = 0; s < steps; ++s) {
      const attend::StepReport r = trainer.step();
      if (s > 0) rates.push_back(r.tokens_per_s);
    }
  }
  std::filesystem::remove_all(dir);
  std::sort(rates.begin(), rates.end());
  const double rate = rates.empty() ? 0.0 : rates[rates.size() / 2];
  fmt::print("{{\"impl\": \"attend\", \"shape\": \"{}\", \"precision\": \"{}\", \"threads\": {}, \"params\": {}, \"tokens_per_s\": {:.1f}, "
             "\"step_s\": {:.3f}, \"mfu\": {:.3f}, \"sgemm_gflops\": {:.0f}, \"peak_rss_mib\": {:.0f}}}\n",
             shape, precision, threads, n.total(), rate, double(B * T) / rate, rate * flops_per_token / (gflops * 1e9), gflops,
             peak_rss_mib());
}
