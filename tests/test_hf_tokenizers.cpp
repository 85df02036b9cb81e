// Real tokenizer.json files of current models (data/tokenizers/NAME, scripts/get-data.sh tokenizers) against
// Hugging Face's tokenizers 0.23.2 (tests/data/hf_tokenizers/NAME.json, tools/make_hf_tokenizer_fixtures.sh):
// ids with and without special tokens, decoded text with and without skip_special_tokens; the same after a
// save and reload; tokenizer_config.json; and the errors for components Attend does not know.
#include "testing.h"

#include <attend/error.h>
#include <attend/tokenizer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
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

INSTANTIATE_TEST_SUITE_P(Families, HfTokenizer, ::testing::ValuesIn(kFamilies),
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
        j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", "[CLS] $A"}, {"special_tokens", json::object()}};
        Tokenizer::from_json(j.dump(), "t.json");
      },
      {"t.json", "post_processor", "[CLS]", "special_tokens"});
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

}  // namespace
}  // namespace attend
