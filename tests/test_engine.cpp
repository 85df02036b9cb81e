// The serving engine (attend/engine.h): requests run together give each the tokens it gets alone, bit for bit,
// with prefix-cache hits and several choices; stop strings, EOS and budgets end choices as promised; bad
// requests are refused by name; a full queue refuses; a cancelled request's blocks go back.
#include "testing.h"

#include <attend/engine.h>
#include <attend/error.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <cmath>
#include <limits>
#include <span>
#include <thread>

namespace attend {
namespace {

using testing::expect_error_mentions;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;   // per choice
  std::vector<std::vector<float>> logprobs;
  std::vector<std::string> text, finish;
  int64_t cached = 0;
  bool operator==(const Outcome& o) const {
    return tokens == o.tokens && logprobs == o.logprobs && text == o.text && finish == o.finish;
  }
};

Outcome collect(EngineRequest& r, int64_t n) {
  Outcome o;
  o.tokens.resize(n), o.logprobs.resize(n), o.text.resize(n), o.finish.resize(n);
  for (EngineEvent e; r.next(e);) {
    if (e.finished) {
      o.finish[e.choice] = e.finish_reason;
      continue;
    }
    o.text[e.choice] += e.text;
    if (e.token >= 0) o.tokens[e.choice].push_back(e.token), o.logprobs[e.choice].push_back(e.logprob);
  }
  o.cached = r.cached_tokens();
  return o;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the cat sat on the mat and the dog ran to the park. ";
    tokenizer_ = new Tokenizer(Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300}));
    ModelConfig c;
    c.architecture = Architecture::Decoder, c.vocab_size = tokenizer_->vocab_size(), c.d_model = 64, c.n_layers = 2;
    c.n_heads = 4, c.n_kv_heads = 2, c.activation = FfnKind::SwiGLU, c.position = PositionKind::RoPE;
    c.norm = NormKind::RMSNorm, c.bias = false, c.max_seq_len = 320;
    model_ = new Model(c);
    model_->initialize(11);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
  }
  static std::vector<int32_t> prompt(int64_t n, int32_t seed) {
    std::vector<int32_t> p(n);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((seed * 37 + i * 13 + i * i * 7) % tokenizer_->vocab_size());
    return p;
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* EngineTest::model_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

// Eight requests, four sequences at a time, the chunks of some prompts shared (prefix-cache hits), greedy and
// seeded sampling, with penalties, bias and two choices: each equals its run alone on an engine of one sequence
// without a prefix cache, token for token, log-probability for log-probability (bit for bit).
TEST_F(EngineTest, RequestsRunTogetherGiveTheTokensOfEachAlone) {
  const std::vector<int32_t> shared = prompt(150, 1);
  std::vector<CompletionParams> requests;
  for (int i = 0; i < 8; ++i) {
    CompletionParams p;
    p.prompt = i % 2 == 0 ? shared : prompt(20 + 17 * i, i);
    if (i % 2 == 0) p.prompt.insert(p.prompt.end(), {static_cast<int32_t>(i), 7, 9});
    p.max_tokens = 12 + 3 * i;
    p.sampling = i % 3 == 0 ? SamplingOptions{.greedy = true} : SamplingOptions{.temperature = 0.8, .top_p = 0.95, .seed = uint64_t(100 + i)};
    if (i == 5) p.presence_penalty = 0.5, p.frequency_penalty = 0.3, p.logit_bias = {{4, 2.0f}};
    if (i == 2 || i == 4) p.n = 2;
    p.top_logprobs = 2;
    requests.push_back(p);
  }
  std::vector<Outcome> alone;
  {
    Engine one(*model_, tokenizer_, {.max_sequences = 2, .prefix_cache = false});
    for (const CompletionParams& p : requests) alone.push_back(collect(*one.submit(p), p.n));
  }
  Engine many(*model_, tokenizer_, {.max_sequences = 4, .kv_blocks = 40});
  std::vector<std::shared_ptr<EngineRequest>> handles;
  for (const CompletionParams& p : requests) handles.push_back(many.submit(p));
  int64_t hits = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome got = collect(*handles[i], requests[i].n);
    EXPECT_TRUE(got == alone[i]) << "request " << i;
    for (const auto& finish : got.finish) EXPECT_EQ(finish, "length") << "request " << i;
    EXPECT_EQ(got.tokens[0].size(), static_cast<size_t>(requests[i].max_tokens)) << "request " << i;
    hits += got.cached > 0;
    if (requests[i].n == 2) {
      EXPECT_NE(got.tokens[0], got.tokens[1]) << "request " << i << ": two choices, one seed each";
    }
  }
  EXPECT_GE(hits, 2) << "the shared 150 tokens should be found in the prefix cache";
  const EngineStats s = many.stats();
  EXPECT_GT(s.cached_prompt_tokens, 0);
  EXPECT_EQ(s.kv_blocks_used, 0) << "every block goes back when its request ends";
  EXPECT_LE(s.max_batch_sequences, 4);
  EXPECT_GT(s.max_batch_sequences, 1);
  EXPECT_EQ(s.batch_sequences.count, s.steps);
  EXPECT_EQ(s.time_to_first_token.count, 8);
}

// A token's log-probability and the top alternatives' are the log-softmax of the logits that chose it (worked out
// here in double from a session's own step over the prompt), the alternatives in decreasing order.
TEST_F(EngineTest, LogProbabilitiesAreTheLogSoftmaxOfTheLogits) {
  CompletionParams p;
  p.prompt = prompt(23, 4);
  p.max_tokens = 1;
  p.sampling = SamplingOptions{.greedy = true};
  p.top_logprobs = 3;
  Engine engine(*model_, tokenizer_, {.max_sequences = 1});
  auto request = engine.submit(p);
  EngineEvent first;
  for (EngineEvent e; request->next(e);)
    if (e.token >= 0) first = e;
  Session s(*model_);
  const std::span<const float> logits = s.step(p.prompt);
  double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
  for (const float z : logits) max = std::max(max, double{z});
  for (const float z : logits) sum += std::exp(z - max);
  const double lse = max + std::log(sum);
  ASSERT_GE(first.token, 0);
  EXPECT_NEAR(first.logprob, logits[first.token] - lse, 1e-4);
  ASSERT_EQ(first.top.size(), 3u);
  EXPECT_EQ(first.top[0].id, first.token) << "greedy's token is the most likely";
  for (size_t i = 0; i < first.top.size(); ++i) {
    EXPECT_NEAR(first.top[i].logprob, logits[first.top[i].id] - lse, 1e-4) << i;
    if (i > 0) {
      EXPECT_LE(first.top[i].logprob, first.top[i - 1].logprob) << i;
    }
  }
}

TEST_F(EngineTest, StopStringsEosAndBudgetsEndChoices) {
  Engine engine(*model_, tokenizer_, {.max_sequences = 2});
  CompletionParams base;
  base.prompt = prompt(10, 3), base.max_tokens = 40, base.sampling = {.greedy = true};
  const Outcome free = collect(*engine.submit(base), 1);
  ASSERT_EQ(free.finish[0], "length");
  const std::string text = free.text[0];
  ASSERT_EQ(text, tokenizer_->decode(free.tokens[0], true));
  ASSERT_GT(text.size(), 8u);
  // A stop string from the middle of the text: the text ends before it, the reason is "stop".
  CompletionParams stop = base;
  const std::string s = text.substr(text.size() / 2, 3);
  stop.stop = {s};
  const Outcome cut = collect(*engine.submit(stop), 1);
  EXPECT_EQ(cut.finish[0], "stop");
  EXPECT_EQ(cut.text[0], text.substr(0, text.find(s)));
  // EOS: the fifth token made an end-of-sequence token ends there, without it.
  CompletionParams eos = base;
  eos.eos = {free.tokens[0][4]};
  const Outcome ended = collect(*engine.submit(eos), 1);
  EXPECT_EQ(ended.finish[0], "stop");
  const auto first = std::find(free.tokens[0].begin(), free.tokens[0].end(), free.tokens[0][4]);
  EXPECT_EQ(ended.tokens[0], std::vector<int32_t>(free.tokens[0].begin(), first));
  // The start of a stop string that never comes is held back, then handed out when EOS ends the choice (a sampled
  // text, whose tokens vary: the greedy one repeats a token).
  CompletionParams sampled = base;
  sampled.sampling = {.temperature = 1.0, .seed = 5};
  const Outcome varied = collect(*engine.submit(sampled), 1);
  const std::vector<int32_t>& t = varied.tokens[0];
  size_t i = 1;
  while (i < t.size() && std::find(t.begin(), t.begin() + i, t[i]) != t.begin() + i) ++i;
  ASSERT_LT(i, t.size()) << "a token that the text has not made before";
  const std::string before = tokenizer_->decode(std::vector<int32_t>(t.begin(), t.begin() + i), true);
  ASSERT_FALSE(before.empty());
  CompletionParams held = sampled;
  held.stop = {before.substr(before.size() - 1) + "\x7f\x7f"};
  held.eos = {t[i]};
  const Outcome h = collect(*engine.submit(held), 1);
  EXPECT_EQ(h.finish[0], "stop");
  EXPECT_EQ(h.text[0], before) << "the held-back end of the text was lost";
  // A stop string in text still held back when the budget ends the choice (U+FFFDs of stray bytes, which wait
  // eight tokens): the text ends before it and the reason is "stop", as where it was handed out.
  const std::vector<int32_t> split = tokenizer_->encode("\xC3\xA4");  // ä, two byte-level ids
  ASSERT_EQ(split.size(), 2u);
  CompletionParams stray = base;
  stray.max_tokens = 3;
  stray.logit_bias = {{split[0], 100.0f}};  // the lead byte three times: no character comes whole
  stray.stop = {"\xEF\xBF\xBD\xEF\xBF\xBD"};
  const Outcome st = collect(*engine.submit(stray), 1);
  EXPECT_EQ(st.tokens[0], std::vector<int32_t>(3, split[0]));
  EXPECT_EQ(st.finish[0], "stop");
  EXPECT_EQ(st.text[0], "");
}

TEST_F(EngineTest, BadRequestsAreRefusedByName) {
  Engine engine(*model_, tokenizer_, {.max_sequences = 2, .context = 64});
  CompletionParams p;
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"prompt", "no tokens"});
  p.prompt = {1, 2, 3};
  p.max_tokens = 62;
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"context is 64", "3", "62"});
  p.max_tokens = 4, p.n = 3;
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"n must be", "3"});
  p.n = 1, p.prompt = {1, 5000};
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"5000", "vocabulary"});
  p.prompt = {1}, p.top_logprobs = 21;
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"top_logprobs", "21"});
  p.top_logprobs = -1, p.sampling.top_p = 0;
  expect_error_mentions<Error>([&] { engine.submit(p); }, {"top-p"});
  expect_error_mentions<Error>([&] { Engine(*model_, tokenizer_, {.chunk = 48}); }, {"chunk", "48"});
}

TEST_F(EngineTest, AFullQueueRefusesAndCancellingFreesTheBlocks) {
  Engine engine(*model_, tokenizer_, {.max_sequences = 1, .max_queue = 1});
  CompletionParams slow;
  slow.prompt = prompt(100, 4), slow.max_tokens = 200, slow.sampling = {.greedy = true};
  auto running = engine.submit(slow);
  while (engine.stats().running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto waiting = engine.submit(slow);  // the queue's one place
  EXPECT_THROW(engine.submit(slow), QueueFull);
  EXPECT_GT(engine.stats().kv_blocks_used, 0);
  running->cancel();
  waiting->cancel();
  const Outcome a = collect(*running, 1), b = collect(*waiting, 1);
  EXPECT_EQ(a.finish[0], "cancelled");
  EXPECT_EQ(b.finish[0], "cancelled");
  for (int i = 0; i < 1000 && engine.stats().kv_blocks_used > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  // A deadline passed ends a request the same way (one already passed when it is submitted: this model makes its
  // 200 tokens in milliseconds, too fast for a deadline to fall reliably inside them).
  slow.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  EXPECT_EQ(collect(*engine.submit(slow), 1).finish[0], "deadline");
}

// request_stop() returns while the engine's thread is busy (here with a job, as with a long step): the server's stop
// runs on the thread that takes signals, and a second Ctrl-C must find it free. Requests end "cancelled" once the
// thread is free, submit() refuses at once, and stop() then joins.
TEST_F(EngineTest, ARequestToStopReturnsWhileAStepIsUnderWay) {
  Engine engine(*model_, tokenizer_, {.max_sequences = 1});
  std::promise<void> entered;
  std::atomic<bool> release{false};
  std::thread busy([&] {
    try {
      engine.run([&] {
        entered.set_value();
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    } catch (const Error&) {
    }
  });
  entered.get_future().wait();
  CompletionParams params;
  params.prompt = prompt(8, 5), params.max_tokens = 4, params.sampling = {.greedy = true};
  auto waiting = engine.submit(params);
  // Joining here would wait for `release`, which is set only after: a stop that waits never returns.
  auto asked = std::async(std::launch::async, [&] { engine.request_stop(); });
  const bool returned = asked.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  release = true;
  busy.join();
  ASSERT_TRUE(returned) << "request_stop() waited for the engine's thread";
  expect_error_mentions<Error>([&] { engine.submit(params); }, {"shutting down"});
  EXPECT_EQ(collect(*waiting, 1).finish[0], "cancelled");
  engine.stop();
}

}  // namespace
}  // namespace attend
