// Launch environment: which launcher started this process and what it says the rank, world size
// and local rank are — Open MPI (OMPI_COMM_WORLD_*), MPICH / Intel MPI's Hydra (PMI_RANK / PMI_SIZE
// / MPI_LOCALRANKID), Slurm (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID) or torchrun (RANK /
// WORLD_SIZE / LOCAL_RANK). The CPU runtime's ranks come from
// MPI; this checks that the launcher and MPI agree (a torchrun-only start gives a one-rank MPI
// world) and gives the local rank that picks a device on GPUs.
#pragma once

#include <string>

#include "models/status.h"

namespace parallax {

struct LaunchInfo {
  std::string launcher;  // "mpirun", "hydra", "srun", "torchrun" or "none"
  int rank = 0, world_size = 1, local_rank = 0;
};

// Reads the environment: torchrun first when its agent started the process (TORCHELASTIC_RUN_ID),
// then Open MPI, Hydra, Slurm, torchrun. Errors name a variable that is not a non-negative
// integer, or a missing local rank in a world of several ranks.
Result<LaunchInfo> launch_info_from_env();

// Errors when the launcher's world size differs from the MPI world's.
Status check_launch(const LaunchInfo& launch, int mpi_world_size);

}  // namespace parallax
