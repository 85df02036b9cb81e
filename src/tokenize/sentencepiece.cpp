// SentencePiece .model files: a protobuf ModelProto, read here with a small wire-format
// reader (varints and length-delimited fields) rather than generated code. Fields used:
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece (string), 2 score (float), 3 type (enum PieceType)
//   TrainerSpec     3 model_type (1 unigram, 2 bpe, 3 word, 4 char), 24 treat_whitespace_as_suffix,
//                   35 byte_fallback
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
//                   5 escape_whitespaces
//   A Tokenizer is then built from the pieces (Tokenizer::from_sentencepiece, at the end).
#include "tokenize/sentencepiece.h"

#include "tokenize/json_reader.h"
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include <algorithm>

#include <attend/error.h>

#include <cstring>

namespace attend::tokenize {

namespace {

class WireReader {
 public:
  WireReader(std::string_view data, std::string_view origin) : data_(data), origin_(origin) {}

  bool done() const { return pos_ >= data_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      check(pos_ < data_.size(), "{}: truncated varint at byte {}", origin_, pos_);
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      value |= uint64_t(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw Error(fmt::format("{}: varint longer than 10 bytes at byte {}", origin_, pos_));
  }

  // Reads a field key: (field number, wire type).
  std::pair<uint32_t, uint32_t> key() {
    const uint64_t k = varint();
    return {static_cast<uint32_t>(k >> 3), static_cast<uint32_t>(k & 7)};
  }

  std::string_view bytes() {
    const uint64_t n = varint();
    check(n <= data_.size() - pos_, "{}: a field of {} bytes at byte {} runs past the end ({} bytes)", origin_, n, pos_,
          data_.size());
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  float fixed32_float() {
    check(data_.size() - pos_ >= 4, "{}: truncated float at byte {}", origin_, pos_);
    float f;
    std::memcpy(&f, data_.data() + pos_, 4);
    pos_ += 4;
    return f;
  }

  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: advance(8); break;
      case 2: bytes(); break;
      case 5: advance(4); break;
      default: throw Error(fmt::format("{}: unsupported protobuf wire type {} at byte {}", origin_, wire_type, pos_));
    }
  }

 private:
  void advance(size_t n) {
    check(data_.size() - pos_ >= n, "{}: truncated field at byte {}", origin_, pos_);
    pos_ += n;
  }
  std::string_view data_;
  std::string_view origin_;
  size_t pos_ = 0;
};

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = decode_utf8(s, i);
    if (c.value == kInvalid) return false;
    i += c.length;
  }
  return true;
}

}  // namespace

SentencePieceModel parse_sentencepiece(std::string_view data, std::string_view origin) {
  SentencePieceModel m;
  WireReader model(data, origin);
  bool add_dummy_prefix = true, remove_extra = true, escape = true;
  std::string charsmap;
  while (!model.done()) {
    const auto [field, type] = model.key();
    if (field == 1 && type == 2) {
      WireReader piece(model.bytes(), origin);
      UnigramPiece p;
      while (!piece.done()) {
        const auto [f, t] = piece.key();
        if (f == 1 && t == 2) p.text = std::string(piece.bytes());
        else if (f == 2 && t == 5) p.score = piece.fixed32_float();
        else if (f == 3 && t == 0) {
          const uint64_t v = piece.varint();
          check(v >= 1 && v <= 6, "{}: piece {} has type {}, expected 1-6", origin, m.pieces.size(), v);
          p.type = static_cast<PieceType>(v);
        } else piece.skip(t);
      }
      // SentencePiece refuses empty pieces ("piece must not be empty"): one would match everywhere.
      check(!p.text.empty(), "{}: piece {} is empty; a piece holds at least one byte", origin, m.pieces.size());
      // Protobuf strings are UTF-8, and tokenizer.json (a JSON string per piece) can hold nothing else.
      check(valid_utf8(p.text), "{}: piece {} ({:?}) is not valid UTF-8", origin, m.pieces.size(), p.text);
      m.pieces.push_back(std::move(p));
    } else if (field == 2 && type == 2) {
      WireReader spec(model.bytes(), origin);
      while (!spec.done()) {
        const auto [f, t] = spec.key();
        if (f == 3 && t == 0) m.model_type = static_cast<int>(spec.varint());
        else if (f == 24 && t == 0) m.treat_whitespace_as_suffix = spec.varint() != 0;
        else if (f == 35 && t == 0) m.byte_fallback = spec.varint() != 0;
        else spec.skip(t);
      }
    } else if (field == 3 && type == 2) {
      WireReader spec(model.bytes(), origin);
      while (!spec.done()) {
        const auto [f, t] = spec.key();
        if (f == 1 && t == 2) m.normalizer_name = std::string(spec.bytes());
        else if (f == 2 && t == 2) charsmap = std::string(spec.bytes());
        else if (f == 3 && t == 0) add_dummy_prefix = spec.varint() != 0;
        else if (f == 4 && t == 0) remove_extra = spec.varint() != 0;
        else if (f == 5 && t == 0) escape = spec.varint() != 0;
        else spec.skip(t);
      }
    } else {
      model.skip(type);
    }
  }
  check(!m.pieces.empty(), "{}: no pieces; not a SentencePiece model", origin);
  check(m.model_type == 1 || m.model_type == 2,
        "{}: model_type {} is not supported; expected 1 (unigram) or 2 (bpe)", origin, m.model_type);
  m.normalizer.add_dummy_prefix = add_dummy_prefix;
  m.normalizer.remove_extra_whitespaces = remove_extra;
  m.normalizer.escape_whitespaces = escape;
  m.normalizer.treat_whitespace_as_suffix = m.treat_whitespace_as_suffix;
  m.normalizer.set_charsmap(std::move(charsmap), origin);
  for (const UnigramPiece& p : m.pieces)
    if (p.type == PieceType::UserDefined) m.normalizer.user_defined.push_back(p.text);
  // Longest user-defined symbols first, so "<sep2>" wins over "<sep>".
  std::sort(m.normalizer.user_defined.begin(), m.normalizer.user_defined.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return m;
}

}  // namespace attend::tokenize

// ---- A Tokenizer from a .model file ----------------------------------------------------------------

namespace attend {

using namespace tokenize;

namespace {

std::unique_ptr<Tokenizer::Impl> impl_from_sentencepiece(std::string_view bytes, std::string_view origin) {
  SentencePieceModel sp = parse_sentencepiece(bytes, origin);
  auto m = std::make_unique<Tokenizer::Impl>();
  m->sp = sp.normalizer;
  m->byte_level = false;
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

Tokenizer Tokenizer::from_sentencepiece(std::string_view model, std::string_view origin) {
  return naming_origin(origin, [&] { return Tokenizer(impl_from_sentencepiece(model, origin)); });
}

}  // namespace attend
