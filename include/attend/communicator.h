// The processes of a data-parallel run and the messages between them (attend::Trainer takes one).
//
// A Communicator is this process's view of a group of size() ranks: point-to-point messages with a tag,
// started without waiting and finished by test() or wait(). Everything the trainer needs (sums, the bucketed
// gradient reduction, ZeRO-1's parameter gathering, broadcasts) is built on these in src/train/collective.cpp,
// in a fixed order, so that a sum never depends on which message arrived first.
//
//   auto group = attend::mpi_communicator();           // attend/distributed.h: the ranks mpirun started
//   attend::Trainer trainer(std::move(model), data, config, "runs/gpt", false, &tokenizer, group.get());
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace attend {

class Communicator {
 public:
  using Request = int64_t;  // a started send or receive, until test() says it completed (or wait() returns)

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What carries the messages, for logs: "Open MPI 4.1.4", "threads".
  virtual std::string transport() const = 0;

  // Starts sending `data` to rank `peer`; the bytes must stay untouched until the request completes.
  virtual Request send(int peer, std::span<const std::byte> data, int tag) = 0;
  // Starts receiving a message of exactly data.size() bytes with this tag from `peer` into `data`.
  virtual Request receive(int peer, std::span<std::byte> data, int tag) = 0;
  // Moves the transfers on (where the transport needs the caller for that) and says whether `request` has
  // completed; a completed request is spent.
  virtual bool test(Request request) = 0;
  virtual void wait(Request request) = 0;
  // Ends every rank of the group: one rank's error must not leave the others waiting for it.
  [[noreturn]] virtual void abort(std::string_view why) = 0;
};

// Returns once every rank of the group has called it.
void barrier(Communicator& group);

}  // namespace attend
