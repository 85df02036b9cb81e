// `attend tokenizer train`, `attend tokenizer info`, `attend tokenize` and `attend detokenize`.
#include "commands.h"
#include "progress.h"

#include <attend/error.h>
#include <attend/io.h>
#include <attend/model_dir.h>
#include <attend/tokenizer.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace attend::cli {

namespace fs = std::filesystem;

namespace {

// --tokenizer: a tokenizer file or a model directory (Tokenizer::load), or a GGUF model file's tokenizer (it was read as
// JSON: "not valid JSON ... 'G'").
Tokenizer load_tokenizer_file(const std::string& path) {
  if (!is_gguf_file(path)) return Tokenizer::load(path);
  std::optional<Tokenizer> tok = load_gguf_tokenizer(path);
  check(tok.has_value(), "{}: a GGUF file without a tokenizer (tokenizer.ggml.*)", path);
  return std::move(*tok);
}

const char* kPathHelp =
    "Tokenizer: a tokenizer.json, a SentencePiece .model, or a directory holding tokenizer.json or GPT-2's "
    "encoder.json + vocab.bpe";

TokenizerKind parse_kind(const std::string& kind) {
  if (kind == "bpe") return TokenizerKind::BPE;
  if (kind == "wordpiece") return TokenizerKind::WordPiece;
  if (kind == "unigram") return TokenizerKind::Unigram;
  throw Error(fmt::format("--kind '{}': expected bpe, wordpiece or unigram", kind));
}

void add_train(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("train", "Train a tokenizer on text files and save it as tokenizer.json");
  struct Options {
    std::string kind = "bpe";
    TokenizerTrainOptions train;
    std::vector<std::string> inputs;
    std::string output = "tokenizer.json";
    bool no_byte_fallback = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--kind", o->kind, "bpe (byte-level, GPT-2 style), wordpiece (BERT) or unigram (SentencePiece)")
      ->capture_default_str()->check(CLI::IsMember({"bpe", "wordpiece", "unigram"}));
  cmd->add_option("--vocab-size", o->train.vocab_size, "Tokens in the vocabulary, special tokens included")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--input", o->inputs, "Plain-text (UTF-8) training files")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output, "Where to write tokenizer.json (a directory gets tokenizer.json inside)")
      ->capture_default_str();
  cmd->add_option("--min-frequency", o->train.min_frequency, "bpe/wordpiece: pairs seen fewer times are not merged")
      ->capture_default_str();
  cmd->add_option("--special", o->train.special_tokens,
                  "Special tokens, given ids 0, 1, ... in order (default: <|endoftext|> for bpe; "
                  "[PAD] [UNK] [CLS] [SEP] [MASK] for wordpiece; <pad> <unk> <s> </s> <mask> for unigram)");
  cmd->add_flag("--lowercase", o->train.lowercase, "wordpiece: lower-case the text (BERT uncased)");
  cmd->add_flag("--strip-accents", o->train.strip_accents, "wordpiece: remove accents (NFD, then drop marks)");
  cmd->add_option("--max-piece-chars", o->train.max_piece_chars, "unigram: longest piece, in characters")
      ->capture_default_str();
  cmd->add_flag("--no-byte-fallback", o->no_byte_fallback, "unigram: no <0xNN> pieces; unknown characters become <unk>");
  cmd->callback([o] {
    o->train.kind = parse_kind(o->kind);
    o->train.byte_fallback = !o->no_byte_fallback;
    fs::path out = o->output;
    if (fs::is_directory(out)) out /= "tokenizer.json";
    // The directory the file goes in, made before training rather than failing after it.
    std::error_code ec;
    if (!out.parent_path().empty()) fs::create_directories(out.parent_path(), ec);
    check(!ec, "{}: cannot create the directory for the tokenizer: {}", out.parent_path().string(), ec.message());
    auto bar = std::make_shared<ProgressBar>("reading");
    o->train.progress = [bar](std::string_view stage, int64_t done, int64_t total) { bar->update(stage, done, total); };
    const auto start = std::chrono::steady_clock::now();
    std::vector<fs::path> files(o->inputs.begin(), o->inputs.end());
    const Tokenizer tok = Tokenizer::train(files, o->train);
    bar->finish();
    tok.save(out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("wrote {}: {} (trained in {:.2f} s)\n", out.string(), tok.describe(), seconds);
  });
}

void add_info(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("info", "Describe a tokenizer: family, vocabulary size, special tokens");
  auto path = std::make_shared<std::string>();
  cmd->add_option("tokenizer", *path, kPathHelp)->required();
  cmd->callback([path] { fmt::print("{}\n", load_tokenizer_file(*path).describe()); });
}

}  // namespace

void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, std::string_view what) {
  for (const int32_t id : ids)
    check(id >= 0 && id < vocab, "{} {}: not a token id of the model's vocabulary of {}", what, id, vocab);
}

// "1,2,3", "1 2 3" or one per line; anything else names the bad entry.
std::vector<int32_t> parse_ids(const std::string& text, std::string_view origin) {
  std::vector<int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used == token.size() && v >= 0 && v <= INT32_MAX, "{}: '{}' is not a token id (expected a non-negative integer)",
          origin, token);
    ids.push_back(static_cast<int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') flush();
    else token += c;
  }
  flush();
  return ids;
}

void add_tokenizer_commands(CLI::App& app) {
  auto* group = app.add_subcommand("tokenizer", "Train or inspect tokenizers (BPE, WordPiece, Unigram)");
  group->require_subcommand(1);
  add_train(*group);
  add_info(*group);

  struct EncodeOptions {
    std::string tokenizer, text, input;
    bool json = false, bos = false, eos = false, no_special = false, no_special_tokens = false, stats = false;
  };
  auto e = std::make_shared<EncodeOptions>();
  auto* tokenize = app.add_subcommand("tokenize", "Encode text to token ids (printed space-separated, or as JSON)");
  tokenize->add_option("--tokenizer", e->tokenizer, kPathHelp)->required();
  auto* text = tokenize->add_option("--text", e->text, "The text to encode");
  auto* input = tokenize->add_option("--input", e->input, "A file to encode (as one text)")->check(CLI::ExistingFile);
  text->excludes(input);
  tokenize->add_flag("--json", e->json, "Print {\"ids\": [...], \"tokens\": [...]}");
  tokenize->add_flag("--bos", e->bos, "Prepend the BOS token (CLS for WordPiece) instead of the tokenizer's own special tokens");
  tokenize->add_flag("--eos", e->eos, "Append the EOS token (SEP for WordPiece) instead of the tokenizer's own special tokens");
  tokenize->add_flag("--no-special-tokens", e->no_special_tokens,
                     "Add no special tokens (by default the tokenizer's post-processor adds them, as Hugging Face's "
                     "encode does: BERT's [CLS] ... [SEP], Llama's <s> ...)");
  tokenize->add_flag("--no-special", e->no_special, "Encode special-token text like <|endoftext|> as plain text");
  tokenize->add_flag("--stats", e->stats, "Print bytes, tokens and speed to stderr");
  tokenize->callback([e, text, input] {
    check(text->count() + input->count() == 1, "tokenize: give the text with --text or a file with --input");
    const Tokenizer tok = load_tokenizer_file(e->tokenizer);
    const std::string content = input->count() ? read_file(e->input) : e->text;
    const auto start = std::chrono::steady_clock::now();
    // --bos/--eos put the role's tokens in place of the post-processor's.
    const bool post = !e->no_special_tokens && !e->bos && !e->eos;
    const auto ids = tok.encode(content, {.add_bos = e->bos, .add_eos = e->eos, .parse_special = !e->no_special,
                                          .add_special_tokens = post});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (e->json) {
      nlohmann::json tokens = nlohmann::json::array();
      for (int32_t id : ids) tokens.push_back(tok.id_to_token(id));
      fmt::print("{}\n", nlohmann::json{{"ids", ids}, {"tokens", tokens}}.dump(-1, ' ', false,
                                                                               nlohmann::json::error_handler_t::replace));
    } else {
      fmt::memory_buffer out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(' ');
        fmt::format_to(std::back_inserter(out), "{}", ids[i]);
      }
      out.push_back('\n');
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    if (e->stats)
      fmt::print(stderr, "{} bytes -> {} tokens ({:.2f} bytes/token) in {:.3f} s, {:.1f} MB/s\n", content.size(),
                 ids.size(), ids.empty() ? 0.0 : static_cast<double>(content.size()) / static_cast<double>(ids.size()),
                 seconds, static_cast<double>(content.size()) / 1e6 / std::max(seconds, 1e-9));
  });

  struct DecodeOptions {
    std::string tokenizer, ids, input;
    bool skip_special = false;
  };
  auto d = std::make_shared<DecodeOptions>();
  auto* detokenize = app.add_subcommand("detokenize", "Decode token ids back to text");
  detokenize->add_option("--tokenizer", d->tokenizer, kPathHelp)->required();
  auto* ids = detokenize->add_option("--ids", d->ids, "Token ids, e.g. \"464,3797,3332,319\" or \"464 3797\"");
  auto* ids_file = detokenize->add_option("--input", d->input, "A file of token ids (as `attend tokenize` prints them)")
                       ->check(CLI::ExistingFile);
  ids->excludes(ids_file);
  detokenize->add_flag("--skip-special", d->skip_special, "Leave special tokens out of the text");
  detokenize->callback([d, ids, ids_file] {
    check(ids->count() + ids_file->count() == 1, "detokenize: give the ids with --ids or a file with --input");
    const Tokenizer tok = load_tokenizer_file(d->tokenizer);
    const std::string source = ids->count() ? d->ids : read_file(d->input);
    const std::string text = tok.decode(parse_ids(source, ids->count() ? "--ids" : d->input), d->skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  });
}

}  // namespace attend::cli
