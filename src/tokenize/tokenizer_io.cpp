// Loading and saving tokenizers: Hugging Face tokenizer.json (read and written), GPT-2's encoder.json +
// vocab.bpe, and SentencePiece .model files. Every error names the file and the entry at fault.
#include "tokenize/sentencepiece.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>
#include <attend/io.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

namespace attend {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tokenize;

namespace {

json parse_json(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number too large for a double
    throw Error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

// Typed access that names the field: "tokenizer.json: model.unk_id is a string, expected an integer".
struct Reader {
  std::string_view origin;

  const json& field(const json& obj, std::string_view path, std::string_view name) const {
    check(obj.is_object(), "{}: {} is {}, expected an object", origin, path, obj.type_name());
    auto it = obj.find(name);
    check(it != obj.end(), "{}: {} has no field '{}'", origin, path, name);
    return *it;
  }
  const json* optional(const json& obj, std::string_view name) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& v, std::string_view path) const {
    check(v.is_string(), "{}: {} is {}, expected a string", origin, path, v.type_name());
    return v.get<std::string>();
  }
  int64_t integer(const json& v, std::string_view path) const {
    check(v.is_number_integer(), "{}: {} is {}, expected an integer", origin, path, v.type_name());
    return v.get<int64_t>();
  }
  bool boolean(const json* v, std::string_view path, bool fallback) const {
    if (!v) return fallback;
    check(v->is_boolean(), "{}: {} is {}, expected true or false", origin, path, v->type_name());
    return v->get<bool>();
  }
};

// ---- base64, for SentencePiece's precompiled_charsmap inside tokenizer.json ----

constexpr std::string_view kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint8_t(in[i + 2]);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kBase64[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kBase64[v & 63] : '=';
  }
  return out;
}

std::string base64_decode(std::string_view in, std::string_view what) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t k = kBase64.find(c);
    check(k != std::string_view::npos, "{}: invalid base64 character '{}'", what, c);
    v = (v << 6) | static_cast<uint32_t>(k);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  return out;
}

// Visits every pre-tokeniser / normaliser / decoder in a possibly nested {"type": "Sequence", ...}.
template <typename F>
void for_each_component(const json* node, F&& fn) {
  if (!node || !node->is_object()) return;
  const std::string type = node->value("type", "");
  if (type == "Sequence") {
    for (const char* list : {"pretokenizers", "normalizers", "decoders", "processors"})
      if (auto it = node->find(list); it != node->end() && it->is_array())
        for (const json& child : *it) for_each_component(&child, fn);
    return;
  }
  fn(*node, type);
}

// The model's vocabulary as a dense id -> token table.
std::vector<std::string> dense_vocab(const json& vocab, const Reader& r, bool byte_letters) {
  check(vocab.is_object(), "{}: model.vocab is {}, expected an object of token: id", r.origin, vocab.type_name());
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id_json] : vocab.items()) {
    const int64_t id = r.integer(id_json, fmt::format("model.vocab[{:?}]", token));
    check(id >= 0 && id < static_cast<int64_t>(tokens.size()),
          "{}: model.vocab[{:?}] has id {}, expected 0 to {} (ids must be dense)", r.origin, token, id, tokens.size() - 1);
    check(!seen[static_cast<size_t>(id)], "{}: model.vocab gives id {} to two tokens", r.origin, id);
    seen[static_cast<size_t>(id)] = true;
    if (byte_letters) {
      auto bytes = gpt2_letters_to_bytes(token);
      check(bytes.has_value(), "{}: model.vocab token {:?} (id {}) is not written in GPT-2's byte letters", r.origin, token, id);
      tokens[static_cast<size_t>(id)] = std::move(*bytes);
    } else {
      tokens[static_cast<size_t>(id)] = token;
    }
  }
  return tokens;
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

void read_added_tokens(const json& j, const Reader& r, Tokenizer::Impl& m) {
  const json* added = r.optional(j, "added_tokens");
  if (!added) return;
  check(added->is_array(), "{}: added_tokens is {}, expected an array", r.origin, added->type_name());
  for (size_t i = 0; i < added->size(); ++i) {
    const json& t = (*added)[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    AddedToken a;
    const int64_t id = r.integer(r.field(t, path, "id"), path + ".id");
    check(id >= 0 && id < INT32_MAX, "{}: {}.id is {}, expected a token id (0 or more)", r.origin, path, id);
    a.id = static_cast<int32_t>(id);
    a.content = r.string(r.field(t, path, "content"), path + ".content");
    a.special = r.boolean(r.optional(t, "special"), path + ".special", true);
    m.added.push_back(std::move(a));
  }
}

// Roles named by the post-processor (BOS/EOS or CLS/SEP templates) and by padding.
void read_roles(const json& j, const Reader& r, Tokenizer::Impl& m) {
  auto bind = [&](SpecialRole role, const std::string& content) {
    for (const AddedToken& t : m.added)
      if (t.content == content) m.roles[static_cast<size_t>(role)] = t.id;
  };
  for_each_component(r.optional(j, "post_processor"), [&](const json& p, const std::string& type) {
    if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array()) {
      const json& single = p["single"];
      const bool wordpiece = m.kind == TokenizerKind::WordPiece;
      if (!single.empty() && single.front().contains("SpecialToken"))
        bind(wordpiece ? SpecialRole::Cls : SpecialRole::Bos, single.front()["SpecialToken"].value("id", ""));
      if (single.size() > 1 && single.back().contains("SpecialToken"))
        bind(wordpiece ? SpecialRole::Sep : SpecialRole::Eos, single.back()["SpecialToken"].value("id", ""));
    } else if ((type == "BertProcessing" || type == "RobertaProcessing") && p.contains("cls") && p.contains("sep")) {
      bind(SpecialRole::Cls, p.at("cls").at(0).get<std::string>());
      bind(SpecialRole::Sep, p.at("sep").at(0).get<std::string>());
    }
  });
  if (const json* padding = r.optional(j, "padding"); padding && padding->contains("pad_token"))
    bind(SpecialRole::Pad, (*padding)["pad_token"].get<std::string>());
}

// SentencePiece-style whitespace and normalisation from a Metaspace pre-tokeniser (or Prepend normaliser)
// and a Precompiled character map, as Hugging Face's converters write them.
void read_sp_pipeline(const json* normalizer, const json* pre_tokenizer, const Reader& r, Tokenizer::Impl& m) {
  m.sp.remove_extra_whitespaces = false;
  m.sp.add_dummy_prefix = false;
  auto prefix = [&](const json& c, const std::string& t) {
    if (t == "Metaspace") {
      const std::string scheme = c.contains("prepend_scheme") ? r.string(c["prepend_scheme"], "Metaspace.prepend_scheme")
                                 : r.boolean(r.optional(c, "add_prefix_space"), "Metaspace.add_prefix_space", true) ? "always"
                                                                                                                    : "never";
      check(scheme == "always" || scheme == "first" || scheme == "never",
            "{}: Metaspace.prepend_scheme is {:?}, expected always, first or never", r.origin, scheme);
      m.sp.add_dummy_prefix = scheme != "never";
      m.prefix_first_only = scheme == "first";
    }
    if (t == "Prepend") m.sp.add_dummy_prefix = true;
    if (t == "Precompiled")
      m.sp.set_charsmap(base64_decode(r.string(r.field(c, "normalizer", "precompiled_charsmap"), "precompiled_charsmap"),
                                      fmt::format("{}: normalizer.precompiled_charsmap", r.origin)),
                        r.origin);
    if (t == "Replace" && c.contains("pattern") && c["pattern"].is_object() && c["pattern"].value("Regex", "") == " {2,}")
      m.sp.remove_extra_whitespaces = true;
  };
  for_each_component(pre_tokenizer, prefix);
  for_each_component(normalizer, prefix);
}

std::unique_ptr<Tokenizer::Impl> impl_from_json(const json& j, std::string_view origin) {
  const Reader r{origin};
  check(j.is_object(), "{}: the top level is {}, expected an object", origin, j.type_name());
  const json& model = r.field(j, "the top level", "model");
  std::string type = model.is_object() ? model.value("type", "") : "";
  if (type.empty()) {  // older files leave the model type out
    if (model.contains("merges")) type = "BPE";
    else if (model.contains("vocab") && model["vocab"].is_array()) type = "Unigram";
    else if (model.contains("continuing_subword_prefix")) type = "WordPiece";
  }
  auto m = std::make_unique<Tokenizer::Impl>();
  read_added_tokens(j, r, *m);
  const json* normalizer = r.optional(j, "normalizer");
  const json* pre_tokenizer = r.optional(j, "pre_tokenizer");
  const json* decoder = r.optional(j, "decoder");

  if (type == "BPE") {
    m->kind = TokenizerKind::BPE;
    bool byte_level = false, byte_level_regex = true, split = false;
    auto find_byte_level = [&](const json& c, const std::string& t) {
      if (t == "ByteLevel") {
        byte_level = true;
        m->add_prefix_space = r.boolean(r.optional(c, "add_prefix_space"), "ByteLevel.add_prefix_space", false);
        byte_level_regex = r.boolean(r.optional(c, "use_regex"), "ByteLevel.use_regex", true);
      } else if (t == "Split") {
        split = true;
        const json& pattern = r.field(c, "pre_tokenizer Split", "pattern");
        std::string regex;
        if (pattern.contains("Regex")) {
          regex = r.string(pattern["Regex"], "Split.pattern.Regex");
        } else {  // a literal string: quoted for PCRE2
          std::string literal = r.string(r.field(pattern, "Split.pattern", "String"), "Split.pattern.String");
          for (size_t at = literal.find("\\E"); at != std::string::npos; at = literal.find("\\E", at + 7))
            literal.replace(at, 2, "\\E\\\\E\\Q");
          regex = "\\Q" + literal + "\\E";
        }
        const std::string behavior = c.contains("behavior") ? r.string(c["behavior"], "Split.behavior") : "Isolated";
        check(behavior == "Isolated", "{}: pre_tokenizer Split has behavior {:?}; only Isolated is supported", origin,
              behavior);
        check(!r.boolean(r.optional(c, "invert"), "Split.invert", false),
              "{}: pre_tokenizer Split has invert: true, which is not supported", origin);
        if (regex != kGpt2Pattern) m->regex.emplace(regex);
      }
    };
    for_each_component(pre_tokenizer, find_byte_level);
    for_each_component(decoder, [&](const json&, const std::string& t) { byte_level |= t == "ByteLevel"; });
    m->byte_level = byte_level;
    m->pretokenize = split || byte_level_regex;
    for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (const json* v = r.optional(model, unsupported))
        check(v->is_string() && v->get<std::string>().empty(), "{}: model.{} is {}; BPE with a {} is not supported",
              origin, unsupported, v->dump(), unsupported);
    std::vector<std::string> tokens = dense_vocab(r.field(model, "model", "vocab"), r, byte_level);
    BpeModel vocab_only(tokens, {}, byte_level ? BpeModel::Symbols::Bytes : BpeModel::Symbols::Characters);
    const auto merges = read_merges(r.field(model, "model", "merges"), r, vocab_only, byte_level);
    int32_t unk = -1;
    if (const json* u = r.optional(model, "unk_token")) {
      unk = vocab_only.find(r.string(*u, "model.unk_token"));
      check(unk >= 0, "{}: model.unk_token {} is not in model.vocab", origin, u->dump());
    }
    if (!byte_level) read_sp_pipeline(normalizer, pre_tokenizer, r, *m);
    m->model = BpeModel(std::move(tokens), merges, byte_level ? BpeModel::Symbols::Bytes : BpeModel::Symbols::Characters, unk);
    std::get<BpeModel>(m->model).set_ignore_merges(r.boolean(r.optional(model, "ignore_merges"), "model.ignore_merges", false));
  } else if (type == "WordPiece") {
    m->kind = TokenizerKind::WordPiece;
    std::vector<std::string> tokens = dense_vocab(r.field(model, "model", "vocab"), r, false);
    const std::string unk_token = r.string(r.field(model, "model", "unk_token"), "model.unk_token");
    int32_t unk = -1;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == unk_token) unk = static_cast<int32_t>(i);
    check(unk >= 0, "{}: model.unk_token {:?} is not in model.vocab", origin, unk_token);
    std::string prefix = "##";
    if (const json* p = r.optional(model, "continuing_subword_prefix")) prefix = r.string(*p, "model.continuing_subword_prefix");
    int64_t max_chars = 100;
    if (const json* p = r.optional(model, "max_input_chars_per_word")) max_chars = r.integer(*p, "model.max_input_chars_per_word");
    for_each_component(normalizer, [&](const json& c, const std::string& t) {
      if (t != "BertNormalizer") return;
      m->bert.clean_text = r.boolean(r.optional(c, "clean_text"), "normalizer.clean_text", true);
      m->bert.handle_chinese_chars = r.boolean(r.optional(c, "handle_chinese_chars"), "normalizer.handle_chinese_chars", true);
      m->bert.lowercase = r.boolean(r.optional(c, "lowercase"), "normalizer.lowercase", true);
      m->bert.strip_accents = r.boolean(r.optional(c, "strip_accents"), "normalizer.strip_accents", m->bert.lowercase);
    });
    if (!normalizer) m->bert = {false, false, false, false};
    for_each_component(decoder, [&](const json& c, const std::string& t) {
      if (t == "WordPiece") m->wordpiece_cleanup = r.boolean(r.optional(c, "cleanup"), "decoder.cleanup", true);
    });
    m->model = WordPieceModel(std::move(tokens), unk, prefix, static_cast<int32_t>(max_chars));
  } else if (type == "Unigram") {
    m->kind = TokenizerKind::Unigram;
    const json& vocab = r.field(model, "model", "vocab");
    check(vocab.is_array(), "{}: model.vocab is {}, expected an array of [piece, score]", origin, vocab.type_name());
    const bool byte_fallback = r.boolean(r.optional(model, "byte_fallback"), "model.byte_fallback", false);
    int64_t unk = -1;
    if (const json* u = r.optional(model, "unk_id")) unk = r.integer(*u, "model.unk_id");
    std::vector<UnigramPiece> pieces;
    pieces.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i) {
      const json& e = vocab[i];
      check(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(),
            "{}: model.vocab[{}] is {}, expected [piece, score]", origin, i, e.dump());
      UnigramPiece p{e[0].get<std::string>(), e[1].get<float>(), PieceType::Normal};
      if (static_cast<int64_t>(i) == unk) p.type = PieceType::Unknown;
      else if (byte_fallback && p.text.size() == 6 && p.text.starts_with("<0x")) p.type = PieceType::Byte;
      pieces.push_back(std::move(p));
    }
    for (const AddedToken& t : m->added)
      if (t.special && t.id >= 0 && t.id < static_cast<int32_t>(pieces.size()) && pieces[static_cast<size_t>(t.id)].type == PieceType::Normal)
        pieces[static_cast<size_t>(t.id)].type = PieceType::Control;
    check(unk >= 0, "{}: model.unk_id is missing; a Unigram model needs an unknown piece", origin);
    check(unk < static_cast<int64_t>(pieces.size()), "{}: model.unk_id {} is outside model.vocab ({} pieces)", origin, unk,
          pieces.size());
    read_sp_pipeline(normalizer, pre_tokenizer, r, *m);
    m->model = UnigramModel(std::move(pieces), static_cast<int32_t>(unk), byte_fallback);
  } else {
    throw Error(fmt::format("{}: model.type is {:?}; expected BPE, WordPiece or Unigram", origin, type));
  }
  for (const AddedToken& t : m->added) {
    // An added token inside the model's vocabulary must be the same token.
    if (t.id < m->model_size() && m->kind != TokenizerKind::Unigram) {
      const std::string in_model = m->model_id_to_token(t.id);
      check(in_model == t.content, "{}: added token {:?} has id {}, which model.vocab gives to {:?}", origin, t.content,
            t.id, in_model);
    }
  }
  read_roles(j, r, *m);
  return m;
}

std::unique_ptr<Tokenizer::Impl> impl_from_sentencepiece(std::string_view bytes, std::string_view origin) {
  SentencePieceModel sp = parse_sentencepiece(bytes, origin);
  auto m = std::make_unique<Tokenizer::Impl>();
  m->sp = sp.normalizer;
  int32_t unk = -1;
  for (size_t id = 0; id < sp.pieces.size(); ++id) {
    const UnigramPiece& p = sp.pieces[id];
    if (p.type == PieceType::Unknown) unk = static_cast<int32_t>(id);
    if (p.type == PieceType::Control || p.type == PieceType::Unknown)
      m->added.push_back({p.text, static_cast<int32_t>(id), true, false});
  }
  check(unk >= 0, "{}: no piece has type UNKNOWN", origin);
  if (sp.model_type == 1) {
    m->kind = TokenizerKind::Unigram;
    m->model = UnigramModel(std::move(sp.pieces), unk, sp.byte_fallback);
  } else {
    // SentencePiece BPE merges the adjacent pair whose union has the best score: a piece's rank is its
    // place in score order, and every split of it into two pieces is a merge of that rank.
    m->kind = TokenizerKind::BPE;
    m->byte_level = false;
    std::vector<std::string> tokens;
    for (const UnigramPiece& p : sp.pieces) tokens.push_back(p.text);
    BpeModel vocab_only(tokens, {}, BpeModel::Symbols::Characters, unk);
    // User-defined pieces are frozen: they take part in no merge.
    std::vector<size_t> order;
    for (size_t id = 0; id < sp.pieces.size(); ++id)
      if (sp.pieces[id].type == PieceType::Normal) order.push_back(id);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sp.pieces[a].score > sp.pieces[b].score; });
    auto mergeable = [&](int32_t id) { return id >= 0 && sp.pieces[static_cast<size_t>(id)].type == PieceType::Normal; };
    std::vector<BpeModel::Merge> merges;
    std::vector<int32_t> ranks;
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const std::string& t = tokens[order[rank]];
      for (size_t k = 1; k < t.size(); ++k) {
        if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // not a character boundary
        const int32_t left = vocab_only.find(std::string_view(t).substr(0, k));
        const int32_t right = vocab_only.find(std::string_view(t).substr(k));
        if (mergeable(left) && mergeable(right)) {
          merges.push_back({left, right});
          ranks.push_back(static_cast<int32_t>(rank));
        }
      }
    }
    m->model = BpeModel(std::move(tokens), merges, BpeModel::Symbols::Characters, unk, ranks);
  }
  return m;
}

}  // namespace

// Errors from deep inside (a model's constructor, a JSON value of the wrong type) get the file's name.
template <typename F>
auto naming_origin(std::string_view origin, F&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected structure: {}", origin, e.what()));
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(origin)) throw;
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
}

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view origin) {
  return naming_origin(origin, [&] { return Tokenizer(impl_from_json(parse_json(text, origin), origin)); });
}

Tokenizer Tokenizer::from_sentencepiece(std::string_view model, std::string_view origin) {
  return naming_origin(origin, [&] { return Tokenizer(impl_from_sentencepiece(model, origin)); });
}

namespace {

Tokenizer load_gpt2(std::string_view encoder_text, std::string_view merges_text, std::string_view encoder_origin,
                    std::string_view merges_origin) {
  const json encoder = parse_json(encoder_text, encoder_origin);
  const Reader r{encoder_origin};
  std::vector<std::string> tokens = dense_vocab(encoder, r, true);
  const BpeModel vocab_only(tokens, {});
  // vocab.bpe: a "#version" line, then one "left right" merge per line.
  std::istringstream lines{std::string(merges_text)};
  json merges = json::array();
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty() || (number == 1 && line.starts_with("#version"))) continue;
    merges.push_back(line);
  }
  auto m = std::make_unique<Tokenizer::Impl>();
  m->kind = TokenizerKind::BPE;
  m->model = BpeModel(std::move(tokens), read_merges(merges, Reader{merges_origin}, vocab_only, true));
  if (auto id = std::get<BpeModel>(m->model).find("<|endoftext|>"); id >= 0) m->added.push_back({"<|endoftext|>", id, true, true});
  return Tokenizer(std::move(m));
}

}  // namespace

Tokenizer Tokenizer::from_gpt2_files(const fs::path& encoder_json, const fs::path& vocab_bpe) {
  return from_gpt2(read_file(encoder_json), read_file(vocab_bpe), encoder_json.string(), vocab_bpe.string());
}

Tokenizer Tokenizer::from_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, std::string_view encoder_origin,
                               std::string_view merges_origin) {
  return naming_origin(encoder_origin, [&] { return load_gpt2(encoder_json, vocab_bpe, encoder_origin, merges_origin); });
}


Tokenizer Tokenizer::load(const fs::path& path) {
  check(fs::exists(path), "{}: no such file or directory (expected tokenizer.json, a SentencePiece .model, or a "
        "directory holding one of them or encoder.json + vocab.bpe)", path.string());
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return load(path / "tokenizer.json");
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(path / "encoder.json", path / "vocab.bpe");
    for (const char* name : {"tokenizer.model", "spiece.model", "sentencepiece.bpe.model"})
      if (fs::exists(path / name)) return load(path / name);
    throw Error(fmt::format("{}: directory holds no tokenizer.json, encoder.json + vocab.bpe, or tokenizer.model",
                            path.string()));
  }
  if (path.extension() == ".model") return from_sentencepiece(read_file(path), path.string());
  return from_json(read_file(path), path.string());
}

// ---------------------------------------------------------------------------------------------------
// Writing tokenizer.json.

std::string Tokenizer::to_json() const {
  const Impl& m = *impl_;
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  const auto pad = m.roles[static_cast<size_t>(SpecialRole::Pad)];
  if (pad) {
    j["padding"] = {{"strategy", "BatchLongest"}, {"direction", "Right"}, {"pad_to_multiple_of", nullptr},
                    {"pad_id", *pad},             {"pad_type_id", 0},     {"pad_token", id_to_token(*pad)}};
  } else {
    j["padding"] = nullptr;
  }
  json added = json::array();
  for (const AddedToken& t : m.added)
    added.push_back({{"id", t.id}, {"content", t.content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", t.special}});
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["post_processor"] = nullptr;
  auto template_processing = [&](SpecialRole first, SpecialRole last) {
    const auto a = m.roles[static_cast<size_t>(first)], b = m.roles[static_cast<size_t>(last)];
    if (!a || !b) return;
    const std::string ta = id_to_token(*a), tb = id_to_token(*b);
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", ta}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"SpecialToken", {{"id", tb}, {"type_id", 0}}}}}},
        {"pair", {{{"SpecialToken", {{"id", ta}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", tb}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
                  {{"SpecialToken", {{"id", tb}, {"type_id", 1}}}}}},
        {"special_tokens", {{ta, {{"id", ta}, {"ids", {*a}}, {"tokens", {ta}}}}, {tb, {{"id", tb}, {"ids", {*b}}, {"tokens", {tb}}}}}}};
  };
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", std::string(kSpace)},
                          {"prepend_scheme", !m.sp.add_dummy_prefix ? "never" : m.prefix_first_only ? "first" : "always"},
                          {"split", true}};
  // SentencePiece's pipeline: its character map and extra-whitespace rule as normalisers, "▁" by
  // Metaspace, and a decoder that undoes both (with <0xNN> bytes when `byte_fallback`).
  auto write_sp_pipeline = [&](bool byte_fallback) {
    json normalizers = json::array();
    if (!m.sp.charsmap().empty())
      normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(m.sp.charsmap())}});
    if (m.sp.remove_extra_whitespaces)
      normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
    if (!normalizers.empty()) j["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    j["pre_tokenizer"] = metaspace;
    j["decoder"] = byte_fallback
                       ? json{{"type", "Sequence"}, {"decoders", {metaspace, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}
                       : metaspace;
  };

  if (const auto* bpe = std::get_if<BpeModel>(&m.model)) {
    json vocab = json::object();
    json merges = json::array();
    auto spell = [&](const std::string& t) { return m.byte_level ? bytes_to_gpt2_letters(t) : t; };
    for (int32_t id = 0; id < bpe->size(); ++id) vocab[spell(bpe->token(id))] = id;
    for (const auto& merge : bpe->merges()) merges.push_back({spell(bpe->token(merge.left)), spell(bpe->token(merge.right))});
    j["model"] = {{"type", "BPE"},         {"dropout", nullptr},         {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", !m.byte_level},
                  {"byte_fallback", !m.byte_level}, {"ignore_merges", bpe->ignore_merges()}, {"vocab", vocab},
                  {"merges", merges}};
    if (bpe->unk() >= 0) j["model"]["unk_token"] = spell(bpe->token(bpe->unk()));
    if (m.byte_level) {
      const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", m.add_prefix_space}, {"trim_offsets", true},
                               {"use_regex", m.pretokenize && !m.regex}};
      if (m.regex) {
        j["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Split"}, {"pattern", {{"Regex", m.regex->pattern()}}}, {"behavior", "Isolated"}, {"invert", false}},
                                byte_level}}};
      } else {
        j["pre_tokenizer"] = byte_level;
      }
      j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    } else {
      write_sp_pipeline(true);
    }
  } else if (const auto* wp = std::get_if<WordPieceModel>(&m.model)) {
    json vocab = json::object();
    for (int32_t id = 0; id < wp->size(); ++id) vocab[wp->token(id)] = id;
    j["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", m.bert.clean_text},
                       {"handle_chinese_chars", m.bert.handle_chinese_chars}, {"strip_accents", m.bert.strip_accents},
                       {"lowercase", m.bert.lowercase}};
    j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
    template_processing(SpecialRole::Cls, SpecialRole::Sep);
    j["decoder"] = {{"type", "WordPiece"}, {"prefix", wp->prefix()}, {"cleanup", m.wordpiece_cleanup}};
    j["model"] = {{"type", "WordPiece"}, {"unk_token", wp->token(wp->unk())}, {"continuing_subword_prefix", wp->prefix()},
                  {"max_input_chars_per_word", wp->max_chars()}, {"vocab", vocab}};
  } else {
    const auto& u = std::get<UnigramModel>(m.model);
    json vocab = json::array();
    for (const UnigramPiece& p : u.pieces()) vocab.push_back({p.text, p.score});
    write_sp_pipeline(u.byte_fallback());
    j["model"] = {{"type", "Unigram"}, {"unk_id", u.unk()}, {"vocab", vocab}, {"byte_fallback", u.byte_fallback()}};
  }
  if (m.kind != TokenizerKind::WordPiece) template_processing(SpecialRole::Bos, SpecialRole::Eos);
  if (m.kind == TokenizerKind::BPE && m.byte_level) j["post_processor"] = nullptr;  // GPT-2 adds nothing by default
  return j.dump(2);
}

void Tokenizer::save(const fs::path& path) const { write_file_atomic(path, to_json()); }

}  // namespace attend
