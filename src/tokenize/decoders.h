// Hugging Face's decoders and post-processors.
//
// Decoding turns the tokens of ids (as the vocabulary writes them; added tokens as their content) into text.
// Each decoder maps the list of token strings to a new list; the last list is concatenated.
//   ByteLevel    GPT-2's byte letters -> bytes (a token with another character stays as it is), all tokens
//                joined into one, invalid UTF-8 -> U+FFFD
//   Metaspace    replacement -> ' ', dropped in the first token unless prepend_scheme is never
//   WordPiece    tokens after the first get a space unless they begin with the prefix (then dropped);
//                cleanup removes spaces before punctuation and clitics
//   BPEDecoder   suffix -> ' ' ('' in the last token)
//   ByteFallback runs of <0xNN> tokens -> their bytes (one U+FFFD per byte if they are not UTF-8)
//   Fuse         all tokens joined into one
//   Strip        up to `start` copies of `content` off the left of each token, up to `stop` off the right
//   Replace      matches of a string or regex -> content, in each token
//   CTC          repeated tokens once, pad tokens dropped, cleanup and word delimiter -> ' '
//   Sequence     the above in order
//
// Post-processing adds the special tokens of encode(text, add_special_tokens):
//   TemplateProcessing  the single template: special tokens (each one or more ids) around $A
//   BertProcessing      [CLS] $A [SEP]; RobertaProcessing: <s> $A </s>
//   ByteLevel           nothing to ids (offsets only)
//   Sequence            each in order
#pragma once

#include "tokenize/normalizers.h"
#include "tokenize/pre_tokenizers.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attend::tokenize {

struct DecoderStep {
  enum class Kind { ByteLevel, Metaspace, WordPiece, BPEDecoder, ByteFallback, Fuse, Strip, Replace, CTC };
  Kind kind = Kind::ByteLevel;
  std::string text;         // Metaspace: replacement; WordPiece: prefix; BPEDecoder: suffix; Strip: content;
                            // CTC: pad token
  std::string word_delimiter = "|";  // CTC
  PrependScheme prepend = PrependScheme::Always;  // Metaspace
  bool split = true;                              // Metaspace (written back)
  bool cleanup = true;                            // WordPiece, CTC
  int64_t start = 0, stop = 0;                    // Strip
  NormalizerStep replace;                         // Replace: pattern and content
  bool add_prefix_space = true, trim_offsets = true, use_regex = true;  // ByteLevel (written back)
};

class Decoder {
 public:
  std::vector<DecoderStep> steps;
  bool sequence = false;
  bool empty() const { return steps.empty(); }
  // Just ByteLevel: the byte-level fast path.
  bool is_byte_level() const { return steps.size() == 1 && steps[0].kind == DecoderStep::Kind::ByteLevel; }
  // The text of `tokens`; no decoder: the tokens joined by spaces.
  std::string decode(std::vector<std::string> tokens) const;
};

Decoder read_decoder(const json* node, const Reader& r, const std::string& path);
json write_decoder(const Decoder& d);

struct PostStep {
  enum class Kind { Template, Bert, Roberta, ByteLevel };
  Kind kind = Kind::Template;
  // Template: the single and pair templates as items; a special item names a key of `specials`.
  struct Item {
    bool special = false;
    std::string id;  // "A"/"B" or the special token's key
    int64_t type_id = 0;
  };
  std::vector<Item> single, pair;
  struct Special {
    std::string key;
    std::vector<int32_t> ids;
    std::vector<std::string> tokens;
  };
  std::vector<Special> specials;
  // Bert/Roberta: (token, id) of the start and end tokens.
  std::string cls, sep;
  int32_t cls_id = -1, sep_id = -1;
  bool trim_offsets = true, add_prefix_space = true;  // Roberta, ByteLevel (written back)
  bool use_regex = true;                              // ByteLevel
};

class PostProcessor {
 public:
  std::vector<PostStep> steps;
  bool sequence = false;
  bool empty() const { return steps.empty(); }
  // The ids with the special tokens of the single template around them.
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;
  // The first and last special ids the single template adds (BOS/CLS and EOS/SEP), or -1.
  std::pair<int32_t, int32_t> ends() const;
};

PostProcessor read_post_processor(const json* node, const Reader& r, const std::string& path);
json write_post_processor(const PostProcessor& p);
// transformers' update_post_processor: "bos? $A eos?" and "bos? $A eos? bos? $B eos?" (type 1 for B).
PostProcessor bos_eos_template(const std::string* bos, int32_t bos_id, const std::string* eos, int32_t eos_id);

}  // namespace attend::tokenize
