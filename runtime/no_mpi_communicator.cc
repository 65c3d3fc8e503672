// make_mpi_world for builds without MPI (PARALLAX_MPI=OFF, as on a GPU machine that has none):
// the world is this one process. Multi-rank CPU runs need the MPI build.
#include "runtime/mpi_communicator.h"

namespace parallax {

std::unique_ptr<Communicator> make_mpi_world(int*, char***) { return make_self_communicator(); }
void finalize_mpi() {}

}  // namespace parallax
