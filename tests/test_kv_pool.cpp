// Paged KV caches (nn/kv_pool.h): a pool's blocks handed out and taken back, its prefix cache, sessions on a pool
// equal to sessions with their own caches bit for bit, copies sharing blocks, prefixes reused with the numbers a
// computation gives, and the row-invariant step that a server's determinism rests on.
#include "nn/kv_pool.h"
#include "testing.h"

#include <attend/error.h>
#include <attend/session.h>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

namespace attend {
namespace {

using testing::expect_error_mentions;

std::vector<float> copy(std::span<const float> x) { return {x.begin(), x.end()}; }
bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ModelConfig small_model(bool llama) {
  ModelConfig c;
  c.architecture = Architecture::Decoder, c.vocab_size = 97, c.d_model = 64, c.n_layers = 2, c.n_heads = 4;
  c.max_seq_len = 256;
  if (llama) {
    c.n_kv_heads = 2, c.activation = FfnKind::SwiGLU, c.position = PositionKind::RoPE, c.norm = NormKind::RMSNorm;
    c.bias = false, c.tie_embeddings = false;
  }
  return c;
}

std::vector<int32_t> tokens(int64_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 31 + i * 17 + i * i) % 97);
  return t;
}

TEST(KVPool, HandsOutBlocksAllOrNothingAndTakesThemBack) {
  nn::KVPool pool({.n_layers = 2, .n_kv_heads = 2, .d_head = 8, .storage = CacheType::F16, .blocks = 5});
  EXPECT_EQ(nn::KVPool::block_bytes(pool.config()), 2 * 2 * 32 * 2 * 8 * 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(pool.available(), 2);
  EXPECT_FALSE(pool.allocate(3, b));  // all or nothing
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.available(), 2);
  pool.retain(a[0]);
  pool.release(a[0]);
  EXPECT_EQ(pool.in_use(), 3);
  for (int32_t x : a) pool.release(x);
  EXPECT_EQ(pool.available(), 5);
  EXPECT_EQ(pool.in_use(), 0);
  expect_error_mentions<Error>([&] { pool.release(a[0]); }, {"nobody holds"});
  expect_error_mentions<Error>([] { nn::KVPool({.blocks = 0}); }, {"blocks=0"});
}

TEST(KVPool, ThePrefixCacheMatchesWholeBlocksInOrderAndEvictsTheOldestIdleFirst) {
  nn::KVPool pool({.n_layers = 1, .n_kv_heads = 1, .d_head = 4, .blocks = 4});
  const std::vector<int32_t> t = tokens(100, 1);
  std::vector<int32_t> held;
  ASSERT_TRUE(pool.allocate(3, held));
  pool.publish(t, held);  // blocks of positions [0, 96)
  EXPECT_EQ(pool.cached(), 3);
  std::vector<int32_t> got;
  EXPECT_EQ(pool.match(t, got), 3);
  EXPECT_EQ(got, held);
  for (int32_t b : got) pool.release(b);
  // Another start shares nothing; one that agrees for 40 tokens shares the first block only.
  std::vector<int32_t> other = t;
  other[0] += 1;
  got.clear();
  EXPECT_EQ(pool.match(other, got), 0);
  other = t;
  other[40] += 1;
  EXPECT_EQ(pool.match(other, got), 1);
  pool.release(got[0]);
  // Nobody holds them now: they stay cached, and are taken last, least recently idle first. A sequence gives
  // its blocks back last first, so that a chain loses its tail before its head (without which the rest is
  // unreachable).
  for (auto b = held.rbegin(); b != held.rend(); ++b) pool.release(*b);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_EQ(pool.cached(), 3);
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.allocate(2, fresh));  // the free block, then the chain's last block
  EXPECT_EQ(pool.cached(), 2);
  got.clear();
  EXPECT_EQ(pool.match(t, got), 2);
  for (int32_t b : got) pool.release(b);
  for (int32_t b : fresh) pool.release(b);
}

// One session on a pool and one with its own cache, the same tokens: equal logits bit for bit over prompts that
// span several blocks and a decode that crosses block boundaries, for every cache type.
TEST(PagedSessions, EqualSessionsWithTheirOwnCachesBitForBit) {
  for (const bool llama : {false, true}) {
    Model model(small_model(llama));
    model.initialize(3);
    for (const CacheType type : {CacheType::F32, CacheType::F16, CacheType::Int8}) {
      const std::string what = std::string(llama ? "llama" : "gpt") + ", " + cache_type_name(type);
      KVBlockPool pool(model, 16, type);
      Session own(model, {.cache = type}), paged(model, {.pool = &pool});
      const std::vector<int32_t> prompt = tokens(70, 2);
      ASSERT_TRUE(same_bits(own.step(prompt), paged.step(prompt))) << what << ": the prompt";
      EXPECT_EQ(pool.in_use(), 3) << what;  // 70 positions: three blocks of 32
      for (int i = 0; i < 30; ++i) {
        const int32_t next[] = {static_cast<int32_t>((i * 7 + 3) % 97)};
        ASSERT_TRUE(same_bits(own.step(next), paged.step(next))) << what << ": token " << i;
      }
      const std::vector<int32_t> more = tokens(9, 5);  // a short prompt-like step after decoding
      ASSERT_TRUE(same_bits(own.step(more), paged.step(more))) << what;
      EXPECT_EQ(pool.in_use(), 4) << what;  // 109 positions
    }
  }
}

TEST(PagedSessions, CopiesShareFullBlocksAndContinueApart) {
  Model model(small_model(true));
  model.initialize(4);
  KVBlockPool pool(model, 12);
  Session a(model, {.pool = &pool});
  a.step(tokens(50, 1));  // two blocks, the second partly written
  EXPECT_EQ(pool.in_use(), 2);
  Session b = a;  // shares block 0, copies block 1
  EXPECT_EQ(pool.in_use(), 3);
  const int32_t x[] = {5}, y[] = {6};
  const std::vector<float> bx = copy(b.step(x));
  const std::vector<float> ay = copy(a.step(y));
  Session alone(model);
  alone.step(tokens(50, 1));
  Session alone2 = alone;
  EXPECT_TRUE(same_bits(alone.step(y), ay));
  EXPECT_TRUE(same_bits(alone2.step(x), bx));
  b = Session(model, {.pool = &pool});  // b's blocks go back
  EXPECT_EQ(pool.in_use(), 2);
}

TEST(PagedSessions, AStepThePoolCannotHoldIsRefusedAndChangesNothing) {
  Model model(small_model(false));
  model.initialize(5);
  KVBlockPool pool(model, 3);
  Session a(model, {.pool = &pool}), b(model, {.pool = &pool});
  a.step(tokens(40, 1));  // two blocks
  const int64_t before = pool.available();
  expect_error_mentions<Error>([&] { step({&a, &b}, {{1}, tokens(40, 2)}); }, {"session 1", "KV blocks", "pool"});
  EXPECT_EQ(pool.available(), before);
  EXPECT_EQ(a.position(), 40);
  EXPECT_EQ(b.position(), 0);
  expect_error_mentions<Error>([&] { step_row_invariant({&a, &b}, {{1}, tokens(40, 2)}); }, {"KV blocks", "pool"});
  EXPECT_EQ(a.position(), 40);
  step_row_invariant({}, {});  // no sessions: nothing to do (it read the first session's model)
  EXPECT_EQ(pool.available(), before);
}

// A prompt run in chunks of 64 positions, each its own step, publishes its whole chunks; a second session with the
// same start reuses them and runs only the rest, in the same chunks: its logits equal the first's bit for bit,
// and the reused blocks are the same blocks.
TEST(PagedSessions, AReusedPrefixGivesTheNumbersOfComputingIt) {
  for (const bool llama : {false, true}) {
    Model model(small_model(llama));
    model.initialize(6);
    KVBlockPool pool(model, 32, CacheType::F16);
    const int64_t chunk = 64;
    auto run_chunks = [&](Session& s, const std::vector<int32_t>& prompt) {
      std::span<const float> logits;
      for (int64_t p = s.position(); p < static_cast<int64_t>(prompt.size()); p = s.position()) {
        const int64_t end = std::min<int64_t>(prompt.size(), (p / chunk + 1) * chunk);
        step_row_invariant({&s}, {std::vector<int32_t>(prompt.begin() + p, prompt.begin() + end)});
        logits = s.logits();
        s.share_prefix(s.position() / chunk * chunk);
      }
      return copy(logits);
    };
    std::vector<int32_t> first = tokens(150, 3), second = first;
    second.resize(140);
    for (int i = 130; i < 140; ++i) second[i] = (second[i] + 1) % 97;  // same first 130 tokens
    Session a(model, {.pool = &pool});
    run_chunks(a, first);
    Session b(model, {.pool = &pool});
    EXPECT_EQ(b.reuse_prefix(second, chunk), 128);
    EXPECT_EQ(std::vector<int32_t>(b.tokens().begin(), b.tokens().end()), std::vector<int32_t>(first.begin(), first.begin() + 128));
    const std::vector<float> reused = run_chunks(b, second);
    KVBlockPool other(model, 8, CacheType::F16);  // computing it all, in another pool
    Session d(model, {.pool = &other});
    const std::vector<float> computed = run_chunks(d, second);
    EXPECT_TRUE(same_bits(reused, computed)) << (llama ? "llama" : "gpt");
    // At most what leaves a token to run: a prompt of exactly 128 reuses 64.
    Session e(model, {.pool = &pool});
    EXPECT_EQ(e.reuse_prefix(std::span(first).first(128), chunk), 64);
    Session f(model, {.pool = &pool});
    EXPECT_EQ(f.reuse_prefix(std::span(first).first(100), 96), 96);
  }
}

// Sessions adding one token each, in one row-invariant step of seven (more than the per-row kernel's four), with
// two running prompt chunks beside them (of 6 and 40 rows: 16-bit and quantized weights take them in the same
// forward, 50 rows, past the gemv's blocks of widened weight rows from 32), give each the logits of its step
// alone, bit for bit, for every storage a weight can have.
TEST(PagedSessions, ARowInvariantStepGivesEachSessionItsLogitsAlone) {
  for (const WeightType type : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8_0, WeightType::Q4_0,
                                WeightType::Q4_K, WeightType::Q6_K}) {
    ModelConfig c = small_model(true);
    c.d_model = 256, c.d_ff = 512;  // whole blocks of 256 for the K types
    Model model(c);
    model.initialize(7);
    model.set_storage(type);
    KVBlockPool pool(model, 64);
    std::vector<Session> together, alone;
    std::vector<std::vector<int32_t>> next;
    std::vector<Session*> group;
    for (int i = 0; i < 7; ++i) {
      together.emplace_back(model, SessionOptions{.pool = &pool});
      alone.emplace_back(model, SessionOptions{});
    }
    for (int i = 0; i < 7; ++i) {
      together[i].step(tokens(3 + 5 * i, i));
      alone[i].step(tokens(3 + 5 * i, i));
      next.push_back({static_cast<int32_t>(i * 11 % 97)});
      group.push_back(&together[i]);
    }
    next[3] = tokens(6, 9);  // two sessions run prompt chunks beside them
    next[5] = tokens(40, 10);
    step_row_invariant(group, next);
    for (int i = 0; i < 7; ++i)
      EXPECT_TRUE(same_bits(together[i].logits(), alone[i].step(next[i])))
          << weight_type_name(type) << ": session " << i;
  }
}

}  // namespace
}  // namespace attend
