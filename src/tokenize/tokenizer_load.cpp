// Tokenizer::load: which file format a path holds (a tokenizer.json, a SentencePiece .model, GPT-2's two
// files, or a directory holding one of them).
#include <attend/error.h>
#include <attend/io.h>
#include <attend/tokenizer.h>

namespace attend {

namespace fs = std::filesystem;

Tokenizer Tokenizer::load(const fs::path& path) {
  check(fs::exists(path), "{}: no such file or directory (expected tokenizer.json, a SentencePiece .model, or a "
        "directory holding one of them or encoder.json + vocab.bpe)", path.string());
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return load(path / "tokenizer.json");
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(path / "encoder.json", path / "vocab.bpe");
    for (const char* name : {"tokenizer.model", "spiece.model", "sentencepiece.bpe.model"})
      if (fs::exists(path / name)) return load(path / name);
    throw Error(fmt::format("{}: directory holds no tokenizer.json, encoder.json + vocab.bpe, or tokenizer.model",
                            path.string()));
  }
  if (path.extension() == ".model") return from_sentencepiece(read_file(path), path.string());
  return from_json(read_file(path), path.string());
}

}  // namespace attend
