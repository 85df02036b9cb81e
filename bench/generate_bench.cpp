// Inference speed of a GPT-2-124M-shaped model (or, with --shape llama-1b, a Llama-3.2-1B-shaped one: 16 layers of
// 2048 with 32 query and 8 key/value heads, SwiGLU of 8192, a tied vocabulary of 128,256), random weights, batch 1:
//
//   build/bench/attend_generate_bench [--shape gpt2|llama-1b --prompt 512 --new 128 --threads 2 --weights f32|bf16
//                                      --kv-cache f32|f16|int8 --passes 8 --isa auto|generic|avx2|avx512|avx512vnni]
//   build/bench/attend_generate_bench --model FILE.gguf|DIR [the same options but --shape]
//
// --model runs a model as it loads (a GGUF file's quantized matrices as their blocks), e.g. the very file
// llama-bench runs (bench/beside_llama_quant.sh); with --weights bf16 its matrices are loaded into bf16 as
// attend generate --weights bf16 loads them (load_model; bench/beside_llama_model.sh).
//
//   build/bench/attend_generate_bench --model FILE.gguf --streams 8 --prompt 32 --new 128 --kv-cache f16
//
// --streams S decodes as attend serve does: S sessions on one pool of KV blocks, each after its own prompt, all
// stepped together one token each (step_row_invariant); prints the aggregate generation rate and the step times.
//
// Prints one JSON line: prompt processing tokens/s (the prompt in one call: time to first token) and
// generation tokens/s (the new tokens over their total time), each the median over the passes as llama-bench
// reports them; per-token latency percentiles over every pass; the memory read bandwidth measured in the same
// process during each pass (a 256 MiB sum on every thread after every 8th token), and the bound it implies:
// weight bytes per token / bandwidth, with each pass's rate taken over its own bound. The KV cache's bytes
// per token (the mean over the generated tokens) are reported beside it, not counted in the bound.
// bench/generate.sh runs it beside PyTorch (bench/generate_torch.py).
//
//   build/bench/attend_generate_bench --pages-ab [the options above; fp32 weights]
//
// --pages-ab holds the model twice in one process, its parameter buffer in 2 MiB pages (as Attend lays it out) and
// a copy in 4 KiB pages, and alternates the passes between the two: what huge pages give generation, without
// the drift between processes. The probe reads huge pages in every mode (the most the machine gives).
//
//   build/bench/attend_generate_bench --weights-ab [the options above but --weights and --model]
//
// --weights-ab holds the random model twice, fp32 and bf16 (the same values rounded), and alternates the passes
// between them: bf16's gain over fp32 within each pair, free of the drift between processes (issue 18's 1.8x).
#include "nn/kv_cache.h"

#include <attend/error.h>
#include <attend/generate.h>
#include <attend/model.h>
#include <attend/model_dir.h>
#include <attend/rng.h>
#include <attend/runtime.h>
#include <attend/session.h>

#include <fmt/format.h>
#include <omp.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

using Probe = std::vector<float, attend::WeightAllocator<float>>;  // in huge pages, as the weights

// Seconds to sum `data` on every thread: the read-bandwidth probe.
double read_seconds(const Probe& data) {
  const int64_t n = static_cast<int64_t>(data.size());
  const auto start = std::chrono::steady_clock::now();
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t block = 0; block < n / 4096; ++block) {
    float lanes[16] = {};
    for (int64_t i = block * 4096; i < (block + 1) * 4096; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += data[i + l];
    for (float l : lanes) total += l;
  }
  const double s = seconds_since(start);
  if (total != double(n)) fmt::print(stderr, "bandwidth: wrong sum\n");
  return s;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t prompt_len = 512, new_tokens = 128;
  int threads = 2, passes = 8, streams = 0;
  std::string weights = "f32", kv_cache = "f32", shape = "gpt2", isa = "auto", model_path;
  bool weights_given = false, shape_given = false, pages_ab = false, weights_ab = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--pages-ab") {
      pages_ab = true, --i;  // a flag without a value
      continue;
    }
    if (flag == "--weights-ab") {
      weights_ab = true, --i;
      continue;
    }
    if (flag == "--prompt") prompt_len = std::atoll(value.c_str());
    else if (flag == "--new") new_tokens = std::atoll(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--weights") weights = value, weights_given = true;
    else if (flag == "--passes") passes = std::atoi(value.c_str());
    else if (flag == "--kv-cache") kv_cache = value;
    else if (flag == "--shape") shape = value, shape_given = true;
    else if (flag == "--isa") isa = value;
    else if (flag == "--model") model_path = value;
    else if (flag == "--streams") streams = std::atoi(value.c_str());
    else {
      std::fprintf(flag == "--help" ? stdout : stderr,
                   "usage: attend_generate_bench [--shape gpt2|llama-1b | --model FILE.gguf|DIR] [--prompt 512] [--new 128] [--threads 2]\n"
                   "       [--weights f32|bf16] [--kv-cache f32|f16|int8] [--passes 8] [--isa auto|generic|avx2|avx512|avx512vnni]\n"
                   "       [--streams S] [--pages-ab | --weights-ab]\n"
                   "GPT-2-124M (or Llama-3.2-1B) shape, random weights: prompt and generation rates, per-token latency, the\n"
                   "share of the memory-bandwidth bound; one JSON line. --streams S: S sessions stepped together as a\n"
                   "server's, the aggregate rate and the step times. --pages-ab: fp32 weights in 2 MiB pages and in 4 KiB\n"
                   "pages, alternating pass by pass. --weights-ab: the random model in fp32 and in bf16, alternating.\n");
      return flag == "--help" ? 0 : 2;
    }
  }
  if (prompt_len < 1 || new_tokens < 1 || threads < 1 || passes < 1 || streams < 0 || (weights != "f32" && weights != "bf16") ||
      (shape != "gpt2" && shape != "llama-1b")) {
    std::fprintf(stderr, "attend_generate_bench: --prompt, --new, --threads and --passes must be positive, --streams not "
                         "negative, --weights f32 or bf16, --shape gpt2 or llama-1b\n");
    return 2;
  }
  if ((weights_ab || pages_ab) && streams > 0) {
    std::fprintf(stderr, "attend_generate_bench: --pages-ab and --weights-ab time one sequence; they take no --streams\n");
    return 2;
  }
  if (weights_ab && (weights_given || !model_path.empty() || pages_ab)) {
    std::fprintf(stderr, "attend_generate_bench: --weights-ab compares the random shape's fp32 and bf16 weights; it takes "
                         "neither --weights, --model nor --pages-ab\n");
    return 2;
  }
  if (!model_path.empty() && shape_given) {
    std::fprintf(stderr, "attend_generate_bench: --model runs the model's own shape; --shape is for the random-weight "
                         "shapes\n");
    return 2;
  }
  attend::CacheType cache_type;
  try {
    cache_type = attend::parse_cache_type(kv_cache);
  } catch (const attend::Error& e) {
    std::fprintf(stderr, "attend_generate_bench: --kv-cache: %s\n", e.what());
    return 2;
  }
  attend::set_num_threads(threads);
  try {
    attend::set_kernel_isa(isa);  // a narrower set of Attend's kernels (oneDNN's: ONEDNN_MAX_CPU_ISA)
  } catch (const attend::Error& e) {
    std::fprintf(stderr, "attend_generate_bench: --isa: %s\n", e.what());
    return 2;
  }
  const Probe probe(int64_t{1} << 26, 1.0f);  // 256 MiB
  constexpr int64_t kProbeEvery = 8;                        // generated tokens between probes
  const bool bf16 = weights == "bf16";
  auto built = [&] {
    attend::ModelConfig c;
    if (shape == "gpt2") {
      c.vocab_size = 50257, c.d_model = 768, c.n_layers = 12, c.n_heads = 12, c.max_seq_len = 1024;
      c.activation = attend::FfnKind::GELUTanh;
    } else {
      c.vocab_size = 128256, c.d_model = 2048, c.n_layers = 16, c.n_heads = 32, c.n_kv_heads = 8, c.d_ff = 8192;
      c.max_seq_len = 2048, c.activation = attend::FfnKind::SwiGLU, c.norm = attend::NormKind::RMSNorm;
      c.position = attend::PositionKind::RoPE, c.rope_base = 500000.0, c.bias = false;
    }
    attend::Model m(c);
    if (bf16) m.set_storage(attend::WeightType::BF16);
    return m;
  };
  // --model with --weights bf16: the matrices loaded into bf16, as attend generate --weights bf16 loads them.
  const attend::WeightType loaded_as = bf16 ? attend::WeightType::BF16 : attend::WeightType::F32;
  attend::Model model = model_path.empty() ? built() : attend::load_model(model_path, loaded_as);
  const attend::ModelConfig c = model.config();
  if (!model_path.empty()) shape = model_path, weights = weights_given ? weights : "as loaded";
  // Bytes each generated token reads: every matrix once as it is stored (the tied embedding as the LM head), one
  // row of a lookup table (the position table, an untied token table).
  auto bytes_per_token = [&c](const attend::Model& m) {
    double bytes = 0.0;
    for (const attend::Parameter* p : m.parameters()) {
      const bool lookup = p->role == attend::Role::PositionTable ||
                          (p->role == attend::Role::TokenEmbedding && !c.tie_embeddings);
      if (lookup) bytes += 4.0 * double(p->value.size(-1));
      else if (!p->quantized.empty()) for (const attend::QuantizedRows& s : p->quantized) bytes += double(s.bytes);
      else if (!p->packed.empty()) bytes += 2.0 * double(p->numel());
      else bytes += 4.0 * double(p->numel());
    }
    return bytes;
  };
  const double weight_bytes = bytes_per_token(model);
  // Keys and values of every layer at the mean position of the generated tokens.
  const double kv_bytes_per_position = double(attend::nn::KVCache::memory_bytes(
      {.n_layers = c.n_layers, .batch = 1, .max_T = 1, .n_kv_heads = c.kv_heads(), .d_head = c.d_head(), .storage = cache_type}));
  const double kv_bytes = kv_bytes_per_position * (double(prompt_len) + double(new_tokens + 1) / 2.0);

  attend::Rng rng(3);
  std::vector<int32_t> prompt(prompt_len);
  for (auto& t : prompt) t = static_cast<int32_t>(rng.below(c.vocab_size));
  if (streams > 0) {
    // A server's decoding: `streams` sessions on one pool of fp16 KV blocks (as attend serve's), each with its own
    // prompt, stepped together one token each (step_row_invariant, the server's step) after their prompts ran.
    std::vector<double> step_s, rates;
    for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms up
      const int64_t per_session = (prompt_len + new_tokens + 31) / 32 + 1;
      attend::KVBlockPool pool(model, streams * per_session, cache_type);
      std::vector<attend::Session> sessions;
      std::vector<attend::Session*> pointers;
      std::vector<std::vector<int32_t>> next;
      for (int i = 0; i < streams; ++i) sessions.emplace_back(model, attend::SessionOptions{.max_T = prompt_len + new_tokens, .pool = &pool});
      for (attend::Session& s : sessions) {
        std::vector<int32_t> own(prompt_len);
        for (auto& t : own) t = static_cast<int32_t>(rng.below(c.vocab_size));
        s.step(own);
        pointers.push_back(&s);
      }
      double total = 0.0;
      for (int64_t t = 0; t < new_tokens; ++t) {
        next.clear();
        for (attend::Session& s : sessions)
          next.push_back({attend::sample_token(s.logits().data(), c.vocab_size, {.greedy = true}, 0.0)});
        const auto start = std::chrono::steady_clock::now();
        attend::step_row_invariant(pointers, next);
        const double s = seconds_since(start);
        total += s;
        if (pass > 0) step_s.push_back(s);
      }
      if (pass > 0) rates.push_back(double(streams) * double(new_tokens) / total);
    }
    fmt::print("{{\"impl\": \"attend\", \"shape\": \"{}\", \"weights\": \"{}\", \"kv_cache\": \"{}\", \"threads\": {}, "
               "\"streams\": {}, \"prompt\": {}, \"new\": {}, \"generate_tokens_per_s\": {:.1f}, \"step_ms_p50\": {:.2f}, "
               "\"step_ms_p90\": {:.2f}}}\n",
               shape, weights, kv_cache, threads, streams, prompt_len, new_tokens, percentile(rates, 0.5),
               1e3 * percentile(step_s, 0.5), 1e3 * percentile(step_s, 0.9));
    return 0;
  }
  // The machine is shared and its bandwidth moves by tens of percent within seconds, so the bound is
  // measured during the pass it bounds: the probe runs after every 8th generated token (outside the tokens'
  // timing), and a pass's bandwidth is its probes' bytes over their time. A pass's share of the bound is
  // its rate over that bound; the figures reported are the medians over the passes.
  struct Passes {
    std::vector<double> prompt_s, generate_rate, token_s, bandwidth, share;
  };
  auto run_pass = [&](const attend::Model& m, Passes* out) {  // out: nullptr for the warm-up
    attend::Session session(m, {.max_T = prompt_len + new_tokens, .cache = cache_type});
    auto start = std::chrono::steady_clock::now();
    std::span<const float> logits = session.step(prompt);
    if (out) out->prompt_s.push_back(seconds_since(start));
    double total = 0.0, probe_s = 0.0;
    int probes = 0;
    for (int64_t t = 0; t < new_tokens; ++t) {
      const int32_t next = attend::sample_token(logits.data(), c.vocab_size, {.greedy = true}, 0.0);
      start = std::chrono::steady_clock::now();
      const int32_t one[] = {next};
      logits = session.step(one);
      const double s = seconds_since(start);
      total += s;
      if (out) out->token_s.push_back(s);
      if (t % kProbeEvery == kProbeEvery - 1 || (t == new_tokens - 1 && probes == 0)) {
        probe_s += read_seconds(probe);
        ++probes;
      }
    }
    if (!out) return;
    const double pass_bandwidth = double(probes) * double(probe.size()) * sizeof(float) / probe_s / 1e9;
    out->generate_rate.push_back(double(new_tokens) / total);
    out->bandwidth.push_back(pass_bandwidth);
    out->share.push_back(out->generate_rate.back() / (pass_bandwidth * 1e9 / bytes_per_token(m)));
  };
  // Two models' passes alternating, each order as often, after a warm-up of each: one JSON line with each one's
  // median rate and share of the bound, and a's rate over b's pair by pair.
  auto alternate = [&](const attend::Model& a, const attend::Model& b, const char* a_name, const char* b_name) {
    Passes ra, rb;
    run_pass(a, nullptr);
    run_pass(b, nullptr);
    std::string pairs;
    for (int pass = 0; pass < passes; ++pass) {
      const bool a_first = pass % 2 == 0;
      run_pass(a_first ? a : b, a_first ? &ra : &rb);
      run_pass(a_first ? b : a, a_first ? &rb : &ra);
      pairs += fmt::format("{}{:.3f}", pass ? ", " : "", ra.generate_rate.back() / rb.generate_rate.back());
    }
    fmt::print("{{\"impl\": \"attend\", \"shape\": \"{}\", \"kv_cache\": \"{}\", \"threads\": {}, \"prompt\": {}, \"new\": {}, "
               "\"a\": \"{}\", \"b\": \"{}\", \"a_generate_tokens_per_s\": {:.1f}, \"b_generate_tokens_per_s\": {:.1f}, "
               "\"a_over_b_by_pair\": [{}], \"a_share_of_bound\": {:.2f}, \"b_share_of_bound\": {:.2f}, \"read_gbs\": {:.1f}}}\n",
               shape, kv_cache, threads, prompt_len, new_tokens, a_name, b_name, percentile(ra.generate_rate, 0.5),
               percentile(rb.generate_rate, 0.5), pairs, percentile(ra.share, 0.5), percentile(rb.share, 0.5),
               percentile(ra.bandwidth, 0.5));
  };
  if (weights_ab) {
    attend::Model half = built();
    half.set_storage(attend::WeightType::BF16);
    alternate(half, model, "bf16", "f32");
    return 0;
  }
  if (pages_ab) {
    // The same model again, its parameter buffer copied into 4 KiB pages (advised against huge ones).
    const bool fp32 = std::all_of(model.parameters().begin(), model.parameters().end(), [](const attend::Parameter* p) {
      return p->packed.empty() && p->quantized.empty();
    });
    if (!fp32) {
      std::fprintf(stderr, "attend_generate_bench: --pages-ab compares the fp32 parameter buffer's pages; this model's "
                           "matrices are packed or quantized\n");
      return 2;
    }
    attend::Model small = model_path.empty() ? built() : attend::load_model(model_path);
    const std::span<const float> values = model.parameter_buffer();
    const size_t bytes = (values.size_bytes() + 4095) / 4096 * 4096;
    void* memory = std::aligned_alloc(4096, bytes);
    if (memory == nullptr) return 1;
    (void)madvise(memory, bytes, MADV_NOHUGEPAGE);
    std::memcpy(memory, values.data(), values.size_bytes());
    small.adopt_parameter_buffer(std::span<float>(static_cast<float*>(memory), values.size()),
                                 std::shared_ptr<void>(memory, std::free));
    alternate(model, small, "2 MiB pages", "4 KiB pages");
    return 0;
  }
  Passes r;
  for (int pass = 0; pass <= passes; ++pass) run_pass(model, pass > 0 ? &r : nullptr);  // pass 0 warms up
  const double ttft = percentile(r.prompt_s, 0.5), rate = percentile(r.generate_rate, 0.5);
  const double read_gbs = percentile(r.bandwidth, 0.5);
  fmt::print("{{\"impl\": \"attend\", \"shape\": \"{}\", \"weights\": \"{}\", \"kv_cache\": \"{}\", \"threads\": {}, \"prompt\": {}, \"new\": {}, \"prompt_tokens_per_s\": {:.1f}, "
             "\"ttft_ms\": {:.1f}, \"generate_tokens_per_s\": {:.1f}, \"token_ms_p50\": {:.2f}, \"token_ms_p90\": {:.2f}, "
             "\"token_ms_p99\": {:.2f}, \"read_gbs\": {:.1f}, \"weight_mb_per_token\": {:.0f}, \"kv_mb_per_token\": {:.0f}, \"bound_tokens_per_s\": {:.1f}, "
             "\"share_of_bound\": {:.2f}}}\n",
             shape, weights, kv_cache, threads, prompt_len, new_tokens, double(prompt_len) / ttft, 1e3 * ttft, rate,
             1e3 * percentile(r.token_s, 0.5), 1e3 * percentile(r.token_s, 0.9), 1e3 * percentile(r.token_s, 0.99), read_gbs,
             weight_bytes / 1e6, kv_bytes / 1e6, read_gbs * 1e9 / weight_bytes, percentile(r.share, 0.5));
}
