// The MPI plugins srun offers (`srun --mpi=list`), remembered per cluster in /tmp/ringrun-UID so
// that later launches do not start one more srun each (about 7 ms a launch on the test cluster).
#pragma once

#include <ringrun/plan.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ringrun {

// The cached plugin list when one exists for this cluster (SLURM_CLUSTER_NAME, SLURM_CONF and the
// srun found in PATH, with the inode, size and mtime of both files); else ask(), stored when it
// names at least one plugin. Without a srun in PATH: ask() uncached.
std::vector<std::string> cached_srun_mpi_plugins(const Environment& env,
                                                 const std::function<std::vector<std::string>()>& ask);

}  // namespace ringrun
