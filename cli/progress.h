// A progress bar on stderr for long work (training, reading corpora):
//   merges  [=================>          ]  61%  4700/7700  0:03 left
// On a terminal it redraws one line at most ten times a second; when stderr is not a terminal (CI,
// logs) it writes a plain line at each tenth of the way, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace attend::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Reports `done` of `total`; a new label starts a new bar.
  void update(std::string_view label, int64_t done, int64_t total);
  void update(int64_t done, int64_t total) { update(label_, done, total); }
  // Text shown after the counts, e.g. "loss 3.214  lr 3.0e-04  2,400 tok/s".
  void set_status(std::string status) { status_ = std::move(status); }
  // Ends the current bar's line.
  void finish();

 private:
  void draw(int64_t done, int64_t total);

  std::string label_, status_;
  int64_t first_done_ = -1;  // the count at the first update: a resumed run's rate counts only new work
  bool tty_;
  bool open_ = false;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace attend::cli
