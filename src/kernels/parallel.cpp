#include "kernels/parallel.h"

#include <omp.h>

namespace attend::kernels {

int num_threads() { return omp_get_max_threads(); }

int thread_index() { return omp_get_thread_num(); }

void set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

}  // namespace attend::kernels
