#include "runtime/launch.h"

#include <cstdlib>
#include <vector>

namespace parallax {

namespace {

// The integer value of environment variable `name`, -1 if unset.
Result<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < 0 || x > 1 << 30)
    return Error{std::string("environment variable ") + name + "='" + v + "' is not a non-negative integer"};
  return static_cast<int>(x);
}

}  // namespace

Result<LaunchInfo> launch_info_from_env() {
  struct Source {
    const char* launcher;
    const char *rank, *size, *local;
  };
  const Source torchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"};
  // torchrun's workers inside a Slurm allocation (`srun torchrun ...`) also see Slurm's one task
  // per node: torchrun's own variables win when its agent started this process.
  std::vector<Source> sources;
  if (std::getenv("TORCHELASTIC_RUN_ID")) sources.push_back(torchrun);
  sources.insert(sources.end(), {Source{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                                 Source{"hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
                                 Source{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}, torchrun});
  for (const Source& s : sources) {
    Result<int> size = env_int(s.size);
    if (!size.ok()) return Error{size.error()};
    if (*size < 0) continue;
    Result<int> rank = env_int(s.rank), local = env_int(s.local);
    if (!rank.ok()) return Error{rank.error()};
    if (!local.ok()) return Error{local.error()};
    if (*size > 1 && *local < 0)
      return Error{std::string(s.launcher) + " sets " + s.size + " but not " + s.local + ": no way to pick this rank's GPU"};
    return LaunchInfo{s.launcher, std::max(*rank, 0), *size, std::max(*local, 0)};
  }
  return LaunchInfo{"none", 0, 1, 0};
}

Status check_launch(const LaunchInfo& launch, int mpi_world_size) {
  if (launch.launcher == "none" || launch.world_size == mpi_world_size) return Status::Ok();
  return Error{launch.launcher + " says the world has " + std::to_string(launch.world_size) + " ranks but MPI has " +
               std::to_string(mpi_world_size) +
               (launch.launcher == "torchrun" ? ": start train with mpirun or srun (the CPU runtime bootstraps over MPI)"
                                              : ": is this train built against the launcher's MPI?")};
}

}  // namespace parallax
