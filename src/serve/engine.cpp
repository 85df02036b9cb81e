// The serving engine (attend/engine.h): a queue of requests, one thread that steps every active sequence
// together, and each request's events handed to the thread that waits for them.
#include "kernels/parallel.h"
#include "kernels/softmax.h"

#include <attend/engine.h>
#include <attend/error.h>
#include <attend/rng.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

namespace attend {

using Clock = std::chrono::steady_clock;

// ---- a request's side ---------------------------------------------------------------------------------

struct EngineRequest::State {
  CompletionParams params;
  Clock::time_point submitted = Clock::now();
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<EngineEvent> events;
  int64_t open = 0;  // choices whose end has not been queued
  std::atomic<bool> cancelled{false};
  std::atomic<int64_t> cached{0};

  void push(EngineEvent e) {
    {
      std::lock_guard lock(mutex);
      if (e.finished) --open;
      events.push_back(std::move(e));
    }
    ready.notify_all();
    if (params.signal) params.signal->notify();
  }
  // The end of choice `choice`: its last event.
  void end(int64_t choice, const std::string& reason, const std::string& error = {}) {
    EngineEvent e;
    e.choice = choice, e.finished = true, e.finish_reason = reason, e.error = error;
    push(std::move(e));
  }
};

uint64_t EngineSignal::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

bool EngineSignal::wait_past(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return count_ > seen; });
}

void EngineSignal::notify() {
  {
    std::lock_guard lock(mutex_);
    ++count_;
  }
  cv_.notify_all();
}

bool EngineRequest::next(EngineEvent& event) {
  std::unique_lock lock(state_->mutex);
  state_->ready.wait(lock, [&] { return !state_->events.empty() || state_->open == 0; });
  if (state_->events.empty()) return false;
  event = std::move(state_->events.front());
  state_->events.pop_front();
  return true;
}
EngineRequest::Wait EngineRequest::next_for(EngineEvent& event, std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  if (!state_->ready.wait_for(lock, timeout, [&] { return !state_->events.empty() || state_->open == 0; }))
    return Wait::Timeout;
  if (state_->events.empty()) return Wait::Done;
  event = std::move(state_->events.front());
  state_->events.pop_front();
  return Wait::Event;
}

void Histogram::add(double x) {
  const auto at = std::lower_bound(bounds.begin(), bounds.end(), x);
  ++counts[static_cast<size_t>(at - bounds.begin())];
  sum += x;
  ++count;
}

void EngineRequest::cancel() { state_->cancelled = true; }
int64_t EngineRequest::prompt_tokens() const { return static_cast<int64_t>(state_->params.prompt.size()); }
int64_t EngineRequest::cached_tokens() const { return state_->cached; }
Clock::time_point EngineRequest::submitted() const { return state_->submitted; }

// ---- the engine ---------------------------------------------------------------------------------------

namespace {

constexpr int64_t kBlock = KVBlockPool::kBlockPositions;

int64_t blocks_for(int64_t positions) { return (positions + kBlock - 1) / kBlock; }

// One choice of a request: a sequence with its own sampler.
struct Choice {
  int64_t index = 0;
  Session session;
  Rng rng;
  std::vector<int32_t> generated;
  std::unordered_map<int32_t, int32_t> counts;  // of generated tokens, for the penalties
  std::optional<StreamDecoder> text;             // the generated tokens' text, decoded as they come
  size_t sent = 0;          // bytes of the decoded text handed out
  int32_t pending = -1;     // sampled, to run at the next step
  bool finished = false;
  Clock::time_point last_token;
};

struct Active {
  std::shared_ptr<EngineRequest::State> request;
  std::vector<Choice> choices;  // one until the prompt has run, then n
  int64_t total = 0;            // positions at most: prompt + max_tokens (within the context)
  bool prompt_done = false;
};

}  // namespace

struct Engine::Impl {
  const Model& model;
  const Tokenizer* tokenizer;
  EngineOptions options;
  int64_t context = 0;
  int64_t vocab = 0;  // ids that can be sampled: the model's, within the tokenizer's
  KVBlockPool pool;

  mutable std::mutex mutex;  // queue, jobs, stop, stats
  std::condition_variable wake;
  std::deque<std::shared_ptr<EngineRequest::State>> queue;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<std::promise<void>>>> jobs;
  bool stopping = false;
  EngineStats stats;
  std::vector<Active> active;  // the engine thread's own
  std::thread thread;

  Impl(const Model& m, const Tokenizer* t, const EngineOptions& o)
      : model(m), tokenizer(t), options(o), context(check_context(m, o)), vocab(sampled_vocab(m, t)),
        pool(m, o.kv_blocks > 0 ? o.kv_blocks : o.max_sequences * blocks_for(context), o.cache) {
    check(o.max_sequences >= 1 && o.max_sequences <= 4096, "engine: max_sequences must be in [1, 4096], got {}",
          o.max_sequences);
    check(o.chunk >= kBlock && o.chunk % kBlock == 0, "engine: chunk must be a positive multiple of {}, got {}", kBlock,
          o.chunk);
    check(o.max_queue >= 1, "engine: max_queue must be ≥ 1 (a request waits there before it starts), got {}", o.max_queue);
    check(pool.blocks() >= blocks_for(context), "engine: {} KV blocks hold fewer than one context of {} positions",
          pool.blocks(), context);
    thread = std::thread([this] { loop(); });
  }

  static int64_t check_context(const Model& m, const EngineOptions& o) {
    check(m.config().architecture == Architecture::Decoder,
          "engine: serving generates with decoder models; this one is an {} model",
          architecture_name(m.config().architecture));
    check(o.context >= 0 && o.context <= m.config().max_seq_len,
          "engine: context must be in [1, {}] (the model's), or 0 for the model's, got {}", m.config().max_seq_len,
          o.context);
    return o.context > 0 ? o.context : m.config().max_seq_len;
  }

  // Blocks a request may still take: the first sequence's to its end, and each further choice's from the block
  // holding the prompt's last position (a copy takes that one anew) to its end.
  int64_t outstanding(const Active& a) const {
    const int64_t n = a.request->params.n, L = static_cast<int64_t>(a.request->params.prompt.size());
    if (!a.prompt_done)
      return a.choices[0].session.blocks_needed(a.total - a.choices[0].session.position()) +
             (n - 1) * (blocks_for(a.total) - (L - 1) / kBlock);
    int64_t need = 0;
    for (const Choice& c : a.choices)
      if (!c.finished) need += c.session.blocks_needed(a.total - c.session.position());
    return need;
  }

  int64_t sequences() const {
    int64_t s = 0;
    for (const Active& a : active)
      s += a.prompt_done ? static_cast<int64_t>(std::count_if(a.choices.begin(), a.choices.end(),
                                                              [](const Choice& c) { return !c.finished; }))
                         : a.request->params.n;
    return s;
  }

  // Ends a choice. flush: hand out the text held back so far (the start of a stop string that did not come, a
  // character cut short), which every end but a stop string's (whose text ends before it) and an error owes.
  void finish(Active& a, Choice& c, const std::string& reason, const std::string& error = {}, bool flush = true) {
    if (c.finished) return;
    std::string why = reason;
    if (tokenizer != nullptr && flush && reason != "error") {
      std::string text = tokenizer->decode(c.generated, /*skip_special=*/true);
      // Text held back (a character's bytes, a stray byte's next ids) may hold a stop string: it ends the text.
      if (const StopScan scan = scan_stops(text, c.sent, a.request->params.stop); scan.stopped)
        text.resize(std::max(scan.end, c.sent)), why = "stop";
      if (text.size() > c.sent) {
        EngineEvent e;
        e.choice = c.index, e.text = text.substr(c.sent);
        c.sent = text.size();
        a.request->push(std::move(e));
      }
    }
    c.finished = true;
    c.session = Session(model, {.max_T = 1, .pool = &pool});  // its blocks back now
    a.request->end(c.index, why, error);
  }

  void finish_all(Active& a, const std::string& reason, const std::string& error = {}) {
    if (!a.prompt_done) {  // the choices that never started end too
      const int64_t n = a.request->params.n;
      finish(a, a.choices[0], reason, error);
      for (int64_t i = 1; i < n; ++i) a.request->end(i, reason, error);
      return;
    }
    for (Choice& c : a.choices) finish(a, c, reason, error);
  }

  // The choice's next token drawn from its session's logits, with its log-probabilities where the request asks:
  // reads only the choice and its request, so the choices of a step draw on the compute team's threads at once.
  EngineEvent draw(const Active& a, Choice& c) const {
    const CompletionParams& p = a.request->params;
    // The session's logits as they are, or a copy with the request's biases and penalties.
    std::span<const float> logits = c.session.logits().first(static_cast<size_t>(vocab));
    const bool penalties = p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
    if (!p.logit_bias.empty() || penalties) {
      thread_local std::vector<float> adjusted;
      adjusted.assign(logits.begin(), logits.end());
      for (const auto& [id, bias] : p.logit_bias)
        if (id >= 0 && id < vocab) adjusted[id] += bias;
      if (penalties)
        for (const auto& [id, count] : c.counts)
          adjusted[id] -= static_cast<float>(p.presence_penalty + p.frequency_penalty * count);
      logits = adjusted;
    }
    EngineEvent e;
    e.choice = c.index, e.token = sample_token(logits.data(), vocab, p.sampling, c.rng.uniform_double());
    if (p.top_logprobs >= 0) {
      // log Σ e^z in the kernels' vector passes: 34-37 µs over GPT-2's 50,257 logits, where a double exponential
      // per logit took 435-484 µs a token for each sequence that asked, on the engine thread.
      float log_z = 0.0f;
      kernels::logsumexp_forward(&log_z, logits.data(), 1, vocab);
      e.logprob = logits[e.token] - log_z;
      thread_local std::vector<int32_t> largest;
      largest_logits(logits.data(), vocab, p.top_logprobs, largest);
      for (const int32_t id : largest) e.top.push_back({id, logits[id] - log_z});
    }
    return e;
  }

  // Draws the next token of each choice (on the compute team: a temperature-1 draw over GPT-2's vocabulary takes
  // about 0.2 ms, a step of eight sequences paid them one after another while the other thread waited), then
  // hands each out in order.
  void sample(const std::vector<std::pair<Active*, Choice*>>& choices) {
    std::vector<EngineEvent> drawn(choices.size());
    kernels::parallel_for(static_cast<int64_t>(choices.size()), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) drawn[i] = draw(*choices[i].first, *choices[i].second);
    });
    for (size_t i = 0; i < choices.size(); ++i) deliver(*choices[i].first, *choices[i].second, std::move(drawn[i]));
  }

  // Hands out the choice's drawn token; ends the choice when it is done.
  void deliver(Active& a, Choice& c, EngineEvent e) {
    const CompletionParams& p = a.request->params;
    const int32_t token = e.token;
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard lock(mutex);
      ++stats.generated_tokens;
      if (c.generated.empty() && c.index == 0)
        stats.time_to_first_token.add(std::chrono::duration<double>(now - a.request->submitted).count());
      else if (!c.generated.empty())
        stats.inter_token_latency.add(std::chrono::duration<double>(now - c.last_token).count());
    }
    c.last_token = now;
    if (std::find(p.eos.begin(), p.eos.end(), token) != p.eos.end()) return finish(a, c, "stop");  // not handed out
    c.generated.push_back(token);
    ++c.counts[token];
    bool stopped = false;
    if (tokenizer != nullptr) {
      if (!c.text) c.text.emplace(*tokenizer, /*skip_special=*/true);
      c.text->push(token);
      // The settled text: a character cut short (its bytes not all made yet, U+FFFD) and what follows it wait
      // until its bytes come or, a stray byte, for eight ids (holding everything after any U+FFFD held a sampled
      // stream's whole rest after one stray byte).
      const std::string& text = c.text->settled();
      // A stop string ends the text before it; one that may still be coming holds back its start.
      const StopScan scan = scan_stops(text, c.sent, p.stop);
      stopped = scan.stopped;
      if (scan.end > c.sent) e.text = text.substr(c.sent, scan.end - c.sent), c.sent = scan.end;
    }
    a.request->push(std::move(e));
    if (stopped) return finish(a, c, "stop", {}, /*flush=*/false);
    if (static_cast<int64_t>(c.generated.size()) >= p.max_tokens || c.session.position() >= a.total)
      return finish(a, c, "length");
    c.pending = token;
  }

  // Takes waiting requests while sequences and blocks allow (first come, first served).
  void admit() {
    while (true) {
      std::shared_ptr<EngineRequest::State> r;
      {
        std::lock_guard lock(mutex);
        if (queue.empty()) return;
        r = queue.front();
      }
      const CompletionParams& p = r->params;
      if (r->cancelled || (p.deadline && Clock::now() >= *p.deadline)) {
        {
          std::lock_guard lock(mutex);
          queue.pop_front();
        }
        for (int64_t i = 0; i < p.n; ++i) r->end(i, r->cancelled ? "cancelled" : "deadline");
        continue;
      }
      if (sequences() + p.n > options.max_sequences) return;
      Active a;
      a.request = r;
      a.total = std::min<int64_t>(context, static_cast<int64_t>(p.prompt.size()) + p.max_tokens);
      const SessionOptions session{.max_T = context, .pool = &pool, .adapters = p.adapters,
                                   .adapter_scales = p.adapter_scales};
      Choice first{.index = 0, .session = Session(model, session), .rng = Rng(p.sampling.seed)};
      a.choices.reserve(static_cast<size_t>(p.n));  // the first choice stays where it is while the others copy it
      a.choices.push_back(std::move(first));
      const int64_t reused = options.prefix_cache ? a.choices[0].session.reuse_prefix(p.prompt, options.chunk) : 0;
      int64_t held = 0;
      for (const Active& b : active) held += outstanding(b);
      if (pool.available() - held < outstanding(a)) return;  // its blocks go back with `a`; it waits
      r->cached = reused;
      active.push_back(std::move(a));
      std::lock_guard lock(mutex);
      queue.pop_front();
      stats.cached_prompt_tokens += reused;
      stats.running = static_cast<int64_t>(active.size());
      stats.sequences = sequences();
    }
  }

  void step_once() {
    // Deadlines and cancellations first: their blocks go back before anything is admitted.
    const Clock::time_point now = Clock::now();
    for (Active& a : active) {
      if (a.request->cancelled) finish_all(a, "cancelled");
      else if (a.request->params.deadline && now >= *a.request->params.deadline) finish_all(a, "deadline");
    }
    std::erase_if(active, [](const Active& a) {
      return a.prompt_done ? std::all_of(a.choices.begin(), a.choices.end(), [](const Choice& c) { return c.finished; })
                           : a.choices[0].finished;
    });
    admit();
    {
      std::lock_guard lock(mutex);
      stats.running = static_cast<int64_t>(active.size());
      stats.sequences = sequences();
    }
    if (active.empty()) return;

    std::vector<Session*> sessions;
    std::vector<std::vector<int32_t>> tokens;
    int64_t rows = 0, prompt_rows = 0;
    for (Active& a : active) {
      if (!a.prompt_done) {
        Session& s = a.choices[0].session;
        const std::vector<int32_t>& prompt = a.request->params.prompt;
        const int64_t p = s.position(), end = std::min<int64_t>(prompt.size(), (p / options.chunk + 1) * options.chunk);
        sessions.push_back(&s);
        tokens.emplace_back(prompt.begin() + p, prompt.begin() + end);
        rows += end - p, prompt_rows += end - p;
      } else {
        for (Choice& c : a.choices)
          if (!c.finished) sessions.push_back(&c.session), tokens.push_back({c.pending}), ++rows;
      }
    }
    try {
      step_row_invariant(sessions, tokens);
    } catch (const Error& e) {  // should not happen (the blocks were reserved): end what ran, keep serving
      for (Active& a : active) finish_all(a, "error", e.what());
      return;
    }
    {
      std::lock_guard lock(mutex);
      ++stats.steps;
      stats.prompt_tokens += prompt_rows;
      stats.last_batch_rows = rows;
      stats.last_batch_sequences = static_cast<int64_t>(sessions.size());
      stats.batch_sequences.add(static_cast<double>(sessions.size()));
      stats.max_batch_sequences = std::max<int64_t>(stats.max_batch_sequences, static_cast<int64_t>(sessions.size()));
    }
    std::vector<std::pair<Active*, Choice*>> to_sample;
    for (Active& a : active) {
      if (!a.prompt_done) {
        Session& s = a.choices[0].session;
        const int64_t L = static_cast<int64_t>(a.request->params.prompt.size());
        if (options.prefix_cache) s.share_prefix(s.position() / options.chunk * options.chunk);
        if (s.position() < L) continue;
        a.prompt_done = true;
        for (int64_t i = 1; i < a.request->params.n; ++i) {  // the other choices continue from the prompt's end
          const uint64_t seed = a.request->params.sampling.seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i));
          a.choices.push_back(Choice{.index = i, .session = s, .rng = Rng(seed)});
        }
        for (Choice& c : a.choices) to_sample.emplace_back(&a, &c);
      } else {
        for (Choice& c : a.choices)
          if (!c.finished) to_sample.emplace_back(&a, &c);
      }
    }
    sample(to_sample);
    std::lock_guard lock(mutex);
    stats.running = static_cast<int64_t>(active.size());
    stats.sequences = sequences();
  }

  void loop() {
    while (true) {
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || !queue.empty() || !jobs.empty() || !active.empty(); });
        if (stopping) break;
      }
      while (true) {
        std::pair<std::function<void()>, std::shared_ptr<std::promise<void>>> job;
        {
          std::lock_guard lock(mutex);
          if (jobs.empty()) break;
          job = std::move(jobs.front());
          jobs.pop_front();
        }
        try {
          job.first();
          job.second->set_value();
        } catch (...) {
          job.second->set_exception(std::current_exception());
        }
      }
      {
        std::lock_guard lock(mutex);
        if (stopping) break;  // asked during the jobs: no step that would admit more requests
      }
      step_once();
      // Waiting requests that cannot start until blocks or sequences free up: the thread sleeps until a step
      // changes that (there is one while anything is active) or a new request arrives.
      if (active.empty()) {
        std::unique_lock lock(mutex);
        if (!queue.empty() && !stopping) wake.wait_for(lock, std::chrono::milliseconds(20));
      }
    }
    for (Active& a : active) finish_all(a, "cancelled");
    active.clear();
    std::lock_guard lock(mutex);
    for (auto& r : queue)
      for (int64_t i = 0; i < r->params.n; ++i) r->end(i, "cancelled");
    queue.clear();
    for (auto& job : jobs) job.second->set_exception(std::make_exception_ptr(Error("engine: shutting down")));
    jobs.clear();
  }
};

Engine::Engine(const Model& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(model, tokenizer, options)) {}

Engine::~Engine() { stop(); }

void Engine::request_stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
}

void Engine::stop() {
  request_stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::shared_ptr<EngineRequest> Engine::submit(CompletionParams params) {
  const Impl& m = *impl_;
  const auto L = static_cast<int64_t>(params.prompt.size());
  check(L >= 1, "the prompt has no tokens");
  for (const int32_t id : params.prompt)
    check(id >= 0 && id < m.model.config().vocab_size, "prompt token id {} is outside the vocabulary [0, {})", id,
          m.model.config().vocab_size);
  check(params.max_tokens >= 1, "max_tokens must be at least 1, got {}", params.max_tokens);
  check(L + params.max_tokens <= m.context,
        "this model's context is {} tokens; the prompt has {} and max_tokens asks for {} more ({} in all)", m.context, L,
        params.max_tokens, L + params.max_tokens);
  check(params.n >= 1 && params.n <= m.options.max_sequences, "n must be in [1, {}] (the sequences served at once), got {}",
        m.options.max_sequences, params.n);
  check(params.top_logprobs <= 20, "top_logprobs must be at most 20, got {}", params.top_logprobs);
  for (const auto& [id, bias] : params.logit_bias)
    check(id >= 0 && id < m.vocab, "logit_bias: token id {} is outside the vocabulary [0, {})", id, m.vocab);
  params.sampling.validate();
  for (size_t k = 0; k < params.adapter_scales.size(); ++k)
    check(!params.adapter_scales[k] || std::isfinite(*params.adapter_scales[k]),
          "adapter_scales[{}] is {}: expected a finite number", k, params.adapter_scales[k].value_or(0.0));
  const int64_t blocks = blocks_for(L + params.max_tokens) + (params.n - 1) * (blocks_for(L + params.max_tokens) - (L - 1) / kBlock);
  check(blocks <= m.pool.blocks(), "the request needs {} KV blocks of {} positions ({} choices); the server has {}",
        blocks, kBlock, params.n, m.pool.blocks());
  auto state = std::make_shared<EngineRequest::State>();
  state->params = std::move(params);
  state->open = state->params.n;
  {
    std::lock_guard lock(impl_->mutex);
    check(!impl_->stopping, "the server is shutting down");
    if (static_cast<int64_t>(impl_->queue.size()) >= m.options.max_queue)
      throw QueueFull(fmt::format("{} requests are waiting already (the server's queue holds {})", impl_->queue.size(),
                                  m.options.max_queue));
    impl_->queue.push_back(state);
  }
  impl_->wake.notify_all();
  return std::make_shared<EngineRequest>(state);
}

void Engine::run(const std::function<void()>& job) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  {
    std::lock_guard lock(impl_->mutex);
    check(!impl_->stopping, "engine: shutting down");
    impl_->jobs.emplace_back(job, done);
  }
  impl_->wake.notify_all();
  result.get();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mutex);
  EngineStats s = impl_->stats;
  s.waiting = static_cast<int64_t>(impl_->queue.size());
  s.kv_blocks = impl_->pool.blocks();
  s.kv_blocks_used = impl_->pool.in_use();
  s.kv_blocks_cached = impl_->pool.cached();
  return s;
}

const EngineOptions& Engine::options() const { return impl_->options; }
int64_t Engine::context() const { return impl_->context; }

}  // namespace attend
