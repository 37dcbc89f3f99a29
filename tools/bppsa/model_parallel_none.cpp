// A bppsa built without MPI: --model-parallel explains how to get it.
#include "bppsa/core/error.hpp"
#include "model_parallel.hpp"

namespace bppsa::cli {
namespace {
[[noreturn]] void no_mpi() {
  detail::raise<InvalidArgument>("model-parallel",
                                 "this bppsa was built without MPI; install an MPI implementation (Debian: "
                                 "apt-get install libopenmpi-dev openmpi-bin) and rebuild (scripts/setup.sh)");
}
}  // namespace

int run_train_model_parallel(const TrainArgs&) { no_mpi(); }
int run_grad_model_parallel(const GradArgs&) { no_mpi(); }

}  // namespace bppsa::cli
