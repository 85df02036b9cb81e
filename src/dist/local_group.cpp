// A group of ranks in one process (one thread each): messages are copied through a shared mailbox. Sends
// complete at once (the bytes are copied); receives match the messages of their sender and tag in the order
// both were made, as MPI's do.
#include <attend/distributed.h>
#include <attend/error.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace attend {

namespace {

struct Mailbox {
  using Key = std::tuple<int, int, int>;  // from, to, tag
  struct Receive {
    int64_t id;
    std::span<std::byte> into;
  };
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<Key, std::deque<std::vector<std::byte>>> messages;
  std::map<Key, std::deque<Receive>> receives;
  std::unordered_map<int64_t, bool> done;  // receive id → completed
  int64_t next_id = 1;
  std::string aborted;

  // Pairs the key's oldest receives with its oldest messages. Holds the lock.
  void match(const Key& key) {
    auto& waiting = receives[key];
    auto& queued = messages[key];
    while (!waiting.empty() && !queued.empty()) {
      Receive r = waiting.front();
      std::vector<std::byte> bytes = std::move(queued.front());
      waiting.pop_front();
      queued.pop_front();
      check(bytes.size() == r.into.size(), "local group: a message of {} bytes for a receive of {} (rank {} to {}, tag {})",
            bytes.size(), r.into.size(), std::get<0>(key), std::get<1>(key), std::get<2>(key));
      if (!bytes.empty()) std::memcpy(r.into.data(), bytes.data(), bytes.size());
      done[r.id] = true;
    }
  }
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Mailbox> box, int rank, int size) : box_(std::move(box)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "threads"; }

  Request send(int peer, std::span<const std::byte> data, int tag) override {
    check(peer >= 0 && peer < size_ && peer != rank_, "local group: rank {} cannot send to rank {}", rank_, peer);
    std::lock_guard lock(box_->mutex);
    const Mailbox::Key key{rank_, peer, tag};
    box_->messages[key].emplace_back(data.begin(), data.end());
    box_->match(key);
    box_->arrived.notify_all();
    return 0;  // complete: the bytes were copied
  }

  Request receive(int peer, std::span<std::byte> data, int tag) override {
    check(peer >= 0 && peer < size_ && peer != rank_, "local group: rank {} cannot receive from rank {}", rank_, peer);
    std::lock_guard lock(box_->mutex);
    const int64_t id = box_->next_id++;
    const Mailbox::Key key{peer, rank_, tag};
    box_->done[id] = false;
    box_->receives[key].push_back({id, data});
    box_->match(key);
    return id;
  }

  bool test(Request request) override {
    if (request == 0) return true;
    std::lock_guard lock(box_->mutex);
    check(box_->aborted.empty(), "local group: {}", box_->aborted);
    return take(request);
  }

  void wait(Request request) override {
    if (request == 0) return;
    std::unique_lock lock(box_->mutex);
    box_->arrived.wait(lock, [&] { return !box_->aborted.empty() || box_->done.at(request); });
    check(box_->aborted.empty(), "local group: {}", box_->aborted);
    take(request);
  }

  [[noreturn]] void abort(std::string_view why) override {
    {
      std::lock_guard lock(box_->mutex);
      if (box_->aborted.empty()) box_->aborted = fmt::format("rank {} stopped the group: {}", rank_, why);
      box_->arrived.notify_all();
    }
    throw Error(fmt::format("rank {}: {}", rank_, why));
  }

 private:
  bool take(Request request) {  // holds the lock
    const auto it = box_->done.find(request);
    check(it != box_->done.end(), "local group: request {} is unknown or spent", request);
    if (!it->second) return false;
    box_->done.erase(it);
    return true;
  }

  std::shared_ptr<Mailbox> box_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> local_group(int ranks) {
  check(ranks >= 1, "local group: {} ranks, expected at least 1", ranks);
  auto box = std::make_shared<Mailbox>();
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<LocalCommunicator>(box, r, ranks));
  return out;
}

}  // namespace attend
