// `attend chat`: an interactive conversation with a chat model in the terminal. Each turn is the whole
// conversation rendered by the model's chat template (tokenizer_config.json, chat_template.jinja), of which only
// the tokens the session has not yet run go through the model: the KV cache carries the history. Replies stream
// as they are made and stop at the model's end-of-turn tokens.
#include "commands.h"
#include "signals.h"

#include <attend/chat_template.h>
#include <attend/error.h>
#include <attend/io.h>
#include <attend/generate.h>
#include <attend/model.h>
#include <attend/model_dir.h>
#include <attend/rng.h>
#include <attend/session.h>
#include <attend/tokenizer.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

namespace attend::cli {

namespace {

struct ChatSettings {
  std::string model_dir, tokenizer_path, template_path, template_name, system;
  std::vector<std::string> lora;
  int64_t max_new_tokens = 512;
  int64_t context = 4096;
  SamplingOptions sampling{.temperature = 0.7, .top_p = 0.9};
  std::string weights, kv_cache = "f16", eos_ids;
};

class Chat {
 public:
  Chat(const ChatSettings& s, const Model& model, const Tokenizer& tok, ChatTemplate tmpl)
      : s_(s), model_(model), tok_(tok), tmpl_(std::move(tmpl)), eos_(reply_end_tokens(s.model_dir, tok, &tmpl_, s.eos_ids)),
        rng_(s.sampling.seed) {
    check_token_ids(eos_, model.config().vocab_size, "end-of-turn token");
    reset();
  }

  void reset() {
    messages_.clear();
    if (!s_.system.empty()) messages_.push_back({"system", s_.system});
    session_.reset();
    fed_.clear();
  }

  // One user turn: the reply is streamed to stdout and kept in the history.
  void turn(const std::string& user) {
    messages_.push_back({"user", user});
    const std::string prompt = tmpl_.render(messages_, {.add_generation_prompt = true});
    // The template writes BOS and the turns' markers itself: encode as transformers' apply_chat_template does,
    // special tokens parsed and none added.
    const std::vector<int32_t> ids = tok_.encode(prompt, {.parse_special = true});
    const int64_t context = std::min<int64_t>(s_.context, model_.config().max_seq_len);
    if (static_cast<int64_t>(ids.size()) + 1 > context) {
      messages_.pop_back();
      throw Error(fmt::format("the conversation ({} tokens) no longer fits the context of {}: /reset", ids.size(),
                              context));
    }
    // Run only what the cache does not hold: the new tokens after the history it ran (all of them when the
    // rendering changed what came before).
    size_t same = 0;
    while (session_ && same < fed_.size() && same < ids.size() && fed_[same] == ids[same]) ++same;
    if (!session_ || same < fed_.size() || same == ids.size()) {
      session_.emplace(model_, SessionOptions{.max_T = context, .cache = parse_cache_type(s_.kv_cache)});
      fed_.clear();
      same = 0;
    }
    // Ctrl-C during a reply (or the run of its prompt) ends the reply, what it said so far staying in the history, and
    // the conversation goes on; at the prompt it leaves, as the default action. SIGTERM leaves either way.
    std::atomic<int> interrupted{0};
    std::optional<StopOnSignal> on_signal(std::in_place, [&](int signal) { interrupted = signal; });
    std::span<const float> logits = session_->step(std::span(ids).subspan(same));
    fed_ = ids;
    std::vector<int32_t> reply;
    StreamDecoder reply_text(tok_, /*skip_special=*/true);
    std::string printed;
    const int64_t V = sampled_vocab(model_, &tok_);  // not the ids a padded vocabulary has past the tokenizer's
    const int64_t budget = std::min<int64_t>(s_.max_new_tokens, context - static_cast<int64_t>(fed_.size()));
    for (int64_t i = 0; i < budget && interrupted == 0; ++i) {
      const int32_t token = sample_token(logits.data(), V, s_.sampling, rng_.uniform_double());
      if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) break;
      reply.push_back(token);
      reply_text.push(token);
      const std::string& text = reply_text.settled();  // a half-made character waits for its bytes
      if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
        fmt::print("{}", text.substr(printed.size()));
        std::fflush(stdout);
        printed = text;
      }
      if (i + 1 < budget) {
        logits = session_->step(std::span(&token, 1));
        fed_.push_back(token);
      }
    }
    on_signal.reset();
    const std::string text = tok_.decode(reply, /*skip_special=*/true);
    if (text.size() > printed.size()) fmt::print("{}", text.substr(printed.size()));
    fmt::print("\n");
    std::fflush(stdout);
    messages_.push_back({"assistant", text});
    if (interrupted == SIGTERM) throw ExitStatus{128 + SIGTERM};
    if (interrupted != 0) fmt::print(stderr, "(reply interrupted)\n");
  }

 private:
  const ChatSettings& s_;
  const Model& model_;
  const Tokenizer& tok_;
  ChatTemplate tmpl_;
  std::vector<int32_t> eos_;
  Rng rng_;
  std::vector<ChatMessage> messages_;
  std::optional<Session> session_;
  std::vector<int32_t> fed_;  // the tokens the session has run, in order
};

}  // namespace

ChatTemplate model_chat_template(const std::string& model, const Tokenizer& tok, const std::string& template_path,
                                 const std::string& template_name) {
  if (!template_path.empty())
    return template_path.ends_with(".json")
               ? ChatTemplate::from_tokenizer_config(read_file(template_path), template_path, template_name)
               : ChatTemplate::from_string(read_file(template_path), template_path);
  if (!is_gguf_file(model)) return ChatTemplate::from_model_dir(model, template_name);
  // A GGUF file's tokenizer.chat_template, with the tokenizer's BOS and EOS as the template's.
  const std::optional<std::string> source = gguf_chat_template(model);
  check(source.has_value(), "{}: no tokenizer.chat_template in the file; give --template", model);
  nlohmann::json config = {{"chat_template", *source}};
  for (const auto& [role, key] : {std::pair{SpecialRole::Bos, "bos_token"}, {SpecialRole::Eos, "eos_token"}})
    if (const std::optional<int32_t> id = tok.special_id(role)) config[key] = tok.id_to_token(*id);
  return ChatTemplate::from_tokenizer_config(config.dump(), model + " (tokenizer.chat_template)", template_name);
}

std::vector<int32_t> reply_end_tokens(const std::string& model, const Tokenizer& tok, const ChatTemplate* tmpl,
                                      const std::string& eos) {
  if (!eos.empty()) return parse_ids(eos, "--eos");
  std::vector<int32_t> ids = read_generation_defaults(model).eos;
  if (tmpl != nullptr && !tmpl->eos_token().empty())
    if (const auto id = tok.token_to_id(tmpl->eos_token())) ids.push_back(*id);
  if (const auto id = tok.special_id(SpecialRole::Eos)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Talk with a chat model in the terminal: the model's chat template, streamed "
                                         "replies, the history kept (/reset clears it, Ctrl-C stops a reply, /exit or end of input leaves)");
  static ChatSettings s;
  cmd->add_option("--model", s.model_dir, "A model directory with a tokenizer and a chat template (e.g. a Hugging Face "
                                          "instruct checkpoint), or a GGUF file holding both")->required();
  cmd->add_option("--tokenizer", s.tokenizer_path, "The tokenizer, if not in the model directory");
  cmd->add_option("--template", s.template_path, "A chat template (a .jinja file, or a tokenizer_config.json), if not "
                                                 "the model directory's");
  cmd->add_option("--template-name", s.template_name, "Which of a config's named templates (e.g. tool_use)");
  cmd->add_option("--system", s.system, "A system message that starts the conversation");
  cmd->add_option("--max-new-tokens", s.max_new_tokens, "Tokens a reply may have at most")->capture_default_str();
  cmd->add_option("--context", s.context, "Tokens the conversation may hold (at most the model's)")->capture_default_str();
  auto* greedy = cmd->add_flag("--greedy", s.sampling.greedy, "Always take the most likely token");
  cmd->add_option("--temperature", s.sampling.temperature, "Softmax temperature (0 is --greedy)")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--top-k", s.sampling.top_k, "Sample from the k most likely tokens (0: all)")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--top-p", s.sampling.top_p, "Sample from the smallest set of probability ≥ p, in (0, 1]")
      ->capture_default_str()->excludes(greedy);
  cmd->add_option("--seed", s.sampling.seed, "Seed of the sampling")->capture_default_str();
  cmd->add_option("--weights", s.weights, std::string(kWeightsHelp) + " (default: bf16, or as a GGUF file stores them)");
  cmd->add_option("--lora", s.lora, kLoraHelp);
  cmd->add_option("--kv-cache", s.kv_cache, "f32, f16 or int8: the KV cache's storage")->capture_default_str();
  cmd->add_option("--eos", s.eos_ids, "End a reply at these token ids (default: the model's end-of-turn tokens)");
  cmd->callback([] {
    check(s.max_new_tokens >= 1, "--max-new-tokens must be at least 1, got {}", s.max_new_tokens);
    check(s.context >= 2, "--context must be at least 2 (a prompt token and a reply's), got {}", s.context);
    settle_sampling(s.sampling);
    Model model = load_for_running(s.model_dir, s.lora, s.weights, WeightType::BF16);
    check(model.config().architecture == Architecture::Decoder, "chat: {} is an {} model; chat needs a decoder",
          s.model_dir, architecture_name(model.config().architecture));
    std::optional<Tokenizer> own = s.tokenizer_path.empty() ? model_tokenizer(s.model_dir) : Tokenizer::load(s.tokenizer_path);
    check(own.has_value(), "{}: no tokenizer; give --tokenizer", s.model_dir);
    const Tokenizer tok = std::move(*own);
    ChatTemplate tmpl = model_chat_template(s.model_dir, tok, s.template_path, s.template_name);
    Chat chat(s, model, tok, std::move(tmpl));
    const bool interactive = ::isatty(STDIN_FILENO) != 0;
    constexpr const char* kCommands =
        "/reset clears the history, /exit or Ctrl-D leaves, Ctrl-C stops a reply, /help lists these";
    if (interactive) fmt::print(stderr, "{}: chat ({})\n", s.model_dir, kCommands);
    std::string line;
    bool failed = false;
    while (true) {
      if (interactive) fmt::print("> "), std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      // A line that is one word after a slash is a command; any other line (a path, a sentence) is the user's turn.
      if (line.size() > 1 && line[0] == '/' &&
          std::all_of(line.begin() + 1, line.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); })) {
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
          chat.reset();
          fmt::print(stderr, "(history cleared)\n");
        } else if (line == "/help") {
          fmt::print(stderr, "{}\n", kCommands);
        } else {
          fmt::print(stderr, "attend: unknown command {} ({})\n", line, kCommands);
          failed = true;
        }
        continue;
      }
      if (line.empty()) continue;
      try {
        chat.turn(line);
      } catch (const Error& e) {  // a template that refuses the conversation, a full context: say so, go on
        fmt::print(stderr, "attend: {}\n", e.what());
        failed = true;
      }
    }
    if (interactive) fmt::print("\n");
    // A session read from a pipe ends non-zero when a turn failed, for the script that ran it.
    if (failed && !interactive) throw ExitStatus{1};
  });
}

}  // namespace attend::cli
