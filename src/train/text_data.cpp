// Text files to token streams for causal LM, with a hash-based validation split and a token cache.
#include <attend/error.h>
#include <attend/io.h>
#include <attend/log.h>
#include <attend/tokenizer.h>
#include <attend/train.h>

#include "core/hash.h"
#include "core/json_fields.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace attend {

namespace fs = std::filesystem;

namespace {

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

// A cache file's ids, each checked against the vocabulary (a damaged file must not reach the model).
std::vector<int32_t> read_ids(const fs::path& path, int32_t vocab_size) {
  const std::string bytes = read_file(path);
  check(bytes.size() % 4 == 0, "{}: {} bytes is not a whole number of int32 token ids", path.string(), bytes.size());
  std::vector<int32_t> ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), bytes.size());  // an empty vector's data() may be null
  for (size_t i = 0; i < ids.size(); ++i)
    check(ids[i] >= 0 && ids[i] < vocab_size, "{}: id {} at position {} is outside the tokenizer's vocabulary [0, {})",
          path.string(), ids[i], i, vocab_size);
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
  key["tokenizer"] = tokenizer.fingerprint();
  // The end-of-document id goes into the streams; a role that tokenizer_config.json gives is not in the hash.
  const auto eos = tokenizer.special_id(SpecialRole::Eos);
  key["eos"] = eos ? *eos : -1;
  const fs::path meta = cache_dir / "tokens.json", train_path = cache_dir / "train.tokens",
                 valid_path = cache_dir / "valid.tokens";
  TokenStreams out;
  if (fs::exists(meta) && fs::exists(train_path) && fs::exists(valid_path)) {
    // The cache is derived data: a damaged or stale one is rebuilt (with a warning), never trusted.
    try {
      const nlohmann::json cached = parse_json(read_file(meta), meta.string());
      check(cached.is_object(), "{}: expected a JSON object, found {}", meta.string(), cached.type_name());
      if (cached.value("key", nlohmann::json()) == key) {
        auto count = [&](const char* field) {
          int64_t n = -1;
          check(cached.contains(field), "{}: has no '{}'", meta.string(), field);
          read_field(n, cached.at(field), fmt::format("{}: '{}'", meta.string(), field));
          check(n >= 0, "{}: '{}' is {}, expected a non-negative count", meta.string(), field, n);
          return n;
        };
        out.train = read_ids(train_path, tokenizer.vocab_size());
        out.valid = read_ids(valid_path, tokenizer.vocab_size());
        check(static_cast<int64_t>(out.train.size()) == count("train_tokens") &&
                  static_cast<int64_t>(out.valid.size()) == count("valid_tokens"),
              "{}: the token files hold {} and {} tokens, the cache's meta says {} and {}", cache_dir.string(),
              out.train.size(), out.valid.size(), count("train_tokens"), count("valid_tokens"));
        out.train_documents = count("train_documents");
        out.valid_documents = count("valid_documents");
        out.from_cache = true;
        return out;
      }
    } catch (const Error& e) {
      log::warn("ignoring the token cache: {}; tokenizing again", e.what());
      out = TokenStreams{};
    }
  }

  // With a validation file, every line of the training files trains; otherwise a hash holds some out.
  const uint64_t threshold = data.valid.empty() ? static_cast<uint64_t>(data.valid_fraction * 1e6) : 0;
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

ExampleSets load_examples(const DataConfig& data, const Tokenizer& tokenizer, std::span<const std::string> classes) {
  const bool classify = data.task == Task::Classify;
  struct Line {
    std::string first, second;
    bool valid;
    std::string where;  // file:line, for a label that is not one of `classes`
  };
  std::vector<Line> lines;
  // With a validation file, every line of the training files trains; otherwise a hash holds some out.
  const uint64_t threshold = data.valid.empty() ? static_cast<uint64_t>(data.valid_fraction * 1e6) : 0;
  auto add_file = [&](const std::string& path, bool all_valid) {
    check(fs::is_regular_file(path), "data: {}: no such file", path);
    const std::string text = read_file(path);
    size_t pos = 0;
    for (int64_t number = 1; pos < text.size(); ++number) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      const size_t tab = line.find('\t');
      check(tab != std::string_view::npos, "{}:{}: expected {}<TAB>{}, found no tab", path, number,
            classify ? "label" : "source", classify ? "text" : "target");
      lines.push_back({std::string(line.substr(0, tab)), std::string(line.substr(tab + 1)),
                       all_valid || fnv1a(line) % 1000000 < threshold, fmt::format("{}:{}", path, number)});
    }
  };
  for (const std::string& f : data.train) add_file(f, false);
  if (!data.valid.empty()) add_file(data.valid, true);

  ExampleSets out;
  std::vector<std::string> sources, targets;
  for (const Line& l : lines) {
    sources.push_back(classify ? l.second : l.first);
    if (!classify) targets.push_back(l.second);
    if (classify) out.labels.push_back(l.first);
  }
  std::sort(out.labels.begin(), out.labels.end());
  out.labels.erase(std::unique(out.labels.begin(), out.labels.end()), out.labels.end());
  if (classify && !classes.empty()) {  // the model's classes: a label outside them is an error, not a new class
    for (const Line& l : lines)
      check(std::find(classes.begin(), classes.end(), l.first) != classes.end(),
            "{}: label '{}' is not one of the classes {}", l.where, l.first, fmt::join(classes, ", "));
    out.labels.assign(classes.begin(), classes.end());
  }
  const auto source_ids = tokenizer.encode_batch(sources);
  const auto target_ids = tokenizer.encode_batch(targets);
  const auto cls = classify ? tokenizer.special_id(SpecialRole::Cls) : std::nullopt;
  for (size_t i = 0; i < lines.size(); ++i) {
    Example e;
    if (cls) e.source.push_back(*cls);
    e.source.insert(e.source.end(), source_ids[i].begin(), source_ids[i].end());
    if (static_cast<int64_t>(e.source.size()) > data.seq_len) e.source.resize(data.seq_len);
    if (classify)
      e.label = static_cast<int32_t>(std::find(out.labels.begin(), out.labels.end(), lines[i].first) -
                                     out.labels.begin());
    else
      e.target = target_ids[i];
    (lines[i].valid ? out.valid : out.train).push_back(std::move(e));
  }
  check(!out.train.empty(), "data: no training examples in {}", fmt::join(data.train, ", "));
  return out;
}

std::unique_ptr<Dataset> make_dataset(RunConfig& run, const Tokenizer& tokenizer, const fs::path& cache_dir,
                                      std::string* summary) {
  const DataConfig& d = run.data;
  // A role, or its BERT-style stand-in (sequences start with [CLS] and end with [SEP]).
  auto role = [&](SpecialRole r, const char* why, std::optional<SpecialRole> fallback = std::nullopt) {
    auto id = tokenizer.special_id(r);
    if (!id && fallback) id = tokenizer.special_id(*fallback);
    check(id.has_value(), "data: task {} needs the tokenizer's {} token{} ({}); the tokenizer has: {}", task_name(d.task),
          role_name(r), fallback ? fmt::format(" or {}", role_name(*fallback)) : "", why, tokenizer.describe());
    return *id;
  };
  if (d.task == Task::LM || d.task == Task::MLM) {
    TokenStreams s = load_token_streams(d, tokenizer, cache_dir);
    if (summary)
      *summary = fmt::format("{} training tokens ({} document{}), {} validation tokens ({} document{}){}", s.train.size(),
                             s.train_documents, s.train_documents == 1 ? "" : "s", s.valid.size(), s.valid_documents,
                             s.valid_documents == 1 ? "" : "s", s.from_cache ? ", from the cache" : "");
    // A text without blank lines is one document, and one document is never held out: say so, where the run
    // would otherwise report no validation loss without a word of why.
    const size_t valid_tokens = s.valid.size();
    auto checked = [&](std::unique_ptr<Dataset> out) {
      if (d.max_valid_batches == 0 || out->valid_batches() > 0) return out;
      if (d.valid.empty() && valid_tokens == 0)
        log::warn("data: no validation text: none of the {} document{} (separated by blank lines) was held out by "
                  "data.valid_fraction {}; set data.valid to a file of its own, or separate the documents with blank "
                  "lines", s.train_documents, s.train_documents == 1 ? "" : "s", d.valid_fraction);
      else
        log::warn("data: {} gives no validation batch ({} tokens, too few for one sequence of {}); no validation "
                  "loss", d.valid.empty() ? "the held-out documents" : d.valid, valid_tokens, d.seq_len);
      return out;
    };
    if (d.task == Task::LM)
      return checked(std::make_unique<LmDataset>(std::move(s.train), std::move(s.valid),
                                                 LmDataOptions{.batch_size = d.batch_size, .seq_len = d.seq_len,
                                                               .seed = d.seed, .max_valid_batches = d.max_valid_batches}));
    MlmOptions o{.batch_size = d.batch_size, .seq_len = d.seq_len, .seed = d.seed,
                 .mask_probability = d.mask_probability, .mask_id = role(SpecialRole::Mask, "masked positions"),
                 .vocab_size = tokenizer.vocab_size(), .max_valid_batches = d.max_valid_batches};
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
      if (tokenizer.is_special(id)) o.special_ids.push_back(id);
    return checked(std::make_unique<MlmDataset>(std::move(s.train), std::move(s.valid), o));
  }
  ExampleSets e = load_examples(d, tokenizer, run.model.class_names);
  if (summary)
    *summary = fmt::format("{} training and {} validation examples{}", e.train.size(), e.valid.size(),
                           e.labels.empty() ? "" : fmt::format(", classes {}", fmt::join(e.labels, ", ")));
  ExampleOptions o{.batch_size = d.batch_size, .seed = d.seed, .max_source_len = d.seq_len,
                   .max_target_len = d.max_target_len, .max_valid_batches = d.max_valid_batches};
  if (d.task == Task::Seq2Seq) {
    o.bos_id = role(SpecialRole::Bos, "the decoder's first input", SpecialRole::Cls);
    o.eos_id = role(SpecialRole::Eos, "the end of each target", SpecialRole::Sep);
    return std::make_unique<ExampleDataset>(ExampleDataset::Kind::Seq2Seq, std::move(e.train), std::move(e.valid), o);
  }
  check(static_cast<int64_t>(e.labels.size()) == run.model.n_classes,
        "data: the files have {} classes ({}), model.n_classes is {}", e.labels.size(), fmt::join(e.labels, ", "),
        run.model.n_classes);
  run.model.class_names = e.labels;  // saved in config.json: evaluation maps labels to ids by them
  return std::make_unique<ExampleDataset>(ExampleDataset::Kind::Classify, std::move(e.train), std::move(e.valid), o);
}

}  // namespace attend
