#include "tokenize/decoders.h"

#include "core/enum_names.h"
#include "tokenize/unicode.h"

#include <attend/error.h>

namespace attend::tokenize {

namespace {

using Kind = DecoderStep::Kind;

constexpr EnumName<Kind> kNames[] = {{Kind::ByteLevel, "ByteLevel"},     {Kind::Metaspace, "Metaspace"}, {Kind::WordPiece, "WordPiece"},
                           {Kind::BPEDecoder, "BPEDecoder"},   {Kind::ByteFallback, "ByteFallback"}, {Kind::Fuse, "Fuse"},
                           {Kind::Strip, "Strip"},             {Kind::Replace, "Replace"},     {Kind::CTC, "CTC"}};

void replace_text(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t done = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + from.size())) {
    out.append(s, done, at - done);
    out.append(to);
    done = at + from.size();
  }
  out.append(s, done);
  s = std::move(out);
}

// The WordPiece decoder's cleanup (English spacing around punctuation and clitics).
void cleanup(std::string& s) {
  static constexpr std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
      {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) replace_text(s, from, to);
}

std::vector<std::string> step(const DecoderStep& d, std::vector<std::string> tokens) {
  switch (d.kind) {
    case Kind::ByteLevel: {
      std::string bytes;
      for (const std::string& t : tokens) {
        if (auto b = gpt2_letters_to_bytes(t)) bytes += *b;
        else bytes += t;
      }
      return {utf8_lossy(bytes)};
    }
    case Kind::Metaspace: {
      const bool drop_first = d.prepend != PrependScheme::Never;
      for (size_t i = 0; i < tokens.size(); ++i) replace_text(tokens[i], d.text, i == 0 && drop_first ? "" : " ");
      return tokens;
    }
    case Kind::WordPiece:
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i != 0) {
          if (tokens[i].starts_with(d.text)) tokens[i].erase(0, d.text.size());
          else tokens[i].insert(0, 1, ' ');
        }
        if (d.cleanup) cleanup(tokens[i]);
      }
      return tokens;
    case Kind::BPEDecoder:
      for (size_t i = 0; i < tokens.size(); ++i) replace_text(tokens[i], d.text, i + 1 == tokens.size() ? "" : " ");
      return tokens;
    case Kind::ByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      auto flush = [&] {
        if (pending.empty()) return;
        if (is_valid_utf8(pending)) out.push_back(pending);
        else
          for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
        pending.clear();
      };
      for (std::string& t : tokens) {
        // Hugging Face parses the two hex digits with from_str_radix, which takes either case.
        if (const auto byte = parse_byte_piece(t)) {
          pending += static_cast<char>(*byte);
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      return out;
    }
    case Kind::Fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      return {all};
    }
    case Kind::Strip: {
      const char32_t c = decode_utf8(d.text, 0).value;
      for (std::string& t : tokens) {
        std::vector<uint32_t> bounds = char_bounds(t);
        const size_t n = bounds.size() - 1;
        size_t first = 0, last = n;
        for (size_t i = 0; i < n && i < static_cast<size_t>(d.start); ++i) {
          if (decode_utf8(t, bounds[i]).value != c) break;
          first = i + 1;
        }
        for (size_t i = 0; i < static_cast<size_t>(d.stop) && i < n; ++i) {
          const size_t index = n - i - 1;
          if (decode_utf8(t, bounds[index]).value != c) break;
          last = index;
        }
        t = first < last ? t.substr(bounds[first], bounds[last] - bounds[first]) : std::string();
      }
      return tokens;
    }
    case Kind::Replace:
      for (std::string& t : tokens) t = replace_all(d.replace, t);
      return tokens;
    case Kind::CTC: {
      std::vector<std::string> out;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0 && tokens[i] == tokens[i - 1]) continue;
        std::string t = tokens[i];
        replace_text(t, d.text, "");
        if (d.cleanup) {
          cleanup(t);
          replace_text(t, d.word_delimiter, " ");
        }
        if (!t.empty()) out.push_back(std::move(t));
      }
      return out;
    }
  }
  return tokens;
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  if (steps.empty()) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const DecoderStep& d : steps) tokens = step(d, std::move(tokens));
  for (const std::string& t : tokens) out += t;
  return out;
}

// ---------------------------------------------------------------------------------------------------
// tokenizer.json

namespace {

void read_step(const json& c, const Reader& r, const std::string& path, Decoder& out) {
  const std::string type = r.string(r.field(c, path, "type"), path + ".type");
  if (type == "Sequence") {
    const json& list = r.field(c, path, "decoders");
    check(list.is_array(), "{}: {}.decoders is {}, expected an array", r.origin, path, list.type_name());
    for (size_t i = 0; i < list.size(); ++i) read_step(list[i], r, fmt::format("{}.decoders[{}]", path, i), out);
    out.sequence = true;
    return;
  }
  DecoderStep d;
  const std::optional<Kind> kind = find_enum<Kind>(kNames, type);
  check(kind.has_value(), "{}: {}.type is {:?}; expected ByteLevel, Metaspace, WordPiece, BPEDecoder, ByteFallback, Fuse, Strip, "
        "Replace, CTC or Sequence", r.origin, path, type);
  d.kind = *kind;
  auto text = [&](const char* field, const char* fallback) {
    const json* v = r.optional(c, field);
    return v ? r.string(*v, path + "." + field) : std::string(fallback);
  };
  switch (d.kind) {
    case Kind::ByteLevel:
      d.add_prefix_space = r.boolean(r.optional(c, "add_prefix_space"), path + ".add_prefix_space", true);
      d.trim_offsets = r.boolean(r.optional(c, "trim_offsets"), path + ".trim_offsets", true);
      d.use_regex = r.boolean(r.optional(c, "use_regex"), path + ".use_regex", true);
      break;
    case Kind::Metaspace: {
      // The pre-tokenizer's reader checks the same fields; read them through it.
      PreTokenizer p = read_pre_tokenizer(&c, r, path);
      d.text = p.steps.at(0).replacement;
      d.prepend = p.steps[0].prepend;
      d.split = p.steps[0].split;
      break;
    }
    case Kind::WordPiece:
      d.text = text("prefix", "##");
      d.cleanup = r.boolean(r.optional(c, "cleanup"), path + ".cleanup", true);
      break;
    case Kind::BPEDecoder: d.text = text("suffix", "</w>"); break;
    case Kind::Strip: {
      d.text = r.string(r.field(c, path, "content"), path + ".content");
      check(!d.text.empty() && static_cast<size_t>(decode_utf8(d.text, 0).length) == d.text.size(),
            "{}: {}.content is {:?}, expected one character", r.origin, path, d.text);
      d.start = r.integer(r.field(c, path, "start"), path + ".start");
      d.stop = r.integer(r.field(c, path, "stop"), path + ".stop");
      check(d.start >= 0 && d.stop >= 0, "{}: {}.start and .stop are {} and {}, expected counts (0 or more)", r.origin,
            path, d.start, d.stop);
      break;
    }
    case Kind::Replace: {
      Normalizer n = read_normalizer(&c, r, path);
      d.replace = n.steps.at(0);
      break;
    }
    case Kind::CTC:
      d.text = text("pad_token", "<pad>");
      d.word_delimiter = text("word_delimiter_token", "|");
      d.cleanup = r.boolean(r.optional(c, "cleanup"), path + ".cleanup", true);
      break;
    default: break;
  }
  out.steps.push_back(std::move(d));
}

json write_step(const DecoderStep& d) {
  json j = {{"type", enum_name<Kind>(kNames, d.kind)}};
  switch (d.kind) {
    case Kind::ByteLevel:
      j["add_prefix_space"] = d.add_prefix_space;
      j["trim_offsets"] = d.trim_offsets;
      j["use_regex"] = d.use_regex;
      break;
    case Kind::Metaspace:
      j["replacement"] = d.text;
      j["prepend_scheme"] = d.prepend == PrependScheme::Always ? "always" : d.prepend == PrependScheme::First ? "first" : "never";
      j["split"] = d.split;
      break;
    case Kind::WordPiece: j["prefix"] = d.text; j["cleanup"] = d.cleanup; break;
    case Kind::BPEDecoder: j["suffix"] = d.text; break;
    case Kind::Strip: j["content"] = d.text; j["start"] = d.start; j["stop"] = d.stop; break;
    case Kind::Replace:
      j["pattern"] = d.replace.regex ? json{{"Regex", d.replace.pattern}} : json{{"String", d.replace.pattern}};
      j["content"] = d.replace.content;
      break;
    case Kind::CTC:
      j["pad_token"] = d.text;
      j["word_delimiter_token"] = d.word_delimiter;
      j["cleanup"] = d.cleanup;
      break;
    default: break;
  }
  return j;
}

}  // namespace

Decoder read_decoder(const json* node, const Reader& r, const std::string& path) {
  Decoder d;
  if (node) read_step(*node, r, path, d);
  return d;
}

json write_decoder(const Decoder& d) {
  return write_stage(d, "decoders", [](const DecoderStep& s) { return write_step(s); });
}

}  // namespace attend::tokenize
