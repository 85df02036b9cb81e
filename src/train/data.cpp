// Datasets the trainer draws batches from.
#include <attend/error.h>
#include <attend/rng.h>
#include <attend/train.h>

#include <numeric>

namespace attend {

LmDataset::LmDataset(std::vector<int32_t> train, std::vector<int32_t> valid, const LmDataOptions& options)
    : train_(std::move(train)), valid_(std::move(valid)), options_(options) {
  const int64_t T = options_.seq_len;
  check(options_.batch_size >= 1 && T >= 1, "data: batch_size and seq_len must be positive, got {} and {}",
        options_.batch_size, T);
  check(static_cast<int64_t>(train_.size()) >= T + 1,
        "data: the training text has {} tokens, fewer than one sequence of seq_len + 1 = {}", train_.size(), T + 1);
  windows_ = (static_cast<int64_t>(train_.size()) - 1) / T;
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

// Sequence i of the run (counting from 0) is window perm_e[i mod W] of epoch e = i / W, where perm_e is a
// Fisher-Yates shuffle drawn from (seed, e).
Batch LmDataset::train_batch(int64_t micro) const {
  const int64_t B = options_.batch_size;
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = micro * B + b;
    const int64_t epoch = i / windows_;
    if (epoch != permutation_epoch_) {
      permutation_.resize(windows_);
      std::iota(permutation_.begin(), permutation_.end(), 0);
      Rng rng(options_.seed, static_cast<uint64_t>(epoch) << 40);
      for (int64_t k = windows_ - 1; k > 0; --k)
        std::swap(permutation_[k], permutation_[static_cast<int64_t>(rng.below(static_cast<uint64_t>(k + 1)))]);
      permutation_epoch_ = epoch;
    }
    starts.push_back(permutation_[i % windows_] * options_.seq_len);
  }
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

}  // namespace attend
