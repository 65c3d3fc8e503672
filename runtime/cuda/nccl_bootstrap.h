// NCCL bootstrap: gets rank 0's ncclUniqueId to every rank before make_nccl_world. In an MPI
// world (more than one CPU rank) the id is broadcast over MPI. Without MPI (a torchrun-style start
// on one node: RANK / WORLD_SIZE / LOCAL_RANK) it goes through a file that rank 0 writes
// atomically and the other ranks poll for; a single process needs neither.
//
// The file: `$PARALLAX_NCCL_ID_DIR/<name>` if that variable is set, else
// `/tmp/parallax-nccl-$USER-<key>/<name>`, key = TORCHELASTIC_RUN_ID, else MASTER_PORT, else
// "default". <name> is `nccl-id`, suffixed with a token of this launch where the launcher gives
// one (`nccl-id.<token>`: Slurm's job and step id, Open MPI's job namespace, torchrun's restart
// count), so a file left by an earlier launch is never read. Rank 0 also deletes any old file of
// its own name before writing, and remove_nccl_id_file() deletes the file once the communicator
// is up (every rank has read the id by then, since NCCL's initialization is collective).
//
// The limitation left: without a launch token (ranks started by hand, or torchrun without
// --rdzv-id and --standalone, whose run id is "none"), a file left by a launch that died before
// its communicator came up can be read by a rank that polls before rank 0 has replaced it. Such
// a rank does not join the wrong job silently: the stale id names a rank 0 that is gone, so NCCL's
// initialization fails or the watchdog ends it (exit 3). Set PARALLAX_NCCL_ID_DIR to a fresh
// directory per launch to rule it out.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>

#include "models/status.h"
#include "runtime/communicator.h"
#include "runtime/launch.h"

namespace parallax {

// The id every rank of `launch` uses: over `cpu_world` when it has more than one rank, else through
// the rendezvous file when launch.world_size > 1 (waiting at most timeout_s for rank 0), else
// created here. Errors name the NCCL call or the file.
Result<ncclUniqueId> bootstrap_nccl_id(Communicator& cpu_world, const LaunchInfo& launch, double timeout_s);

// The rendezvous file of this launch, from the environment (see above).
std::string nccl_id_path();

// Rank 0, after make_nccl_world has returned: deletes the rendezvous file (if any).
void remove_nccl_id_file();

// The file exchange over raw bytes, which needs no GPU. The writer writes a temporary file in the
// same directory (created if missing), fsyncs it and renames it over `path`, so a reader sees all
// of it or nothing. The reader polls until `path` exists and holds `size` bytes in the format the
// writer uses; an error names the file (a timeout, or a file of another format or size).
Status write_rendezvous_file(const std::string& path, const std::string& bytes);
Result<std::string> read_rendezvous_file(const std::string& path, size_t size, double timeout_s);

}  // namespace parallax
