#include "kernels/parallel.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

namespace attend::kernels {

int num_threads() { return omp_get_max_threads(); }

int thread_index() { return omp_get_thread_num(); }

// n <= 0: OMP_NUM_THREADS when set; otherwise the cores this process may run on (its affinity mask), shared
// with the other ranks mpirun started on this host when they are not bound to cores of their own: two ranks
// of two threads each on two cores spin in each other's way (OpenMP's barriers and MPI's waits both spin)
// and ran a hundred times slower.
void set_num_threads(int n) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); n <= 0 && env != nullptr) n = std::atoi(env);
  if (n <= 0) {
    int local_ranks = 1;
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* v = std::getenv(name)) local_ranks = std::max(1, std::atoi(v));
    n = std::max(1, omp_get_num_procs() / local_ranks);
  }
  omp_set_num_threads(n);
}

}  // namespace attend::kernels
