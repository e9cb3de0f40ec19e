// The allocation: which hosts a job may use, how many ranks each may hold, and which GPUs.
// Built from SLURM's environment, from libslurm for a job id, from -H / --hostfile, or from a
// Kubernetes pod's job contract (ringrun/kubernetes.hpp).
// Everything here is pure (text in, value out) except allocation_from_job(), which asks slurmctld.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ringrun/input_error.hpp>

namespace ringrun {

using Environment = std::map<std::string, std::string>;

struct HostSlots {
  std::string name;
  int slots = 0;                  // ranks this host may hold (0 = not limited, local host only)
  std::vector<std::string> gpus;  // GPU ids usable on this host, as the allocation names them
                                  // (SLURM_STEP_GPUS / SLURM_JOB_GPUS); empty = not known
};

// discovery_script: elastic mode's --host-discovery-script named other hosts at the start.
// mpijob: an MPIJob launcher pod's hostfile; pod: a per-pod job's PET_* variables
// (ringrun/kubernetes.hpp).
enum class AllocationSource { local, hosts_flag, hostfile, slurm_env, slurm_job, discovery_script, mpijob, pod };

struct Allocation {
  AllocationSource source = AllocationSource::local;
  std::vector<HostSlots> hosts;  // in the order given; ranks fill them in block order
  bool explicit_slots = false;   // slots are a limit that -np may not exceed (w/o --oversubscribe)
  std::optional<std::string> job_id;  // SLURM job id
  std::optional<int> ntasks;          // SLURM_NTASKS when the allocation states it
  bool inside_step = false;           // we run inside an srun step (SLURM_STEP_ID set)

  // Saturates at INT_MAX: SLURM counts are up to INT_MAX each and their sum must not overflow.
  int total_slots() const {
    long long n = 0;
    for (const auto& h : hosts) n = std::min<long long>(n + h.slots, std::numeric_limits<int>::max());
    return static_cast<int>(n);
  }
};

// -H "h1:4,h2:4" (horovodrun's syntax; a host without ":N" has 1 slot).
Allocation parse_hosts_flag(std::string_view spec);
// Hostfile text, "host slots=N" (or MPICH's "host:N") per line, '#' comments; `origin` names the
// file in errors. A host line without slots has `default_slots` (1 unless given).
Allocation parse_hostfile(std::string_view text, std::string_view origin);
Allocation parse_hostfile(std::string_view text, std::string_view origin, int default_slots);

// The pieces -H and --hostfile (and elastic mode's discovery script) check a host with: a name
// of letters, digits, '.', '-' and '_' (Horovod's [\w.-]+), at most 253 characters; a slot count,
// a whole number from 1.
bool valid_hostname(std::string_view name);
std::optional<int> parse_slots(std::string_view text);

}  // namespace ringrun
