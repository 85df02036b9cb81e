// Tokenizer::load: which file format a path holds (a tokenizer.json, a SentencePiece .model, GPT-2's two
// files, or a directory holding one of them).
#include <attend/error.h>
#include <attend/io.h>
#include <attend/tokenizer.h>

namespace attend {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSentencePieceNames[] = {"tokenizer.model", "spiece.model", "sentencepiece.bpe.model"};

}  // namespace

bool Tokenizer::found_in(const fs::path& dir) {
  if (fs::exists(dir / "tokenizer.json") || (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) ||
      (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")))
    return true;
  for (const char* name : kSentencePieceNames)
    if (fs::exists(dir / name)) return true;
  return false;
}

Tokenizer Tokenizer::load(const fs::path& path) {
  check(fs::exists(path), "{}: no such file or directory (expected tokenizer.json, a SentencePiece .model, or a "
        "directory holding one of them or encoder.json + vocab.bpe)", path.string());
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) {
      Tokenizer tok = load(path / "tokenizer.json");
      if (const fs::path config = path / "tokenizer_config.json"; fs::exists(config))
        tok.apply_config(read_file(config), config.string());
      return tok;
    }
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(path / "encoder.json", path / "vocab.bpe");
    // Hugging Face's names for the same two files (GPT2Tokenizer's vocab_file and merges_file).
    if (fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt"))
      return from_gpt2_files(path / "vocab.json", path / "merges.txt");
    for (const char* name : kSentencePieceNames)
      if (fs::exists(path / name)) return load(path / name);
    throw Error(fmt::format("{}: directory holds no tokenizer.json, encoder.json + vocab.bpe, vocab.json + merges.txt, "
                            "or tokenizer.model",
                            path.string()));
  }
  if (path.extension() == ".model") return from_sentencepiece(read_file(path), path.string());
  return from_json(read_file(path), path.string());
}

}  // namespace attend
