// The token cache that a run (and its resume) reuses instead of tokenizing again: tokens.json (the key and
// the counts) and the int32 ids of train.tokens and valid.tokens, read by load_token_streams. The input is
// the three files, cut at the line "#### next file"; "@key" in tokens.json stands for the key of this
// cache's real training file, so that inputs get past the key comparison. A damaged cache must be rebuilt
// (the result is then tokenized anew), and ids read from a cache must lie in the tokenizer's vocabulary.
#include "fuzz_util.h"

#include <attend/io.h>
#include <attend/log.h>
#include <attend/train.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

// A directory of this process's own (in /dev/shm, where the cache's flushes cost nothing), removed at exit.
struct Scratch {
  fs::path dir;
  Scratch() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = base / ("attend-fuzz-token-cache-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  static Scratch scratch;
  static const fs::path cache = scratch.dir / "cache";
  static const Tokenizer tok = [] {
    log::set_level(log::Level::Error);  // "ignoring the token cache: ..." is the expected answer
    return Tokenizer::train_from_text("the cat sat on the mat\n\nhello world\n",
                                      {.kind = TokenizerKind::WordPiece, .vocab_size = 60, .min_frequency = 1});
  }();
  static const DataConfig config = [] {
    const fs::path text = scratch.dir / "train.txt";
    std::ofstream(text) << "the cat sat on the mat\n\nthe mat sat on the cat\n\nhello world\n";
    return DataConfig{.train = {text.string()}, .valid_fraction = 0.3};
  }();
  static const std::string key = [] {  // the real cache's key, from a first load that writes the cache
    (void)load_token_streams(config, tok, cache);
    return nlohmann::json::parse(read_file(cache / "tokens.json")).at("key").dump();
  }();

  const auto files = fuzz::split(fuzz::text(data, size), 3, "\n#### next file\n");
  std::string meta(files[0]);
  for (size_t at = meta.find("\"@key\""); at != std::string::npos; at = meta.find("\"@key\"", at + key.size()))
    meta.replace(at, 6, key);
  write_file_atomic(cache / "tokens.json", meta);
  write_file_atomic(cache / "train.tokens", files[1]);
  write_file_atomic(cache / "valid.tokens", files[2]);
  try {
    const TokenStreams s = load_token_streams(config, tok, cache);
    for (const auto* ids : {&s.train, &s.valid})
      for (int32_t id : *ids)
        if (id < 0 || id >= tok.vocab_size())
          fuzz::fail(fmt::format("token cache: id {} outside the vocabulary of {} was used{}", id, tok.vocab_size(),
                                 s.from_cache ? " (from the cache)" : ""));
  } catch (const Error&) {
  }
  return 0;
}
