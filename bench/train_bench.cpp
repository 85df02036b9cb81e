// Training throughput: forward + backward + AdamW step of a GPT, one shape per process.
//
//   build/bench/attend_train_bench --shape S [--steps 6 --threads 2]
//   build/bench/attend_train_bench --shape gpt2 --steps 4 [--precision f32,bf16]   (one or more of f32, bf16, f16)
//
// Shapes (issue 6): S = 6 layers, d_model 384, 6 heads, vocabulary 8192, T 256, batch 8;
// gpt2 = 12 layers, d_model 768, 12 heads, vocabulary 50257, T 256, batch 4 (GPT-2 124M).
// Prints one JSON line: median tokens/s over the steps after the first (warm-up), the model FLOPs
// utilisation (6·N + 12·L·d·T FLOPs per token, N without the position table, over the best sgemm rate
// measured in the same process, before and after the steps), and peak RSS. bench/train.sh runs it beside
// PyTorch (bench/train_torch.py).
#include "kernels/convert.h"
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
#include <memory>
#include <string>
#include <vector>

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The matmul rate on the shape that dominates training (a 2048-row activation block times a d×4d weight):
// sgemm, or the bf16 matmul of mixed precision.
double gemm_gflops(bool bf16) {
  const int64_t M = 2048, N = 3072, K = 768;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  attend::kernels::float_to_bf16(ah.data(), a.data(), M * K);
  attend::kernels::float_to_bf16(bh.data(), b.data(), K * N);
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    if (bf16)
      attend::kernels::gemm_half(attend::kernels::Half::BF16, false, true, M, N, K, ah.data(), K, bh.data(), K, 0.0f,
                                 c.data(), N);
    else
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
  // Each precision trains its own copy of the model; with several, their steps alternate, so that a slow
  // spell of this shared machine falls on all of them alike and the ratios hold.
  std::vector<attend::Precision> precisions;
  std::vector<std::string> names;
  for (size_t at = 0; at <= precision.size();) {
    const size_t comma = std::min(precision.find(',', at), precision.size());
    const std::string name = precision.substr(at, comma - at);
    if (name != "f32" && name != "bf16" && name != "f16") {
      fmt::print(stderr, "--precision: expected f32, bf16 or f16 (or a comma list), got '{}'\n", name);
      return 1;
    }
    names.push_back(name);
    precisions.push_back(name == "bf16" ? attend::Precision::BF16
                         : name == "f16" ? attend::Precision::F16
                                         : attend::Precision::F32);
    at = comma + 1;
  }
  // The rates are measured before and after the steps and the better kept: a slow spell of this shared machine
  // during one measurement would otherwise put the steps above the CPU's own rate.
  double sgemm = gemm_gflops(false), bf16_gemm = gemm_gflops(true);
  const attend::ParameterCount n = attend::Model(c).count();
  const double N = double(n.total() - c.max_seq_len * c.d_model);
  const double flops_per_token = 6.0 * N + 12.0 * c.n_layers * c.d_model * T;

  attend::Rng rng(1);
  std::vector<int32_t> tokens((steps + 1) * B * T + 1);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(c.vocab_size));
  attend::LmDataset data(tokens, {}, {.batch_size = B, .seq_len = T});
  std::vector<std::unique_ptr<attend::Trainer>> trainers;
  std::vector<std::filesystem::path> dirs;
  for (size_t k = 0; k < precisions.size(); ++k) {
    attend::TrainConfig config;
    config.steps = steps;
    config.precision = precisions[k];
    config.schedule = {.kind = attend::train::ScheduleKind::Constant, .lr = 1e-4};
    dirs.push_back(std::filesystem::temp_directory_path() / fmt::format("attend_train_bench_{}_{}", getpid(), k));
    trainers.push_back(std::make_unique<attend::Trainer>(attend::Model(c), data, config, dirs.back()));
  }
  std::vector<std::vector<double>> rates(precisions.size());
  for (int64_t s = 0; s < steps; ++s)
    for (size_t k = 0; k < trainers.size(); ++k) {
      const attend::StepReport r = trainers[k]->step();
      if (s > 0) rates[k].push_back(r.tokens_per_s);
    }
  trainers.clear();
  sgemm = std::max(sgemm, gemm_gflops(false));
  bf16_gemm = std::max(bf16_gemm, gemm_gflops(true));
  for (const auto& dir : dirs) std::filesystem::remove_all(dir);
  for (size_t k = 0; k < precisions.size(); ++k) {
    std::sort(rates[k].begin(), rates[k].end());
    const double rate = rates[k].empty() ? 0.0 : rates[k][rates[k].size() / 2];
    // The share of the matmul rate measured in this run for the precision (bf16's own, sgemm's for f32 and f16,
    // which is emulated on sgemm): not "MFU", which is a share of the CPU's peak.
    const double peak = precisions[k] == attend::Precision::BF16 ? bf16_gemm : sgemm;
    // Peak memory is the process's: meaningful when one precision ran alone.
    const std::string rss = precisions.size() == 1 ? fmt::format("{:.0f}", peak_rss_mib()) : "null";
    fmt::print("{{\"impl\": \"attend\", \"shape\": \"{}\", \"precision\": \"{}\", \"threads\": {}, \"params\": {}, "
               "\"tokens_per_s\": {:.1f}, \"step_s\": {:.3f}, \"matmul_rate_share\": {:.3f}, \"sgemm_gflops\": {:.0f}, "
               "\"bf16_gemm_gflops\": {:.0f}, \"peak_rss_mib\": {}}}\n",
               shape, names[k], threads, n.total(), rate, double(B * T) / rate, rate * flops_per_token / (peak * 1e9),
               sgemm, bf16_gemm, rss);
  }
}
