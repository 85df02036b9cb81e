// Real tokenizer.json files of current models (data/tokenizers/NAME, scripts/get-data.sh tokenizers) against
// Hugging Face's tokenizers 0.23.2 (tests/data/hf_tokenizers/NAME.json, tools/make_hf_tokenizer_fixtures.sh):
// ids with and without special tokens, decoded text with and without skip_special_tokens; the same after a
// save and reload; tokenizer_config.json; and the errors for components Attend does not know.
#include "core/base64.h"
#include "testing.h"
#include "tokenize/sentencepiece.h"

#include <attend/error.h>
#include <attend/rng.h>
#include <attend/tokenizer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>

namespace attend {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using testing::expect_error_mentions;

const char* const kFamilies[] = {"llama3", "llama2", "gemma3", "qwen3", "gpt4o", "deepseek_v3", "mistral_nemo", "gpt2", "bert"};

json golden(const std::string& name) {
  std::ifstream in(std::string(ATTEND_TEST_DATA) + "/hf_tokenizers/" + name + ".json");
  if (!in) throw std::runtime_error("missing fixture hf_tokenizers/" + name + ".json");
  return json::parse(in);
}

fs::path family_file(const std::string& name) { return fs::path(ATTEND_DATA_DIR) / "tokenizers" / name / "tokenizer.json"; }

// Loading the largest files takes a second: each is loaded once.
const Tokenizer& family(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(family_file(name)));
  return *slot;
}

std::string show(const std::vector<int32_t>& ids) { return json(ids).dump(); }

// Every case of the fixture: the first mismatch fails with the text, both id lists and both strings.
void expect_matches_golden(const Tokenizer& tok, const json& fixture, const std::string& name) {
  int checked = 0;
  for (size_t i = 0; i < fixture["cases"].size(); ++i) {
    const json& c = fixture["cases"][i];
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto with_special = c["with_special"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text);
    ASSERT_EQ(got, ids) << name << " case " << i << " text " << json(text).dump() << "\n  attend " << show(got)
                        << "\n  hf     " << show(ids);
    const auto got_special = tok.encode(text, {.add_special_tokens = true});
    ASSERT_EQ(got_special, with_special) << name << " case " << i << " (add_special_tokens) text " << json(text).dump();
    ASSERT_EQ(tok.decode(with_special), c["decoded"].get<std::string>()) << name << " case " << i << " decode of "
                                                                         << show(with_special);
    ASSERT_EQ(tok.decode(with_special, true), c["decoded_skip"].get<std::string>())
        << name << " case " << i << " decode (skip special) of " << show(with_special);
    ++checked;
  }
  for (size_t i = 0; i < fixture["decodes"].size(); ++i) {
    const json& d = fixture["decodes"][i];
    const auto ids = d["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(tok.decode(ids), d["decoded"].get<std::string>()) << name << " decode " << i << " of " << show(ids);
    ASSERT_EQ(tok.decode(ids, true), d["decoded_skip"].get<std::string>()) << name << " decode " << i << " (skip) of " << show(ids);
  }
  EXPECT_GT(checked, 300) << name;
}

class HfTokenizer : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTokenizer, EncodesAndDecodesAsHuggingFace) {
  const std::string name = GetParam();
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/" + name + "/tokenizer.json");
  const json fixture = golden(name);
  const Tokenizer& tok = family(name);
  // Hugging Face counts the tokens; ids may skip some (GPT-4o's vocabulary has none at 199998 and
  // 200000-200017), which Attend's vocab_size (an embedding table's rows) covers.
  int32_t named = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    try {
      (void)tok.id_to_token(id);
      ++named;
    } catch (const Error&) {
    }
  }
  EXPECT_EQ(named, fixture["vocab_size"].get<int32_t>()) << name;
  expect_matches_golden(tok, fixture, name);
}

// Saving a loaded tokenizer writes a tokenizer.json that loads back to the same behaviour.
TEST_P(HfTokenizer, SavedAndReloadedBehavesTheSame) {
  const std::string name = GetParam();
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/" + name + "/tokenizer.json");
  const Tokenizer back = Tokenizer::from_json(family(name).to_json(), name + " (saved)");
  expect_matches_golden(back, golden(name), name + " (saved)");
}

// Streamed text (StreamDecoder, what attend serve sends as tokens come) is the decode of every id so far after
// each id, with and without skip_special: over the fixture's encoded texts one after another (whitespace, accents,
// CJK, emoji: characters whose bytes span ids), then random ids (byte pieces, special tokens, pieces that rewrite
// spaces), for every family.
void expect_streams_as_decoded(const Tokenizer& tok, std::vector<int32_t> ids, const std::string& name) {
  // Words at the end (more than eight ids), after which all of the text is settled and is the whole decode.
  const std::vector<int32_t> words = tok.encode(" and that is the end of the text we stream here, word after word");
  ids.insert(ids.end(), words.begin(), words.end());
  for (const bool skip : {false, true}) {
    StreamDecoder stream(tok, skip);
    std::string settled;  // what the stream has settled so far: each one begins every later one
    std::vector<std::string> recent;  // the texts after the last nine ids
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string& got = stream.push(ids[i]);
      const std::string want = tok.decode(std::span(ids).first(i + 1), skip);
      ASSERT_TRUE(stream.settled().starts_with(settled))
          << name << " after id " << i << ": the settled text shrank or changed, now " << json(stream.settled()).dump();
      settled = stream.settled();
      // Text that the last eight ids left as it was is handed out (where the text still begins with what is).
      recent.push_back(got);
      if (recent.size() > 9) recent.erase(recent.begin());
      size_t unchanged = got.size();
      for (const std::string& r : recent)
        unchanged = std::min<size_t>(unchanged, std::mismatch(r.begin(), r.end(), got.begin(), got.end()).first - r.begin());
      if (recent.size() == 9 && got.starts_with(settled)) {
        ASSERT_GE(settled.size(), unchanged) << name << " after id " << i << ": held back "
                                             << json(got.substr(settled.size())).dump();
      }
      if (got == want) continue;
      size_t at = 0;
      while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
      const size_t from = at >= 24 ? at - 24 : 0;
      FAIL() << name << (skip ? " (skip_special)" : "") << " after id " << i << " (" << ids[i] << "): the texts part at byte "
             << at << ": streamed " << json(got.substr(from, 48)).dump() << ", decoded " << json(want.substr(from, 48)).dump()
             << "; the last ids " << show(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(i >= 8 ? i - 8 : 0),
                                                               ids.begin() + static_cast<std::ptrdiff_t>(i) + 1));
    }
    // What was handed out on the way is the start of the whole text, and all of it is out after the words.
    EXPECT_EQ(stream.settled(), tok.decode(ids, skip)) << name << (skip ? " (skip_special)" : "");
  }
}

TEST_P(HfTokenizer, StreamedTextIsTheWholeDecode) {
  const std::string name = GetParam();
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/" + name + "/tokenizer.json");
  const Tokenizer& tok = family(name);
  const json fixture = golden(name);
  std::vector<int32_t> text;
  for (const json& c : fixture["cases"]) {
    const auto ids = c["with_special"].get<std::vector<int32_t>>();
    text.insert(text.end(), ids.begin(), ids.end());
    if (text.size() > 600) break;
  }
  expect_streams_as_decoded(tok, text, name);
  // Half the ids from the first 300 (special tokens, and the byte pieces of SentencePiece vocabularies and
  // GPT-2's: runs of them that are and are not UTF-8), half from anywhere; and every tenth an id the vocabulary
  // skips, where it has such gaps (GPT-4o's 199998 and 200000-200017: a model can still sample them, and decode
  // passes them over).
  std::vector<int32_t> gaps;
  for (int32_t id = tok.vocab_size() - 1; id >= 0 && gaps.size() < 8; --id) {
    try {
      (void)tok.id_to_token(id);
    } catch (const Error&) {
      gaps.push_back(id);
    }
  }
  Rng rng(7);
  std::vector<int32_t> random;
  for (int i = 0; i < 600; ++i) {
    if (!gaps.empty() && i % 10 == 9) random.push_back(gaps[static_cast<size_t>(i / 10) % gaps.size()]);
    else random.push_back(static_cast<int32_t>(rng.below(i % 2 == 0 ? 300 : static_cast<uint64_t>(tok.vocab_size()))));
  }
  expect_streams_as_decoded(tok, random, name + " (random ids)");
}

// A stream holds back a character whose bytes span ids until they have all come, and a stray byte (a character
// that never comes whole) for eight ids only: the text after it is handed out then, not at the end of the
// generation. A hieroglyph no vocabulary holds (four bytes: byte-level ids, or ByteFallback's byte pieces).
TEST_P(HfTokenizer, AStreamWaitsForACharactersBytesAndNotForAStrayByte) {
  const std::string name = GetParam();
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/" + name + "/tokenizer.json");
  const Tokenizer& tok = family(name);
  const std::vector<int32_t> glyph = tok.encode("\xF0\x93\x80\x80");  // U+13000
  const std::vector<int32_t> words = tok.encode(" and then the rest of the sentence, word by word, comes out");
  if (glyph.size() < 2 || tok.decode(glyph) != "\xF0\x93\x80\x80")
    GTEST_SKIP() << name << " does not spell U+13000 in bytes";
  StreamDecoder whole(tok);
  for (size_t i = 0; i + 1 < glyph.size(); ++i) {
    whole.push(glyph[i]);
    EXPECT_EQ(whole.settled(), "") << name << ": part of a character handed out after id " << i;
  }
  whole.push(glyph.back());  // whole: out at once, or once a plain piece ends a run of byte pieces
  whole.push(words[0]);
  EXPECT_TRUE(whole.settled().starts_with("\xF0\x93\x80\x80")) << name << ": " << json(whole.settled()).dump();
  // The glyph's first id alone, then the words: the stray byte's U+FFFD and what follows settle eight ids on.
  StreamDecoder stray(tok);
  stray.push(glyph[0]);
  for (size_t i = 0; i < words.size(); ++i) {
    stray.push(words[i]);
    if (i + 1 >= 8) {
      EXPECT_EQ(stray.settled(), stray.text()) << name << ": still held back " << i + 1 << " ids after the stray byte";
    }
  }
  ASSERT_GE(words.size(), 9u);
  std::vector<int32_t> all = {glyph[0]};
  all.insert(all.end(), words.begin(), words.end());
  EXPECT_EQ(stray.settled(), tok.decode(all)) << name;
}

// ByteFallback's runs (Llama 2): a byte piece that is whole UTF-8 (the newline) and then a stray byte in the same
// run: the run decodes as U+FFFDs, the newline included, so the newline is not handed out before the run ends.
// And a run that shortens the text as it completes (three-byte characters, one U+FFFD a byte until each is whole)
// then a stray byte among plain pieces.
TEST(StreamDecoderRuns, AByteRunIsHandedOutOnceItCannotChange) {
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/llama2/tokenizer.json");
  const Tokenizer& tok = family("llama2");
  auto byte = [&](int value) { return tok.token_to_id(fmt::format("<0x{:02X}>", value)).value(); };
  std::vector<int32_t> ids = tok.encode("Hello");
  ids.push_back(byte(0x0A));
  ids.push_back(byte(0xE4));
  const std::vector<int32_t> words = tok.encode(" world, and then some more words until the end");
  ids.insert(ids.end(), words.begin(), words.end());
  for (int c = 0; c < 4; ++c)  // U+9F98, four times: twelve byte pieces in one run
    for (const int b : {0xE9, 0xBE, 0x98}) ids.push_back(byte(b));
  ids.insert(ids.end(), words.begin(), words.begin() + 3);
  ids.push_back(byte(0xE4));
  ids.insert(ids.end(), words.begin(), words.end());
  StreamDecoder stream(tok);
  std::string settled;
  for (size_t i = 0; i < ids.size(); ++i) {
    stream.push(ids[i]);
    ASSERT_TRUE(stream.settled().starts_with(settled)) << "after id " << i << ": " << stream.settled();
    settled = stream.settled();
    ASSERT_TRUE(tok.decode(ids).starts_with(settled)) << "after id " << i << ": handed out " << settled;
  }
  EXPECT_EQ(settled, tok.decode(ids));
}

INSTANTIATE_TEST_SUITE_P(Families, HfTokenizer, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// ---------------------------------------------------------------------------------------------------
// Variants (tests/data/hf_tokenizers/variants/): a real vocabulary behind another pipeline, or a T5-style
// Unigram built from a committed SentencePiece model, for the components no real file above uses. Each
// golden file names its base and the patch of top-level fields; the tokenizer.json is built here as
// tools/make_hf_tokenizer_fixtures.mjs builds it for Hugging Face.

const char* const kVariants[] = {"llama2_metaspace_first", "llama2_metaspace_always_split", "bert_pieces", "bert_whitespace",
                                 "bert_bpe_decoder", "gpt2_roberta", "gpt2_split_behaviors", "t5like"};

// "spm:FILE": a Unigram tokenizer.json from tests/data/spm/FILE, as Hugging Face's converter lays it out:
// unknown and control pieces as special added tokens, user-defined ones as plain added tokens.
json spm_base(const std::string& file) {
  const std::string path = std::string(ATTEND_TEST_DATA) + "/spm/" + file;
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const tokenize::SentencePieceModel sp = tokenize::parse_sentencepiece(data, path);
  json added = json::array(), vocab = json::array();
  int64_t unk = -1;
  for (size_t id = 0; id < sp.pieces.size(); ++id) {
    const auto& p = sp.pieces[id];
    const int type = static_cast<int>(p.type);
    if (type == 2) unk = static_cast<int64_t>(id);
    if (type == 2 || type == 3 || type == 4)
      added.push_back({{"id", id}, {"content", p.text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", type != 4}});
    vocab.push_back({p.text, static_cast<double>(p.score)});
  }
  return {{"added_tokens", added},
          {"normalizer", {{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(sp.normalizer.charsmap())}}},
          {"model", {{"type", "Unigram"}, {"unk_id", unk}, {"vocab", vocab}, {"byte_fallback", sp.byte_fallback}}}};
}

// The base with the patch's top-level fields; a Precompiled normalizer without a map gets the base's.
json patched(const std::string& base, const json& patch) {
  json j;
  if (base.starts_with("spm:")) {
    j = spm_base(base.substr(4));
  } else {
    std::ifstream in(family_file(base));
    j = json::parse(in);
  }
  const json charsmap = j["normalizer"].is_object() ? j["normalizer"].value("precompiled_charsmap", json()) : json();
  std::function<void(json&)> fill = [&](json& v) {
    if (v.is_object() && v.value("type", "") == "Precompiled" && !v.contains("precompiled_charsmap")) v["precompiled_charsmap"] = charsmap;
    if (v.is_structured())
      for (auto& child : v) fill(child);
  };
  for (const auto& [key, value] : patch.items()) {
    j[key] = value;
    fill(j[key]);
  }
  return j;
}

class HfVariant : public ::testing::TestWithParam<const char*> {};

TEST_P(HfVariant, EncodesAndDecodesAsHuggingFace) {
  const std::string name = GetParam();
  const json fixture = golden(std::string("variants/") + name);
  const std::string base = fixture["base"];
  if (!base.starts_with("spm:")) ATTEND_SKIP_WITHOUT_DATA("tokenizers/" + base + "/tokenizer.json");
  const Tokenizer tok = Tokenizer::from_json(patched(base, fixture["patch"]).dump(), name);
  expect_matches_golden(tok, fixture, name);
  const Tokenizer back = Tokenizer::from_json(tok.to_json(), name + " (saved)");
  expect_matches_golden(back, fixture, name + " (saved)");
}

INSTANTIATE_TEST_SUITE_P(Variants, HfVariant, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// tokenizer_config.json beside tokenizer.json: add_bos_token makes the prompt start with BOS, as
// transformers' LlamaTokenizerFast / GemmaTokenizerFast do; without it the file's post-processor stands.
TEST(HfTokenizerConfig, AddBosTokenAsTransformersDoes) {
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/deepseek_v3/tokenizer_config.json");
  struct Expect {
    const char* name;
    std::optional<std::string> first;  // the prompt's first token, if a special one
  };
  for (const Expect& e : {Expect{"llama2", "<s>"}, Expect{"gemma3", "<bos>"}, Expect{"deepseek_v3", "<｜begin▁of▁sentence｜>"},
                          Expect{"mistral_nemo", "<s>"}, Expect{"qwen3", std::nullopt}, Expect{"llama3", std::nullopt}}) {
    const Tokenizer dir = Tokenizer::load(fs::path(ATTEND_DATA_DIR) / "tokenizers" / e.name);
    const auto plain = dir.encode("Hello world");
    const auto prompt = dir.encode_prompt("Hello world");
    if (e.first) {
      ASSERT_EQ(prompt.size(), plain.size() + 1) << e.name;
      EXPECT_EQ(dir.id_to_token(prompt[0]), *e.first) << e.name;
      EXPECT_EQ(dir.special_id(SpecialRole::Bos), prompt[0]) << e.name;
    } else {
      EXPECT_EQ(prompt, plain) << e.name;
    }
  }
  const Tokenizer qwen = Tokenizer::load(fs::path(ATTEND_DATA_DIR) / "tokenizers" / "qwen3");
  EXPECT_EQ(qwen.id_to_token(*qwen.special_id(SpecialRole::Eos)), "<|im_end|>");
  EXPECT_EQ(qwen.id_to_token(*qwen.special_id(SpecialRole::Pad)), "<|endoftext|>");
}

TEST(HfTokenizerConfig, BadSettingsNameTheFileAndField) {
  ATTEND_SKIP_WITHOUT_DATA("tokenizers/llama2/tokenizer.json");
  Tokenizer tok = Tokenizer::load(family_file("llama2"));
  expect_error_mentions<Error>([&] { tok.apply_config(R"({"bos_token": "<nope>"})", "cfg.json"); },
                               {"cfg.json", "bos_token", "<nope>", "not in the vocabulary"});
  expect_error_mentions<Error>([&] { tok.apply_config(R"({"add_eos_token": true})", "cfg.json"); },
                               {"cfg.json", "add_eos_token", "eos_token is not set"});
  expect_error_mentions<Error>([&] { tok.apply_config(R"({"bos_token": 3})", "cfg.json"); },
                               {"cfg.json", "bos_token", "expected a token"});
  tok.apply_config(R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": true, "add_eos_token": true})");
  EXPECT_EQ(tok.encode("hi", {.add_special_tokens = true}), (std::vector<int32_t>{1, 12014, 2}));  // "▁hi" is 12014
}

// ---------------------------------------------------------------------------------------------------
// Components on small hand-made files.

// A tokenizer.json over single characters and a few longer tokens, without merges but with ignore_merges:
// a piece that is a token comes out whole, any other piece as its characters, so the ids show the pieces.
const std::vector<std::string> kTinyPieces = {"ab", "c!", "ab ", " c!", "  "};
std::string tiny(const json& pre_tokenizer, const json& normalizer = nullptr) {
  json vocab = json::object();
  int id = 0;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = id++;
  for (const char* s : {" ", "\u2581", "1", "2", "!", "?"}) vocab[s] = id++;
  for (const std::string& s : kTinyPieces) vocab[s] = id++;
  return json{{"normalizer", normalizer}, {"pre_tokenizer", pre_tokenizer},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}}}}.dump();
}

TEST(HfComponents, UnknownComponentsAndOptionsNameTheirPath) {
  expect_error_mentions<Error>(
      [] {
        Tokenizer::from_json(tiny({{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "Magic"}}}}}), "m.json");
      },
      {"m.json", "pre_tokenizer.pretokenizers[1].type", "Magic", "expected Split"});
  expect_error_mentions<Error>(
      [] {
        Tokenizer::from_json(tiny({{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}}), "b.json");
      },
      {"b.json", "pre_tokenizer.behavior", "Sideways", "MergedWithPrevious"});
  expect_error_mentions<Error>([] { Tokenizer::from_json(tiny(nullptr, {{"type", "Lowercase2"}}), "n.json"); },
                               {"n.json", "normalizer.type", "Lowercase2"});
  expect_error_mentions<Error>(
      [] {
        json j = json::parse(tiny(nullptr));
        j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}}}}};
        Tokenizer::from_json(j.dump(), "d.json");
      },
      {"d.json", "decoder.decoders[1]", "no field 'start'"});
  expect_error_mentions<Error>(
      [] {
        json j = json::parse(tiny(nullptr));
        j["model"]["dropout"] = 0.1;
        Tokenizer::from_json(j.dump(), "p.json");
      },
      {"p.json", "model.dropout", "expected null or 0"});
  expect_error_mentions<Error>(
      [] {
        json j = json::parse(tiny(nullptr));
        j["post_processor"] = {{"type", "TemplateProcessing"},
                               {"single", {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}}}},
                               {"special_tokens", json::object()}};
        Tokenizer::from_json(j.dump(), "t.json");
      },
      {"t.json", "post_processor", "[CLS]", "special_tokens"});
  // A post-processor's ids go into every encoding, so each must be a token of the vocabulary.
  expect_error_mentions<Error>(
      [] {
        json j = json::parse(tiny(nullptr));
        j["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"[CLS]", 5000}}, {"sep", {"[SEP]", 1}}};
        Tokenizer::from_json(j.dump(), "c.json");
      },
      {"c.json", "post_processor", "[CLS]", "5000", "outside the vocabulary"});
  // The string form of a template is Hugging Face's Python API's; its tokenizer.json takes only arrays.
  expect_error_mentions<Error>(
      [] {
        json j = json::parse(tiny(nullptr));
        j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", "$A"}};
        Tokenizer::from_json(j.dump(), "s.json");
      },
      {"s.json", "post_processor.single", "expected a template"});
}

// Found by fuzz/fuzz_tokenizer_json (the brief run): a WordPiece tokenizer.json without a post-processor
// was saved with BERT's "[CLS] $A [SEP]" (the writer made one from the roles), so the file it wrote encoded
// differently with add_special_tokens. A tokenizer read from tokenizer.json is written as it was read.
TEST(HfComponents, SavingAddsNoPostProcessorTheFileDidNotHave) {
  const std::string file = R"({"added_tokens": [{"id": 0, "content": "[UNK]", "special": true, "normalized": false},
                                                {"id": 1, "content": "[CLS]", "special": true, "normalized": false},
                                                {"id": 2, "content": "[SEP]", "special": true, "normalized": false}],
                               "normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
                               "model": {"type": "WordPiece", "unk_token": "[UNK]",
                                         "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##s": 4}}})";
  const Tokenizer tok = Tokenizer::from_json(file);
  const Tokenizer back = Tokenizer::from_json(tok.to_json());
  EXPECT_EQ(tok.encode("Hellos", {.add_special_tokens = true}), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(back.encode("Hellos", {.add_special_tokens = true}), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(json::parse(tok.to_json())["post_processor"].is_null());
  // Attend's own trained WordPiece has BERT's template, in memory and in its file.
  TokenizerTrainOptions o;
  o.kind = TokenizerKind::WordPiece;
  o.vocab_size = 60;
  const Tokenizer trained = Tokenizer::train_from_text("hello hello world worlds", o);
  const auto ids = trained.encode("hello", {.add_special_tokens = true});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(trained.id_to_token(ids.front()), "[CLS]");
  EXPECT_EQ(trained.id_to_token(ids.back()), "[SEP]");
  EXPECT_EQ(Tokenizer::from_json(trained.to_json()).encode("hello", {.add_special_tokens = true}), ids);
}

// Split's delimiter behaviours on "ab  c!": pieces checked with Hugging Face's tokenizers 0.23.2
// (splitPreTokenizer(" ", behavior).preTokenizeString).
TEST(HfComponents, SplitBehaviours) {
  struct Case {
    const char* behavior;
    bool invert;
    std::vector<std::string> pieces;
  };
  const std::vector<Case> cases = {
      {"Removed", false, {"ab", "c!"}},
      {"Isolated", false, {"ab", " ", " ", "c!"}},
      {"MergedWithPrevious", false, {"ab ", " ", "c!"}},
      {"MergedWithNext", false, {"ab", " ", " c!"}},
      {"Contiguous", false, {"ab", "  ", "c!"}},
      {"Removed", true, {" ", " "}},
      {"Isolated", true, {"ab", " ", " ", "c!"}},
      {"MergedWithNext", true, {"ab ", " ", "c!"}},
  };
  for (const Case& c : cases) {
    const Tokenizer tok = Tokenizer::from_json(
        tiny({{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", c.behavior}, {"invert", c.invert}}));
    std::vector<int32_t> expected;
    for (const std::string& p : c.pieces) {
      if (const auto whole = tok.token_to_id(p)) expected.push_back(*whole);
      else
        for (char ch : p) expected.push_back(*tok.token_to_id(std::string(1, ch)));
    }
    EXPECT_EQ(tok.encode("ab  c!"), expected) << c.behavior;
  }
}

// A Split pattern that backtracks without end on some text (nested repetition before an anchor that fails): encoding
// that text is an error naming the pattern and the place, under Attend's own match limits, not a hang; other texts
// still encode.
TEST(HfComponents, BacktrackingSplitPatternIsAnErrorNotAHang) {
  const Tokenizer tok =
      Tokenizer::from_json(tiny({{"type", "Split"}, {"pattern", {{"Regex", "(a|aa)+$"}}}, {"behavior", "Isolated"}}));
  EXPECT_FALSE(tok.encode("ab").empty());
  const std::string text = std::string(80, 'a') + "!";
  expect_error_mentions<Error>([&] { tok.encode(text); }, {"(a|aa)+$", "from byte 0", "match limit"});
}

}  // namespace
}  // namespace attend
