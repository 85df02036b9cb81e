// Encoding: added tokens, then per piece of text between them the normalizer, the pre-tokenizer and the
// model (Hugging Face's encode_single_sequence); GPT-2's pre-tokenizer by the hand-written scanner, large
// inputs over threads; SentencePiece files through SentencePiece's own normaliser.
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include "kernels/parallel.h"

#include <attend/error.h>

#include <algorithm>

namespace attend {

void Tokenizer::Impl::encode_model(std::string_view piece, std::vector<int32_t>& ids) const {
  if (const auto* bpe = std::get_if<tokenize::BpeModel>(&model)) bpe->encode(piece, ids);
  else if (const auto* wp = std::get_if<tokenize::WordPieceModel>(&model)) wp->encode(piece, ids);
  else std::get<tokenize::UnigramModel>(model).encode(piece, ids);
}

// GPT-2's pattern, 64 KiB at a time (cut where pieces must start), so the pieces stay in cache instead of
// filling a vector as long as the text; inputs of several MiB are cut the same way and shared by threads.
void Tokenizer::Impl::encode_gpt2(std::string_view text, std::vector<int32_t>& ids) const {
  const auto& bpe = std::get<tokenize::BpeModel>(model);
  auto run = [&](std::string_view part, std::vector<int32_t>& out) {
    constexpr size_t kBlock = size_t{1} << 16;
    std::vector<std::string_view> pieces;
    for (size_t begin = 0; begin < part.size();) {
      size_t end = std::min(part.size(), begin + kBlock);
      while (end < part.size() && !tokenize::is_gpt2_cut_point(part, end)) ++end;
      pieces.clear();
      tokenize::split_gpt2(part.substr(begin, end - begin), pieces);
      for (std::string_view p : pieces) bpe.encode(p, out);
      begin = end;
    }
  };
  constexpr size_t kChunk = size_t{1} << 20;
  const int threads = kernels::num_threads();
  if (threads <= 1 || text.size() < 2 * kChunk) {
    run(text, ids);
    return;
  }
  std::vector<size_t> cuts{0};
  for (size_t target = kChunk; target < text.size(); target += kChunk) {
    size_t i = std::max(target, cuts.back() + 1);
    while (i < text.size() && !tokenize::is_gpt2_cut_point(text, i)) ++i;
    if (i < text.size()) cuts.push_back(i);
  }
  cuts.push_back(text.size());
  const auto chunks = static_cast<int64_t>(cuts.size() - 1);
  std::vector<std::vector<int32_t>> parts(static_cast<size_t>(chunks));
  kernels::parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const auto k = static_cast<size_t>(c);
      parts[k].reserve((cuts[k + 1] - cuts[k]) / 3);
      run(text.substr(cuts[k], cuts[k + 1] - cuts[k]), parts[k]);
    }
  });
  for (const auto& part : parts) ids.insert(ids.end(), part.begin(), part.end());
}

void Tokenizer::Impl::encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  if (byte_level && pre_tokenizer.is_gpt2()) {
    encode_gpt2(text, ids);
    return;
  }
  if (const tokenize::RegexSplitter* split = pre_tokenizer.single_isolated_split()) {
    split->split(text, [&](std::string_view piece) { encode_model(piece, ids); });
    return;
  }
  std::vector<tokenize::Piece> pieces;
  tokenize::TextArena arena;
  pre_tokenizer.apply(text, at_origin, pieces, arena);
  for (const tokenize::Piece& p : pieces) encode_model(p.text, ids);
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_origin, bool parse_special,
                                     std::vector<int32_t>& ids) const {
  std::string normalized;
  if (!normalizer.empty()) {
    bool first_kept = true;
    normalized = normalizer.apply(text, first_kept);
    text = normalized;
    at_origin = at_origin && first_kept;
  }
  if (normalized_matcher.empty()) {
    encode_pieces(text, at_origin, ids);
    return;
  }
  std::vector<tokenize::AddedTokenMatch> matches;
  normalized_matcher.find(text, !parse_special, matches);
  size_t done = 0;
  for (const auto& m : matches) {
    encode_pieces(text.substr(done, m.begin - done), at_origin && done == 0, ids);
    ids.push_back(m.id);
    done = m.end;
  }
  encode_pieces(text.substr(done), at_origin && done == 0, ids);
}

// SentencePiece-style encoding: user-defined pieces are cut out first and never merged, as SentencePiece
// freezes them; the rest is normalised whole and given to the model.
void Tokenizer::Impl::encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  const std::string normalized = sp->normalize(text, sp->add_dummy_prefix && (at_start || !prefix_first_only));
  const std::string_view n = normalized;
  if (const auto* u = std::get_if<tokenize::UnigramModel>(&model)) {
    u->encode(n, ids);
    return;
  }
  const auto& bpe = std::get<tokenize::BpeModel>(model);
  size_t plain = 0;
  for (size_t i = 0; i < n.size() && !sp->user_defined.empty(); ++i)
    for (const std::string& u : sp->user_defined)
      if (!u.empty() && n.substr(i).starts_with(u)) {
        bpe.encode(n.substr(plain, i - plain), ids);
        ids.push_back(bpe.find(u));
        i += u.size() - 1;
        plain = i + 1;
        break;
      }
  bpe.encode(n.substr(plain), ids);
}

void Tokenizer::Impl::encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& ids) const {
  std::vector<tokenize::AddedTokenMatch> matches;
  raw_matcher.find(text, !parse_special, matches);
  size_t done = 0;
  auto plain = [&](size_t end) {
    const std::string_view part = text.substr(done, end - done);
    if (sp) encode_sentencepiece(part, done == 0, ids);
    else encode_segment(part, done == 0, parse_special, ids);
  };
  for (const auto& m : matches) {
    plain(m.begin);
    ids.push_back(m.id);
    done = m.end;
  }
  plain(text.size());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 2);
  auto role = [&](SpecialRole primary, SpecialRole fallback, std::string_view what) {
    auto id = m.roles[static_cast<size_t>(primary)];
    if (!id) id = m.roles[static_cast<size_t>(fallback)];
    check(id.has_value(), "cannot add {}: this tokenizer has no {} or {} token (bind one with set_special)", what,
          role_name(primary), role_name(fallback));
    return *id;
  };
  const bool wordpiece = m.kind == TokenizerKind::WordPiece;
  if (options.add_bos)
    ids.push_back(wordpiece ? role(SpecialRole::Cls, SpecialRole::Bos, "a start token")
                            : role(SpecialRole::Bos, SpecialRole::Cls, "a start token"));
  m.encode_text(text, options.parse_special, ids);
  if (options.add_eos)
    ids.push_back(wordpiece ? role(SpecialRole::Sep, SpecialRole::Eos, "an end token")
                            : role(SpecialRole::Eos, SpecialRole::Sep, "an end token"));
  if (options.add_special_tokens) ids = m.post_processor.apply(std::move(ids));
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts,
                                                          const EncodeOptions& options) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  // Errors on worker threads are rethrown here by parallel_for.
  kernels::parallel_for(static_cast<int64_t>(texts.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = encode(texts[static_cast<size_t>(i)], options);
  });
  return out;
}

}  // namespace attend
