// Writing tokenizer.json in Hugging Face's layout, so that its tokenizers library (and Attend) read it back
// to the same encoding.
#include "core/base64.h"
#include "core/hash.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>
#include <attend/io.h>

#include <nlohmann/json.hpp>

#include <algorithm>
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
    added.push_back({{"id", t.id}, {"content", t.content}, {"single_word", t.single_word}, {"lstrip", t.lstrip},
                     {"rstrip", t.rstrip}, {"normalized", t.normalized}, {"special", t.special}});
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
                          {"prepend_scheme", !m.sp || !m.sp->add_dummy_prefix ? "never" : m.prefix_first_only ? "first" : "always"},
                          {"split", true}};
  // SentencePiece's pipeline: its character map and extra-whitespace rule as normalisers, "▁" by
  // Metaspace, and a decoder that undoes both (with <0xNN> bytes when `byte_fallback`).
  auto write_sp_pipeline = [&](bool byte_fallback) {
    json normalizers = json::array();
    if (!m.sp->charsmap().empty())
      normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(m.sp->charsmap())}});
    if (m.sp->remove_extra_whitespaces)
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
    for (int32_t id = 0; id < bpe->size(); ++id)
      if (!m.is_gap(id)) vocab[m.model_token_text(id)] = id;
    for (const auto& merge : bpe->merges()) merges.push_back({m.model_token_text(merge.left), m.model_token_text(merge.right)});
    const BpeModel::Options& o = bpe->options();
    auto optional = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
    j["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", optional(o.prefix)},
                  {"end_of_word_suffix", optional(o.suffix)},
                  {"fuse_unk", m.sp ? true : o.fuse_unk && !m.byte_level},
                  {"byte_fallback", m.sp ? true : o.byte_fallback && !m.byte_level},
                  {"ignore_merges", bpe->ignore_merges()},
                  {"vocab", vocab},
                  {"merges", merges}};
    if (bpe->unk() >= 0) j["model"]["unk_token"] = m.model_token_text(bpe->unk());
    if (m.sp) write_sp_pipeline(true);
  } else if (const auto* wp = std::get_if<WordPieceModel>(&m.model)) {
    json vocab = json::object();
    for (int32_t id = 0; id < wp->size(); ++id)
      if (!m.is_gap(id)) vocab[wp->token(id)] = id;
    j["model"] = {{"type", "WordPiece"}, {"unk_token", wp->token(wp->unk())}, {"continuing_subword_prefix", wp->prefix()},
                  {"max_input_chars_per_word", wp->max_chars()}, {"vocab", vocab}};
  } else {
    const auto& u = std::get<UnigramModel>(m.model);
    json vocab = json::array();
    for (const UnigramPiece& p : u.pieces()) vocab.push_back({p.text, p.score});
    if (m.sp) write_sp_pipeline(u.byte_fallback());
    j["model"] = {{"type", "Unigram"}, {"unk_id", u.unk()}, {"vocab", vocab}, {"byte_fallback", u.byte_fallback()}};
  }
  if (m.sp) {
    template_processing(SpecialRole::Bos, SpecialRole::Eos);
  } else {
    // The pipeline as read (or as Attend builds it for GPT-2's files and its trained tokenizers).
    j["normalizer"] = write_normalizer(m.normalizer);
    j["pre_tokenizer"] = write_pre_tokenizer(m.pre_tokenizer);
    j["decoder"] = write_decoder(m.decoder);
    if (!m.post_processor.empty()) j["post_processor"] = write_post_processor(m.post_processor);
  }
  return j.dump(2);
}

uint64_t Tokenizer::fingerprint() const {
  uint64_t h = impl_->fingerprint.load(std::memory_order_relaxed);
  if (h == 0) {  // two threads asking at once both work it out, to the same value
    h = std::max<uint64_t>(fnv1a(to_json()), 1);
    impl_->fingerprint.store(h, std::memory_order_relaxed);
  }
  return h;
}

void Tokenizer::save(const fs::path& path) const { write_file_atomic(path, to_json()); }

}  // namespace attend
