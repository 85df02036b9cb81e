// One attention configuration per process, so that peak resident memory means something:
//
//   build/bench/attend_attention_bench --kernel flash --T 4096 [--heads 12 --d-head 64 --threads 2]
//   build/bench/attend_attention_bench --kernel decode --T 1024     # one decode step vs recomputing
//
// Prints one JSON line: forward and backward seconds (median of --repeats after a warm-up), matmul
// GFLOP/s of the forward, and peak RSS above the inputs' baseline. bench/attention.sh runs the sweep
// beside PyTorch (bench/attention_torch.py).
#include "kernels/attention.h"

#include <attend/rng.h>
#include <attend/runtime.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  attend::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform() - 0.5f;
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string kernel = "flash";
  int64_t T = 1024, H = 12, D = 64, repeats = 3;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--kernel") kernel = value;
    else if (flag == "--T") T = std::atoll(value.c_str());
    else if (flag == "--heads") H = std::atoll(value.c_str());
    else if (flag == "--d-head") D = std::atoll(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::atoll(value.c_str());
    else {
      fmt::print(stderr, "unknown flag {}\n", flag);
      return 2;
    }
  }
  attend::set_num_threads(threads);
  using namespace attend::kernels;
  AttentionParams<float> p;
  p.B = 1, p.Tq = T, p.Tk = T, p.n_heads = H, p.n_kv_heads = H, p.d_head = D, p.causal = true;
  p.scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t n = T * H * D;
  auto q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3), dout = random_floats(n, 4);
  std::vector<float> out(n), dq(n), dk(n), dv(n);
  const double baseline = peak_rss_mib();

  std::vector<double> fwd, bwd;
  if (kernel == "decode") {
    // One new token at position T−1 attending to T cached keys, against recomputing attention over the
    // whole prefix (what decoding without a cache costs per token).
    AttentionParams<float> step = p;
    step.Tq = 1, step.q_offset = T - 1;
    std::vector<float> ws(flash_attention_workspace_size(step, threads)), lse(H), full_lse(H * T);
    std::vector<float> ws_full(flash_attention_workspace_size(p, threads));
    for (int64_t r = 0; r <= repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      for (int rep = 0; rep < 20; ++rep)
        flash_attention_forward(out.data(), lse.data(), q.data() + (T - 1) * H * D, k.data(), v.data(), step, ws.data());
      if (r > 0) fwd.push_back(seconds_since(start) / 20);
      start = std::chrono::steady_clock::now();
      flash_attention_forward(out.data(), full_lse.data(), q.data(), k.data(), v.data(), p, ws_full.data());
      if (r > 0) bwd.push_back(seconds_since(start));
    }
    fmt::print("{{\"kernel\": \"decode\", \"T\": {}, \"cached_step_s\": {:.6g}, \"recompute_s\": {:.6g}}}\n", T,
               median(fwd), median(bwd));
    return 0;
  }

  for (int64_t r = 0; r <= repeats; ++r) {  // r = 0 is the warm-up
    std::fill(dq.begin(), dq.end(), 0.0f), std::fill(dk.begin(), dk.end(), 0.0f), std::fill(dv.begin(), dv.end(), 0.0f);
    if (kernel == "flash") {
      std::vector<float> lse(H * T), ws(flash_attention_workspace_size(p, threads));
      auto start = std::chrono::steady_clock::now();
      flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p, ws.data());
      const double f = seconds_since(start);
      start = std::chrono::steady_clock::now();
      flash_attention_backward(dq.data(), dk.data(), dv.data(), static_cast<float*>(nullptr), dout.data(), out.data(),
                               lse.data(), q.data(), k.data(), v.data(), p, ws.data());
      if (r > 0) fwd.push_back(f), bwd.push_back(seconds_since(start));
    } else if (kernel == "reference") {
      std::vector<float> probs(H * T * T);
      auto start = std::chrono::steady_clock::now();
      attention_reference_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), p);
      const double f = seconds_since(start);
      start = std::chrono::steady_clock::now();
      attention_reference_backward(dq.data(), dk.data(), dv.data(), static_cast<float*>(nullptr), dout.data(),
                                   probs.data(), q.data(), k.data(), v.data(), p);
      if (r > 0) fwd.push_back(f), bwd.push_back(seconds_since(start));
    } else {
      fmt::print(stderr, "unknown kernel {} (flash, reference, decode)\n", kernel);
      return 2;
    }
  }
  // Causal matmul FLOPs of the forward: QKᵀ and PV over the lower triangle, 2·2·H·D·T²/2.
  const double flops = 2.0 * H * D * static_cast<double>(T) * static_cast<double>(T);
  fmt::print(
      "{{\"kernel\": \"{}\", \"T\": {}, \"threads\": {}, \"forward_s\": {:.4g}, \"backward_s\": {:.4g}, "
      "\"total_s\": {:.4g}, \"forward_gflops\": {:.1f}, \"extra_peak_mib\": {:.0f}}}\n",
      kernel, T, threads, median(fwd), median(bwd), median(fwd) + median(bwd), flops / median(fwd) * 1e-9,
      peak_rss_mib() - baseline);
}
