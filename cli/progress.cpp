#include "progress.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace attend::cli {

namespace {

std::string clock(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(std::string_view label, int64_t done, int64_t total) {
  if (label != label_) {
    finish();
    label_ = std::string(label);
    last_tenth_ = -1;
    first_done_ = -1;
    start_ = std::chrono::steady_clock::now();
  }
  draw(done, total);
}

void ProgressBar::draw(int64_t done, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  const double fraction = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (first_done_ < 0) first_done_ = done;
  const double fresh = static_cast<double>(done - first_done_) / static_cast<double>(std::max<int64_t>(total, 1));
  const std::string eta = fresh > 0.01 ? clock(elapsed * (1 - fraction) / fresh) + " left" : "";
  if (tty_) {
    if (open_ && fraction < 1.0 && now - last_draw_ < std::chrono::milliseconds(100)) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    fmt::print(stderr, "\r{:<8} [{}] {:3.0f}%  {}/{}  {} {}  {}\x1b[K", label_, bar, 100 * fraction, done, total,
               clock(elapsed), eta, status_);
    std::fflush(stderr);
    open_ = true;
    last_draw_ = now;
    return;
  }
  const int tenth = static_cast<int>(fraction * 10);
  if (tenth == last_tenth_) return;
  last_tenth_ = tenth;
  fmt::print(stderr, "{}: {:3.0f}%  {}/{}  {}  {}\n", label_, 100 * fraction, done, total, clock(elapsed), status_);
}

void ProgressBar::finish() {
  if (tty_ && open_) fmt::print(stderr, "\n");
  open_ = false;
}

}  // namespace attend::cli
