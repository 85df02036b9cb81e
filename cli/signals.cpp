#include "signals.h"

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

namespace attend::cli {

namespace {

std::mutex g_mutex;
std::function<void(int)> g_stop;  // the live StopOnSignal's action (guarded by g_mutex)
bool g_asked = false;             // a signal has called it: the next one, while it lives, ends the process

// SIGINT and SIGTERM, less one this process was started ignoring (`nohup`, a script's `cmd &`): a blocked signal is
// still queued for sigwait, which would otherwise turn an ignored one into a stop or a death.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal : {SIGINT, SIGTERM}) {
    struct sigaction now {};
    if (sigaction(signal, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
    sigaddset(&set, signal);
  }
  return set;
}

// What the default action does: the process ends, killed by the signal (a shell then sees 128 + its number).
[[noreturn]] void die_of(int signal) {
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  pthread_kill(pthread_self(), signal);
  std::_Exit(128 + signal);  // not reached: the signal ended the process
}

void wait_for_signals() {
  const sigset_t set = stop_signals();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (g_asked) std::_Exit(128 + signal);  // a second one: at once
    if (!g_stop) die_of(signal);
    g_asked = true;
    try {
      g_stop(signal);
    } catch (...) {  // a message that could not be written (stderr closed): the stop was asked all the same
    }
  }
}

}  // namespace

void start_signal_thread() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(wait_for_signals).detach();
}

StopOnSignal::StopOnSignal(std::function<void(int)> stop) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_stop = std::move(stop);
  g_asked = false;  // a new stop action: the next signal is its first
}

StopOnSignal::~StopOnSignal() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_stop = nullptr;
  g_asked = false;  // the next signal finds no stop action: the default action
}

}  // namespace attend::cli
