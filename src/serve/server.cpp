// The HTTP side of `attend serve` (attend/server.h): cpp-httplib's server, a thread per connection from a pool
// sized to the engine's sequences and queue, each request parsed (serve/openai.h), run by the engine and answered
// as OpenAI answers: one JSON body, or server-sent events ending in [DONE].
#include "serve/openai.h"
#include "serve/playground.h"

#include <attend/error.h>
#include <attend/log.h>
#include <attend/server.h>

#include <httplib.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

namespace attend {

using nlohmann::json;
using serve::ApiError;
using Clock = std::chrono::steady_clock;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Code points in UTF-8 text: the bytes that do not continue a sequence.
size_t characters(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}{:016x}", prefix, salt * 0x9E3779B97F4A7C15ull + counter.fetch_add(1));
}

std::string base64(const void* data, size_t n) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = p[i] << 16 | (i + 1 < n ? p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < n ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// One choice's answer as it is collected.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;
  std::vector<EngineEvent> tokens;  // with their log-probabilities, when asked for
  int64_t completion_tokens = 0;
};

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::function<ServedModel()> load;
  httplib::Server http;
  int port = 0;
  std::atomic<int> state{0};  // 0 loading, 1 ready, 2 failed
  std::atomic<bool> stopping{false}, run_entered{false}, run_returned{false};
  std::string load_error;
  std::unique_ptr<ServedModel> served;
  std::unique_ptr<Engine> engine;  // decoder models
  std::mutex encoder_mutex;        // encoder models' forwards, one at a time
  // Each served adapter's scale now (llama-server's global scales): the SCALE it was loaded with until POST
  // /lora-adapters sets them. Requests that list no adapters of their own run with these.
  mutable std::mutex lora_mutex;
  std::vector<double> lora_scales;
  std::thread loader;
  void stop();  // Server::stop, also the loader's when the load fails
  int64_t created = unix_seconds();

  std::mutex metrics_mutex;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (endpoint, status) → count

  // ---- plumbing ---------------------------------------------------------------------------------------

  void count(const std::string& endpoint, int status) {
    std::lock_guard lock(metrics_mutex);
    ++requests[{endpoint, status}];
  }

  static void send_error(httplib::Response& res, int status, const std::string& message, std::string_view type,
                         std::string_view param = {}, std::string_view code = {}) {
    res.status = status;
    res.set_content(serve::error_body(message, type, param, code), "application/json");
  }

  // Runs a handler with the checks every API endpoint shares and turns its errors into OpenAI's error bodies.
  void api(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
           const std::function<void()>& handler) {
    try {
      if (!options.api_key.empty()) {
        const std::string auth = req.get_header_value("Authorization");
        if (auth != "Bearer " + options.api_key)
          throw ApiError(401, auth.empty() ? "no API key: send the header 'Authorization: Bearer KEY'"
                                           : "incorrect API key provided",
                         "", "invalid_request_error", "invalid_api_key");
      }
      if (state == 0) throw ApiError(503, "the model is loading; try again shortly", "", "server_error", "model_loading");
      if (state == 2) throw ApiError(503, "the model failed to load: " + load_error, "", "server_error", "model_load_failed");
      handler();
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), e.type, e.param, e.code);
      if (e.status == 429) res.set_header("Retry-After", "1");
    } catch (const QueueFull& e) {
      send_error(res, 429, std::string("the server is busy: ") + e.what(), "rate_limit_error", "", "queue_full");
      res.set_header("Retry-After", "1");
    } catch (const Error& e) {  // a request the model cannot take (a template that refuses it, ids out of range)
      send_error(res, 400, e.what(), "invalid_request_error");
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("internal error: ") + e.what(), "server_error");
    }
    count(endpoint, res.status == -1 ? 200 : res.status);  // -1: not set yet, 200 when httplib writes it
  }

  // The adapter slots a request's "model" selects (ServedModel::adapters): none named, every one; the base
  // model's id, the model's own adapters alone (a LoRA checkpoint's); an adapter's, that one beside them.
  uint64_t check_model(const std::string& name) const {
    if (name.empty()) return ~uint64_t{0};
    const uint64_t listed = listed_adapters();
    if (name == options.model_name) return ~listed;
    for (const ServedAdapter& a : served->adapters)
      if (name == a.name) return ~listed | uint64_t{1} << a.slot;
    std::string ids = "'" + options.model_name + "'";
    for (const ServedAdapter& a : served->adapters) ids += ", '" + a.name + "'";
    throw ApiError(404, fmt::format("the model '{}' does not exist; this server serves {}", name, ids), "model",
                   "invalid_request_error", "model_not_found");
  }

  uint64_t listed_adapters() const {
    uint64_t listed = 0;
    for (const ServedAdapter& a : served->adapters) listed |= uint64_t{1} << a.slot;
    return listed;
  }

  // The adapters a request runs with and their multipliers (SessionOptions::adapters and adapter_scales). A request
  // that lists adapters ("lora": llama-server's per-request [{"id": index among --lora, "scale"}]) runs with those,
  // the others off, and its "model" names the base model or none; one that names neither adapters nor a model runs
  // with every adapter at the server's scales now (llama-server's global scales: POST /lora-adapters); one that
  // names a model runs with what that model is (check_model: an adapter at the scale it was loaded with, or the base
  // model). An adapter at scale 0 is off; one at another scale than it was loaded with runs at that scale, bit for
  // bit as if loaded so. The model's own adapters (a LoRA checkpoint's) stay.
  std::pair<uint64_t, std::vector<std::optional<double>>> request_adapters(
      const std::string& model, const std::optional<serve::LoraScales>& lora) const {
    const auto count = static_cast<int64_t>(served->adapters.size());
    std::vector<double> wanted;  // per served adapter
    uint64_t mask = 0;
    if (lora) {
      if (!model.empty() && model != options.model_name) {
        check_model(model);  // 404 for a model that does not exist
        throw ApiError(400, fmt::format("'lora' picks adapters on the base model: name the model '{}' (or none), not "
                                        "the adapter '{}'", options.model_name, model), "model");
      }
      mask = ~uint64_t{0};
      wanted.assign(static_cast<size_t>(count), 0.0);
      for (const auto& [id, scale] : *lora) {
        if (id < 0 || id >= count)
          throw ApiError(400, fmt::format("'lora' names the adapter {}; this server has {} (GET /lora-adapters)", id,
                                          count), "lora");
        wanted[static_cast<size_t>(id)] = scale;
      }
    } else if (model.empty()) {
      mask = ~uint64_t{0};
      std::lock_guard lock(lora_mutex);
      wanted = lora_scales;
    } else {
      mask = check_model(model);
      for (const ServedAdapter& a : served->adapters) wanted.push_back(a.scale);
    }
    std::vector<std::optional<double>> scales;
    for (size_t i = 0; i < served->adapters.size(); ++i) {
      const ServedAdapter& a = served->adapters[i];
      const uint64_t bit = uint64_t{1} << a.slot;
      if ((mask & bit) == 0) continue;
      if (wanted[i] == 0.0) {
        mask &= ~bit;
        continue;
      }
      if (wanted[i] == a.scale) continue;  // as loaded: the same request as naming the adapter (and its prefix blocks)
      if (scales.size() <= static_cast<size_t>(a.slot)) scales.resize(static_cast<size_t>(a.slot) + 1);
      scales[static_cast<size_t>(a.slot)] = wanted[i];
    }
    return {mask, std::move(scales)};
  }

  const std::string& model_id(const std::string& requested) const {
    return requested.empty() ? options.model_name : requested;  // responses name the model the request named
  }

  const Tokenizer& tokenizer() const {
    if (!served->tokenizer) throw ApiError(400, "this model has no tokenizer: send token ids", "prompt");
    return *served->tokenizer;
  }

  std::vector<int32_t> to_ids(const serve::Prompt& p, const char* param) const {
    if (const auto* ids = std::get_if<std::vector<int32_t>>(&p)) {
      const int64_t V = served->model.config().vocab_size;
      for (int32_t id : *ids)
        if (id >= V) throw ApiError(400, fmt::format("token id {} is outside the vocabulary [0, {})", id, V), param);
      return *ids;
    }
    std::vector<int32_t> ids = tokenizer().encode_prompt(std::get<std::string>(p));
    if (ids.empty()) throw ApiError(400, fmt::format("'{}' encodes to no tokens", param), param);
    return ids;
  }

  // ---- completions -----------------------------------------------------------------------------------

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!engine)
      throw ApiError(400, fmt::format("this model is an {} model: it does not generate (try /v1/embeddings)",
                                      architecture_name(served->model.config().architecture)), "model");
    const serve::CompletionRequest r = serve::parse_completion_request(req.body, chat);
    const auto [adapters, adapter_scales] = request_adapters(r.model, r.lora);
    // What the engine would refuse, refused before the prompts are rendered and tokenized, with the field named.
    if (r.n > options.engine.max_sequences)
      throw ApiError(400, fmt::format("n is {}; the server decodes at most {} sequences at once (--parallel)", r.n,
                                      options.engine.max_sequences), "n");
    const int64_t vocab = sampled_vocab(served->model, served->tokenizer ? &*served->tokenizer : nullptr);
    for (const auto& [id, bias] : r.logit_bias)
      if (id >= vocab)
        throw ApiError(400, fmt::format("logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab), "logit_bias");
    // Each prompt waits in the engine's queue as a request of its own: a batch longer than the queue never fits.
    if (!chat && static_cast<int64_t>(r.prompts.size()) > options.engine.max_queue)
      throw ApiError(400, fmt::format("{} prompts in one request: the server queues at most {} (--queue)", r.prompts.size(),
                                      options.engine.max_queue), "prompt");
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> prompt_texts;  // for echo
    if (chat) {
      if (!served->chat_template)
        throw ApiError(400, "this model has no chat template: use /v1/completions", "messages");
      ChatRenderOptions ro{.add_generation_prompt = true};
      if (!r.tools.is_null()) ro.tools_json = dump(r.tools);
      const std::string text = served->chat_template->render_json(dump(r.messages), ro);
      // The template writes BOS and the turns' markers itself: special tokens parsed, none added.
      prompts.push_back(tokenizer().encode(text, {.parse_special = true}));
      if (prompts.back().empty()) throw ApiError(400, "the conversation renders to no tokens", "messages");
    } else {
      for (const serve::Prompt& p : r.prompts) {
        prompts.push_back(to_ids(p, "prompt"));
        if (r.echo)
          prompt_texts.push_back(std::holds_alternative<std::string>(p) ? std::get<std::string>(p)
                                                                         : tokenizer().decode(prompts.back()));
      }
    }
    const int64_t context = engine->context();
    std::vector<CompletionParams> params;
    for (const std::vector<int32_t>& ids : prompts) {
      const auto L = static_cast<int64_t>(ids.size());
      CompletionParams p;
      p.prompt = ids;
      p.max_tokens = r.max_tokens.value_or(chat ? context - L : 16);
      if (L + p.max_tokens > context || p.max_tokens < 1)
        throw ApiError(400,
                       fmt::format("this model's maximum context length is {} tokens; the request asks for {} ({} in "
                                   "the {}, {} in the completion)",
                                   context, L + std::max<int64_t>(p.max_tokens, 1), L, chat ? "messages" : "prompt",
                                   std::max<int64_t>(p.max_tokens, 1)),
                       chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
      p.n = r.n;
      if (r.temperature == 0.0) {
        p.sampling.greedy = true;
      } else {
        p.sampling.temperature = r.temperature, p.sampling.top_p = r.top_p, p.sampling.top_k = r.top_k;
      }
      p.sampling.seed = r.seed ? *r.seed : std::random_device{}() * 0x100000001ull + std::random_device{}();
      p.presence_penalty = r.presence_penalty, p.frequency_penalty = r.frequency_penalty;
      p.logit_bias = r.logit_bias;
      if (!r.ignore_eos) p.eos = served->eos;
      p.stop = r.stop;
      p.top_logprobs = r.logprobs;
      p.deadline = Clock::now() + std::chrono::seconds(options.request_timeout_s);
      p.adapters = adapters;
      p.adapter_scales = adapter_scales;
      params.push_back(std::move(p));
    }
    auto signal = std::make_shared<EngineSignal>();  // one wake-up for every prompt's events
    std::vector<std::shared_ptr<EngineRequest>> handles;
    try {
      for (CompletionParams& p : params) p.signal = signal, handles.push_back(engine->submit(std::move(p)));
    } catch (...) {
      for (auto& h : handles) h->cancel();
      throw;
    }
    auto job = std::make_shared<Job>(Job{this, r, chat, std::move(handles), std::move(signal), std::move(prompt_texts),
                                        random_id(chat ? "chatcmpl-" : "cmpl-"), unix_seconds()});
    if (r.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream", [job](size_t, httplib::DataSink& sink) { return job->stream(sink); },
          [job](bool) { job->cancel(); });
    } else {
      res.set_chunked_content_provider(
          "application/json", [job](size_t, httplib::DataSink& sink) { return job->whole(sink); },
          [job](bool) { job->cancel(); });
    }
  }

  // A submitted completion request, answered by the connection's thread from the engine's events.
  struct Job {
    Impl* server;
    serve::CompletionRequest request;
    bool chat;
    std::vector<std::shared_ptr<EngineRequest>> handles;  // one per prompt
    std::shared_ptr<EngineSignal> signal;                 // notified at an event of any of them
    std::vector<std::string> prompt_texts;
    std::string id;
    int64_t created;
    std::vector<ChoiceResult> results{};  // prompt-major: index = prompt · n + choice
    bool started = false;

    void cancel() {
      for (auto& h : handles) h->cancel();
    }
    const Tokenizer* tokenizer() const { return server->served->tokenizer ? &*server->served->tokenizer : nullptr; }
    std::string token_text(int32_t id) const { return tokenizer() ? tokenizer()->id_to_bytes(id) : std::to_string(id); }

    json usage() const {
      int64_t prompt = 0, completion = 0, cached = 0;
      for (const auto& h : handles) prompt += h->prompt_tokens(), cached += h->cached_tokens();
      for (const ChoiceResult& c : results) completion += c.completion_tokens;
      return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
    }

    json chat_logprob(const EngineEvent& e) const {
      auto entry = [&](int32_t id, float lp) {
        const std::string t = token_text(id);
        json bytes = json::array();
        for (unsigned char ch : t) bytes.push_back(static_cast<int>(ch));
        return json{{"token", t}, {"logprob", lp}, {"bytes", bytes}};
      };
      json j = entry(e.token, e.logprob);
      j["top_logprobs"] = json::array();
      for (const TokenLogprob& t : e.top) j["top_logprobs"].push_back(entry(t.id, t.logprob));
      return j;
    }

    // Completions' logprobs object for `tokens`, their text starting at `offset` characters into the choice's
    // text (OpenAI's text_offset counts characters, as a Python string's indices do: code points, not bytes).
    json completion_logprobs(const std::vector<EngineEvent>& tokens, size_t offset) const {
      json j = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
      for (const EngineEvent& e : tokens) {
        j["tokens"].push_back(token_text(e.token));
        j["token_logprobs"].push_back(e.logprob);
        json top = json::object();
        for (const TokenLogprob& t : e.top) top[token_text(t.id)] = t.logprob;
        j["top_logprobs"].push_back(top);
        j["text_offset"].push_back(offset);
        offset += characters(e.text);
      }
      return j;
    }

    // Takes the next event of any prompt's request, probing the client while none comes: false when the client
    // is gone (then everything is cancelled) or every request is done (`done` set).
    bool next(httplib::DataSink& sink, EngineEvent& e, size_t& which, bool& done, const char* probe) {
      while (true) {
        const uint64_t seen = signal->count();  // an event after this wakes the wait below
        bool all_done = true;
        for (size_t i = 0; i < handles.size(); ++i) {
          const auto w = handles[i]->next_for(e, std::chrono::milliseconds(0));
          if (w == EngineRequest::Wait::Event) {
            which = i;
            return true;
          }
          if (w != EngineRequest::Wait::Done) all_done = false;
        }
        if (all_done) {
          done = true;
          return true;
        }
        if (signal->wait_past(seen, std::chrono::milliseconds(250))) continue;
        if (!sink.write(probe, std::strlen(probe))) {  // the client went away: its blocks go back now
          cancel();
          return false;
        }
      }
    }

    static bool write(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

    bool stream(httplib::DataSink& sink) {
      const int64_t n = request.n;
      if (!started) {
        started = true;
        results.resize(handles.size() * n);
        if (chat)  // each choice's first chunk names the role
          for (size_t k = 0; k < results.size(); ++k)
            if (!write(sink, "data: " + dump(chunk(k, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) + "\n\n"))
              return cancel(), false;
        if (!chat && request.echo)
          for (size_t k = 0; k < results.size(); ++k)
            if (!write(sink, "data: " + dump(chunk(k, prompt_texts[k / n], nullptr, nullptr)) + "\n\n")) return cancel(), false;
      }
      EngineEvent e;
      size_t which = 0;
      bool done = false;
      if (!next(sink, e, which, done, ": keep-alive\n\n")) return false;
      if (done) {
        if (request.include_usage) {
          json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                    {"model", server->model_id(request.model)}, {"system_fingerprint", "attend"},
                    {"choices", json::array()}, {"usage", usage()}};
          if (!write(sink, "data: " + dump(u) + "\n\n")) return false;
        }
        write(sink, "data: [DONE]\n\n");
        sink.done();
        return true;
      }
      const size_t k = which * n + e.choice;
      ChoiceResult& c = results[k];
      if (e.finished) {
        c.finish_reason = e.finish_reason;
        return write(sink, "data: " + dump(chunk(k, chat ? json::object() : json(""), e.finish_reason.c_str(), nullptr)) + "\n\n") || (cancel(), false);
      }
      if (e.token >= 0) ++c.completion_tokens;
      if (e.text.empty() && request.logprobs < 0) return true;  // nothing to say yet (a character held back)
      json logprobs = nullptr;
      if (request.logprobs >= 0 && e.token >= 0)
        logprobs = chat ? json{{"content", json::array({chat_logprob(e)})}} : completion_logprobs({e}, characters(c.text));
      c.text += e.text;
      const json delta = chat ? json{{"content", e.text}} : json(e.text);
      return write(sink, "data: " + dump(chunk(k, delta, nullptr, &logprobs)) + "\n\n") || (cancel(), false);
    }

    json chunk(size_t k, const json& delta, const char* finish, const json* logprobs) const {
      json choice = {{"index", k}, {"finish_reason", finish ? json(finish) : json(nullptr)},
                     {"logprobs", logprobs ? *logprobs : json(nullptr)}};
      if (chat) choice["delta"] = delta;
      else choice["text"] = delta;
      json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                {"model", server->model_id(request.model)}, {"system_fingerprint", "attend"}, {"choices", json::array({choice})}};
      if (request.include_usage) j["usage"] = nullptr;  // as OpenAI's chunks before the last, which carries it
      return j;
    }

    bool whole(httplib::DataSink& sink) {
      const int64_t n = request.n;
      results.resize(handles.size() * n);
      while (true) {
        EngineEvent e;
        size_t which = 0;
        bool done = false;
        if (!next(sink, e, which, done, " ")) return false;  // white space before JSON is still JSON
        if (done) break;
        ChoiceResult& c = results[which * n + e.choice];
        if (e.finished) {
          c.finish_reason = e.finish_reason;
          continue;
        }
        if (e.token >= 0) ++c.completion_tokens;
        c.text += e.text;
        if (request.logprobs >= 0 && e.token >= 0) c.tokens.push_back(e);
      }
      json choices = json::array();
      for (size_t k = 0; k < results.size(); ++k) {
        const ChoiceResult& c = results[k];
        json choice = {{"index", k}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
        if (chat) {
          choice["message"] = {{"role", "assistant"}, {"content", c.text}};
          if (request.logprobs >= 0) {
            json content = json::array();
            for (const EngineEvent& e : c.tokens) content.push_back(chat_logprob(e));
            choice["logprobs"] = {{"content", content}};
          }
        } else {
          const std::string echo = request.echo ? prompt_texts[k / n] : std::string();
          choice["text"] = echo + c.text;
          if (request.logprobs >= 0) choice["logprobs"] = completion_logprobs(c.tokens, characters(echo));
        }
        choices.push_back(choice);
      }
      const json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                         {"model", server->model_id(request.model)}, {"system_fingerprint", "attend"}, {"choices", choices},
                         {"usage", usage()}};
      write(sink, dump(body));
      sink.done();
      return true;
    }
  };

  // ---- embeddings, tokens, models, health, metrics -------------------------------------------------------

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const serve::EmbeddingRequest r = serve::parse_embedding_request(req.body);
    // Not a structured binding: the forward below captures them, and clang cannot capture one under OpenMP.
    const std::pair<uint64_t, std::vector<std::optional<double>>> selected = request_adapters(r.model, r.lora);
    const uint64_t adapters = selected.first;
    const std::vector<std::optional<double>>& adapter_scales = selected.second;
    const Model& model = served->model;
    const ModelConfig& c = model.config();
    json data = json::array();
    int64_t tokens = 0;
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      const std::vector<int32_t> ids = to_ids(r.inputs[i], "input");
      const auto T = static_cast<int64_t>(ids.size());
      if (T > c.max_seq_len)
        throw ApiError(400, fmt::format("input {} has {} tokens; this model reads at most {}", i, T, c.max_seq_len),
                       "input", "invalid_request_error", "context_length_exceeded");
      tokens += T;
      std::vector<float> pooled(static_cast<size_t>(c.d_model), 0.0f);
      auto forward = [&] {
        Batch b;
        b.B = 1, b.T = T, b.ids = ids;
        const Tensor h = model.hidden_states(b, adapters, adapter_scales);  // (1, T, C)
        const std::string pooling = c.architecture == Architecture::Encoder
                                        ? (c.pooling == Pooling::Mean ? "mean" : "cls")
                                        : (options.embedding_pooling.empty() ? "last" : options.embedding_pooling);
        for (int64_t t = 0; t < T; ++t) {
          if ((pooling == "cls" && t != 0) || (pooling == "last" && t != T - 1)) continue;
          for (int64_t d = 0; d < c.d_model; ++d) pooled[d] += h[t * c.d_model + d];
        }
        if (pooling == "mean")
          for (float& x : pooled) x /= static_cast<float>(T);
      };
      if (engine) {
        engine->run(forward);
      } else {
        std::lock_guard lock(encoder_mutex);
        forward();
      }
      double norm = 0.0;  // unit length, as OpenAI's embeddings are
      for (float x : pooled) norm += double(x) * x;
      if (norm > 0)
        for (float& x : pooled) x = static_cast<float>(x / std::sqrt(norm));
      json item = {{"object", "embedding"}, {"index", i}};
      item["embedding"] = r.base64 ? json(base64(pooled.data(), pooled.size() * sizeof(float))) : json(pooled);
      data.push_back(item);
    }
    res.set_content(dump({{"object", "list"}, {"data", data}, {"model", model_id(r.model)},
                          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}),
                    "application/json");
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const serve::TokenizeRequest r = serve::parse_tokenize_request(req.body);
    const Tokenizer& tok = tokenizer();
    const std::vector<int32_t> ids = r.add_special ? tok.encode_prompt(r.content) : tok.encode(r.content);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (r.with_pieces) tokens.push_back({{"id", id}, {"piece", tok.id_to_bytes(id)}});
      else tokens.push_back(id);
    }
    res.set_content(dump({{"tokens", tokens}}), "application/json");
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const std::vector<int32_t> ids = serve::parse_detokenize_request(req.body);
    const Tokenizer& tok = tokenizer();
    for (int32_t id : ids)
      if (id >= tok.vocab_size())
        throw ApiError(400, fmt::format("token id {} is outside the vocabulary [0, {})", id, tok.vocab_size()), "tokens");
    res.set_content(dump({{"content", tok.decode(ids)}}), "application/json");
  }

  json model_entry(const std::string& id) const {
    json e = {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "attend"}};
    if (id != options.model_name) e["parent"] = options.model_name;  // a LoRA adapter on it (vLLM says so too)
    return e;
  }

  std::string metrics() {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, const std::string& lines) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", name, help, name, type, lines);
    };
    {
      std::lock_guard lock(metrics_mutex);
      std::string lines;
      for (const auto& [key, n] : requests)
        lines += fmt::format("attend_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
      metric("attend_requests_total", "counter", "HTTP requests answered, by endpoint and status.", lines);
    }
    metric("attend_model_loaded", "gauge", "1 once the model is loaded and serving.", fmt::format("attend_model_loaded {}\n", state == 1 ? 1 : 0));
    if (!engine) return out;
    const EngineStats s = engine->stats();
    auto gauge = [&](const char* name, const char* help, int64_t v) { metric(name, "gauge", help, fmt::format("{} {}\n", name, v)); };
    auto counter = [&](const char* name, const char* help, int64_t v) { metric(name, "counter", help, fmt::format("{} {}\n", name, v)); };
    auto histogram = [&](const char* name, const char* help, const Histogram& h) {
      std::string lines;
      int64_t cumulative = 0;
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        cumulative += h.counts[i];
        lines += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cumulative);
      }
      lines += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name, h.sum, name, h.count);
      metric(name, "histogram", help, lines);
    };
    counter("attend_prompt_tokens_total", "Prompt tokens run through the model.", s.prompt_tokens);
    counter("attend_prompt_tokens_cached_total", "Prompt tokens taken from the prefix cache instead.", s.cached_prompt_tokens);
    counter("attend_generated_tokens_total", "Tokens generated.", s.generated_tokens);
    counter("attend_steps_total", "Batched steps of the engine.", s.steps);
    gauge("attend_queue_length", "Requests waiting to start.", s.waiting);
    gauge("attend_running_requests", "Requests running.", s.running);
    gauge("attend_active_sequences", "Sequences (choices) running.", s.sequences);
    gauge("attend_batch_rows", "Rows (tokens) in the last step.", s.last_batch_rows);
    gauge("attend_kv_blocks", "KV-cache blocks of 32 positions in the pool.", s.kv_blocks);
    gauge("attend_kv_blocks_in_use", "KV-cache blocks held by running sequences.", s.kv_blocks_used);
    gauge("attend_kv_blocks_cached", "KV-cache blocks in the prefix cache.", s.kv_blocks_cached);
    histogram("attend_batch_sequences", "Sequences per step.", s.batch_sequences);
    histogram("attend_time_to_first_token_seconds", "Seconds from a request's arrival to its first token.", s.time_to_first_token);
    histogram("attend_inter_token_latency_seconds", "Seconds between a choice's consecutive tokens.", s.inter_token_latency);
    return out;
  }

  // The methods each plain path is served with (route), for the 405 of another and its Allow header.
  std::map<std::string, std::string> methods;

  void route(const std::string& method, const std::string& path, httplib::Server::Handler handler) {
    std::string& allowed = methods[path];
    allowed += (allowed.empty() ? "" : ", ") + method;
    if (method == "GET") http.Get(path, std::move(handler));
    else http.Post(path, std::move(handler));
  }

  void routes() {
    route("GET", "/health", [this](const httplib::Request&, httplib::Response& res) {
      const int s = state;
      res.status = s == 1 ? 200 : 503;
      json body = {{"status", s == 0 ? "loading" : s == 1 ? "ok" : "error"}};
      if (s == 2) body["error"] = load_error;
      res.set_content(dump(body), "application/json");
      count("/health", res.status);
    });
    route("GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
      count("/metrics", 200);
    });
    route("GET", "/", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(serve::playground_html(), "text/html; charset=utf-8");
      count("/", 200);
    });
    route("GET", "/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/v1/models", [&] {
        json data = json::array({model_entry(options.model_name)});
        for (const ServedAdapter& a : served->adapters) data.push_back(model_entry(a.name));
        res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
      });
    });
    // llama-server's list of the loaded adapters, whose ids a request's "lora" names, with their scales now.
    route("GET", "/lora-adapters", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/lora-adapters", [&] {
        std::lock_guard lock(lora_mutex);
        json list = json::array();
        for (size_t i = 0; i < served->adapters.size(); ++i) {
          const ServedAdapter& a = served->adapters[i];
          list.push_back({{"id", i}, {"name", a.name}, {"path", a.path}, {"scale", lora_scales[i]}});
        }
        res.set_content(dump(list), "application/json");
      });
    });
    // llama-server's: sets every adapter's scale, [{"id", "scale"}] (those not listed: 0), for the requests that
    // name neither adapters nor a model. Requests already running keep theirs.
    route("POST", "/lora-adapters", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/lora-adapters", [&] {
        const serve::LoraScales list = serve::parse_lora_adapters_request(req.body);
        std::vector<double> scales(served->adapters.size(), 0.0);
        for (const auto& [id, scale] : list) {
          if (id >= static_cast<int64_t>(scales.size()))
            throw ApiError(400, fmt::format("the body names the adapter {}; this server has {} (GET /lora-adapters)",
                                            id, scales.size()));
          scales[static_cast<size_t>(id)] = scale;
        }
        {
          std::lock_guard lock(lora_mutex);
          lora_scales = std::move(scales);
        }
        res.set_content(dump({{"success", true}}), "application/json");
      });
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/v1/models/{id}", [&] {
        check_model(req.matches[1]);
        res.set_content(dump(model_entry(req.matches[1])), "application/json");
      });
    });
    route("POST", "/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/v1/completions", [&] { completions(req, res, false); });
    });
    route("POST", "/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/v1/chat/completions", [&] { completions(req, res, true); });
    });
    route("POST", "/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/v1/embeddings", [&] { embeddings(req, res); });
    });
    route("POST", "/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/tokenize", [&] { tokenize(req, res); });
    });
    route("POST", "/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      api(req, res, "/detokenize", [&] { detokenize(req, res); });
    });
    // A browser's preflight before a cross-origin POST (or a GET with an Authorization header): what may follow.
    http.Options(R"(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      if (options.cors_origin.empty()) {
        send_error(res, 405, "cross-origin requests are not served (attend serve --cors)", "invalid_request_error");
      } else {
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "86400");
      }
      count("OPTIONS", res.status);
    });
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!options.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", options.cors_origin);
    });
    // Whatever the library answers itself (an unknown path 404, a body over the limit 413) in OpenAI's shape.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      // A path served with another method: 405 and what it takes.
      const auto served_path = methods.find(req.path);
      if (res.status == 404 && served_path != methods.end()) {
        res.status = 405;
        res.set_header("Allow", served_path->second);
      }
      // The library reads a form-encoded body (curl -d's type) up to 8 KiB whatever the limit: say so.
      const bool form = req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded");
      std::string message = fmt::format("HTTP {}", res.status);
      if (res.status == 404) message = fmt::format("no such endpoint: {} {}", req.method, req.path);
      if (res.status == 405) {
        std::string takes = served_path->second;  // "GET, POST" as "GET or POST"
        if (const size_t comma = takes.find(", "); comma != std::string::npos) takes.replace(comma, 2, " or ");
        message = fmt::format("{} takes {}, not {}", req.path, takes, req.method);
      }
      if (res.status == 413)
        message = form ? "a body sent as application/x-www-form-urlencoded (curl -d's default) is read up to 8,192 bytes: "
                         "send it with 'Content-Type: application/json'"
                       : fmt::format("the request body is larger than {} bytes", options.max_body_bytes);
      send_error(res, res.status, message, "invalid_request_error", "",
                 res.status == 404 ? "unknown_url" : res.status == 413 ? "body_too_large" : "");
      count(res.status == 404 ? "unknown" : req.path, res.status);
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, "internal error: " + what, "server_error");
    });
  }
};

Server::Server(ServerOptions options, std::function<ServedModel()> load) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = std::move(options);
  m.load = std::move(load);
  const EngineOptions& e = m.options.engine;
  // A thread per connection for every sequence and queued request, and some to answer the rest (429, /health).
  const size_t threads = static_cast<size_t>(std::max<int64_t>(e.max_sequences, 1) + e.max_queue + 8);
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  m.http.set_payload_max_length(m.options.max_body_bytes);
  m.http.set_read_timeout(m.options.read_timeout_s, 0);
  m.http.set_write_timeout(m.options.request_timeout_s, 0);
  m.http.set_keep_alive_max_count(1000);
  m.routes();
  // Debian's cpp-httplib is a library built with its default listen backlog of 5: clients past that in a burst
  // (eight streams starting at once) waited for the kernel's one-second SYN retry, a first token 1.07 s late. The
  // socket-options hook sees the socket before it is bound; once it listens, listen() again raises the backlog
  // (Linux updates a listening socket's).
  int listening = -1;
  m.http.set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = sock;
  });
  if (m.options.port == 0) {
    m.port = m.http.bind_to_any_port(m.options.host);
    check(m.port > 0, "serve: cannot listen on {} (any port)", m.options.host);
  } else {
    check(m.http.bind_to_port(m.options.host, m.options.port), "serve: cannot listen on {}:{} (in use, or not an address of "
          "this machine)", m.options.host, m.options.port);
    m.port = m.options.port;
  }
  m.http.set_socket_options(httplib::default_socket_options);  // the hook's `listening` ends with this constructor
  constexpr int kListenBacklog = 512;
  const int relisten = listening >= 0 ? ::listen(listening, kListenBacklog) : -1;
  const int error = listening >= 0 ? errno : EBADF;
  check(relisten == 0, "serve: cannot listen on {}:{} with a backlog of {}: {}", m.options.host, m.port, kListenBacklog,
        std::strerror(error));
  m.loader = std::thread([&m] {
    try {
      m.served = std::make_unique<ServedModel>(m.load());
      for (const ServedAdapter& a : m.served->adapters) m.lora_scales.push_back(m.options.lora_apply ? a.scale : 0.0);
      if (m.served->model.config().architecture == Architecture::Decoder)
        m.engine = std::make_unique<Engine>(m.served->model, m.served->tokenizer ? &*m.served->tokenizer : nullptr,
                                            m.options.engine);
      m.state = 1;
      log::info("serve: {} loaded; serving", m.options.model_name);
    } catch (const std::exception& e) {
      m.load_error = e.what();
      m.state = 2;
      m.stop();  // run() returns and throws the error: nothing can be served
    }
  });
}

void Server::Impl::stop() {
  stopping = true;
  // Every running request ends ("cancelled", after the engine's step under way), so that the connections' threads
  // finish and the listener can stop waiting for them. Not waited for here: this runs on the thread that takes
  // signals, which must stay free for a second Ctrl-C; the destructor joins the engine.
  if (state == 1 && engine) engine->request_stop();
  // A stop before the listener runs is lost on it: when run() is between its look at `stopping` and the
  // listener's start, wait for the listener (run() and stop() each write their flag before reading the other's).
  while (run_entered && !run_returned && !http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http.stop();
}

Server::~Server() {
  stop();
  if (impl_->loader.joinable()) impl_->loader.join();
  impl_->engine.reset();  // before the model it runs
}

int Server::port() const { return impl_->port; }
bool Server::loading() const { return impl_->state == 0; }
void Server::run() {
  Impl& m = *impl_;
  m.run_entered = true;
  if (!m.stopping) m.http.listen_after_bind();
  m.run_returned = true;
  if (m.state == 2) throw Error(fmt::format("serve: loading the model failed: {}", m.load_error));
}

void Server::stop() { impl_->stop(); }

}  // namespace attend
