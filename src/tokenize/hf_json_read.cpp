// Reading Hugging Face's tokenizer.json: the model (BPE, WordPiece, Unigram), added tokens, the
// normaliser / pre-tokeniser / post-processor / decoder pipeline, and the special tokens' roles. Every error
// names the file and the entry at fault.
#include "core/base64.h"
#include "core/json_fields.h"
#include "tokenize/json_reader.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>
#include <attend/log.h>

#include <algorithm>
#include <climits>
#include <map>

namespace attend {

namespace tokenize {

std::vector<std::string> dense_vocab(const json& vocab, const Reader& r, bool byte_letters,
                                     std::unordered_map<int32_t, std::string>* unspellable, std::vector<int32_t>* gaps) {
  check(vocab.is_object(), "{}: model.vocab is {}, expected an object of token: id", r.origin, vocab.type_name());
  // Ids may leave gaps (GPT-4o's vocabulary has no 199998), but not so many that a stray id sizes the table.
  const size_t limit = gaps ? 2 * vocab.size() + 256 : vocab.size();
  int64_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    const int64_t id = r.integer(id_json, fmt::format("model.vocab[{:?}]", token));
    check(id >= 0 && id < static_cast<int64_t>(limit), "{}: model.vocab[{:?}] has id {}, expected 0 to {} ({})", r.origin,
          token, id, limit - 1, gaps ? "at most twice the vocabulary's size" : "ids must be dense");
    max_id = std::max(max_id, id);
  }
  std::vector<std::string> tokens(static_cast<size_t>(max_id + 1));
  std::vector<bool> seen(tokens.size(), false);
  for (const auto& [token, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    check(!seen[static_cast<size_t>(id)], "{}: model.vocab gives id {} to two tokens", r.origin, id);
    seen[static_cast<size_t>(id)] = true;
    if (byte_letters) {
      auto bytes = gpt2_letters_to_bytes(token);
      check(bytes.has_value() || unspellable, "{}: model.vocab token {:?} (id {}) is not written in GPT-2's byte letters",
            r.origin, token, id);
      // A token in other characters (DeepSeek's special tokens) is one no byte sequence spells: it is kept by
      // its text, outside the model's index.
      if (bytes) tokens[static_cast<size_t>(id)] = std::move(*bytes);
      else (*unspellable)[static_cast<int32_t>(id)] = token;
    } else {
      tokens[static_cast<size_t>(id)] = token;
    }
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (!seen[id]) gaps->push_back(static_cast<int32_t>(id));
  return tokens;
}

AddedToken read_added_token(const json& entry, const Reader& r, const std::string& path, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = r.string(r.field(entry, path, "content"), path + ".content");
  a.special = r.boolean(r.optional(entry, "special"), path + ".special", false);
  a.lstrip = r.boolean(r.optional(entry, "lstrip"), path + ".lstrip", false);
  a.rstrip = r.boolean(r.optional(entry, "rstrip"), path + ".rstrip", false);
  a.single_word = r.boolean(r.optional(entry, "single_word"), path + ".single_word", false);
  a.normalized = r.boolean(r.optional(entry, "normalized"), path + ".normalized", !a.special);
  return a;
}

std::vector<BpeModel::Merge> read_merges(const json& merges, const Reader& r, const BpeModel& vocab_only,
                                         bool byte_letters) {
  check(merges.is_array(), "{}: model.merges is {}, expected an array", r.origin, merges.type_name());
  std::vector<BpeModel::Merge> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {  // "Ġ t"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      check(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
            "{}: model.merges[{}] is {:?}, expected two tokens separated by one space", r.origin, i, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
            "{}: model.merges[{}] is {}, expected \"left right\" or [\"left\", \"right\"]", r.origin, i, m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    auto id_of = [&](const std::string& t) {
      std::optional<std::string> bytes = byte_letters ? gpt2_letters_to_bytes(t) : std::optional<std::string>(t);
      const int32_t id = bytes ? vocab_only.find(*bytes) : -1;
      check(id >= 0, "{}: model.merges[{}] names {:?}, which is not in model.vocab", r.origin, i, t);
      return id;
    };
    out.push_back({id_of(left), id_of(right)});
  }
  return out;
}

}  // namespace tokenize

using namespace tokenize;

namespace {

void read_added_tokens(const json& j, const Reader& r, Tokenizer::Impl& m) {
  const json* added = r.optional(j, "added_tokens");
  if (!added) return;
  check(added->is_array(), "{}: added_tokens is {}, expected an array", r.origin, added->type_name());
  for (size_t i = 0; i < added->size(); ++i) {
    const json& t = (*added)[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    const int64_t id = r.integer(r.field(t, path, "id"), path + ".id");
    check(id >= 0 && id < INT32_MAX, "{}: {}.id is {}, expected a token id (0 or more)", r.origin, path, id);
    m.added.push_back(read_added_token(t, r, path, static_cast<int32_t>(id)));
  }
}

// Roles named by the post-processor (BOS/EOS or CLS/SEP) and by padding.
void read_roles(const json& j, const Reader& r, Tokenizer::Impl& m) {
  const auto [first, last] = m.post_processor.ends();
  const bool cls = m.kind == TokenizerKind::WordPiece ||
                   std::any_of(m.post_processor.steps.begin(), m.post_processor.steps.end(),
                               [](const PostStep& s) { return s.kind != PostStep::Kind::Template; });
  if (first >= 0) m.roles[static_cast<size_t>(cls ? SpecialRole::Cls : SpecialRole::Bos)] = first;
  if (last >= 0) m.roles[static_cast<size_t>(cls ? SpecialRole::Sep : SpecialRole::Eos)] = last;
  if (const json* padding = r.optional(j, "padding"); padding && padding->contains("pad_token")) {
    const std::string pad = r.string((*padding)["pad_token"], "padding.pad_token");
    for (const AddedToken& t : m.added)
      if (t.content == pad) m.roles[static_cast<size_t>(SpecialRole::Pad)] = t.id;
  }
}

std::string optional_string(const json& obj, const Reader& r, const char* field) {
  const json* v = r.optional(obj, field);
  return v ? r.string(*v, std::string("model.") + field) : std::string();
}

void read_bpe(const json& model, const Reader& r, Tokenizer::Impl& m) {
  m.kind = TokenizerKind::BPE;
  if (const json* d = r.optional(model, "dropout"))
    check(d->is_number() && d->get<double>() == 0.0,
          "{}: model.dropout is {}; BPE dropout samples merges at random, expected null or 0", r.origin, d->dump());
  const bool byte_level = m.byte_level;
  std::vector<std::string> tokens = dense_vocab(r.field(model, "model", "vocab"), r, byte_level, &m.unspellable, &m.vocab_gaps);
  BpeModel::Options o;
  o.byte_fallback = r.boolean(r.optional(model, "byte_fallback"), "model.byte_fallback", false);
  o.fuse_unk = r.boolean(r.optional(model, "fuse_unk"), "model.fuse_unk", false);
  o.prefix = optional_string(model, r, "continuing_subword_prefix");
  o.suffix = optional_string(model, r, "end_of_word_suffix");
  o.last_merge_wins = true;
  check(!byte_level || (o.prefix.empty() && o.suffix.empty()),
        "{}: model.continuing_subword_prefix/end_of_word_suffix with a ByteLevel pre-tokenizer are not supported", r.origin);
  const auto symbols = byte_level ? BpeModel::Symbols::Bytes : BpeModel::Symbols::Characters;
  BpeModel vocab_only(tokens, {}, symbols, -1, {}, o);
  const auto merges = read_merges(r.field(model, "model", "merges"), r, vocab_only, byte_level);
  int32_t unk = -1;
  if (const json* u = r.optional(model, "unk_token")) {
    const std::string name = r.string(*u, "model.unk_token");
    std::optional<std::string> bytes = byte_level ? gpt2_letters_to_bytes(name) : std::optional<std::string>(name);
    unk = bytes ? vocab_only.find(*bytes) : -1;
    // Hugging Face accepts an unk_token outside the vocabulary until an unknown character needs it.
    if (unk < 0) unk = -1;
  }
  m.model = BpeModel(std::move(tokens), merges, symbols, unk, {}, o);
  std::get<BpeModel>(m.model).set_ignore_merges(r.boolean(r.optional(model, "ignore_merges"), "model.ignore_merges", false));
}

void read_wordpiece(const json& model, const Reader& r, Tokenizer::Impl& m) {
  m.kind = TokenizerKind::WordPiece;
  std::vector<std::string> tokens = dense_vocab(r.field(model, "model", "vocab"), r, false, nullptr, &m.vocab_gaps);
  const std::string unk_token = r.string(r.field(model, "model", "unk_token"), "model.unk_token");
  int32_t unk = -1;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == unk_token) unk = static_cast<int32_t>(i);
  check(unk >= 0, "{}: model.unk_token {:?} is not in model.vocab", r.origin, unk_token);
  std::string prefix = "##";
  if (const json* p = r.optional(model, "continuing_subword_prefix")) prefix = r.string(*p, "model.continuing_subword_prefix");
  int64_t max_chars = 100;
  if (const json* p = r.optional(model, "max_input_chars_per_word")) max_chars = r.integer(*p, "model.max_input_chars_per_word");
  check(max_chars > 0 && max_chars < INT32_MAX, "{}: model.max_input_chars_per_word is {}, expected a positive count",
        r.origin, max_chars);
  m.model = WordPieceModel(std::move(tokens), unk, prefix, static_cast<int32_t>(max_chars));
}

void read_unigram(const json& model, const Reader& r, Tokenizer::Impl& m) {
  m.kind = TokenizerKind::Unigram;
  const json& vocab = r.field(model, "model", "vocab");
  check(vocab.is_array(), "{}: model.vocab is {}, expected an array of [piece, score]", r.origin, vocab.type_name());
  const bool byte_fallback = r.boolean(r.optional(model, "byte_fallback"), "model.byte_fallback", false);
  int64_t unk = -1;
  if (const json* u = r.optional(model, "unk_id")) unk = r.integer(*u, "model.unk_id");
  std::vector<UnigramPiece> pieces;
  pieces.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& e = vocab[i];
    check(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(),
          "{}: model.vocab[{}] is {}, expected [piece, score]", r.origin, i, e.dump());
    UnigramPiece p{e[0].get<std::string>(), e[1].get<double>(), PieceType::Normal};
    if (static_cast<int64_t>(i) == unk) p.type = PieceType::Unknown;
    else if (byte_fallback && p.text.size() == 6 && p.text.starts_with("<0x")) p.type = PieceType::Byte;
    pieces.push_back(std::move(p));
  }
  check(unk >= 0, "{}: model.unk_id is missing; a Unigram model needs an unknown piece", r.origin);
  check(unk < static_cast<int64_t>(pieces.size()), "{}: model.unk_id {} is outside model.vocab ({} pieces)", r.origin, unk,
        pieces.size());
  m.model = UnigramModel(std::move(pieces), static_cast<int32_t>(unk), byte_fallback, /*every_piece=*/true);
}

// The model's id of a token as the file spells it (GPT-2's letters for byte-level BPE), or nothing.
std::optional<int32_t> model_id_of(const Tokenizer::Impl& m, const std::string& text) {
  if (m.kind == TokenizerKind::BPE && m.byte_level) {
    for (const auto& [id, t] : m.unspellable)
      if (t == text) return id;
    const auto bytes = gpt2_letters_to_bytes(text);
    return bytes && !bytes->empty() ? m.model_token_to_id(*bytes) : std::nullopt;
  }
  return text.empty() ? std::nullopt : m.model_token_to_id(text);
}

// Hugging Face's ids for added tokens (AddedVocabulary::add_tokens, in file order): the model's id when
// the model has the token, the id of an earlier added token with the same content (whose options it then
// replaces), else the next id after the model's vocabulary. The "id" written in the file is not used;
// Attend says so when it differs, as Hugging Face warns.
void assign_added_ids(const Reader& r, Tokenizer::Impl& m) {
  auto next_id = static_cast<int32_t>(m.model_size() - static_cast<int32_t>(m.vocab_gaps.size()));
  std::unordered_map<std::string, size_t> by_content;
  std::vector<AddedToken> kept;
  for (AddedToken& t : m.added) {
    if (t.content.empty()) continue;  // Hugging Face ignores empty tokens
    int32_t id;
    if (auto it = by_content.find(t.content); it != by_content.end()) id = kept[it->second].id;
    else if (auto model = model_id_of(m, t.content)) id = *model;
    else id = next_id++;
    if (id != t.id)
      log::warn("{}: added token {:?} is written with id {} but gets id {}, as Hugging Face assigns it", r.origin,
                t.content, t.id, id);
    t.id = id;
    if (auto it = by_content.find(t.content); it != by_content.end()) {
      kept[it->second] = t;
    } else {
      by_content.emplace(t.content, kept.size());
      kept.push_back(t);
    }
  }
  m.added = std::move(kept);
}

std::unique_ptr<Tokenizer::Impl> impl_from_json(const json& j, std::string_view origin) {
  const Reader r{origin};
  check(j.is_object(), "{}: the top level is {}, expected an object", origin, j.type_name());
  const json& model = r.field(j, "the top level", "model");
  check(model.is_object(), "{}: model is {}, expected an object", origin, model.type_name());
  std::string type;
  if (const json* t = r.optional(model, "type")) type = r.string(*t, "model.type");
  if (type.empty()) {  // older files leave the model type out
    if (model.contains("merges")) type = "BPE";
    else if (model.contains("vocab") && model["vocab"].is_array()) type = "Unigram";
    else if (model.contains("continuing_subword_prefix")) type = "WordPiece";
  }
  auto m = std::make_unique<Tokenizer::Impl>();
  read_added_tokens(j, r, *m);
  m->normalizer = read_normalizer(r.optional(j, "normalizer"), r, "normalizer");
  m->pre_tokenizer = read_pre_tokenizer(r.optional(j, "pre_tokenizer"), r, "pre_tokenizer");
  m->post_processor = read_post_processor(r.optional(j, "post_processor"), r, "post_processor");
  m->decoder = read_decoder(r.optional(j, "decoder"), r, "decoder");
  // ByteLevel writes every byte as one of GPT-2's letters, which the vocabulary uses; Attend keeps bytes.
  m->byte_level = m->normalizer.byte_level() || m->pre_tokenizer.byte_level();
  if (type == "BPE") read_bpe(model, r, *m);
  else if (type == "WordPiece") read_wordpiece(model, r, *m);
  else if (type == "Unigram") read_unigram(model, r, *m);
  else throw Error(fmt::format("{}: model.type is {:?}; expected BPE, WordPiece or Unigram", origin, type));
  check(m->kind == TokenizerKind::BPE || !m->byte_level,
        "{}: a ByteLevel normalizer or pre-tokenizer needs a BPE model, found {}", origin, type);
  assign_added_ids(r, *m);
  read_roles(j, r, *m);
  return m;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view origin) {
  return naming_origin(origin, [&] { return Tokenizer(impl_from_json(parse_json(text, origin), origin)); });
}

}  // namespace attend
