// Text files to token streams for causal LM, with a hash-based validation split and a token cache.
#include <attend/error.h>
#include <attend/io.h>
#include <attend/log.h>
#include <attend/tokenizer.h>
#include <attend/train.h>

#include <nlohmann/json.hpp>

#include <cstring>

namespace attend {

namespace fs = std::filesystem;

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Cuts text into chunks of text lines followed by the blank lines after them; the chunks concatenate back
// to the text exactly (leading blank lines stay with the first chunk).
std::vector<std::string_view> documents(std::string_view text) {
  std::vector<std::string_view> out;
  size_t begin = 0, pos = 0;
  bool has_text = false, after_blank = false;  // the chunk so far has text, and blank lines after it
  while (pos < text.size()) {
    const size_t newline = text.find('\n', pos);
    const size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    const bool blank = text.substr(pos, next - pos).find_first_not_of(" \t\r\n") == std::string_view::npos;
    if (!blank && after_blank) {
      out.push_back(text.substr(begin, pos - begin));
      begin = pos;
      after_blank = false;
    }
    after_blank |= blank && has_text;
    has_text |= !blank;
    pos = next;
  }
  if (begin < text.size()) out.push_back(text.substr(begin));
  return out;
}

void write_ids(const fs::path& path, const std::vector<int32_t>& ids) {
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)));
}

std::vector<int32_t> read_ids(const fs::path& path) {
  const std::string bytes = read_file(path);
  check(bytes.size() % 4 == 0, "{}: {} bytes is not a whole number of int32 token ids", path.string(), bytes.size());
  std::vector<int32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

}  // namespace

TokenStreams load_token_streams(const DataConfig& data, const Tokenizer& tokenizer, const fs::path& cache_dir) {
  // The cache key: every input file's path, size and time, the split and the tokenizer itself.
  nlohmann::json key;
  std::vector<std::string> inputs = data.train;
  if (!data.valid.empty()) inputs.push_back(data.valid);
  for (const std::string& f : inputs) {
    check(fs::is_regular_file(f), "data: {}: no such file", f);
    key["files"].push_back({f, fs::file_size(f), fs::last_write_time(f).time_since_epoch().count()});
  }
  key["valid"] = data.valid;
  key["valid_fraction"] = data.valid_fraction;
  key["tokenizer"] = fnv1a(tokenizer.to_json());
  const fs::path meta = cache_dir / "tokens.json", train_path = cache_dir / "train.tokens",
                 valid_path = cache_dir / "valid.tokens";
  TokenStreams out;
  if (fs::exists(meta) && fs::exists(train_path) && fs::exists(valid_path)) {
    const auto cached = nlohmann::json::parse(read_file(meta));
    if (cached.value("key", nlohmann::json()) == key) {
      out.train = read_ids(train_path);
      out.valid = read_ids(valid_path);
      out.train_documents = cached.value("train_documents", int64_t{0});
      out.valid_documents = cached.value("valid_documents", int64_t{0});
      out.from_cache = true;
      return out;
    }
  }

  const auto eos = tokenizer.special_id(SpecialRole::Eos);
  const uint64_t threshold = static_cast<uint64_t>(data.valid_fraction * 1e6);
  auto add_file = [&](const std::string& path, bool all_valid) {
    const std::string text = read_file(path);
    std::vector<std::string> train_docs, valid_docs;
    for (std::string_view doc : documents(text)) {
      const bool valid = all_valid || fnv1a(doc) % 1000000 < threshold;
      (valid ? valid_docs : train_docs).emplace_back(doc);
    }
    out.train_documents += static_cast<int64_t>(train_docs.size());
    out.valid_documents += static_cast<int64_t>(valid_docs.size());
    for (auto [docs, stream] : {std::pair{&train_docs, &out.train}, std::pair{&valid_docs, &out.valid}}) {
      for (const auto& ids : tokenizer.encode_batch(*docs)) stream->insert(stream->end(), ids.begin(), ids.end());
      if (eos && !docs->empty()) stream->push_back(*eos);  // files are separate documents
    }
  };
  for (const std::string& f : data.train) add_file(f, false);
  if (!data.valid.empty()) add_file(data.valid, true);
  check(!out.train.empty(), "data: the training files hold no text ({})", fmt::join(data.train, ", "));

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  write_ids(train_path, out.train);
  write_ids(valid_path, out.valid);
  write_file_atomic(meta, nlohmann::json{{"key", key},
                                         {"train_tokens", out.train.size()},
                                         {"valid_tokens", out.valid.size()},
                                         {"train_documents", out.train_documents},
                                         {"valid_documents", out.valid_documents}}
                              .dump(2));
  return out;
}

}  // namespace attend
