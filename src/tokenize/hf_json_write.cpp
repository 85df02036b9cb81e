// Writing tokenizer.json in Hugging Face's layout, so that its tokenizers library (and Attend) read it back
// to the same encoding.
#include "core/base64.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>
#include <attend/io.h>

#include <nlohmann/json.hpp>

#include <map>

namespace attend {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tokenize;

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
