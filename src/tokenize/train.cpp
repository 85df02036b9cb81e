// Tokenizer::train: count the corpus's pre-token pieces (in parallel, in blocks, so files of any size
// fit), then hand the counts to the family's trainer.
#include "tokenize/tokenizer_impl.h"
#include "tokenize/unicode.h"

#include "kernels/parallel.h"

#include <attend/error.h>

#include <fstream>

namespace attend {

namespace fs = std::filesystem;
using namespace tokenize;

namespace {

std::vector<std::string> default_specials(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::BPE: return {"<|endoftext|>"};
    case TokenizerKind::WordPiece: return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    case TokenizerKind::Unigram: return {"<pad>", "<unk>", "<s>", "</s>", "<mask>"};
  }
  return {};
}

// How each family cuts text into the pieces it counts.
struct Counter {
  TokenizerKind kind;
  BertNormalization bert;
  SpNormalizer sp;

  void count(std::string_view text, PieceCounts& counts) const {
    std::vector<std::string_view> pieces;
    if (kind == TokenizerKind::BPE) {
      split_gpt2(text, pieces);
      for (std::string_view p : pieces) ++counts[std::string(p)];
      return;
    }
    // WordPiece and Unigram see one line at a time.
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view line = text.substr(start, end - start);
      start = end + 1;
      pieces.clear();
      if (kind == TokenizerKind::WordPiece) {
        const std::string normalized = bert_normalize(line, bert);
        split_bert(normalized, pieces);
        for (std::string_view p : pieces) ++counts[std::string(p)];
        continue;
      }
      const std::string normalized = sp.normalize(line);
      const std::string_view n = normalized;
      size_t word = 0;
      for (size_t i = 1; i <= n.size(); ++i)
        if (i == n.size() || n.substr(i).starts_with(kSpace)) {
          ++counts[std::string(n.substr(word, i - word))];
          word = i;
        }
    }
  }

  // Whether the text can be cut before position i without changing the pieces: where GPT-2's pattern
  // must start a piece (BPE), or at a line start (the others count line by line).
  bool is_cut(std::string_view text, size_t i) const {
    return kind == TokenizerKind::BPE ? is_gpt2_cut_point(text, i) : i > 0 && text[i - 1] == '\n';
  }

  // The last cut point of `text` after position 0, or 0 if there is none.
  size_t last_cut(std::string_view text) const {
    for (size_t i = text.size(); i-- > 1;)
      if (is_cut(text, i)) return i;
    return 0;
  }

  // Counts a block in parallel: one map per thread over slices cut at cut points, then merged, so the
  // counts do not depend on the number of threads.
  void count_block(std::string_view block, PieceCounts& total) const {
    const int threads = kernels::num_threads();
    std::vector<size_t> cuts{0};
    for (int t = 1; t < threads; ++t) {
      size_t at = std::max(block.size() * static_cast<size_t>(t) / static_cast<size_t>(threads), cuts.back() + 1);
      while (at < block.size() && !is_cut(block, at)) ++at;
      if (at >= block.size()) break;
      cuts.push_back(at);
    }
    cuts.push_back(block.size());
    std::vector<PieceCounts> partial(cuts.size() - 1);
    kernels::parallel_for(static_cast<int64_t>(partial.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const auto i = static_cast<size_t>(k);
        count(block.substr(cuts[i], cuts[i + 1] - cuts[i]), partial[i]);
      }
    });
    for (PieceCounts& p : partial)
      for (auto& [piece, n] : p) total[piece] += n;
  }
};

// The special token that plays UNK, or the family's usual name (which training then adds).
std::string unk_token(const std::vector<std::string>& specials, const std::string& usual) {
  for (const std::string& s : specials)
    if (s == "[UNK]" || s == "<unk>") return s;
  return usual;
}

Counter make_counter(const TokenizerTrainOptions& o) {
  Counter c{o.kind, {}, {}};
  c.bert = {true, true, o.lowercase, o.strip_accents};
  c.sp.add_dummy_prefix = true;
  c.sp.remove_extra_whitespaces = false;
  return c;
}

Tokenizer finish(PieceCounts& counts, const TokenizerTrainOptions& o, const Counter& counter,
                 std::unique_ptr<Tokenizer::Impl> m) {
  check(!counts.empty(), "tokenizer training: the corpus is empty (no text to learn from)");
  check(o.vocab_size > 0, "tokenizer training: vocabulary size must be positive, found {}", o.vocab_size);
  std::vector<std::string> specials = o.special_tokens.empty() ? default_specials(o.kind) : o.special_tokens;
  auto stage = [&](std::string_view name) -> std::function<void(int64_t, int64_t)> {
    if (!o.progress) return nullptr;
    return [&o, name](int64_t done, int64_t total) { o.progress(name, done, total); };
  };
  m->kind = o.kind;
  if (o.kind == TokenizerKind::BPE) {
    m->model = train_bpe(counts, {o.vocab_size, o.min_frequency, specials, stage("merges")});
    m->set_gpt2_pipeline();
  } else if (o.kind == TokenizerKind::WordPiece) {
    const std::string unk = unk_token(specials, "[UNK]");
    m->model = train_wordpiece(counts, {o.vocab_size, o.min_frequency, specials, unk, stage("merges")});
    m->set_bert_pipeline(counter.bert);
  } else {
    m->sp = counter.sp;
    m->byte_level = false;
    const std::string unk = unk_token(specials, "<unk>");
    UnigramTrainOptions u;
    u.vocab_size = o.vocab_size;
    u.special_tokens = specials;
    u.unk_token = unk;
    u.max_piece_chars = o.max_piece_chars;
    u.byte_fallback = o.byte_fallback;
    u.progress = stage("pruning");
    m->model = train_unigram(counts, u);
  }
  for (const std::string& s : specials) {
    const int32_t id = std::visit([&](const auto& model) { return model.find(s); }, m->model);
    check(id >= 0, "tokenizer training: special token '{}' did not get an id", s);
    m->added.push_back({s, id, true, true});
  }
  if (o.kind == TokenizerKind::WordPiece) {
    // BERT's "[CLS] $A [SEP]", as the tokenizer.json it is saved as says.
    m->index_added();
    m->infer_roles();
    const auto cls = m->roles[static_cast<size_t>(SpecialRole::Cls)], sep = m->roles[static_cast<size_t>(SpecialRole::Sep)];
    if (cls && sep) {
      auto name = [&](int32_t id) {
        const AddedToken* t = m->added_by_id(id);
        return t ? t->content : m->model_token_text(id);
      };
      PostStep bert;
      bert.single = {{true, name(*cls), 0}, {false, "A", 0}, {true, name(*sep), 0}};
      bert.pair = {{true, name(*cls), 0}, {false, "A", 0}, {true, name(*sep), 0}, {false, "B", 1}, {true, name(*sep), 1}};
      bert.specials = {{name(*cls), {*cls}, {name(*cls)}}, {name(*sep), {*sep}, {name(*sep)}}};
      m->post_processor.steps = {bert};
    }
  }
  return Tokenizer(std::move(m));
}

}  // namespace

Tokenizer Tokenizer::train_from_text(std::string_view text, const TokenizerTrainOptions& options) {
  const Counter counter = make_counter(options);
  PieceCounts counts;
  counter.count_block(text, counts);
  return finish(counts, options, counter, std::make_unique<Impl>());
}

Tokenizer Tokenizer::train(const std::vector<fs::path>& files, const TokenizerTrainOptions& options) {
  check(!files.empty(), "tokenizer training: no input files");
  const Counter counter = make_counter(options);
  int64_t total_bytes = 0, done_bytes = 0;
  for (const fs::path& f : files) {
    check(fs::is_regular_file(f), "{}: no such file", f.string());
    total_bytes += static_cast<int64_t>(fs::file_size(f));
  }
  PieceCounts counts;
  constexpr size_t kBlock = size_t{64} << 20;
  std::string block, carry;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    check(in.good(), "{}: cannot open for reading", f.string());
    while (in) {
      block = std::move(carry);
      carry.clear();
      const size_t have = block.size();
      block.resize(have + kBlock);
      in.read(block.data() + have, static_cast<std::streamsize>(kBlock));
      const auto got = static_cast<size_t>(in.gcount());
      block.resize(have + got);
      done_bytes += static_cast<int64_t>(got);
      if (in) {  // more to come: keep the text after the last cut point for the next block
        if (const size_t cut = counter.last_cut(block); cut > 0) {
          carry = block.substr(cut);
          block.resize(cut);
        }
      }
      counter.count_block(block, counts);
      if (options.progress) options.progress("reading", done_bytes, total_bytes);
    }
    if (!carry.empty()) {
      counter.count_block(carry, counts);
      carry.clear();
    }
  }
  return finish(counts, options, counter, std::make_unique<Impl>());
}

}  // namespace attend
