// attend::Tokenizer: text <-> token ids (001 §5, 004 §11.3).
//
// Three families, one class:
//   BPE             byte-level (GPT-2, Llama 3, Qwen, GPT-4o, DeepSeek) or over characters with <0xNN> byte
//                   fallback (Llama 2, Gemma); loads encoder.json + vocab.bpe too
//   WordPiece       (BERT): "##" continuation pieces, [UNK] for words it cannot spell
//   Unigram         (SentencePiece, T5): Viterbi over piece log-probabilities, "▁" marks word starts,
//                   <0xNN> byte fallback; loads SentencePiece .model files
// A tokenizer.json runs Hugging Face's whole pipeline (added tokens, normalizer, pre-tokenizer, model,
// post-processor, decoder) and encodes and decodes as its tokenizers library does (docs/FORMATS.md).
// Attend's own tokenizers are saved as Hugging Face tokenizer.json, so other tools can read them.
//
//   auto tok = attend::Tokenizer::load("data/gpt2");          // a directory, tokenizer.json or .model
//   std::vector<int32_t> ids = tok.encode("The cat sat on");  // {464, 3797, 3332, 319}
//   std::string text = tok.decode(ids);
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attend {

enum class TokenizerKind { BPE, WordPiece, Unigram };

// The roles special tokens play. A role is bound to a token of the vocabulary; binding one to a token
// that does not exist is an error.
enum class SpecialRole { Bos, Eos, Pad, Unk, Mask, Cls, Sep };
std::string_view role_name(SpecialRole role);
// "bos", "eos", "pad", "unk", "mask", "cls" or "sep"; anything else is an error naming the choices.
SpecialRole parse_role(std::string_view name);

// How encode() adds special tokens. Two ways, which compose (add_bos/add_eos first, then the post-processor):
//   add_special_tokens  the tokenizer's own post-processor, as Hugging Face's encode(text, add_special_tokens)
//                       and transformers' tokenizer(text) do: tokenizer.json's TemplateProcessing /
//                       BertProcessing / RobertaProcessing, or, for a directory whose tokenizer_config.json sets
//                       add_bos_token / add_eos_token, the "BOS? $A EOS?" template transformers builds from them.
//                       This is what a prompt for a pretrained model wants (Tokenizer::encode_prompt).
//   add_bos / add_eos   one BOS (CLS) / EOS (SEP) token by role, whatever the file says: for training data
//                       and for tokenizers without a post-processor (GPT-2's files, Attend's own).
// parse_special=false is Hugging Face's encode_special_tokens: special added tokens written in the text are
// encoded as text; non-special added tokens are still matched.
struct EncodeOptions {
  bool add_bos = false;       // prepend the BOS token (CLS for WordPiece)
  bool add_eos = false;       // append the EOS token (SEP for WordPiece)
  bool parse_special = true;  // special tokens written in the text ("<|endoftext|>") become their ids
  bool add_special_tokens = false;  // apply the tokenizer's post-processor (see above)
};

// Sequences padded (or cut) to one length, row-major (rows, length).
struct PaddedBatch {
  int64_t rows = 0;
  int64_t length = 0;
  std::vector<int32_t> ids;      // padded with the PAD id
  std::vector<int32_t> lengths;  // real tokens in each row
};

struct TokenizerTrainOptions {
  TokenizerKind kind = TokenizerKind::BPE;
  int32_t vocab_size = 8000;     // e.g. 50257 for GPT-2, 30522 for BERT, 32000 for T5
  int64_t min_frequency = 2;     // BPE/WordPiece: pairs seen fewer times are not merged
  // Special tokens, given the first ids in this order. Empty: the family's usual set
  // (BPE: <|endoftext|>; WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK]; Unigram: <pad> <unk> <s> </s> <mask>).
  std::vector<std::string> special_tokens;
  bool lowercase = false;        // WordPiece: BERT's uncased models lower-case and strip accents
  bool strip_accents = false;
  int32_t max_piece_chars = 16;  // Unigram: longest piece considered, in characters
  bool byte_fallback = true;     // Unigram: <0x00>..<0xFF> pieces spell characters outside the vocabulary
  // Called now and then with a stage name and (done, total) for a progress bar.
  std::function<void(std::string_view stage, int64_t done, int64_t total)> progress;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json, a SentencePiece .model, or a directory holding tokenizer.json, GPT-2's
  // encoder.json + vocab.bpe (or Hugging Face's names for them, vocab.json + merges.txt) or a SentencePiece
  // model. In a directory, tokenizer_config.json beside tokenizer.json adds what transformers reads from it:
  // bos_token/eos_token/pad_token/unk_token roles and add_bos_token/add_eos_token (see EncodeOptions).
  // Errors name the file and the entry at fault.
  static Tokenizer load(const std::filesystem::path& path);
  // Whether directory `dir` holds a tokenizer load(dir) reads (tokenizer.json, encoder.json + vocab.bpe, their
  // Hugging Face names vocab.json + merges.txt, or a SentencePiece model).
  static bool found_in(const std::filesystem::path& dir);
  // Reads a Hugging Face tokenizer.json from memory; `origin` names it in errors.
  static Tokenizer from_json(std::string_view json, std::string_view origin = "tokenizer.json");
  // Applies a tokenizer_config.json (its text; `origin` names it in errors) as load() does for a directory.
  void apply_config(std::string_view config_json, std::string_view origin = "tokenizer_config.json");
  // Loads GPT-2's published encoder.json and vocab.bpe.
  static Tokenizer from_gpt2_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe);
  // The same from the two files' bytes in memory; the origins name them in errors.
  static Tokenizer from_gpt2(std::string_view encoder_json, std::string_view vocab_bpe,
                             std::string_view encoder_origin = "encoder.json", std::string_view merges_origin = "vocab.bpe");
  // Reads a SentencePiece .model (a serialised ModelProto) from memory; `origin` names it in errors.
  static Tokenizer from_sentencepiece(std::string_view model, std::string_view origin = "tokenizer.model");
  // Trains on plain-text files (UTF-8, any size).
  static Tokenizer train(const std::vector<std::filesystem::path>& files, const TokenizerTrainOptions& options);
  // Trains on text in memory.
  static Tokenizer train_from_text(std::string_view text, const TokenizerTrainOptions& options);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Writes Hugging Face tokenizer.json (through a temporary file and a rename).
  void save(const std::filesystem::path& path) const;
  std::string to_json() const;
  // A 64-bit hash of to_json() (FNV-1a): equal for tokenizers that save the same file, so a cache of token ids
  // can name the tokenizer it was made with. Worked out on the first call and kept until the tokenizer changes.
  uint64_t fingerprint() const;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // A prompt as the model's own tokenizer encodes it: encode(text, {.add_special_tokens = true}).
  std::vector<int32_t> encode_prompt(std::string_view text) const { return encode(text, {.add_special_tokens = true}); }
  // Encodes many texts, in parallel over the kernel threads.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts,
                                                 const EncodeOptions& options = {}) const;
  // Pads every sequence with PAD to `length` (0: the longest), cutting longer ones when `truncate`.
  PaddedBatch pad(std::span<const std::vector<int32_t>> sequences, int64_t length = 0, bool truncate = true) const;

  // The text of `ids` as Hugging Face's decode(ids, skip_special_tokens) gives it (its decoder; bytes that are
  // not UTF-8 become U+FFFD); special tokens are written out unless `skip_special`. Unknown ids are an error.
  // id_to_bytes gives the exact bytes of each id, for streaming.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  TokenizerKind kind() const;
  int32_t vocab_size() const;
  // The id of a token given as it is written in the vocabulary file, or nothing.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token as the vocabulary file writes it (GPT-2's byte-to-unicode letters for byte-level BPE).
  std::string id_to_token(int32_t id) const;
  // The bytes an id decodes to on its own.
  std::string id_to_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // The bytes of text an id stands for: what it adds to a decoded text after a token (a word's space included,
  // WordPiece's ## and Metaspace's ▁ as the decoder undoes them), 1 for a byte piece, 0 for special tokens (a
  // document's end is no text). The denominator of loss per byte.
  int64_t text_bytes(int32_t id) const;

  std::optional<int32_t> special_id(SpecialRole role) const;
  // Binds a role to an existing token; an unknown token is an error naming it.
  void set_special(SpecialRole role, std::string_view token);
  // Adds a special token (a new id at the end unless it is already in the vocabulary) and returns its id.
  int32_t add_special_token(std::string_view content);

  // One line: family, vocabulary size, special tokens.
  std::string describe() const;

  // The pipeline inside (src/tokenize/tokenizer_impl.h); the loaders and trainers build one.
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;  // which ids are byte pieces
};

// The text of ids that come one at a time (a generation being streamed): decode(every id so far), without
// decoding them all again for each one. A new id is decoded behind a few ids of context, and the text it adds is
// the difference between that and the context's own text: whatever a decoder does at the start of a text
// (Metaspace's first space, Strip) falls on the context in both. The context moves on only past text that is
// whole: while bytes of a character are still to come (they decode as U+FFFD), the ids since stay in the window.
// Where the context's text does not begin the window's, everything is decoded again.
//
//   attend::StreamDecoder text(tokenizer, /*skip_special=*/true);
//   for (int32_t id : generated) std::cout << text.push(id).substr(shown), shown = text.text().size();
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  // Appends `id` and returns the text of every id so far.
  const std::string& push(int32_t id);
  const std::string& text() const { return text_; }
  // What a stream can hand out: the start of text() up to a character whose bytes are still to come (a U+FFFD in
  // text one of the last eight ids changed; an older U+FFFD is the text's own, a stray byte that must not hold
  // back the rest of a generation), and before a run of byte pieces younger than eight ids (ByteFallback decodes a
  // run as one: U+FFFD for each of its bytes while it is not UTF-8, characters already whole included). It only
  // grows; while a new id has rewritten part of it, it waits.
  const std::string& settled() const { return settled_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;  // the context is ids_[prefix_, read_); the text of ids_[0, read_) is whole
  std::string whole_;             // the text of ids_[0, read_)
  std::string context_;           // the text of the context alone
  std::string text_;              // whole_ and what the ids from read_ add
  std::string previous_;          // text_ before the last id
  std::array<size_t, 8> changes_{};  // for the last eight ids, where each changed text_ (the length it kept)
  size_t run_ = 0, run_from_ = 0; // the trailing run of byte pieces: its ids, where its text begins
  std::string settled_;

  void decode_next(int32_t id);   // ids_, text_ and the context with `id`
  bool byte_piece(int32_t id) const;
};

}  // namespace attend
