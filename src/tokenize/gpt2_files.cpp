// GPT-2's published tokenizer files: encoder.json (token -> id, in GPT-2's byte letters) and vocab.bpe
// (a "#version" line, then one "left right" merge per line).
#include "core/json_fields.h"
#include "tokenize/json_reader.h"
#include "tokenize/tokenizer_impl.h"

#include <attend/error.h>
#include <attend/io.h>

#include <sstream>

namespace attend {

namespace fs = std::filesystem;
using namespace tokenize;

namespace {

Tokenizer load_gpt2(std::string_view encoder_text, std::string_view merges_text, std::string_view encoder_origin,
                    std::string_view merges_origin) {
  const json encoder = parse_json(encoder_text, encoder_origin);
  const Reader r{encoder_origin};
  std::vector<std::string> tokens = dense_vocab(encoder, r, true);
  const BpeModel vocab_only(tokens, {});
  // vocab.bpe: a "#version" line, then one "left right" merge per line.
  std::istringstream lines{std::string(merges_text)};
  json merges = json::array();
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty() || (number == 1 && line.starts_with("#version"))) continue;
    merges.push_back(line);
  }
  auto m = std::make_unique<Tokenizer::Impl>();
  m->kind = TokenizerKind::BPE;
  m->model = BpeModel(std::move(tokens), read_merges(merges, Reader{merges_origin}, vocab_only, true));
  m->set_gpt2_pipeline();
  if (auto id = std::get<BpeModel>(m->model).find("<|endoftext|>"); id >= 0) m->added.push_back({"<|endoftext|>", id, true, true});
  return Tokenizer(std::move(m));
}

}  // namespace

Tokenizer Tokenizer::from_gpt2_files(const fs::path& encoder_json, const fs::path& vocab_bpe) {
  return from_gpt2(read_file(encoder_json), read_file(vocab_bpe), encoder_json.string(), vocab_bpe.string());
}

Tokenizer Tokenizer::from_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, std::string_view encoder_origin,
                               std::string_view merges_origin) {
  return naming_origin(encoder_origin, [&] { return load_gpt2(encoder_json, vocab_bpe, encoder_origin, merges_origin); });
}

}  // namespace attend
