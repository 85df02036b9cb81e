// Datasets the trainer draws batches from.
#include <attend/error.h>
#include <attend/rng.h>
#include <attend/train.h>

#include <algorithm>
#include <mutex>
#include <numeric>

namespace attend {

int64_t EpochOrder::operator()(int64_t i) const {
  const int64_t epoch = i / n_;
  std::lock_guard lock(*mutex_);
  if (epoch != epoch_) {
    order_.resize(n_);
    std::iota(order_.begin(), order_.end(), 0);
    Rng rng(seed_, static_cast<uint64_t>(epoch) << 40);
    for (int64_t k = n_ - 1; k > 0; --k)
      std::swap(order_[k], order_[static_cast<int64_t>(rng.below(static_cast<uint64_t>(k + 1)))]);
    epoch_ = epoch;
  }
  return order_[i % n_];
}

LmDataset::LmDataset(std::vector<int32_t> train, std::vector<int32_t> valid, const LmDataOptions& options)
    : train_(std::move(train)), valid_(std::move(valid)), options_(options), order_(1, options.seed) {
  const int64_t T = options_.seq_len;
  check(options_.batch_size >= 1 && T >= 1, "data: batch_size and seq_len must be positive, got {} and {}",
        options_.batch_size, T);
  check(static_cast<int64_t>(train_.size()) >= T + 1,
        "data: the training text has {} tokens, fewer than one sequence of seq_len + 1 = {}", train_.size(), T + 1);
  windows_ = (static_cast<int64_t>(train_.size()) - 1) / T;
  order_ = EpochOrder(windows_, options_.seed);
}

Batch LmDataset::window_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts) const {
  const int64_t T = options_.seq_len;
  Batch b;
  b.B = static_cast<int64_t>(starts.size());
  b.T = T;
  b.ids.reserve(b.B * T);
  b.targets.reserve(b.B * T);
  for (int64_t start : starts) {
    b.ids.insert(b.ids.end(), tokens.begin() + start, tokens.begin() + start + T);
    b.targets.insert(b.targets.end(), tokens.begin() + start + 1, tokens.begin() + start + T + 1);
  }
  return b;
}

// Sequence i of the run (counting from 0) is window order(i): epoch by epoch, each a shuffle of the windows.
Batch LmDataset::train_batch(int64_t micro) const { return train_share(micro, 0, 1); }

Batch LmDataset::train_share(int64_t micro, int part, int parts) const {
  const int64_t B = options_.batch_size;
  check(parts >= 1 && part >= 0 && part < parts, "train_share: part {} of {}", part, parts);
  std::vector<int64_t> starts;
  for (int64_t b = B * part / parts; b < B * (part + 1) / parts; ++b)
    starts.push_back(order_(micro * B + b) * options_.seq_len);
  return window_batch(train_, starts);
}

int64_t LmDataset::valid_batches() const {
  const int64_t windows = (static_cast<int64_t>(valid_.size()) - 1) / options_.seq_len;
  if (windows <= 0) return 0;
  return std::min(options_.max_valid_batches, (windows + options_.batch_size - 1) / options_.batch_size);
}

Batch LmDataset::valid_batch(int64_t i) const {
  const int64_t windows = (static_cast<int64_t>(valid_.size()) - 1) / options_.seq_len;
  std::vector<int64_t> starts;
  for (int64_t w = i * options_.batch_size; w < std::min(windows, (i + 1) * options_.batch_size); ++w)
    starts.push_back(w * options_.seq_len);
  return window_batch(valid_, starts);
}

// ---- Masked LM --------------------------------------------------------------------------------------

MlmDataset::MlmDataset(std::vector<int32_t> train, std::vector<int32_t> valid, const MlmOptions& options)
    : train_(std::move(train)), valid_(std::move(valid)), options_(options), order_(1, options.seed) {
  const int64_t T = options_.seq_len;
  check(options_.batch_size >= 1 && T >= 1, "data: batch_size and seq_len must be positive");
  check(static_cast<int64_t>(train_.size()) >= T, "data: the training text has {} tokens, fewer than one sequence of {}",
        train_.size(), T);
  check(options_.mask_probability > 0.0 && options_.mask_probability < 1.0,
        "data: mask_probability must be in (0, 1), got {}", options_.mask_probability);
  check(options_.vocab_size > static_cast<int32_t>(options_.special_ids.size()) && options_.mask_id >= 0 &&
            options_.mask_id < options_.vocab_size,
        "data: masked LM needs a [MASK] token inside a vocabulary of {} (mask id {})", options_.vocab_size,
        options_.mask_id);
  order_ = EpochOrder(static_cast<int64_t>(train_.size()) / T, options_.seed);
}

// Sequence g draws its choices from Rng(seed + stream, g·T·3): three numbers per position.
Batch MlmDataset::masked(const std::vector<int32_t>& tokens, const std::vector<int64_t>& windows, uint64_t stream) const {
  const int64_t T = options_.seq_len;
  const double p = options_.mask_probability;
  auto special = [&](int32_t id) {
    return std::find(options_.special_ids.begin(), options_.special_ids.end(), id) != options_.special_ids.end();
  };
  Batch b;
  b.B = static_cast<int64_t>(windows.size()), b.T = T;
  b.targets.assign(b.B * T, Batch::kIgnore);
  for (int64_t k = 0; k < b.B; ++k) {
    const int64_t w = windows[k];
    Rng rng(options_.seed + stream, static_cast<uint64_t>(w * T * 3));
    for (int64_t t = 0; t < T; ++t) {
      const int32_t token = tokens[w * T + t];
      const double choose = rng.uniform_double(), how = rng.uniform_double();
      uint64_t draw = rng.next_u32();
      int32_t input = token;
      if (!special(token) && choose < p) {
        b.targets[k * T + t] = token;
        if (how < 0.8) {
          input = options_.mask_id;
        } else if (how < 0.9) {  // a random ordinary token
          do input = static_cast<int32_t>(draw % static_cast<uint64_t>(options_.vocab_size)), draw = rng.next_u32();
          while (special(input));
        }
      }
      b.ids.push_back(input);
    }
  }
  return b;
}

Batch MlmDataset::train_batch(int64_t i) const { return train_share(i, 0, 1); }

// A window's masks are drawn from (seed, window): a share's rows are those of the whole batch.
Batch MlmDataset::train_share(int64_t i, int part, int parts) const {
  check(parts >= 1 && part >= 0 && part < parts, "train_share: part {} of {}", part, parts);
  const int64_t B = options_.batch_size;
  std::vector<int64_t> windows;
  for (int64_t b = B * part / parts; b < B * (part + 1) / parts; ++b) windows.push_back(order_(i * B + b));
  return masked(train_, windows, 0);
}

int64_t MlmDataset::valid_batches() const {
  const int64_t windows = static_cast<int64_t>(valid_.size()) / options_.seq_len;
  return std::min(options_.max_valid_batches, (windows + options_.batch_size - 1) / options_.batch_size);
}

Batch MlmDataset::valid_batch(int64_t i) const {
  const int64_t windows = static_cast<int64_t>(valid_.size()) / options_.seq_len;
  std::vector<int64_t> w;
  for (int64_t k = i * options_.batch_size; k < std::min(windows, (i + 1) * options_.batch_size); ++k) w.push_back(k);
  return masked(valid_, w, 1);  // another stream, the same every evaluation
}

// ---- Seq2seq and classification examples -----------------------------------------------------------

ExampleDataset::ExampleDataset(Kind kind, std::vector<Example> train, std::vector<Example> valid,
                               const ExampleOptions& options)
    : kind_(kind), train_(std::move(train)), valid_(std::move(valid)), options_(options),
      order_(static_cast<int64_t>(train_.size()), options.seed) {
  check(!train_.empty(), "data: no training examples");
  check(options_.batch_size >= 1 && options_.max_source_len >= 1 && options_.max_target_len >= 2,
        "data: batch_size and max_source_len must be positive and max_target_len at least 2");
}

Batch ExampleDataset::collate(const std::vector<const Example*>& examples,
                              const std::vector<const Example*>* batch) const {
  Batch b;
  b.B = static_cast<int64_t>(examples.size());
  auto source_len = [&](const Example* e) {
    return std::max<int64_t>(1, std::min<int64_t>(static_cast<int64_t>(e->source.size()), options_.max_source_len));
  };
  auto target_len = [&](const Example* e) {  // y₁ … y_n, leaving room for BOS / EOS
    return std::min<int64_t>(static_cast<int64_t>(e->target.size()), options_.max_target_len - 1);
  };
  int64_t S = 0, T = 0;  // padded to the whole batch's longest (a share's rows are the batch's rows)
  for (const Example* e : batch ? *batch : examples) S = std::max(S, source_len(e)), T = std::max(T, target_len(e) + 1);
  // The source: the encoder's input (seq2seq) or the whole input (classification); an empty one is one pad.
  std::vector<int32_t> source(b.B * S, 0), source_lengths;
  for (int64_t k = 0; k < b.B; ++k) {
    const Example* e = examples[k];
    std::copy_n(e->source.begin(), std::min<int64_t>(static_cast<int64_t>(e->source.size()), S), source.begin() + k * S);
    source_lengths.push_back(static_cast<int32_t>(source_len(e)));
  }
  if (kind_ == Kind::Classify) {
    b.T = S, b.ids = std::move(source), b.lengths = std::move(source_lengths);
    for (const Example* e : examples) b.labels.push_back(e->label);
    return b;
  }
  b.src_T = S, b.src_ids = std::move(source), b.src_lengths = std::move(source_lengths);
  b.T = T;
  b.ids.assign(b.B * T, 0);
  b.targets.assign(b.B * T, Batch::kIgnore);
  for (int64_t k = 0; k < b.B; ++k) {
    const Example* e = examples[k];
    const int64_t n = target_len(e);
    b.ids[k * T] = options_.bos_id;
    for (int64_t t = 0; t < n; ++t) {
      b.ids[k * T + t + 1] = e->target[t];
      b.targets[k * T + t] = e->target[t];
    }
    b.targets[k * T + n] = options_.eos_id;
    b.lengths.push_back(static_cast<int32_t>(n + 1));
  }
  return b;
}

// Group g holds the examples of batches g·K … g·K + K − 1 in the epoch order (K = bucket_batches). They are
// sorted by (source length, target length) and cut into K batches, which the group visits in an order drawn
// from (seed, g): each batch pads to similar lengths, and batch i is still a pure function of i.
std::vector<int64_t> ExampleDataset::batch_items(int64_t i) const {
  const int64_t B = options_.batch_size, K = std::max<int64_t>(1, options_.bucket_batches);
  const int64_t group = i / K, slot = i % K;
  std::vector<int64_t> items(K * B);
  for (int64_t k = 0; k < K * B; ++k) items[k] = order_(group * K * B + k);
  if (K == 1) return items;
  std::stable_sort(items.begin(), items.end(), [&](int64_t a, int64_t b) {
    const Example &x = train_[a], &y = train_[b];
    return x.source.size() != y.source.size() ? x.source.size() < y.source.size() : x.target.size() < y.target.size();
  });
  std::vector<int64_t> batches(K);
  std::iota(batches.begin(), batches.end(), 0);
  Rng rng(options_.seed ^ 0x9E3779B97F4A7C15ull, static_cast<uint64_t>(group) << 20);
  for (int64_t k = K - 1; k > 0; --k) std::swap(batches[k], batches[static_cast<int64_t>(rng.below(k + 1))]);
  const int64_t chunk = batches[slot];
  return std::vector<int64_t>(items.begin() + chunk * B, items.begin() + (chunk + 1) * B);
}

Batch ExampleDataset::train_batch(int64_t i) const { return train_share(i, 0, 1); }

Batch ExampleDataset::train_share(int64_t i, int part, int parts) const {
  check(parts >= 1 && part >= 0 && part < parts, "train_share: part {} of {}", part, parts);
  std::vector<const Example*> batch;
  for (int64_t k : batch_items(i)) batch.push_back(&train_[k]);
  const auto B = static_cast<int64_t>(batch.size());
  const std::vector<const Example*> share(batch.begin() + B * part / parts, batch.begin() + B * (part + 1) / parts);
  return collate(share, &batch);
}

int64_t ExampleDataset::valid_batches() const {
  const auto n = static_cast<int64_t>(valid_.size());
  return std::min(options_.max_valid_batches, (n + options_.batch_size - 1) / options_.batch_size);
}

Batch ExampleDataset::valid_batch(int64_t i) const {
  std::vector<const Example*> batch;
  for (int64_t k = i * options_.batch_size; k < std::min<int64_t>(valid_.size(), (i + 1) * options_.batch_size); ++k)
    batch.push_back(&valid_[k]);
  return collate(batch);
}

Batch Dataset::train_share(int64_t i, int part, int parts) const {
  check(parts >= 1 && part >= 0 && part < parts, "train_share: part {} of {}", part, parts);
  const Batch whole = train_batch(i);
  return batch_rows(whole, whole.B * part / parts, whole.B * (part + 1) / parts);
}

Batch batch_rows(const Batch& batch, int64_t first, int64_t last) {
  check(0 <= first && first <= last && last <= batch.B, "batch_rows: rows [{}, {}) of a batch of {}", first, last,
        batch.B);
  auto cut = [&](const std::vector<int32_t>& v, int64_t per_row) {
    if (v.empty()) return std::vector<int32_t>();
    return std::vector<int32_t>(v.begin() + first * per_row, v.begin() + last * per_row);
  };
  Batch out;
  out.B = last - first;
  out.T = batch.T;
  out.src_T = batch.src_T;
  out.ids = cut(batch.ids, batch.T);
  out.lengths = cut(batch.lengths, 1);
  out.targets = cut(batch.targets, batch.T);
  out.token_types = cut(batch.token_types, batch.T);
  out.labels = cut(batch.labels, 1);
  out.src_ids = cut(batch.src_ids, batch.src_T);
  out.src_lengths = cut(batch.src_lengths, 1);
  return out;
}

}  // namespace attend
