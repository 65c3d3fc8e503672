// The Communicator over Open MPI, for multi-process CPU runs (mpirun, srun). One per MPI
// communicator; split() wraps MPI_Comm_split.
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace parallax {

// Initializes MPI on first use (MPI_Init_thread) and wraps MPI_COMM_WORLD.
std::unique_ptr<Communicator> make_mpi_world(int* argc, char*** argv);
// Finalizes MPI if make_mpi_world initialized it.
void finalize_mpi();

}  // namespace parallax
