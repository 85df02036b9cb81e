// attend::Tokenizer: the vocabulary, special tokens and their roles, decoding, padding.
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <cctype>

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
  auto it = added_index.find(id);
  return it == added_index.end() ? nullptr : &added[it->second];
}

std::string Tokenizer::Impl::model_token_text(int32_t id) const {
  if (const auto* bpe = std::get_if<tokenize::BpeModel>(&model)) {
    if (!byte_level) return bpe->token(id);
    if (auto it = unspellable.find(id); it != unspellable.end()) return it->second;
    return tokenize::bytes_to_gpt2_letters(bpe->token(id));
  }
  return model_id_to_token(id);
}

void Tokenizer::Impl::set_gpt2_pipeline() {
  byte_level = true;
  normalizer = {};
  pre_tokenizer = {};
  tokenize::PreTokenizerStep p;
  p.kind = tokenize::PreTokenizerStep::Kind::ByteLevel;
  p.add_prefix_space = false;
  pre_tokenizer.steps.push_back(p);
  decoder = {};
  decoder.steps.push_back({});  // ByteLevel
}

void Tokenizer::Impl::set_bert_pipeline(const BertNormalization& bert, bool cleanup) {
  byte_level = false;
  normalizer = {};
  tokenize::NormalizerStep n;
  n.kind = tokenize::NormalizerStep::Kind::Bert;
  n.bert = bert;
  normalizer.steps.push_back(n);
  pre_tokenizer = {};
  tokenize::PreTokenizerStep p;
  p.kind = tokenize::PreTokenizerStep::Kind::Bert;
  pre_tokenizer.steps.push_back(p);
  decoder = {};
  tokenize::DecoderStep d;
  d.kind = tokenize::DecoderStep::Kind::WordPiece;
  d.text = std::get<tokenize::WordPieceModel>(model).prefix();
  d.cleanup = cleanup;
  decoder.steps.push_back(d);
}

std::string Tokenizer::Impl::decoder_token(int32_t id) const {
  if (auto it = added_index.find(id); it != added_index.end()) return added_decoded[it->second];
  return model_token_text(id);
}

void Tokenizer::Impl::index_added() {
  vocab_size = model_size();
  added_index.clear();
  special_contents.clear();
  added_decoded.assign(added.size(), std::string());
  std::vector<tokenize::AddedMatcher::Entry> raw, normalized;
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    check(!t.content.empty(), "special token {} is empty", t.id);
    // Ids past the model's vocabulary are fine (tokens added after training), but not beyond one slot
    // per added token: a stray huge id would otherwise size every embedding table.
    const int64_t limit = static_cast<int64_t>(model_size()) + static_cast<int64_t>(added.size());
    check(t.id >= 0 && t.id < limit, "special token '{}' has id {}, expected 0 to {} (the model's {} tokens and {} added)",
          t.content, t.id, limit - 1, model_size(), added.size());
    vocab_size = std::max(vocab_size, t.id + 1);
    added_index[t.id] = i;  // a later entry for the same id wins, as in Hugging Face's map
    if (t.special) special_contents.insert(t.content);
    // Hugging Face matches a normalized token by its normalised form, and decodes it as that form too.
    std::string form = t.content;
    if (t.normalized && !sp && !normalizer.empty()) {
      bool first_kept = true;
      form = normalizer.apply(t.content, first_kept);
    }
    added_decoded[i] = form;
    if (!t.in_text || form.empty()) continue;
    auto& target = t.normalized && !sp ? normalized : raw;
    target.push_back({form, t.id, t.special, t.lstrip, t.rstrip, t.single_word});
  }
  raw_matcher = tokenize::AddedMatcher(std::move(raw));
  normalized_matcher = tokenize::AddedMatcher(std::move(normalized));
  // Every id past the model's own must be an added token's: a gap would be an id with no token at all.
  const int32_t model_tokens = static_cast<int32_t>(model_size());
  std::vector<char> named(static_cast<size_t>(vocab_size - model_tokens), 0);
  for (const AddedToken& t : added)
    if (t.id >= model_tokens) named[static_cast<size_t>(t.id - model_tokens)] = 1;
  for (size_t k = 0; k < named.size(); ++k)
    check(named[k], "token id {} is neither one of the model's {} tokens nor an added token, but added tokens go up to id {}",
          model_tokens + static_cast<int32_t>(k), model_tokens, vocab_size - 1);
  // The post-processor's ids go into every encoding: each must be a token (Hugging Face does not check).
  for (const tokenize::PostStep& s : post_processor.steps) {
    std::vector<std::pair<std::string, int32_t>> ids;
    for (const auto& sp : s.specials)
      for (int32_t id : sp.ids) ids.emplace_back(sp.key, id);
    if (s.kind == tokenize::PostStep::Kind::Bert || s.kind == tokenize::PostStep::Kind::Roberta) {
      ids.emplace_back(s.cls, s.cls_id);
      ids.emplace_back(s.sep, s.sep_id);
    }
    for (const auto& [name, id] : ids)
      check(id >= 0 && id < vocab_size, "post_processor: special token {:?} has id {}, outside the vocabulary (0 to {})",
            name, id, vocab_size - 1);
  }
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
// The bytes of one id; padding.

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
    if (m.byte_level) return m.unspellable.count(id) ? m.unspellable.at(id) : t;
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

// SentencePiece's decoding (.model files): pieces joined, "▁" is a space, and the space the normaliser put in
// front (or behind, for treat_whitespace_as_suffix) is removed; spaces spelled as byte pieces are text and stay.
std::string sentencepiece_decode(const Tokenizer& tok, const tokenize::SpNormalizer& sp, std::span<const int32_t> ids,
                                  bool skip_special) {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && tok.is_special(id)) continue;
    out += tok.id_to_bytes(id);
  }
  const std::string_view space = tokenize::kSpace;
  if (sp.add_dummy_prefix) {
    if (!sp.treat_whitespace_as_suffix && std::string_view(out).starts_with(space)) out.erase(0, space.size());
    if (sp.treat_whitespace_as_suffix && std::string_view(out).ends_with(space)) out.resize(out.size() - space.size());
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
  return spaced;
}

// Hugging Face's decode: each id's token (added tokens as their content), those whose text is a special
// token's left out when skip_special, then the decoder.
std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  for (int32_t id : ids) check(id >= 0 && id < m.vocab_size, "token id {} is outside the vocabulary (0 to {})", id, m.vocab_size - 1);
  if (m.sp) return sentencepiece_decode(*this, *m.sp, ids, skip_special);
  std::vector<int32_t> kept;
  if (!m.vocab_gaps.empty()) {  // ids without a token are skipped, as Hugging Face does
    for (int32_t id : ids)
      if (m.added_by_id(id) || !m.is_gap(id)) kept.push_back(id);
    ids = kept;
  }
  auto skipped = [&](const std::string& token) { return skip_special && m.special_contents.contains(token); };
  if (m.byte_level && m.decoder.is_byte_level() && std::holds_alternative<tokenize::BpeModel>(m.model)) {
    // The ByteLevel decoder on byte-level BPE: model tokens are their bytes already.
    const auto& bpe = std::get<tokenize::BpeModel>(m.model);
    std::string bytes;
    for (int32_t id : ids) {
      if (m.added_by_id(id) || m.unspellable.count(id)) {
        const std::string token = m.decoder_token(id);
        if (skipped(token)) continue;
        if (auto b = tokenize::gpt2_letters_to_bytes(token)) bytes += *b;
        else bytes += token;
      } else {
        bytes += bpe.token(id);
      }
    }
    return tokenize::utf8_lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::string token = m.decoder_token(id);
    if (!skipped(token)) tokens.push_back(std::move(token));
  }
  return m.decoder.decode(std::move(tokens));
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

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

namespace {
constexpr std::string_view kCutShort = "\xEF\xBF\xBD";  // U+FFFD: bytes of a character still to come
}  // namespace

const std::string& StreamDecoder::push(int32_t id) {
  previous_.assign(text_);
  decode_next(id);
  // Where this id changed the text: decoders rewrite the end of it (a character's bytes coming whole) and
  // ByteFallback a whole run of byte pieces, which can also shorten it.
  const auto changed = static_cast<size_t>(
      std::mismatch(text_.begin(), text_.end(), previous_.begin(), previous_.end()).first - text_.begin());
  changes_[ids_.size() % changes_.size()] = changed;
  // Text that none of the last eight ids changed is final: a character's bytes take at most four ids.
  size_t stable = text_.size();
  for (size_t i = 0; i < std::min(ids_.size(), changes_.size()); ++i) stable = std::min(stable, changes_[i]);
  // A run of byte pieces (ByteFallback) is decoded as one: a next byte that is not UTF-8 with it turns the whole
  // run, characters already whole included, into U+FFFDs. Its text waits until an id that is not a byte piece ends
  // it, or for eight ids.
  if (!byte_piece(id)) {
    run_ = 0;
  } else if (run_++ == 0) {
    run_from_ = changed;
  }
  if (!text_.starts_with(settled_)) return text_;  // settled text being rewritten: wait until it is back
  size_t end = text_.find(kCutShort, std::max(stable, settled_.size()));  // a U+FFFD the last ids made
  if (end == std::string::npos) end = text_.size();
  if (run_ > 0 && run_ < 8) end = std::min(end, run_from_);
  if (end > settled_.size()) settled_.append(text_, settled_.size(), end - settled_.size());
  return text_;
}

bool StreamDecoder::byte_piece(int32_t id) const {
  const Tokenizer::Impl& m = *tokenizer_->impl_;  // ids the vocabulary skips (a model may still sample them) are none
  return !m.added_by_id(id) && !m.is_gap(id) && tokenize::parse_byte_piece(m.model_token_text(id));
}

void StreamDecoder::decode_next(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> ids(ids_);
  const std::string window = tokenizer_->decode(ids.subspan(prefix_), skip_special_);
  // A character's bytes take at most four ids: eight ids past the last whole text, a U+FFFD is the text's own.
  const bool waited = ids_.size() - read_ >= 8;
  if (window.starts_with(context_)) {
    const std::string_view added = std::string_view(window).substr(context_.size());
    text_.assign(whole_).append(added);
    if (added.find(kCutShort) != std::string_view::npos && !waited) return;
  } else {
    // The new id rewrote the context's text (ByteFallback turns a whole run of byte ids into U+FFFDs while the
    // run is not UTF-8, the character before included): decode everything.
    text_ = tokenizer_->decode(ids, skip_special_);
    const size_t after = text_.starts_with(whole_) ? whole_.size() : 0;
    if (text_.find(kCutShort, after) != std::string::npos && !waited) return;
  }
  whole_ = text_, read_ = ids_.size();
  // The next context: the last four ids, back to the start of a run of byte pieces (ByteFallback decodes a run
  // as a whole: U+FFFD for each of its bytes unless all of them are UTF-8), and further until they have text (ids
  // that decode to nothing, such as skipped special tokens, give a decoder no start to work on).
  prefix_ = read_ >= 4 ? read_ - 4 : 0;
  while (prefix_ > 0 && byte_piece(ids_[prefix_])) --prefix_;
  while (true) {
    context_ = tokenizer_->decode(ids.subspan(prefix_, read_ - prefix_), skip_special_);
    if (!context_.empty() || prefix_ == 0) break;
    --prefix_;
  }
}

TokenizerKind Tokenizer::kind() const { return impl_->kind; }
int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  if (impl_->kind == TokenizerKind::BPE && impl_->byte_level) {
    // The vocabulary file writes bytes with GPT-2's byte-to-unicode letters.
    for (const auto& [id, text] : impl_->unspellable)
      if (text == token) return id;
    const auto bytes = tokenize::gpt2_letters_to_bytes(token);
    if (!bytes) return std::nullopt;
    return impl_->model_token_to_id(*bytes);
  }
  return impl_->model_token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  check(id >= 0 && id < impl_->vocab_size, "token id {} is outside the vocabulary (0 to {})", id, impl_->vocab_size - 1);
  if (const AddedToken* t = impl_->added_by_id(id)) return t->content;
  check(!impl_->is_gap(id), "token id {} has no token (tokenizer.json's vocabulary skips it)", id);
  return impl_->model_token_text(id);
}

int64_t Tokenizer::text_bytes(int32_t id) const {
  if (is_special(id)) return 0;
  // A byte piece (<0x41>, byte fallback) is one byte of text, though alone it may decode to U+FFFD.
  const std::string raw = id_to_bytes(id);
  if (raw.size() == 6 && raw.starts_with("<0x") && raw.ends_with(">") && std::isxdigit(static_cast<unsigned char>(raw[3])) &&
      std::isxdigit(static_cast<unsigned char>(raw[4])))
    return 1;
  // What the id adds to a decoded text after a token: the decoder's own marks undone (WordPiece's ##, Metaspace's
  // ▁ as a space, ByteLevel's byte letters) and the space a word after a word takes. The token's own text
  // (id_to_bytes) counted WordPiece's ## and ▁'s three bytes: a 3,000-byte text was 5,740 bytes by WordPiece's.
  const std::vector<int32_t> twice = {id, id};
  const std::string two = decode(twice);
  // A byte-level token of part of a character decodes to U+FFFD: its own bytes are the text's.
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (two.find(kReplacement) != std::string::npos && raw.find(kReplacement) == std::string::npos)
    return static_cast<int64_t>(raw.size());
  const auto one = static_cast<int64_t>(decode(std::span(twice).first(1)).size());
  return std::max<int64_t>(0, static_cast<int64_t>(two.size()) - one);
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
  impl_->fingerprint = 0;
}

int32_t Tokenizer::add_special_token(std::string_view content) {
  check(!content.empty(), "a special token cannot be empty");
  for (const AddedToken& t : impl_->added)
    if (t.content == content) return t.id;
  AddedToken t{std::string(content), impl_->vocab_size, true, true};  // normalized=false: matched in the raw text
  if (auto id = impl_->model_token_to_id(content)) t.id = *id;
  impl_->added.push_back(t);
  impl_->index_added();
  impl_->infer_roles();
  impl_->fingerprint = 0;
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
