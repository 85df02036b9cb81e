#include "tokenize/bpe.h"

#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <queue>

namespace attend::tokenize {

namespace {

std::atomic<uint64_t> next_serial{1};

// Each thread caches the ids of the pieces it has encoded, for the last few models it used.
PieceCache& thread_cache(uint64_t serial) {
  struct Entry {
    uint64_t serial = 0;
    std::unique_ptr<PieceCache> cache;
  };
  thread_local std::array<Entry, 4> entries;
  thread_local size_t victim = 0;
  for (Entry& e : entries)
    if (e.serial == serial) return *e.cache;
  Entry& e = entries[victim++ % entries.size()];
  if (!e.cache) e.cache = std::make_unique<PieceCache>();
  e.cache->clear();
  e.serial = serial;
  return *e.cache;
}

}  // namespace

BpeModel::BpeModel(std::vector<std::string> tokens, const std::vector<Merge>& merges, Symbols symbols, int32_t unk,
                   const std::vector<int32_t>& ranks, Options options)
    : tokens_(std::move(tokens)), merges_(merges), symbols_(symbols), unk_(unk), options_(std::move(options)),
      serial_(next_serial++) {
  int32_t first = -1, second = -1;
  const bool unique = index_.build(tokens_, &first, &second);
  check(unique, "BPE vocabulary: token {:?} has two ids, {} and {}",
        second >= 0 ? tokens_[static_cast<size_t>(second)] : std::string(), first, second);
  byte_token_.fill(-1);
  for (unsigned b = 0; b < 256; ++b) {
    const std::string bytes =
        symbols == Symbols::Bytes ? std::string(1, char(b)) : byte_piece_name(static_cast<unsigned char>(b));
    byte_token_[b] = find(bytes);
    check(symbols != Symbols::Bytes || byte_token_[b] >= 0,
          "byte-level BPE vocabulary has no token for byte 0x{:02X}: every byte needs one", b);
  }
  check(unk_ < size(), "BPE unknown-token id {} is outside the vocabulary of {}", unk_, size());
  check(ranks.empty() || ranks.size() == merges_.size(), "BPE: {} ranks given for {} merges", ranks.size(),
        merges_.size());
  rules_.reserve(merges_.size());
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const Merge m = merges_[rank];
    check(m.left >= 0 && m.left < size() && m.right >= 0 && m.right < size(),
          "BPE merge {} names token ids ({}, {}) outside the vocabulary of {}", rank, m.left, m.right, size());
    // With a continuing-subword prefix the right part's prefix is not repeated: "un" + "##able" = "unable".
    std::string_view right = token(m.right);
    if (!options_.prefix.empty() && right.starts_with(options_.prefix)) right.remove_prefix(options_.prefix.size());
    const std::string spelled = token(m.left) + std::string(right);
    const int32_t merged = find(spelled);
    check(merged >= 0, "BPE merge {} ({:?} + {:?}): the merged token {:?} is not in the vocabulary", rank,
          token(m.left), token(m.right), spelled);
    const uint64_t key = PairMap<Rule>::key(m.left, m.right);
    const int32_t r = ranks.empty() ? static_cast<int32_t>(rank) : ranks[rank];
    if (options_.last_merge_wins || !rules_.find(key)) rules_.insert(key, Rule{r, merged});
  }
}

int32_t BpeModel::find(std::string_view bytes) const { return index_.find(tokens_, bytes); }

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  if (symbols_ == Symbols::Bytes) {
    for (unsigned char c : piece) symbols.push_back(byte_token_[c]);
    return;
  }
  // Hugging Face's merge_word: each character (with the prefix after the first, the suffix on the last) is
  // a token, or its bytes as <0xNN> tokens, or the unknown token (a run of them one token when fuse_unk, and
  // put down only when the next known character comes), or nothing.
  int32_t pending_unk = 0;  // unknown characters waiting to be put down as one UNK
  std::string spelled;
  for (size_t i = 0; i < piece.size();) {
    const auto length = static_cast<size_t>(decode_utf8(piece, i).length);
    spelled.clear();
    if (i > 0) spelled += options_.prefix;
    spelled.append(piece.substr(i, length));
    if (i + length >= piece.size()) spelled += options_.suffix;
    i += length;
    if (const int32_t id = find(spelled); id >= 0) {
      for (; pending_unk > 0; --pending_unk) symbols.push_back(unk_);
      symbols.push_back(id);
      continue;
    }
    bool bytes_known = options_.byte_fallback;  // byte fallback needs a <0xNN> token for every byte
    for (unsigned char c : spelled) bytes_known = bytes_known && byte_token_[c] >= 0;
    if (bytes_known) {
      for (unsigned char c : spelled) symbols.push_back(byte_token_[c]);
    } else if (unk_ >= 0) {
      if (pending_unk > 0 && !options_.fuse_unk) symbols.push_back(unk_);
      else if (pending_unk > 0) continue;
      pending_unk = 1;
    }
  }
  for (; pending_unk > 0; --pending_unk) symbols.push_back(unk_);
}

// For short pieces (most words): keep the rank of every adjacent pair, merge the best, and look up only
// the two pairs that changed. O(n^2) in the worst case, but n is small and the data stays in registers.
void BpeModel::merge_short(std::vector<int32_t>& s) const {
  if (s.size() < 2) return;
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[64];
  auto rank_of = [&](size_t i) {
    const Rule* r = rules_.find(PairMap<Rule>::key(s[i], s[i + 1]));
    return r ? r->rank : kNone;
  };
  size_t n = s.size();
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNone) break;
    s[best] = rules_.find(PairMap<Rule>::key(s[best], s[best + 1]))->merged;
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) ranks[i] = ranks[i + 1];
    --n;
    s.resize(n);
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
    if (best + 1 < n) ranks[best] = rank_of(best);
  }
}

// For long pieces (runs of spaces, digits or symbols): a linked list of symbols and a heap of candidate
// merges ordered by (rank, position). A popped candidate is used only if its pair is still there.
void BpeModel::merge_long(std::vector<int32_t>& s) const {
  const auto n = static_cast<int32_t>(s.size());
  std::vector<int32_t> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    if (i < 0) return;
    const int32_t j = next[static_cast<size_t>(i)];
    if (j < 0) return;
    if (const Rule* r = rules_.find(PairMap<Rule>::key(s[static_cast<size_t>(i)], s[static_cast<size_t>(j)])))
      heap.push({r->rank, i});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(static_cast<size_t>(n), false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto i = static_cast<size_t>(c.pos);
    if (dead[i] || next[i] < 0) continue;
    const auto j = static_cast<size_t>(next[i]);
    const Rule* r = rules_.find(PairMap<Rule>::key(s[i], s[j]));
    if (!r || r->rank != c.rank) continue;  // the pair changed since this candidate was pushed
    s[i] = r->merged;
    dead[j] = true;
    next[i] = next[j];
    if (next[j] >= 0) prev[static_cast<size_t>(next[j])] = c.pos;
    push(prev[i]);
    push(c.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) s[out++] = s[static_cast<size_t>(i)];
  s.resize(out);
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    if (const int32_t whole = find(piece); whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  initial_symbols(piece, symbols);
  if (symbols.size() <= 64) merge_short(symbols);
  else merge_long(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1 && symbols_ == Symbols::Bytes) {
    ids.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > 256) {  // rare and long: not worth a cache slot
    encode_uncached(piece, ids);
    return;
  }
  PieceCache& cache = thread_cache(serial_);
  const uint64_t h = hash_bytes(piece);
  if (cache.find(piece, h, ids)) return;
  const size_t start = ids.size();
  encode_uncached(piece, ids);
  cache.insert(piece, h, ids.data() + start, ids.size() - start);
}

// ---------------------------------------------------------------------------------------------------
// Training.

std::vector<BpeModel::Merge> learn_merges(MergeLoop& corpus, std::vector<std::string>& symbol_bytes,
                                          size_t target_symbols, int64_t min_frequency,
                                          const std::function<std::string(int32_t, int32_t)>& merged_bytes,
                                          const std::function<void(int64_t, int64_t)>& progress) {
  using Key = uint64_t;
  std::unordered_map<Key, int64_t> pair_count;
  std::unordered_map<Key, std::vector<int32_t>> pair_words;  // words that contain the pair (may repeat)
  auto count = [&](Key k, int64_t delta, int32_t word) {
    pair_count[k] += delta;
    if (delta > 0) {
      auto& list = pair_words[k];
      if (list.empty() || list.back() != word) list.push_back(word);
    }
  };
  for (size_t w = 0; w < corpus.words.size(); ++w) {
    const auto& word = corpus.words[w];
    for (size_t i = 0; i + 1 < word.size(); ++i)
      count(PairMap<int>::key(word[i], word[i + 1]), corpus.counts[w], static_cast<int32_t>(w));
  }

  // The most frequent pair first; ties go to the pair of older (smaller) ids, so training is deterministic.
  struct Entry {
    int64_t count;
    Key pair;
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [k, c] : pair_count)
    if (c > 0) heap.push({c, k});

  std::unordered_map<std::string, int32_t> symbol_index;
  for (size_t id = 0; id < symbol_bytes.size(); ++id) symbol_index.emplace(symbol_bytes[id], static_cast<int32_t>(id));
  std::vector<BpeModel::Merge> merges;
  const int64_t wanted = static_cast<int64_t>(target_symbols) - static_cast<int64_t>(symbol_bytes.size());
  std::vector<int64_t> seen(corpus.words.size(), -1);
  std::vector<Key> changed;
  while (symbol_bytes.size() < target_symbols && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const int64_t current = pair_count[top.pair];
    if (current != top.count) {  // stale: requeue with the true count
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < min_frequency) break;
    const auto a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair & 0xFFFFFFFF);
    // Two different pairs can spell the same bytes ("ab"+"c", "a"+"bc"): they share one symbol.
    auto [found, is_new] = symbol_index.try_emplace(merged_bytes(a, b), static_cast<int32_t>(symbol_bytes.size()));
    const int32_t merged = found->second;
    if (is_new) symbol_bytes.push_back(found->first);
    merges.push_back({a, b});

    changed.clear();
    std::vector<int32_t> words = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    const auto stamp = static_cast<int64_t>(merges.size());
    for (int32_t w : words) {
      if (seen[static_cast<size_t>(w)] == stamp) continue;
      seen[static_cast<size_t>(w)] = stamp;
      auto& word = corpus.words[static_cast<size_t>(w)];
      const int64_t c = corpus.counts[static_cast<size_t>(w)];
      auto update = [&](int32_t x, int32_t y, int64_t delta) {
        const Key k = PairMap<int>::key(x, y);
        count(k, delta, w);
        changed.push_back(k);
      };
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        if (word[i] != a || word[i + 1] != b) continue;
        if (i > 0) {
          update(word[i - 1], a, -c);
          update(word[i - 1], merged, c);
        }
        update(a, b, -c);
        if (i + 2 < word.size()) {
          update(b, word[i + 2], -c);
          update(merged, word[i + 2], c);
        }
        word[i] = merged;
        word.erase(word.begin() + static_cast<ptrdiff_t>(i) + 1);
      }
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (Key k : changed) {
      const int64_t c = pair_count[k];
      if (c > 0 && k != top.pair) heap.push({c, k});
    }
    if (progress && (merges.size() % 64 == 0)) progress(static_cast<int64_t>(merges.size()), wanted);
  }
  if (progress) progress(static_cast<int64_t>(merges.size()), wanted);
  return merges;
}

BpeModel train_bpe(const PieceCounts& pieces, const BpeTrainOptions& options) {
  const size_t base = options.special_tokens.size() + 256;
  check(options.vocab_size >= static_cast<int32_t>(base),
        "BPE vocabulary size {} is below the {} tokens it must hold (256 bytes + {} special tokens)",
        options.vocab_size, base, options.special_tokens.size());
  check(!pieces.empty(), "BPE training: the corpus is empty");

  std::vector<std::string> tokens(options.special_tokens);
  for (unsigned b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  const auto first_byte = static_cast<int32_t>(options.special_tokens.size());

  // Distinct pieces in a fixed order (their bytes), so training does not depend on hash order.
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  sorted.reserve(pieces.size());
  for (const auto& entry : pieces) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->first < y->first; });
  MergeLoop corpus;
  corpus.words.reserve(sorted.size());
  for (const auto* entry : sorted) {
    std::vector<int32_t> word;
    for (unsigned char c : entry->first) word.push_back(first_byte + c);
    corpus.words.push_back(std::move(word));
    corpus.counts.push_back(entry->second);
  }
  auto concat = [&](int32_t a, int32_t b) { return tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)]; };
  const std::vector<BpeModel::Merge> merges = learn_merges(
      corpus, tokens, static_cast<size_t>(options.vocab_size), options.min_frequency, concat, options.progress);
  return BpeModel(std::move(tokens), merges);
}

}  // namespace attend::tokenize
