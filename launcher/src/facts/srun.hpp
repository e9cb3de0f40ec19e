// Facts about the cluster's srun, remembered per cluster in /tmp/ringrun-UID so that later
// launches do not start one more process each: the MPI plugins srun offers (`srun --mpi=list`,
// about 7 ms a launch on the test cluster) and the TaskPlugin (`scontrol show config`), which
// decides whether srun can honour --cpu-bind at all.
#pragma once

#include <ringrun/allocation.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun {

// How long `srun --mpi=list` may take before it is killed (at launch and in doctor).
inline constexpr std::chrono::seconds kSrunMpiListTimeout{20};

// The cached plugin list when one exists for this cluster (SLURM_CLUSTER_NAME, SLURM_CONF and the
// srun found in PATH, with the inode, size and mtime of both files); else ask(), stored when it
// names at least one plugin. Without a srun in PATH: ask() uncached.
std::vector<std::string> cached_srun_mpi_plugins(const Environment& env,
                                                 const std::function<std::vector<std::string>()>& ask);

// The cluster's TaskPlugin ("task/none", "task/affinity,task/cgroup"), cached like the plugin
// list; asked with `scontrol show config` (bounded to 10 s, its stderr dropped). Empty when
// unknown: no readable configuration (SLURM_CONF, else /etc/slurm/slurm.conf; a configless
// cluster is not asked, scontrol would retry for 60 s there), no scontrol in PATH, no answer.
std::string cached_slurm_task_plugin(const Environment& env);

// The TaskPlugin value of `scontrol show config` output ("TaskPlugin  = task/none"); empty when
// the line is missing.
std::string parse_task_plugin(std::string_view scontrol_show_config);

// Whether srun can honour --cpu-bind under this TaskPlugin. Slurm 22.05's srun prints "cluster
// configuration lacks support for cpu binding" for any --cpu-bind, none included, when the
// TaskPlugin is exactly task/none, which binds nothing anyway. Unknown ("") counts as yes.
bool srun_offers_cpu_bind(const std::string& task_plugin);

}  // namespace ringrun
