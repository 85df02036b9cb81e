// The groups a data-parallel run trains in (attend/communicator.h): the ranks mpirun started, or threads of
// one process (tests, and trying data parallelism without MPI).
//
//   if (attend::launched_by_mpirun()) group = attend::mpi_communicator();   // `mpirun -np 2 attend train ...`
#pragma once

#include <attend/communicator.h>

#include <memory>
#include <vector>

namespace attend {

// Whether this process is a rank that mpirun (Open MPI's, or another PMI launcher) started.
bool launched_by_mpirun();

// Joins the MPI job (MPI_Init once per process) and checks that every rank can reach every other: a rank
// that gets no answer within connect_timeout_s is an error naming
// the ranks that did not answer. MPI_Finalize when the last communicator goes.
std::unique_ptr<Communicator> mpi_communicator(double connect_timeout_s = 60.0);

// `ranks` communicators that talk through memory, for as many threads of this process.
std::vector<std::unique_ptr<Communicator>> local_group(int ranks);

}  // namespace attend
