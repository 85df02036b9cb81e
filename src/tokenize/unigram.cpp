#include "tokenize/unigram.h"

#include "tokenize/unicode.h"

#include <attend/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace attend::tokenize {

namespace {

constexpr float kUnkPenalty = 10.0f;  // UNK scores this far below the worst piece (SentencePiece's choice)
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

UnigramModel::UnigramModel(std::vector<UnigramPiece> pieces, int32_t unk, bool byte_fallback, bool every_piece)
    : pieces_(std::move(pieces)), unk_(unk), byte_fallback_(byte_fallback), every_piece_(every_piece) {
  check(unk_ >= 0 && unk_ < size(), "Unigram: the unknown piece id {} is not in the vocabulary of {}", unk_, size());
  texts_.reserve(pieces_.size());
  for (const UnigramPiece& p : pieces_) texts_.push_back(p.text);
  int32_t first = -1, second = -1;
  const bool unique = index_.build(texts_, &first, &second);
  check(unique, "Unigram vocabulary: piece {:?} has two ids, {} and {}",
        second >= 0 ? texts_[static_cast<size_t>(second)] : std::string(), first, second);

  matchable_.resize(pieces_.size());
  // As SentencePiece: the maximum starts at FLT_MIN (the smallest positive float), so with the usual
  // negative log-probabilities the user-defined bonus below is about -0.1.
  min_score_ = std::numeric_limits<double>::max();
  max_score_ = std::numeric_limits<float>::min();
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const UnigramPiece& p = pieces_[id];
    check(std::isfinite(p.score), "Unigram vocabulary: piece {} ({:?}) has a score of {}, expected a finite number", id,
          p.text, p.score);
    matchable_[id] = (every_piece || p.type == PieceType::Normal || p.type == PieceType::UserDefined) && !p.text.empty();
    if (matchable_[id]) longest_ = std::max(longest_, p.text.size());
    if (p.type == PieceType::Normal || every_piece) {
      min_score_ = std::min(min_score_, p.score);
      max_score_ = std::max(max_score_, p.score);
    }
  }
  if (min_score_ == std::numeric_limits<double>::max()) min_score_ = 0;  // no normal pieces
  byte_pieces_.fill(-1);
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (pieces_[id].type != PieceType::Byte) continue;
    const auto byte = parse_byte_piece(pieces_[id].text);
    check(byte.has_value(), "Unigram vocabulary: byte piece {} is {:?}, expected <0xNN>", id, pieces_[id].text);
    byte_pieces_[*byte] = static_cast<int32_t>(id);
  }
  if (byte_fallback_)
    for (unsigned b = 0; b < 256; ++b)
      check(byte_pieces_[b] >= 0, "Unigram vocabulary uses byte fallback but has no piece <0x{:02X}>", b);
}

void UnigramModel::encode(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  const std::vector<uint32_t> bounds = char_bounds(text);
  const size_t n = bounds.size() - 1;  // characters
  std::vector<double> best(n + 1, kNegInf);
  std::vector<int32_t> best_id(n + 1, -1);
  std::vector<uint32_t> best_from(n + 1, 0);
  best[0] = 0;
  // SentencePiece subtracts in float, Hugging Face in double.
  const double unk_score = every_piece_ ? min_score_ - static_cast<double>(kUnkPenalty)
                                        : static_cast<double>(static_cast<float>(min_score_) - kUnkPenalty);
  for (size_t i = 0; i < n; ++i) {
    if (best[i] == kNegInf) continue;
    bool has_single = false;
    for (size_t j = i + 1; j <= n && bounds[j] - bounds[i] <= longest_; ++j) {
      const int32_t id = find(text.substr(bounds[i], bounds[j] - bounds[i]));
      if (id < 0 || !matchable_[static_cast<size_t>(id)]) continue;
      // SentencePiece's bonus that makes user-defined pieces win: length (in bytes) times the best score.
      const double score = pieces_[static_cast<size_t>(id)].type == PieceType::UserDefined && !every_piece_
                               ? static_cast<double>(bounds[j] - bounds[i]) * max_score_ - 0.1
                               : pieces_[static_cast<size_t>(id)].score;
      if (best[i] + score > best[j]) {
        best[j] = best[i] + score;
        best_id[j] = id;
        best_from[j] = static_cast<uint32_t>(i);
      }
      if (j == i + 1) has_single = true;
    }
    if (!has_single && best[i] + unk_score > best[i + 1]) {
      best[i + 1] = best[i] + unk_score;
      best_id[i + 1] = unk_;
      best_from[i + 1] = static_cast<uint32_t>(i);
    }
  }
  struct Step {
    int32_t id;
    uint32_t begin, end;  // characters
  };
  std::vector<Step> path;
  for (size_t j = n; j > 0; j = best_from[j]) path.push_back({best_id[j], best_from[j], static_cast<uint32_t>(j)});
  std::reverse(path.begin(), path.end());
  bool after_unk = false;
  for (const Step& s : path) {
    if (s.id != unk_) {
      ids.push_back(s.id);
      after_unk = false;
    } else if (byte_fallback_) {
      for (uint32_t k = bounds[s.begin]; k < bounds[s.end]; ++k) ids.push_back(byte_pieces_[static_cast<unsigned char>(text[k])]);
    } else if (!after_unk) {  // a run of unknown characters is one UNK
      ids.push_back(unk_);
      after_unk = true;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Training.

namespace {

// ψ(x): recurrence up to x >= 6, then the asymptotic series.
double digamma(double x) {
  double result = 0;
  while (x < 6) {
    result -= 1 / x;
    x += 1;
  }
  const double r = 1 / x, r2 = r * r;
  return result + std::log(x) - 0.5 * r - r2 * (1.0 / 12 - r2 * (1.0 / 120 - r2 * (1.0 / 252)));
}

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return a > b ? a + std::log1p(std::exp(b - a)) : b + std::log1p(std::exp(a - b));
}

struct Word {
  std::string text;
  std::vector<uint32_t> bounds;
  int64_t count;
};

// The current candidate vocabulary during training.
struct Candidates {
  std::vector<std::string> texts;
  std::vector<double> scores;
  std::vector<bool> is_char;  // single characters are never pruned
  StringIndex index;
  size_t longest = 0;

  void reindex() {
    index.build(texts);
    longest = 0;
    for (const auto& t : texts) longest = std::max(longest, t.size());
  }
  // Calls fn(begin, end, id) for every vocabulary match in a word (character positions).
  template <typename F>
  void for_each_edge(const Word& w, F&& fn) const {
    const size_t n = w.bounds.size() - 1;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j <= n && w.bounds[j] - w.bounds[i] <= longest; ++j) {
        const int32_t id = index.find(texts, std::string_view(w.text).substr(w.bounds[i], w.bounds[j] - w.bounds[i]));
        if (id >= 0) fn(i, j, id);
      }
  }
};

// Viterbi over one word; returns the ids of the best path and its score. `banned` is left out.
std::vector<int32_t> viterbi(const Candidates& c, const Word& w, int32_t banned = -1) {
  const size_t n = w.bounds.size() - 1;
  std::vector<double> best(n + 1, kNegInf);
  std::vector<int32_t> id_at(n + 1, -1);
  std::vector<size_t> from(n + 1, 0);
  best[0] = 0;
  c.for_each_edge(w, [&](size_t i, size_t j, int32_t id) {
    if (id == banned || best[i] == kNegInf) return;
    const double s = best[i] + c.scores[static_cast<size_t>(id)];
    if (s > best[j]) {
      best[j] = s;
      id_at[j] = id;
      from[j] = i;
    }
  });
  std::vector<int32_t> path;
  if (best[n] == kNegInf) return path;
  for (size_t j = n; j > 0; j = from[j]) path.push_back(id_at[j]);
  std::reverse(path.begin(), path.end());
  return path;
}

// One EM step: expected piece counts by forward-backward over every word's lattice, then new scores
// ψ(count) − ψ(total) (SentencePiece's Bayesian variant of log(count/total)); pieces expected less than
// half a time are dropped, unless they are characters.
void em_step(Candidates& c, const std::vector<Word>& words) {
  std::vector<double> expected(c.texts.size(), 0.0);
  struct Edge {
    size_t i, j;
    int32_t id;
  };
  std::vector<Edge> edges;
  for (const Word& w : words) {
    const size_t n = w.bounds.size() - 1;
    edges.clear();
    c.for_each_edge(w, [&](size_t i, size_t j, int32_t id) { edges.push_back({i, j, id}); });
    std::vector<double> alpha(n + 1, kNegInf), beta(n + 1, kNegInf);
    alpha[0] = 0;
    for (const Edge& e : edges) alpha[e.j] = log_add(alpha[e.j], alpha[e.i] + c.scores[static_cast<size_t>(e.id)]);
    beta[n] = 0;
    for (auto e = edges.rbegin(); e != edges.rend(); ++e)
      beta[e->i] = log_add(beta[e->i], beta[e->j] + c.scores[static_cast<size_t>(e->id)]);
    const double z = alpha[n];
    if (z == kNegInf) continue;
    for (const Edge& e : edges)
      expected[static_cast<size_t>(e.id)] +=
          static_cast<double>(w.count) * std::exp(alpha[e.i] + c.scores[static_cast<size_t>(e.id)] + beta[e.j] - z);
  }
  Candidates next;
  double total = 0;
  for (size_t id = 0; id < c.texts.size(); ++id)
    if (c.is_char[id] || expected[id] >= 0.5) total += expected[id];
  const double log_total = digamma(total);
  for (size_t id = 0; id < c.texts.size(); ++id) {
    if (!c.is_char[id] && expected[id] < 0.5) continue;
    next.texts.push_back(std::move(c.texts[id]));
    next.scores.push_back(digamma(std::max(expected[id], 1e-3)) - log_total);
    next.is_char.push_back(c.is_char[id]);
  }
  c = std::move(next);
  c.reindex();
}

// Keeps the pieces whose removal would cost the corpus the most likelihood: for each piece, its Viterbi
// frequency moves to the pieces of its own second-best spelling, and the change in log-likelihood is
// its loss. Characters are always kept.
void prune(Candidates& c, const std::vector<Word>& words, size_t keep) {
  const size_t size = c.texts.size();
  std::vector<std::vector<int32_t>> alternatives(size);
  for (size_t id = 0; id < size; ++id) {
    if (c.is_char[id]) continue;
    Word w{c.texts[id], char_bounds(c.texts[id]), 1};
    alternatives[id] = viterbi(c, w, static_cast<int32_t>(id));
  }
  std::vector<double> freq(size, 0.0);
  for (const Word& w : words)
    for (int32_t id : viterbi(c, w)) freq[static_cast<size_t>(id)] += static_cast<double>(w.count);
  double sum = 0;
  for (double f : freq) sum += f;
  const double log_sum = std::log(sum);
  std::vector<std::pair<double, size_t>> losses;
  for (size_t id = 0; id < size; ++id) {
    if (c.is_char[id]) continue;
    if (freq[id] == 0 || alternatives[id].empty()) {
      losses.push_back({freq[id] == 0 ? 0.0 : std::numeric_limits<double>::max(), id});
      continue;
    }
    const double new_sum = sum + freq[id] * static_cast<double>(alternatives[id].size() - 1);
    double log_alt = 0;
    for (int32_t a : alternatives[id]) log_alt += std::log(freq[static_cast<size_t>(a)] + freq[id]) - std::log(new_sum);
    const double log_piece = std::log(freq[id]) - log_sum;
    losses.push_back({freq[id] / sum * (log_piece - log_alt), id});
  }
  std::sort(losses.begin(), losses.end(), [](auto& x, auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
  std::vector<bool> kept(c.is_char);
  size_t count = static_cast<size_t>(std::count(kept.begin(), kept.end(), true));
  for (const auto& [loss, id] : losses) {
    if (count >= keep) break;
    kept[id] = true;
    ++count;
  }
  Candidates next;
  for (size_t id = 0; id < size; ++id) {
    if (!kept[id]) continue;
    next.texts.push_back(std::move(c.texts[id]));
    next.scores.push_back(c.scores[id]);
    next.is_char.push_back(c.is_char[id]);
  }
  c = std::move(next);
  c.reindex();
}

}  // namespace

UnigramModel train_unigram(const PieceCounts& counts, const UnigramTrainOptions& options) {
  check(!counts.empty(), "Unigram training: the corpus is empty");
  std::vector<UnigramPiece> vocab;
  for (const std::string& s : options.special_tokens)
    vocab.push_back({s, 0.0f, s == options.unk_token ? PieceType::Unknown : PieceType::Control});
  if (std::none_of(vocab.begin(), vocab.end(), [&](auto& p) { return p.text == options.unk_token; }))
    vocab.insert(vocab.begin(), {options.unk_token, 0.0f, PieceType::Unknown});
  if (options.byte_fallback)
    for (unsigned b = 0; b < 256; ++b) vocab.push_back({byte_piece_name(static_cast<unsigned char>(b)), 0.0f, PieceType::Byte});
  const size_t reserved = vocab.size();

  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [text, count] : counts) words.push_back({text, char_bounds(text), count});
  std::sort(words.begin(), words.end(), [](const Word& a, const Word& b) { return a.text < b.text; });

  // Seed: every character, plus the most frequent substrings (by frequency × length, as SentencePiece
  // ranks them) of up to max_piece_chars characters that occur at least twice.
  std::unordered_map<std::string, int64_t> chars, substrings;
  for (const Word& w : words) {
    const size_t n = w.bounds.size() - 1;
    for (size_t i = 0; i < n; ++i) {
      chars[w.text.substr(w.bounds[i], w.bounds[i + 1] - w.bounds[i])] += w.count;
      for (size_t j = i + 2; j <= n && j - i <= static_cast<size_t>(options.max_piece_chars); ++j)
        substrings[w.text.substr(w.bounds[i], w.bounds[j] - w.bounds[i])] += w.count;
    }
  }
  check(reserved + chars.size() <= static_cast<size_t>(options.vocab_size),
        "Unigram vocabulary size {} is below the {} special and byte pieces plus the {} characters of the corpus",
        options.vocab_size, reserved, chars.size());
  std::vector<std::pair<int64_t, std::string>> ranked;
  for (auto& [s, f] : substrings)
    if (f >= 2) ranked.push_back({f * static_cast<int64_t>(char_bounds(s).size() - 1), s});
  substrings.clear();
  std::sort(ranked.begin(), ranked.end(), [](auto& x, auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
  if (ranked.size() > static_cast<size_t>(options.seed_size)) ranked.resize(static_cast<size_t>(options.seed_size));

  Candidates c;
  std::vector<std::pair<std::string, int64_t>> sorted_chars(chars.begin(), chars.end());
  std::sort(sorted_chars.begin(), sorted_chars.end());
  double total = 0;
  for (auto& [s, f] : sorted_chars) total += static_cast<double>(f);
  for (auto& [f, s] : ranked) total += static_cast<double>(f);
  for (auto& [s, f] : sorted_chars) {
    c.texts.push_back(s);
    c.scores.push_back(std::log(static_cast<double>(f)) - std::log(total));
    c.is_char.push_back(true);
  }
  for (auto& [f, s] : ranked) {
    c.texts.push_back(s);
    c.scores.push_back(std::log(static_cast<double>(f)) - std::log(total));
    c.is_char.push_back(false);
  }
  c.reindex();

  // EM and pruning until the vocabulary is within 10% of its size, then keep the best-scoring pieces.
  const size_t wanted = static_cast<size_t>(options.vocab_size) - reserved;
  const size_t start = c.texts.size();
  while (true) {
    for (int k = 0; k < options.em_iterations; ++k) em_step(c, words);
    if (options.progress)
      options.progress(static_cast<int64_t>(start - std::min(start, c.texts.size())),
                       static_cast<int64_t>(start - std::min(start, wanted)));
    if (c.texts.size() <= wanted * 11 / 10) break;
    prune(c, words, std::max(wanted * 11 / 10, static_cast<size_t>(static_cast<double>(c.texts.size()) * options.shrinking_factor)));
  }
  std::vector<size_t> order(c.texts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (c.is_char[a] != c.is_char[b]) return static_cast<bool>(c.is_char[a]);  // characters are always kept
    return c.scores[a] != c.scores[b] ? c.scores[a] > c.scores[b] : c.texts[a] < c.texts[b];
  });
  if (order.size() > wanted) order.resize(wanted);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return c.scores[a] != c.scores[b] ? c.scores[a] > c.scores[b] : c.texts[a] < c.texts[b];
  });
  for (size_t id : order) vocab.push_back({c.texts[id], static_cast<float>(c.scores[id]), PieceType::Normal});
  if (options.progress) options.progress(1, 1);
  const auto unk = static_cast<int32_t>(
      std::find_if(vocab.begin(), vocab.end(), [](auto& p) { return p.type == PieceType::Unknown; }) - vocab.begin());
  return UnigramModel(std::move(vocab), unk, options.byte_fallback);
}

}  // namespace attend::tokenize
