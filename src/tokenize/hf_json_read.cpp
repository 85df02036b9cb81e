// Reading Hugging Face's tokenizer.json: the model (BPE, WordPiece, Unigram), added tokens, the
// normaliser / pre-tokeniser / post-processor / decoder pipeline, and the special tokens' roles. Every error
// names the file and the entry at fault.
#include "core/base64.h"
#include "core/json_fields.h"
#include "tokenize/json_reader.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>

#include <map>

namespace attend {

namespace tokenize {

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

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view origin) {
  return naming_origin(origin, [&] { return Tokenizer(impl_from_json(parse_json(text, origin), origin)); });
}

}  // namespace attend
