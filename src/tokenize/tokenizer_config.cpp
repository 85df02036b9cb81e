// tokenizer_config.json (transformers' settings beside tokenizer.json): what of it changes encoding.
//   bos_token, eos_token, pad_token, unk_token, cls_token, sep_token, mask_token
//                      a string or an AddedToken object ({"content": ...}); binds the role
//   added_tokens_decoder  {"id": {"content", "special", "lstrip", "rstrip", "single_word", "normalized"}}:
//                      tokens tokenizer.json lacks are added
//   add_bos_token, add_eos_token
//                      when either is given, the post-processor becomes "BOS? $A EOS?", as transformers'
//                      LlamaTokenizerFast and GemmaTokenizerFast build it (update_post_processor)
// Everything else (chat templates, model_max_length, tokenizer_class, ...) does not change ids and is ignored.
#include "tokenize/json_reader.h"
#include "tokenize/tokenizer_impl.h"

#include "core/json_fields.h"

#include <attend/error.h>

namespace attend {

using namespace tokenize;

namespace {

// The content of a token setting: "<s>", {"content": "<s>", ...} or null (none).
std::optional<std::string> token_setting(const json& config, const Reader& r, const char* field) {
  const json* v = r.optional(config, field);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  check(v->is_object(), "{}: {} is {}, expected a token (a string or an object with \"content\")", r.origin, field,
        v->type_name());
  return r.string(r.field(*v, field, "content"), std::string(field) + ".content");
}

}  // namespace

void Tokenizer::apply_config(std::string_view text, std::string_view origin) {
  naming_origin(origin, [&] {
    const json config = parse_json(text, origin);
    const Reader r{origin};
    check(config.is_object(), "{}: the top level is {}, expected an object", origin, config.type_name());
    Impl& m = *impl_;
    m.fingerprint = 0;  // whatever this changes, the tokenizer's hash is worked out again
    if (const json* decoder = r.optional(config, "added_tokens_decoder")) {
      check(decoder->is_object(), "{}: added_tokens_decoder is {}, expected an object of id: token", origin,
            decoder->type_name());
      bool changed = false;
      for (const auto& [key, t] : decoder->items()) {
        const std::string path = fmt::format("added_tokens_decoder[{:?}]", key);
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(key, &used);
          if (used != key.size()) id = -1;
        } catch (const std::exception&) {
        }
        check(id >= 0 && id < INT32_MAX, "{}: {} is not a token id", origin, path);
        if (m.added_by_id(static_cast<int32_t>(id))) continue;
        m.added.push_back(read_added_token(t, r, path, static_cast<int32_t>(id)));
        changed = true;
      }
      if (changed) m.index_added();
    }
    struct Setting {
      const char* field;
      SpecialRole role;
    };
    std::optional<std::string> bos, eos;
    for (const Setting& s : {Setting{"bos_token", SpecialRole::Bos}, Setting{"eos_token", SpecialRole::Eos},
                             Setting{"pad_token", SpecialRole::Pad}, Setting{"unk_token", SpecialRole::Unk},
                             Setting{"cls_token", SpecialRole::Cls}, Setting{"sep_token", SpecialRole::Sep},
                             Setting{"mask_token", SpecialRole::Mask}}) {
      const std::optional<std::string> token = token_setting(config, r, s.field);
      if (!token) continue;
      const auto id = token_to_id(*token);
      check(id.has_value(), "{}: {} is {:?}, which is not in the vocabulary", origin, s.field, *token);
      m.roles[static_cast<size_t>(s.role)] = *id;
      if (s.role == SpecialRole::Bos) bos = token;
      if (s.role == SpecialRole::Eos) eos = token;
    }
    const json* add_bos = r.optional(config, "add_bos_token");
    const json* add_eos = r.optional(config, "add_eos_token");
    if (add_bos || add_eos) {
      const bool with_bos = r.boolean(add_bos, "add_bos_token", false);
      const bool with_eos = r.boolean(add_eos, "add_eos_token", false);
      check(!with_bos || bos, "{}: add_bos_token is true but bos_token is not set", origin);
      check(!with_eos || eos, "{}: add_eos_token is true but eos_token is not set", origin);
      m.post_processor = bos_eos_template(with_bos ? &*bos : nullptr, with_bos ? *token_to_id(*bos) : -1,
                                          with_eos ? &*eos : nullptr, with_eos ? *token_to_id(*eos) : -1);
    }
    return 0;
  });
}

}  // namespace attend
