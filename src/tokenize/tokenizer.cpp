// attend::Tokenizer: special tokens, the encode and decode pipelines, batching.
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include "kernels/parallel.h"

#include <attend/error.h>

#include <algorithm>

namespace attend {

using tokenize::decode_utf8;

std::string_view role_name(SpecialRole role) {
  static constexpr std::string_view names[] = {"bos", "eos", "pad", "unk", "mask", "cls", "sep"};
  return names[static_cast<int>(role)];
}

SpecialRole parse_role(std::string_view name) {
  for (int r = 0; r < 7; ++r)
    if (role_name(static_cast<SpecialRole>(r)) == name) return static_cast<SpecialRole>(r);
  throw Error(fmt::format("unknown special-token role '{}': expected bos, eos, pad, unk, mask, cls or sep", name));
}

// ---------------------------------------------------------------------------------------------------
// Impl helpers.

int32_t Tokenizer::Impl::model_size() const {
  return std::visit([](const auto& m) { return m.size(); }, model);
}

std::optional<int32_t> Tokenizer::Impl::model_token_to_id(std::string_view token) const {
  const int32_t id = std::visit([&](const auto& m) { return m.find(token); }, model);
  if (id >= 0) return id;
  return std::nullopt;
}

std::string Tokenizer::Impl::model_id_to_token(int32_t id) const {
  if (const auto* bpe = std::get_if<tokenize::BpeModel>(&model)) return bpe->token(id);
  if (const auto* wp = std::get_if<tokenize::WordPieceModel>(&model)) return wp->token(id);
  return std::get<tokenize::UnigramModel>(model).piece(id).text;
}

const AddedToken* Tokenizer::Impl::added_by_id(int32_t id) const {
  for (const AddedToken& t : added)
    if (t.id == id) return &t;
  return nullptr;
}

void Tokenizer::Impl::index_added() {
  vocab_size = model_size();
  added_first_byte.fill(false);
  added_by_length.clear();
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    check(!t.content.empty(), "special token {} is empty", t.id);
    // Ids past the model's vocabulary are fine (tokens added after training), but not beyond one slot
    // per added token: a stray huge id would otherwise size every embedding table.
    const int64_t limit = static_cast<int64_t>(model_size()) + static_cast<int64_t>(added.size());
    check(t.id >= 0 && t.id < limit, "special token '{}' has id {}, expected 0 to {} (the model's {} tokens and {} added)",
          t.content, t.id, limit - 1, model_size(), added.size());
    vocab_size = std::max(vocab_size, t.id + 1);
    if (!t.in_text) continue;
    added_first_byte[static_cast<unsigned char>(t.content[0])] = true;
    added_by_length.push_back(i);
  }
  // Every id past the model's own must be an added token's: a gap would be an id with no token at all.
  const int32_t model_tokens = static_cast<int32_t>(model_size());
  std::vector<char> named(static_cast<size_t>(vocab_size - model_tokens), 0);
  for (const AddedToken& t : added)
    if (t.id >= model_tokens) named[static_cast<size_t>(t.id - model_tokens)] = 1;
  for (size_t k = 0; k < named.size(); ++k)
    check(named[k], "token id {} is neither one of the model's {} tokens nor an added token, but added tokens go up to id {}",
          model_tokens + static_cast<int32_t>(k), model_tokens, vocab_size - 1);
  std::stable_sort(added_by_length.begin(), added_by_length.end(),
                   [&](size_t a, size_t b) { return added[a].content.size() > added[b].content.size(); });
}

// Binds the roles of conventionally named special tokens that have no role yet.
void Tokenizer::Impl::infer_roles() {
  struct Convention {
    SpecialRole role;
    std::string_view names[5];
  };
  static constexpr Convention conventions[] = {
      {SpecialRole::Bos, {"<s>", "<|startoftext|>", "<|begin_of_text|>", "[BOS]", "<bos>"}},
      {SpecialRole::Eos, {"</s>", "<|endoftext|>", "<|end_of_text|>", "[EOS]", "<eos>"}},
      {SpecialRole::Pad, {"<pad>", "[PAD]", "<|pad|>", "<|padding|>", ""}},
      {SpecialRole::Unk, {"<unk>", "[UNK]", "<|unk|>", "", ""}},
      {SpecialRole::Mask, {"<mask>", "[MASK]", "<|mask|>", "", ""}},
      {SpecialRole::Cls, {"[CLS]", "<cls>", "", "", ""}},
      {SpecialRole::Sep, {"[SEP]", "<sep>", "", "", ""}},
  };
  for (const Convention& c : conventions) {
    auto& slot = roles[static_cast<size_t>(c.role)];
    for (std::string_view name : c.names) {
      if (slot || name.empty()) continue;
      for (const AddedToken& t : added)
        if (t.content == name) slot = t.id;
      if (!slot && kind != TokenizerKind::BPE) {
        if (auto id = model_token_to_id(name)) slot = id;
      }
    }
  }
  // GPT-2's convention: <|endoftext|> both starts and ends documents.
  auto& bos = roles[static_cast<size_t>(SpecialRole::Bos)];
  const auto& eos = roles[static_cast<size_t>(SpecialRole::Eos)];
  if (!bos && eos)
    if (const AddedToken* t = added_by_id(*eos); t && t->content == "<|endoftext|>") bos = eos;
}

// ---------------------------------------------------------------------------------------------------
// Encoding.

// BERT's normaliser (Hugging Face BertNormalizer): clean, space out CJK, strip accents, lower-case.
std::string bert_normalize(std::string_view text, const BertNormalization& b) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto cp = decode_utf8(text, i);
    const std::string_view ch = text.substr(i, static_cast<size_t>(cp.length));
    i += static_cast<size_t>(cp.length);
    if (b.clean_text) {
      if (cp.value == 0 || cp.value == 0xFFFD || cp.value == tokenize::kInvalid || tokenize::is_control(cp.value)) continue;
      if (tokenize::is_whitespace(cp.value)) {
        out += ' ';
        continue;
      }
    }
    if (b.handle_chinese_chars && tokenize::is_cjk(cp.value)) {
      out += ' ';
      out += ch;
      out += ' ';
      continue;
    }
    out += ch;
  }
  if (b.strip_accents) out = tokenize::strip_accents(out);
  if (b.lowercase) out = tokenize::to_lower(out);
  return out;
}

void Tokenizer::Impl::encode_pieces(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> pieces;
  if (const auto* bpe = std::get_if<tokenize::BpeModel>(&model)) {
    if (!byte_level) {
      // SentencePiece-style BPE merges over the whole normalised text; user-defined pieces are cut out
      // first and never merged, as SentencePiece freezes them.
      const std::string normalized = sp.normalize(text, sp.add_dummy_prefix && (at_start || !prefix_first_only));
      const std::string_view n = normalized;
      size_t plain = 0;
      for (size_t i = 0; i < n.size() && !sp.user_defined.empty(); ++i)
        for (const std::string& u : sp.user_defined)
          if (!u.empty() && n.substr(i).starts_with(u)) {
            bpe->encode(n.substr(plain, i - plain), ids);
            ids.push_back(bpe->find(u));
            i += u.size() - 1;
            plain = i + 1;
            break;
          }
      bpe->encode(n.substr(plain), ids);
      return;
    }
    std::string prefixed;
    if (add_prefix_space && !text.empty() && text[0] != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    if (!pretokenize) {
      bpe->encode(text, ids);
    } else if (regex) {
      regex->split(text, pieces);
      for (std::string_view p : pieces) bpe->encode(p, ids);
    } else {
      // Pre-tokenise 64 KiB at a time (cut where pieces must start), so the pieces stay in cache
      // instead of filling a vector as long as the text.
      constexpr size_t kBlock = size_t{1} << 16;
      for (size_t begin = 0; begin < text.size();) {
        size_t end = std::min(text.size(), begin + kBlock);
        while (end < text.size() && !tokenize::is_gpt2_cut_point(text, end)) ++end;
        pieces.clear();
        tokenize::split_gpt2(text.substr(begin, end - begin), pieces);
        for (std::string_view p : pieces) bpe->encode(p, ids);
        begin = end;
      }
    }
    return;
  }
  if (const auto* wp = std::get_if<tokenize::WordPieceModel>(&model)) {
    // A line at a time: newlines are whitespace to BERT, and the normaliser works on bounded text.
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      const std::string normalized = bert_normalize(text.substr(start, end - start), bert);
      pieces.clear();
      tokenize::split_bert(normalized, pieces);
      for (std::string_view p : pieces) wp->encode(p, ids);
      start = end + 1;
    }
    return;
  }
  std::get<tokenize::UnigramModel>(model).encode(
      sp.normalize(text, sp.add_dummy_prefix && (at_start || !prefix_first_only)), ids);
}

// Large byte-level inputs are cut at piece boundaries and encoded by several threads.
void Tokenizer::Impl::encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  constexpr size_t kChunk = size_t{1} << 20;
  const int threads = kernels::num_threads();
  const bool splittable = kind == TokenizerKind::BPE && byte_level && pretokenize && !regex && !add_prefix_space;
  if (!splittable || threads <= 1 || text.size() < 2 * kChunk) {
    encode_pieces(text, at_start, ids);
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
      encode_pieces(text.substr(cuts[k], cuts[k + 1] - cuts[k]), at_start && k == 0, parts[k]);
    }
  });
  for (const auto& part : parts) ids.insert(ids.end(), part.begin(), part.end());
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
  // Cut the special tokens out of the text; encode the text between them.
  size_t plain = 0;
  if (options.parse_special && !m.added_by_length.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!m.added_first_byte[static_cast<unsigned char>(text[i])]) continue;
      for (size_t a : m.added_by_length) {
        const AddedToken& t = m.added[a];
        if (text.compare(i, t.content.size(), t.content) != 0) continue;
        m.encode_plain(text.substr(plain, i - plain), plain == 0, ids);
        ids.push_back(t.id);
        i += t.content.size() - 1;
        plain = i + 1;
        break;
      }
    }
  }
  m.encode_plain(text.substr(plain), plain == 0, ids);
  if (options.add_eos)
    ids.push_back(wordpiece ? role(SpecialRole::Sep, SpecialRole::Eos, "an end token")
                            : role(SpecialRole::Eos, SpecialRole::Sep, "an end token"));
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

PaddedBatch Tokenizer::pad(std::span<const std::vector<int32_t>> sequences, int64_t length, bool truncate) const {
  const auto pad_id = impl_->roles[static_cast<size_t>(SpecialRole::Pad)];
  check(pad_id.has_value(), "cannot pad: this tokenizer has no pad token (bind one with set_special or --pad)");
  check(length >= 0, "pad length must be 0 (the longest sequence) or positive, found {}", length);
  PaddedBatch batch;
  batch.rows = static_cast<int64_t>(sequences.size());
  if (length == 0)
    for (const auto& s : sequences) length = std::max(length, static_cast<int64_t>(s.size()));
  for (const auto& s : sequences)
    check(truncate || static_cast<int64_t>(s.size()) <= length,
          "a sequence of {} tokens is longer than the pad length {} and truncation is off", s.size(), length);
  batch.length = length;
  batch.ids.assign(static_cast<size_t>(batch.rows * length), *pad_id);
  for (size_t r = 0; r < sequences.size(); ++r) {
    const size_t n = std::min(sequences[r].size(), static_cast<size_t>(length));
    std::copy_n(sequences[r].begin(), n, batch.ids.begin() + static_cast<ptrdiff_t>(r * static_cast<size_t>(length)));
    batch.lengths.push_back(static_cast<int32_t>(n));
  }
  return batch;
}

// ---------------------------------------------------------------------------------------------------
// Decoding.

std::string Tokenizer::id_to_bytes(int32_t id) const {
  const Impl& m = *impl_;
  check(id >= 0 && id < m.vocab_size, "token id {} is outside the vocabulary (0 to {})", id, m.vocab_size - 1);
  const AddedToken* added = m.added_by_id(id);
  if (added && added->in_text) return added->content;
  check(id < m.model_size(), "token id {} is in no model vocabulary and is not a special token", id);
  // SentencePiece writes control pieces as nothing and UNK as " ⁇ ".
  constexpr std::string_view kUnkSurface = " \xE2\x81\x87 ";
  if (const auto* bpe = std::get_if<tokenize::BpeModel>(&m.model)) {
    const std::string& t = bpe->token(id);
    if (m.byte_level) return t;
    if (added) return id == bpe->unk() ? std::string(kUnkSurface) : std::string();
    if (const auto byte = tokenize::parse_byte_piece(t)) return std::string(1, static_cast<char>(*byte));
    return t;
  }
  if (const auto* wp = std::get_if<tokenize::WordPieceModel>(&m.model)) return wp->token(id);
  const tokenize::UnigramPiece& p = std::get<tokenize::UnigramModel>(m.model).piece(id);
  switch (p.type) {
    case tokenize::PieceType::Byte: return std::string(1, static_cast<char>(*tokenize::parse_byte_piece(p.text)));
    case tokenize::PieceType::Unknown: return std::string(kUnkSurface);
    case tokenize::PieceType::Control: return "";
    default: return p.text;
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  if (m.kind == TokenizerKind::WordPiece) {
    // Hugging Face's WordPiece decoder: tokens joined by spaces, "##" pieces glued to the previous one
    // (the first token is written as it is).
    const auto& wp = std::get<tokenize::WordPieceModel>(m.model);
    bool first = true;
    for (int32_t id : ids) {
      if (skip_special && is_special(id)) continue;
      const std::string token = id_to_bytes(id);
      if (!first && token.starts_with(wp.prefix()) && !m.added_by_id(id)) {
        out += token.substr(wp.prefix().size());
      } else {
        if (!first) out += ' ';
        out += token;
      }
      first = false;
    }
    if (m.wordpiece_cleanup) {  // no space before punctuation and English clitics
      for (std::string_view from : {" .", " ?", " !", " ,", " n't", " 'm", " 's", " 've", " 're"}) {
        for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at)) out.erase(at, 1);
      }
      for (size_t at = out.find(" ' "); at != std::string::npos; at = out.find(" ' ", at)) out.replace(at, 3, "'");
    }
    return out;
  }
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += id_to_bytes(id);
  }
  if (m.kind == TokenizerKind::Unigram || !m.byte_level) {
    // SentencePiece: "▁" is a space, and the space the normaliser put in front (or behind, for
    // treat_whitespace_as_suffix) is removed; spaces spelled as byte pieces are text and stay.
    const std::string_view space = tokenize::kSpace;
    if (m.sp.add_dummy_prefix) {
      if (!m.sp.treat_whitespace_as_suffix && std::string_view(out).starts_with(space)) out.erase(0, space.size());
      if (m.sp.treat_whitespace_as_suffix && std::string_view(out).ends_with(space)) out.resize(out.size() - space.size());
    }
    std::string spaced;
    spaced.reserve(out.size());
    for (size_t i = 0; i < out.size();) {
      if (std::string_view(out).substr(i).starts_with(space)) {
        spaced += ' ';
        i += space.size();
      } else {
        spaced += out[i++];
      }
    }
    out = std::move(spaced);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Vocabulary and special tokens.

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->index_added();
  impl_->infer_roles();
}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

TokenizerKind Tokenizer::kind() const { return impl_->kind; }
int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  if (impl_->kind == TokenizerKind::BPE && impl_->byte_level) {
    // The vocabulary file writes bytes with GPT-2's byte-to-unicode letters.
    const auto bytes = tokenize::gpt2_letters_to_bytes(token);
    if (!bytes) return std::nullopt;
    return impl_->model_token_to_id(*bytes);
  }
  return impl_->model_token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  check(id >= 0 && id < impl_->vocab_size, "token id {} is outside the vocabulary (0 to {})", id, impl_->vocab_size - 1);
  if (const AddedToken* t = impl_->added_by_id(id)) return t->content;
  if (impl_->kind == TokenizerKind::BPE && impl_->byte_level)
    return tokenize::bytes_to_gpt2_letters(impl_->model_id_to_token(id));
  return impl_->model_id_to_token(id);
}

int64_t Tokenizer::text_bytes(int32_t id) const {
  return is_special(id) ? 0 : static_cast<int64_t>(id_to_bytes(id).size());
}

bool Tokenizer::is_special(int32_t id) const {
  if (const AddedToken* t = impl_->added_by_id(id)) return t->special;
  if (const auto* u = std::get_if<tokenize::UnigramModel>(&impl_->model))
    if (id >= 0 && id < u->size()) {
      const auto type = u->piece(id).type;
      return type == tokenize::PieceType::Control || type == tokenize::PieceType::Unknown;
    }
  for (const auto& r : impl_->roles)
    if (r == id) return true;
  return false;
}

std::optional<int32_t> Tokenizer::special_id(SpecialRole role) const { return impl_->roles[static_cast<size_t>(role)]; }

void Tokenizer::set_special(SpecialRole role, std::string_view token) {
  const auto id = token_to_id(token);
  check(id.has_value(), "cannot make '{}' the {} token: it is not in the vocabulary (add it as a special token first)",
        token, role_name(role));
  impl_->roles[static_cast<size_t>(role)] = id;
}

int32_t Tokenizer::add_special_token(std::string_view content) {
  check(!content.empty(), "a special token cannot be empty");
  for (const AddedToken& t : impl_->added)
    if (t.content == content) return t.id;
  AddedToken t{std::string(content), impl_->vocab_size, true, true};
  if (auto id = impl_->model_token_to_id(content)) t.id = *id;
  impl_->added.push_back(t);
  impl_->index_added();
  impl_->infer_roles();
  return t.id;
}

std::string Tokenizer::describe() const {
  static constexpr std::string_view kinds[] = {"byte-level BPE", "WordPiece", "Unigram"};
  std::string_view kind = kinds[static_cast<int>(impl_->kind)];
  if (impl_->kind == TokenizerKind::BPE && !impl_->byte_level) kind = "SentencePiece BPE";
  std::string roles;
  for (int r = 0; r < 7; ++r)
    if (const auto& id = impl_->roles[static_cast<size_t>(r)])
      roles += fmt::format(" {}={}({})", role_name(static_cast<SpecialRole>(r)), id_to_token(*id), *id);
  return fmt::format("{}, {} tokens, {} special{}{}", kind, impl_->vocab_size, impl_->added.size(),
                     roles.empty() ? "" : ":", roles);
}

}  // namespace attend
