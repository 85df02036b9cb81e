// The KV cache: decoding one token at a time through the cache reproduces the full causal forward at
// every position, for fp32, fp16 and int8 storage; its memory follows 2·L·B·Hkv·d_head·T·bytes.
#include "nn/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/runtime.h>

#include <cmath>

namespace attend::nn {
namespace {

using kernels::AttentionParams;
using testing::cast;
using testing::random_vector;

// Largest |incremental − full| over every position, batch item, head and channel. as_stored: the decode
// kernel reads the cache in place (KVCache::attend); otherwise the tiled kernel reads fp32 copies.
double incremental_decoding_error(CacheType storage, bool as_stored) {
  const int64_t B = 2, T = 50, H = 4, Hkv = 2, D = 16, max_T = 64, layer = 1;
  auto q = cast<float>(random_vector(B * T * H * D, 1, -2, 2));
  auto k = cast<float>(random_vector(B * T * Hkv * D, 2, -2, 2));
  auto v = cast<float>(random_vector(B * T * Hkv * D, 3));

  AttentionParams<float> full;
  full.B = B, full.Tq = T, full.Tk = T, full.n_heads = H, full.n_kv_heads = Hkv, full.d_head = D;
  full.scale = 1.0 / std::sqrt(double(D)), full.causal = true;
  std::vector<float> out_full(q.size()), lse(B * H * T), ws(kernels::flash_attention_workspace_size(full, num_threads()));
  kernels::flash_attention_forward(out_full.data(), lse.data(), q.data(), k.data(), v.data(), full, ws.data());

  KVCache cache({.n_layers = 2, .batch = B, .max_T = max_T, .n_kv_heads = Hkv, .d_head = D, .storage = storage});
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> k_t(B * Hkv * D), v_t(B * Hkv * D), q_t(B * H * D), out_t(B * H * D), lse_t(B * H);
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(&k[(b * T + t) * Hkv * D], Hkv * D, &k_t[b * Hkv * D]);
      std::copy_n(&v[(b * T + t) * Hkv * D], Hkv * D, &v_t[b * Hkv * D]);
      std::copy_n(&q[(b * T + t) * H * D], H * D, &q_t[b * H * D]);
    }
    cache.write(layer, t, k_t.data(), v_t.data(), 1);
    AttentionParams<float> step = full;  // one query at position t over the t + 1 cached keys
    step.Tq = 1, step.Tk = t + 1, step.q_offset = t;
    if (as_stored) {
      cache.attend(layer, out_t.data(), q_t.data(), step);
    } else {
      step.kv_capacity = max_T;
      std::vector<float> ws_t(kernels::flash_attention_workspace_size(step, num_threads()));
      kernels::flash_attention_forward(out_t.data(), lse_t.data(), q_t.data(), cache.keys(layer, t + 1),
                                       cache.values(layer, t + 1), step, ws_t.data());
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < H * D; ++e)
        worst = std::max(worst, double(std::abs(out_t[b * H * D + e] - out_full[(b * T + t) * H * D + e])));
  }
  return worst;
}

TEST(KVCache, IncrementalDecodingEqualsFullForward) {
  // fp32: the same numbers in a different tiling, 1e-5. fp16 keeps 11 significant bits (relative error
  // ≤ 2⁻¹¹ ≈ 4.9e-4 per element) and int8 rounds each element by up to max|row|/254 (≈ 0.8% of a row
  // of values in [−2, 2]); an output is a convex combination of values, so its error is of that order.
  // Measured: 2.4e-7, 3.5e-4 and 6.4e-3.
  for (bool as_stored : {false, true}) {
    SCOPED_TRACE(as_stored ? "decode kernel, cache read as stored" : "tiled kernel over fp32 copies");
    EXPECT_LT(incremental_decoding_error(CacheType::F32, as_stored), 1e-5);
    EXPECT_LT(incremental_decoding_error(CacheType::F16, as_stored), 1e-3);
    EXPECT_LT(incremental_decoding_error(CacheType::Int8, as_stored), 1.5e-2);
  }
}

// The decode kernel against the reference kernel on the same (converted) keys and values, with every
// mask and bias it must honour: grouped-query heads (3 per key/value head), d_head 20 (past the 16-lane
// blocks), ALiBi, T5 buckets, key lengths (one sequence has none: zeros) and an explicit mask, causal
// and not. Only the order of the sums differs, so agreement is to float rounding.
TEST(KVCache, DecodeKernelEqualsTheReferenceWithMasksAndBiases) {
  // 77 keys are three of the kernel's 32-key blocks, the last one partial, so the blocks' merge is exercised;
  // sequence 1's mask hides the whole middle block and variant 1's causal limit leaves the last one empty.
  // Head sizes 20 (the kernel's general loops), 64 and 128 (compiled for those sizes).
  for (const int64_t D : {20, 64, 128}) {
    SCOPED_TRACE("d_head " + std::to_string(D));
    const int64_t B = 3, H = 6, Hkv = 2, max_T = 90, Tk = 77;
    auto k = cast<float>(random_vector(B * Tk * Hkv * D, 4, -2, 2));
    auto v = cast<float>(random_vector(B * Tk * Hkv * D, 5));
    auto q = cast<float>(random_vector(B * H * D, 6, -2, 2));
    const auto t5_table = cast<float>(random_vector(32 * H, 7));
    const std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625};
    const std::vector<int32_t> key_lengths = {77, 40, 0};
    std::vector<uint8_t> mask(B * Tk, 1);
    for (int64_t j = 0; j < Tk; ++j) mask[Tk + j] = j % 3 != 0 && (j < 32 || j >= 64);  // sequence 1's hidden keys
    for (CacheType storage : {CacheType::F32, CacheType::F16, CacheType::Int8}) {
      KVCache cache({.n_layers = 1, .batch = B, .max_T = max_T, .n_kv_heads = Hkv, .d_head = D, .storage = storage});
      for (int64_t t = 0; t < Tk; ++t) {  // position t of every sequence
        std::vector<float> kt(B * Hkv * D), vt(B * Hkv * D);
        for (int64_t b = 0; b < B; ++b) {
          std::copy_n(&k[(b * Tk + t) * Hkv * D], Hkv * D, &kt[b * Hkv * D]);
          std::copy_n(&v[(b * Tk + t) * Hkv * D], Hkv * D, &vt[b * Hkv * D]);
        }
        cache.write(0, t, kt.data(), vt.data(), 1);
      }
      for (int variant = 0; variant < 4; ++variant) {
        AttentionParams<float> p;
        p.B = B, p.Tq = 1, p.Tk = Tk, p.n_heads = H, p.n_kv_heads = Hkv, p.d_head = D, p.scale = 0.3;
        p.causal = variant != 3, p.q_offset = variant == 1 ? 50 : Tk - 1;  // variant 1: keys past 50 are in the future
        if (variant == 0) p.alibi_slopes = slopes.data(), p.key_lengths = key_lengths.data();
        if (variant == 1) p.t5_table = t5_table.data(), p.mask = mask.data();
        if (variant == 2) p.t5_table = t5_table.data(), p.t5_bidirectional = false, p.key_lengths = key_lengths.data();
        std::vector<float> got(B * H * D), want(B * H * D), probs(B * H * Tk);
        cache.attend(0, got.data(), q.data(), p);
        // The blocks are fixed, not one per thread: one thread gives the same bits.
        std::vector<float> one_thread(B * H * D);
        const int threads = attend::num_threads();
        attend::set_num_threads(1);
        cache.attend(0, one_thread.data(), q.data(), p);
        attend::set_num_threads(threads);
        EXPECT_EQ(one_thread, got) << cache_type_name(storage) << " cache, variant " << variant;
        p.kv_capacity = max_T;
        kernels::attention_reference_forward(want.data(), probs.data(), q.data(), cache.keys(0, Tk), cache.values(0, Tk), p);
        testing::expect_all_close(got, want, 1e-5,
                                  std::string(cache_type_name(storage)) + " cache, variant " + std::to_string(variant));
        if (variant == 0 || variant == 2) {
          for (int64_t e = 2 * H * D; e < 3 * H * D; ++e) EXPECT_EQ(got[e], 0.0f) << "sequence 2 has no keys";
        }
      }
    }
  }
  KVCache cache({.n_layers = 1, .batch = 1, .max_T = 4, .n_kv_heads = 1, .d_head = 2});
  AttentionParams<float> two_queries;
  two_queries.Tq = 2, two_queries.Tk = 2, two_queries.d_head = 2;
  std::vector<float> q2(4), out2(4);
  testing::expect_error_mentions<Error>([&] { cache.attend(0, out2.data(), q2.data(), two_queries); },
                                        {"one query per sequence", "got 2 queries"});
}

TEST(KVCache, MemoryFollowsTheFormula) {
  // GPT-2 small at 1024 tokens: 2 · 12 layers · 12 heads · 64 · 1024 · 4 bytes = 72 MiB in fp32.
  KVCacheConfig gpt2{.n_layers = 12, .batch = 1, .max_T = 1024, .n_kv_heads = 12, .d_head = 64};
  EXPECT_EQ(KVCache::memory_bytes(gpt2), 2LL * 12 * 12 * 64 * 1024 * 4);
  gpt2.storage = CacheType::F16;
  EXPECT_EQ(KVCache::memory_bytes(gpt2), 2LL * 12 * 12 * 64 * 1024 * 2);
  gpt2.storage = CacheType::Int8;  // one byte per value plus a 4-byte scale per 64-value row
  EXPECT_EQ(KVCache::memory_bytes(gpt2), 2LL * 12 * 12 * 1024 * (64 + 4));
  KVCache small({.n_layers = 2, .batch = 1, .max_T = 8, .n_kv_heads = 1, .d_head = 4});
  EXPECT_EQ(small.memory_bytes(), 2 * 2 * 8 * 4 * 4);
}

TEST(KVCache, WritingPastMaxTIsAClearError) {
  KVCache cache({.n_layers = 1, .batch = 1, .max_T = 4, .n_kv_heads = 1, .d_head = 2});
  std::vector<float> kv(2 * 2, 1.0f);
  cache.write(0, 2, kv.data(), kv.data(), 2);  // positions 2 and 3: fits
  try {
    cache.write(0, 3, kv.data(), kv.data(), 2);
    FAIL() << "expected attend::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 5)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 positions"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache.keys(1, 1), Error);
}

TEST(Convert, HalfAndInt8RoundTrips) {
  std::vector<float> x = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f, 3.14159f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  kernels::float_to_half(h.data(), x.data(), 6);
  kernels::half_to_float(back.data(), h.data(), 6);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], std::abs(x[i]) * 4.9e-4) << i;
  EXPECT_EQ(h[1], 0x3C00);  // 1.0 in IEEE half
  std::vector<float> row = {0.5f, -1.27f, 0.01f, 1.0f};
  std::vector<int8_t> q(4);
  float scale = 0;
  kernels::quantize_rows_int8(q.data(), &scale, row.data(), 1, 4);
  EXPECT_FLOAT_EQ(scale, 0.01f);  // max |x| = 1.27 → 1.27/127
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[0], 50);
  kernels::dequantize_rows_int8(back.data(), q.data(), &scale, 1, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back[i], row[i], scale / 2 + 1e-7);
}

}  // namespace
}  // namespace attend::nn
