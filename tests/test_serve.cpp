// attend serve's HTTP side (attend/server.h, serve/openai.h): request bodies read field by field with errors that
// name the field, /health answering 503 while the model loads, and a completion, its stream and /metrics over a
// real connection (httplib's client). tests/serve/openai_client.mjs checks the rest with OpenAI's own client.
#include "serve/openai.h"
#include "testing.h"

#include <attend/server.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <thread>

namespace attend {
namespace {

using nlohmann::json;

TEST(OpenAiRequests, CompletionFieldsAreReadWithTheirDefaults) {
  const serve::CompletionRequest r = serve::parse_completion_request(
      R"({"model":"m","prompt":["a",[1,2]],"max_tokens":5,"n":2,"temperature":0,"stop":"END","seed":7,
          "logit_bias":{"3":-100},"logprobs":2,"stream":true,"stream_options":{"include_usage":true}})",
      false);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(r.prompts[0]), "a");
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompts[1]), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, -100.0f}}));
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  const serve::CompletionRequest d = serve::parse_completion_request(R"({"prompt":[5,6,7]})", false);
  EXPECT_EQ(std::get<std::vector<int32_t>>(d.prompts.at(0)), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_EQ(d.n, 1);
  EXPECT_EQ(d.temperature, 1.0);
  EXPECT_EQ(d.logprobs, -1);
  const serve::CompletionRequest c = serve::parse_completion_request(
      R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9,"logprobs":true,"top_logprobs":4})", true);
  EXPECT_EQ(c.messages.size(), 1u);
  EXPECT_EQ(c.max_tokens, 9);
  EXPECT_EQ(c.logprobs, 4);
}

// Each bad body: status 400 and the field named, in the param and in the message.
TEST(OpenAiRequests, BadBodiesNameTheirField) {
  const std::vector<std::tuple<std::string, bool, std::string>> cases = {
      {"{not json", false, ""},
      {"[1,2]", false, ""},
      {R"({})", false, "prompt"},
      {R"({"prompt":[]})", false, "prompt"},
      {R"({"prompt":[1,-2]})", false, "prompt"},
      {R"({"prompt":[[1],"a",3]})", false, "prompt"},
      {R"({"prompt":"a","max_tokens":0})", false, "max_tokens"},
      {R"({"prompt":"a","max_tokens":1.5})", false, "max_tokens"},
      {R"({"prompt":"a","n":0})", false, "n"},
      {R"({"prompt":"a","temperature":-1})", false, "temperature"},
      {R"({"prompt":"a","top_p":0})", false, "top_p"},
      {R"({"prompt":"a","stop":[1]})", false, "stop"},
      {R"({"prompt":"a","stop":""})", false, "stop"},
      {R"({"prompt":"a","logit_bias":{"x":1}})", false, "logit_bias"},
      {R"({"prompt":"a","logit_bias":{"5":101}})", false, "logit_bias"},
      {R"({"prompt":"a","presence_penalty":3})", false, "presence_penalty"},
      {R"({"prompt":"a","stream":"yes"})", false, "stream"},
      {R"({"prompt":"a","suffix":"b"})", false, "suffix"},
      {R"({"prompt":"a","best_of":3})", false, "best_of"},
      {R"({"prompt":"a","echo":true,"logprobs":1})", false, "echo"},
      {R"({"prompt":"a","seed":"x"})", false, "seed"},
      {R"({"prompt":"a","max_tokens":18446744073709551615})", false, "max_tokens"},
      {R"({"messages":"hi"})", true, "messages"},
      {R"({"messages":[{"content":"hi"}]})", true, "messages"},
      {R"({"messages":[{"role":"user","content":5}]})", true, "messages"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true, "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})", true, "response_format"},
      // Found by the fuzzer (openai_request, 7.3M executions in): a "type" that is not a string threw nlohmann's
      // type_error out of the parser (a 500 from the server).
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":5}})", true, "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":"text"})", true, "response_format"},
      // llama-server's per-request adapters: a list of {"id", "scale"}, both present, not null, in range.
      {R"({"prompt":"a","lora":{"id":0,"scale":1}})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":null,"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":-1,"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":64,"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":18446744073709551615,"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0.5,"scale":1}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0,"scale":null}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0,"scale":"1"}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0,"scale":1e7}]})", false, "lora"},
      {R"({"prompt":"a","lora":[{"id":0,"scale":1},{"id":0,"scale":2}]})", false, "lora"},
      {R"({"prompt":"a","lora":[5]})", false, "lora"},
  };
  for (const auto& [body, chat, param] : cases) {
    try {
      serve::parse_completion_request(body, chat);
      ADD_FAILURE() << body << ": accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
      if (!param.empty()) {
        EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << body << ": " << e.what();
      }
    }
  }
  const serve::CompletionRequest with_lora =
      serve::parse_completion_request(R"({"prompt":"a","lora":[{"id":1,"scale":0.3},{"id":0,"scale":0}]})", false);
  ASSERT_TRUE(with_lora.lora.has_value());
  EXPECT_EQ(*with_lora.lora, (std::vector<std::pair<int64_t, double>>{{1, 0.3}, {0, 0.0}}));
  EXPECT_FALSE(serve::parse_completion_request(R"({"prompt":"a"})", false).lora.has_value());
  // The same list in an embeddings request, and as POST /lora-adapters' whole body.
  EXPECT_EQ(serve::parse_embedding_request(R"({"input":"a","lora":[{"id":2,"scale":-0.5}]})").lora,
            (std::optional<serve::LoraScales>{{{2, -0.5}}}));
  EXPECT_THROW(serve::parse_embedding_request(R"({"input":"a","lora":[{"id":2}]})"), serve::ApiError);
  EXPECT_EQ(serve::parse_lora_adapters_request(R"([{"id":0,"scale":0.25},{"id":3,"scale":0}])"),
            (serve::LoraScales{{0, 0.25}, {3, 0.0}}));
  EXPECT_TRUE(serve::parse_lora_adapters_request("[]").empty());
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  const std::vector<std::pair<std::string, std::string>> bad_lists = {
      {R"({"id":0,"scale":1})", "expected a list"},
      {R"([{"id":0}])", "its 'scale' must be"},
      {R"([{"id":0,"scale":1},{"id":0,"scale":1}])", "twice"},
      {R"([{"id":-1,"scale":1}])", "adapter's index"},
      {"[", "not valid JSON"},
      {R"("x")", "expected a list"},
      {deep, "nests deeper"},
  };
  for (const auto& [body, words] : bad_lists) {
    try {
      serve::parse_lora_adapters_request(body);
      ADD_FAILURE() << body << ": accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, "") << body;
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << body << ": " << e.what();
    }
  }
  EXPECT_THROW(serve::parse_embedding_request(R"({"input":"a","encoding_format":"hex"})"), serve::ApiError);
  EXPECT_THROW(serve::parse_embedding_request(R"({"model":"m"})"), serve::ApiError);
  EXPECT_THROW(serve::parse_tokenize_request(R"({"content":5})"), serve::ApiError);
  EXPECT_THROW(serve::parse_detokenize_request(R"({"tokens":[1,"a"]})"), serve::ApiError);
  const json e = json::parse(serve::error_body("bad", "invalid_request_error", "n"));
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
}

// A body nested past any request's depth is a 400, not the server's stack: 100,000 brackets crashed it (found by
// reading: nlohmann parses any depth, and printing the value for the message recursed once a level).
TEST(OpenAiRequests, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_prompt = R"({"prompt":)" + deep + "}";
  const std::string deep_content = R"({"messages":[{"role":"user","content":)" + deep + "}]}";
  for (const auto& [body, chat] : {std::pair{deep, false}, {deep_prompt, false}, {deep_content, true}}) {
    try {
      serve::parse_completion_request(body, chat);
      ADD_FAILURE() << "accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(std::string(e.what()).find("deeper than 256"), std::string::npos) << e.what();
    }
  }
  // 256 levels is more than a request nests, and still read: the prompt below is refused for its value only.
  const std::string fine = R"({"prompt":)" + std::string(255, '[') + "1" + std::string(255, ']') + "}";
  try {
    serve::parse_completion_request(fine, false);
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(std::string(e.what()).find("deeper"), std::string::npos) << e.what();
  }
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(serve::parse_completion_request(R"({"prompt":")" + std::string(1000, '[') + R"("})", false));
}

// Chat messages reach the template as text models' templates read them: content parts joined into one string,
// null content (a turn that only called tools) empty, "developer" as "system"; parts the model cannot read and
// tool calls it cannot be made to make are 400s.
TEST(OpenAiRequests, ChatContentBecomesTheTextTemplatesRead) {
  const serve::CompletionRequest r = serve::parse_completion_request(
      R"({"messages":[{"role":"developer","content":[{"type":"text","text":"Be brief"}]},
                      {"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]},
                      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
                       "function":{"name":"f","arguments":"{}"}}]},
                      {"role":"tool","tool_call_id":"c1","content":"42"}],
          "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"})",
      true);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "Be brief");
  EXPECT_EQ(r.messages[1]["content"], "Hi\nthere");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "c1");  // other fields stay for the templates that use them
  EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");
  for (const char* body : {
           R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
           R"({"messages":[{"role":"user","content":[{"text":"no type"}]}]})",
           R"({"messages":[{"role":"user","content":[{"type":"text","text":5}]}]})",
           R"({"messages":[{"role":"user","content":["bare"]}]})",
       }) {
    try {
      serve::parse_completion_request(body, true);
      ADD_FAILURE() << body << ": accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.param, "messages") << body;
    }
  }
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"f"}})"}) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":)") + choice + "}";
    try {
      serve::parse_completion_request(body, true);
      ADD_FAILURE() << body << ": accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.param, "tool_choice") << body;
    }
  }
  // logprobs false on /v1/completions, as chat's flag: none.
  EXPECT_EQ(serve::parse_completion_request(R"({"prompt":"a","logprobs":false})", false).logprobs, -1);
}

// A GET's response, or none when the server did not answer.
std::optional<httplib::Response> get(httplib::Client& client, const char* path) {
  auto r = client.Get(path);
  if (!r) return std::nullopt;
  return *r;
}

// A decoder of width d_model and n_layers layers with a BPE tokenizer of 300 tokens, random weights.
ServedModel tiny_model(int64_t d_model = 32, int64_t n_layers = 1) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat and the dog ran. ";
  ServedModel m{Model([&] {
                  ModelConfig c;
                  c.architecture = Architecture::Decoder, c.vocab_size = 300, c.d_model = d_model, c.n_layers = n_layers;
                  c.n_heads = 2, c.max_seq_len = 128;
                  return c;
                }()),
                Tokenizer::train_from_text(text, {.kind = TokenizerKind::BPE, .vocab_size = 300}), std::nullopt, {}};
  m.model.initialize(1);
  return m;
}

// Runs a server's run() on a thread of its own for a test, and stops and joins it at the end of the scope. A failure
// of run() (a model that does not load) fails the test that started it: left to escape the thread it would end the
// whole test binary (std::terminate).
class Running {
 public:
  explicit Running(Server& server) : server_(server), thread_([this] {
    try {
      server_.run();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }) {}
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
  ~Running() { stop(); }
  // Stops the server and waits for run() to return (once; the destructor calls it too).
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
    if (!error_.empty()) ADD_FAILURE() << "Server::run() threw: " << error_;
  }

 private:
  Server& server_;
  std::string error_;
  std::thread thread_;
};

// The server listens before the model is loaded: /health and the API answer 503 until it is, then 200.
TEST(Server, AnswersLoadingUntilTheModelIsLoadedThenServes) {
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  Server server({.port = 0, .model_name = "tiny", .engine = {.max_sequences = 2}}, [&] {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return release; });
    return tiny_model();
  });
  Running runner(server);
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(30, 0);
  std::optional<httplib::Response> health;
  for (int i = 0; i < 200 && !(health = get(client, "/health")); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(json::parse(health->body)["status"], "loading");
  const auto early = client.Post("/v1/completions", R"({"prompt":"the cat"})", "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_EQ(json::parse(early->body)["error"]["code"], "model_loading");
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  for (int i = 0; i < 500 && client.Get("/health")->status != 200; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(client.Get("/health")->status, 200);

  const auto done = client.Post("/v1/completions", R"({"prompt":"the cat","max_tokens":6,"temperature":0})", "application/json");
  ASSERT_TRUE(done);
  ASSERT_EQ(done->status, 200) << done->body;
  const json body = json::parse(done->body);
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["model"], "tiny");
  // The same streamed: chunks whose texts add up to the same, then [DONE].
  const auto streamed = client.Post("/v1/completions", R"({"prompt":"the cat","max_tokens":6,"temperature":0,"stream":true})",
                                    "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  std::string text;
  size_t at = 0;
  bool finished = false;
  while ((at = streamed->body.find("data: ", at)) != std::string::npos) {
    const size_t end = streamed->body.find("\n\n", at);
    const std::string data = streamed->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      finished = true;
      break;
    }
    text += json::parse(data)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(text, body["choices"][0]["text"]);
  // Chat without a template: a 400 that says so.
  const auto chat = client.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", "application/json");
  EXPECT_EQ(chat->status, 400);
  EXPECT_NE(chat->body.find("chat template"), std::string::npos);
  // The metrics count what was answered.
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_NE(metrics.find("attend_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("attend_requests_total{endpoint=\"/v1/completions\",status=\"503\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("attend_generated_tokens_total 12"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE attend_time_to_first_token_seconds histogram"), std::string::npos);
  runner.stop();
}

// The listening socket's backlog holds a burst of clients: cpp-httplib's default of 5 left the SYNs of the rest of
// eight streams starting at once to the kernel's one-second retry. The kernel reports a listening socket's backlog as
// its send queue (ss, iproute2).
TEST(Server, ListensWithABacklogForBurstsOfClients) {
  Server server({.port = 0, .model_name = "tiny", .engine = {.max_sequences = 2}}, [] { return tiny_model(); });
  Running runner(server);
  httplib::Client client("127.0.0.1", server.port());
  for (int i = 0; i < 500 && !get(client, "/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string command = fmt::format("ss -ltnH 'sport = :{}' 2>/dev/null", server.port());
  std::string listing;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[512];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) listing += buffer;
    pclose(pipe);
  }
  runner.stop();
  if (listing.empty()) GTEST_SKIP() << "ss (iproute2) is not installed: " << command;
  std::istringstream fields(listing);
  std::string state;
  int64_t received = 0, backlog = 0;
  fields >> state >> received >> backlog;
  EXPECT_EQ(state, "LISTEN") << listing;
  EXPECT_GE(backlog, 128) << listing;
}

// What a browser, curl and a batch of prompts meet: CORS preflights and headers, 405 for a served path's other
// method, a form-encoded body over httplib's 8 KiB said to be that, a batch longer than the queue a 400 (it was a
// 429 that no retry could pass), a batch whose last prompt ends first answered without padding (the wait on the
// last prompt alone spun, writing the probe's spaces: 65,567 before the body), and include_usage's chunks with
// usage null until the last.
TEST(Server, AnswersBrowsersCurlAndBatchesAsClientsExpect) {
  // Wide enough that a token takes about a millisecond: the events come while the answer is written (the smallest
  // model made its 60 tokens before the first look).
  Server server({.port = 0, .model_name = "tiny", .engine = {.max_sequences = 2, .max_queue = 4}},
                [] { return tiny_model(384, 6); });
  Running runner(server);
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(60, 0);
  for (int i = 0; i < 500 && !(get(client, "/health") && get(client, "/health")->status == 200); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

  const auto preflight = client.Options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                                                  {"Access-Control-Request-Method", "POST"},
                                                                  {"Access-Control-Request-Headers", "authorization,content-type"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");

  const auto wrong_method = client.Get("/v1/completions");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  const auto put = client.Put("/lora-adapters", "[]", "application/json");  // a path served with two methods
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(put->get_header_value("Allow"), "GET, POST");
  EXPECT_NE(put->body.find("takes GET or POST, not PUT"), std::string::npos) << put->body;
  EXPECT_EQ(client.Get("/v1/nothing")->status, 404);

  const std::string big = json{{"prompt", "the cat"}, {"max_tokens", 1}, {"user", std::string(9000, 'x')}}.dump();
  const auto form = client.Post("/v1/completions", big, "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(form->body.find("application/json"), std::string::npos) << form->body;
  const auto as_json = client.Post("/v1/completions", big, "application/json");
  EXPECT_EQ(as_json->status, 200) << as_json->body;
  EXPECT_EQ(as_json->get_header_value("Access-Control-Allow-Origin"), "*");

  for (const auto& [body, param] : {std::pair{R"({"prompt":"a","n":3})", "n"}, {R"({"prompt":"a","logit_bias":{"300":1}})", "logit_bias"}}) {
    const auto refused = client.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << body;
    EXPECT_EQ(json::parse(refused->body)["error"]["param"], param) << refused->body;
  }
  const auto too_many = client.Post("/v1/completions", R"({"prompt":["a","b","c","d","e"],"max_tokens":1})", "application/json");
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->status, 400);
  EXPECT_EQ(json::parse(too_many->body)["error"]["param"], "prompt");

  // A batch whose second prompt ends at its first token (a stop string it makes at once and the first prompt's
  // 60 greedy tokens never do), the first running on: the body is the JSON object from its first byte or nearly
  // (a probe writes one space each 250 ms without events).
  auto greedy_text = [&](const char* prompt, int tokens) {
    const auto r = client.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0}}.dump(),
                               "application/json");
    return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : std::string();
  };
  const std::string at_once = greedy_text("the", 1), long_text = greedy_text("the cat sat on the mat", 60);
  ASSERT_FALSE(at_once.empty());
  ASSERT_EQ(long_text.find(at_once), std::string::npos) << "pick another prompt: '" << at_once << "' is in " << long_text;
  const auto batch = client.Post("/v1/completions",
                                 json{{"prompt", {"the cat sat on the mat", "the"}}, {"max_tokens", 60}, {"temperature", 0},
                                      {"stop", {at_once}}}.dump(),
                                 "application/json");
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->status, 200) << batch->body;
  const size_t first = batch->body.find_first_not_of(' ');
  EXPECT_LT(first, 16u) << "padding before the body";
  const json choices = json::parse(batch->body.substr(first))["choices"];
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0]["finish_reason"], "length");
  EXPECT_EQ(choices[1]["finish_reason"], "stop");

  const auto streamed = client.Post("/v1/completions", R"({"prompt":"the cat","max_tokens":3,"stream":true,
      "stream_options":{"include_usage":true}})", "application/json");
  ASSERT_TRUE(streamed);
  std::vector<json> chunks;
  for (size_t at = 0; (at = streamed->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = streamed->body.find("\n\n", at);
    const std::string data = streamed->body.substr(at + 6, end - at - 6);
    at = end;
    if (data != "[DONE]") chunks.push_back(json::parse(data));
  }
  ASSERT_GE(chunks.size(), 2u);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) EXPECT_TRUE(chunks[i].contains("usage") && chunks[i]["usage"].is_null());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 3);
  runner.stop();
}

// Completions' text_offset counts characters, as OpenAI's (a Python string's indices): with the two bytes of "é"
// favoured, the text is mostly two- and three-byte characters (é, or U+FFFD for a byte out of place), and each
// streamed chunk's offset is the characters of the chunks before it; the whole answer's offsets rise to at most its
// length. Counted in bytes they ran past it.
TEST(Server, CompletionTextOffsetsCountCharacters) {
  ServedModel model = tiny_model();
  const std::vector<int32_t> e_acute = model.tokenizer->encode("\xc3\xa9");
  ASSERT_EQ(e_acute.size(), 2u) << "the tiny tokenizer has no merge for these bytes";
  Server server({.port = 0, .model_name = "tiny", .engine = {.max_sequences = 2}},
                [&model] { return std::move(model); });
  Running runner(server);
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(30, 0);
  for (int i = 0; i < 500 && !(get(client, "/health") && get(client, "/health")->status == 200); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto characters = [](const std::string& s) {
    return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  };
  const json request = {{"prompt", "the cat"}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 1},
                        {"logit_bias", {{std::to_string(e_acute[0]), 100}, {std::to_string(e_acute[1]), 100}}}};
  json streamed_request = request;
  streamed_request["stream"] = true;
  const auto streamed = client.Post("/v1/completions", streamed_request.dump(), "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  std::string text;
  int chunks = 0;
  for (size_t at = 0; (at = streamed->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = streamed->body.find("\n\n", at);
    const std::string data = streamed->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const json choice = json::parse(data)["choices"][0];
    if (choice["logprobs"].is_object()) {  // a token's chunk (the last text held back comes in one without)
      EXPECT_EQ(choice["logprobs"]["text_offset"][0], characters(text)) << "after " << text;
      ++chunks;
    }
    text += choice["text"].get<std::string>();
  }
  EXPECT_EQ(chunks, 24);
  ASSERT_GT(text.size(), static_cast<size_t>(characters(text)) + 4) << "too few multi-byte characters to tell: " << text;

  const auto whole = client.Post("/v1/completions", request.dump(), "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json choice = json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["text"], text);
  const json offsets = choice["logprobs"]["text_offset"];
  ASSERT_EQ(offsets.size(), 24u);
  EXPECT_EQ(offsets[0], 0);
  for (size_t i = 1; i < offsets.size(); ++i) EXPECT_GE(offsets[i], offsets[i - 1]);
  EXPECT_LE(offsets.back().get<int64_t>(), characters(text));
  runner.stop();
}

TEST(Server, ALoadThatFailsStopsTheServerAndRunThrowsItsError) {
  // The load fails at once, or only once run() listens: either way run() returns and names the failure.
  for (const int delay_ms : {0, 50}) {
    Server server({.port = 0}, [delay_ms]() -> ServedModel {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      throw Error("model.safetensors: no such file");
    });
    std::string error;
    std::thread runner([&] {
      try {
        server.run();
      } catch (const Error& e) {
        error = e.what();
      }
    });
    runner.join();
    EXPECT_EQ(error, "serve: loading the model failed: model.safetensors: no such file") << delay_ms << " ms";
  }
}

TEST(Server, AStopBeforeRunIsNotLost) {
  std::atomic<bool> release{false};
  Server server({.port = 0}, [&]() -> ServedModel {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    throw Error("not loaded");
  });
  server.stop();
  server.run();  // returns at once: stopped before it ran
  release = true;
}

}  // namespace
}  // namespace attend
