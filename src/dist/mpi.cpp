// The ranks of an MPI job as a Communicator: nonblocking point-to-point messages on MPI_COMM_WORLD.
// Only the thread that made the communicator calls MPI (MPI_THREAD_FUNNELED); MPI's errors are returned,
// not fatal, and become attend::Error naming the call.
#include <attend/distributed.h>
#include <attend/error.h>
#include <attend/log.h>

// MPI's C interface only (Open MPI's mpi.h would bring its deprecated C++ bindings into C++ code).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>
#include <unordered_map>

namespace attend {

namespace {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(fmt::format("MPI: {} failed: {}", call, std::string(text, length)));
}

int live_communicators = 0;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double connect_timeout_s) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    ++live_communicators;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    transport_ = std::string(version, length);
    transport_ = transport_.substr(0, transport_.find_first_of(",\n"));
    handshake(connect_timeout_s);
  }

  ~MpiCommunicator() override {
    if (--live_communicators == 0) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return transport_; }

  Request send(int peer, std::span<const std::byte> data, int tag) override {
    MPI_Request r;
    check_mpi(MPI_Isend(data.data(), count(data.size()), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r), "MPI_Isend");
    return keep(r);
  }

  Request receive(int peer, std::span<std::byte> data, int tag) override {
    MPI_Request r;
    check_mpi(MPI_Irecv(data.data(), count(data.size()), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r), "MPI_Irecv");
    return keep(r);
  }

  bool test(Request request) override {
    MPI_Request& r = find(request);
    int done = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&r, &done, &status), "MPI_Test");
    if (done) requests_.erase(request);
    return done != 0;
  }

  void wait(Request request) override {
    MPI_Status status;
    check_mpi(MPI_Wait(&find(request), &status), "MPI_Wait");
    requests_.erase(request);
  }

  [[noreturn]] void abort(std::string_view why) override {
    log::error("rank {} of {}: {}; stopping every rank", rank_, size_, why);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  static int count(size_t bytes) {
    check(bytes <= static_cast<size_t>(INT_MAX), "MPI: a message of {} bytes is more than MPI counts (2 GiB); "
          "lower train.bucket_mb", bytes);
    return static_cast<int>(bytes);
  }
  Request keep(MPI_Request r) {
    const Request id = next_++;
    requests_.emplace(id, r);
    return id;
  }
  MPI_Request& find(Request request) {
    const auto it = requests_.find(request);
    check(it != requests_.end(), "MPI: request {} is unknown or spent", request);
    return it->second;
  }

  // One byte to and from every other rank, polled against a deadline: Open MPI connects lazily, so a rank
  // that cannot reach another would otherwise wait forever at its first gradient.
  void handshake(double timeout_s) {
    std::vector<char> in(size_, 0), out(size_, 1);
    std::vector<MPI_Request> sends, receives;
    std::vector<int> from;
    constexpr int kHelloTag = 3;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      sends.emplace_back();
      receives.emplace_back();
      from.push_back(p);
      check_mpi(MPI_Isend(&out[p], 1, MPI_CHAR, p, kHelloTag, MPI_COMM_WORLD, &sends.back()), "MPI_Isend");
      check_mpi(MPI_Irecv(&in[p], 1, MPI_CHAR, p, kHelloTag, MPI_COMM_WORLD, &receives.back()), "MPI_Irecv");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      int all = 0;
      check_mpi(MPI_Testall(static_cast<int>(receives.size()), receives.data(), &all, MPI_STATUSES_IGNORE),
                "MPI_Testall");
      if (all) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (size_t i = 0; i < receives.size(); ++i)
          if (receives[i] != MPI_REQUEST_NULL) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", from[i]);
        abort(fmt::format("no answer from rank {} within {:.0f} s: every host must reach the others on the network "
                          "mpirun uses (pick it with --mca btl_tcp_if_include and --mca oob_tcp_if_include)",
                          missing, timeout_s));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    check_mpi(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }

  int rank_ = 0, size_ = 1;
  std::string transport_;
  std::unordered_map<Request, MPI_Request> requests_;
  Request next_ = 1;
};

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

std::unique_ptr<Communicator> mpi_communicator(double connect_timeout_s) {
  return std::make_unique<MpiCommunicator>(connect_timeout_s);
}

}  // namespace attend
