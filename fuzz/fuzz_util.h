// What the fuzz targets share: a file in memory for the parsers that take a path, the cutting of one
// input into several files, and a workout for a tokenizer that loaded.
//
// Each target calls a parser on the fuzzer's bytes. attend::Error is the expected answer to bad input
// and is caught; anything else (another exception, a sanitizer report, a timeout) is a finding.
#pragma once

#include <attend/error.h>
#include <attend/tokenizer.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace attend::fuzz {

// The fuzzer's input as text.
inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A finding that is not a crash by itself (a round trip that fails): print it and abort.
[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// A file that lives in memory (memfd), for parsers that take a path: write() replaces its bytes and
// path() (/proc/self/fd/N) opens it. One per process and name, reused by every input.
class MemoryFile {
 public:
  explicit MemoryFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  const std::string& path() const { return path_; }
  void write(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0) fail("ftruncate failed");
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite failed");
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  std::string path_;
};

// Cuts the input into `parts` files at each `separator` (the last part takes the rest, separators and
// all); missing parts are empty. The seed corpora write the separator between the files.
inline std::vector<std::string_view> split(std::string_view input, size_t parts, std::string_view separator) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t at = input.find(separator);
    if (at == std::string_view::npos) break;
    out.push_back(input.substr(0, at));
    input.remove_prefix(at + separator.size());
  }
  out.push_back(input);
  out.resize(parts);
  return out;
}

// Uses a tokenizer that loaded the way a program would: encode and decode a few texts, name every token,
// write tokenizer.json and read it back. A tokenizer that loads must do all of this without crashing, and
// what it writes must load again.
// `same_encoding`: the tokenizer read back must encode as this one (not for SentencePiece .model files, whose
// tokenizer.json runs Hugging Face's pipeline instead of SentencePiece's normaliser).
inline void exercise(const Tokenizer& tok, bool same_encoding = true) {
  static const std::string texts[] = {"Hello, world! It's 2024.", "  naïve café\tüber\n\nZürich  ", "a<|endoftext|>b [CLS] x",
                                      "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xff\xfe bytes", ""};
  for (const std::string& t : texts) {
    for (const EncodeOptions& o : {EncodeOptions{}, EncodeOptions{.add_bos = true, .add_eos = true, .parse_special = false},
                                   EncodeOptions{.add_special_tokens = true}}) {
      const std::vector<int32_t> ids = tok.encode(t, o);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) fail("encode gave an id outside the vocabulary");
      (void)tok.decode(ids);
      (void)tok.decode(ids, /*skip_special=*/true);
    }
  }
  const int32_t n = std::min<int32_t>(tok.vocab_size(), 512);
  for (int32_t id = 0; id < n; ++id) {
    (void)tok.id_to_token(id);
    (void)tok.id_to_bytes(id);
    (void)tok.text_bytes(id);
  }
  (void)tok.describe();
  const std::string saved = tok.to_json();
  try {
    // What it wrote loads again and encodes the same.
    const Tokenizer back = Tokenizer::from_json(saved);
    for (const std::string& t : texts)
      if (same_encoding && back.encode(t, {.add_special_tokens = true}) != tok.encode(t, {.add_special_tokens = true}))
        fail("a tokenizer read back from the tokenizer.json it wrote encodes differently");
  } catch (const Error& e) {
    fail(std::string("a loaded tokenizer wrote a tokenizer.json it cannot read: ") + e.what());
  }
}

}  // namespace attend::fuzz
