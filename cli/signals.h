// SIGINT and SIGTERM are taken by one thread of their own: no signal handler ever runs on a thread that computes.
//
// oneDNN's JIT GEMM kernels point rsp into a heap workspace while they run (up to oneDNN 3.11.1, so Debian 12's
// 2.6.3; oneDNN issue #4845): a handler that the kernel starts on such a thread writes its signal frame over the
// heap. `attend train`'s Ctrl-C handler did so once in CI ("corrupted size vs. prev_size", exit by SIGABRT). So
// main() blocks both signals before any thread exists (every thread made later inherits the mask: OpenMP's
// workers, MPI's, the server's), and one thread waits for them with sigwait.
#pragma once

#include <functional>

namespace attend::cli {

// First thing in main(): blocks SIGINT and SIGTERM and starts the thread that waits for them. A signal that comes
// while no StopOnSignal is alive ends the process as the default action does (killed by that signal).
void start_signal_thread();

// While one is alive, the first SIGINT or SIGTERM calls `stop` with its number, on the signal thread, instead of
// ending the process: `stop` asks the work to wind down (a flag, a server's stop) and returns. A second signal while
// it is alive ends the process at once with exit status 128 + its number. One at a time (a new one replaces the
// last); `attend chat` makes one for each reply.
class StopOnSignal {
 public:
  explicit StopOnSignal(std::function<void(int signal)> stop);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
};

}  // namespace attend::cli
