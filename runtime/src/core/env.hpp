// Every environment variable the runtime reads, in one table (name, meaning). Read them through
// env_string/env_int so that a malformed value fails with a message naming the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ringrun::core {

struct EnvVariable {
  const char* name;
  const char* meaning;
};

// clang-format off
inline constexpr EnvVariable kEnvironment[] = {
  {"RINGRUN_RANK", "rank in the job (set by ringrun)"},
  {"RINGRUN_SIZE", "number of ranks (set by ringrun)"},
  {"RINGRUN_HOSTNAME", "host name for same-host detection (default: gethostname())"},
  {"RINGRUN_STORE_ADDR", "host:port of the rendezvous store that ringrun hosts"},
  {"RINGRUN_JOB_SECRET", "per-job secret presented to the store (64 hex chars)"},
  {"RINGRUN_START_TIMEOUT", "seconds to wait for every rank at start-up (default 60)"},
  {"RINGRUN_NETWORK_INTERFACE", "interface whose IPv4 address this rank listens on and advertises"},
  {"RINGRUN_DISABLE_SHM", "1: never use the shared-memory transport"},
  {"RINGRUN_SHM_SLOT_BYTES", "bytes per rank of each shared-memory slot and ring chunk (default: 256 KiB slots, ring chunks of half the L2 cache, 256 KiB to 1 MiB)"},
  {"RINGRUN_TCP_STREAMS", "TCP connections per pair of ranks, 1 to 8 (unset: one per CPU a rank has to itself on its machine, 1 to 4); large ring steps are striped across them"},
  {"RINGRUN_ELASTIC_ID", "elastic mode: this process's id, unique in the job (set by ringrun --min-np/--max-np)"},
  {"RINGRUN_ELASTIC_EPOCH", "elastic mode: the world this process was started for; rank and size come from that world"},
  {"RINGRUN_ELASTIC_TIMEOUT", "elastic mode: seconds to wait for a world to be published and its members' addresses (default 600)"},
  {"RINGRUN_PEER_TIMEOUT", "seconds after which a peer that stops answering fails the collective (default 30)"},
  {"OMPI_COMM_WORLD_RANK", "rank under Open MPI's mpirun (with OMPI_COMM_WORLD_SIZE)"},
  {"PMIX_RANK", "rank under a PMIx server (srun --mpi=pmix, mpirun); PMIX_NAMESPACE selects PMIx exchange"},
  {"SLURM_PROCID", "rank under srun (with SLURM_NTASKS)"},
  {"PMI_RANK", "rank under a PMI-1/2 launcher (with PMI_SIZE)"},
  {"MASTER_ADDR", "with MASTER_PORT: rank 0 hosts the rendezvous store there when there is no PMIx"},
  {"RINGRUN_ENGINE_AT_INIT", "0: start the engine at the first async op instead of in ringrun_init (synchronous calls take the direct path until then)"},
  {"RINGRUN_FUSION_THRESHOLD_MB", "engine: fusion buffer size in MiB (default 128; 0: no fusion)"},
  {"RINGRUN_CYCLE_TIME_MS", "engine: longest wait between negotiation cycles while ops are pending (default 1)"},
  {"RINGRUN_TIMELINE_FILENAME", "engine: rank 0 writes a Chrome trace-event JSON timeline there"},
  {"RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS", "engine: warn about ops not submitted by every rank after this (default 60; 0: never)"},
  {"RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", "engine: fail such ops after this (default 0: never)"},
  {"RINGRUN_CACHE_CAPACITY", "engine: response-cache entries (default 1024; 0: no cache)"},
  {"RINGRUN_FP16_COMPRESSION", "engine: 1: float32 allreduces travel as float16"},
  {"RINGRUN_INLINE_BYTES", "engine: input bytes per rank that ride in each negotiation record (default 4096; 0: none)"},
  {"RINGRUN_UNFUSED_MIN_BYTES", "engine: allreduces of at least this many bytes skip the fusion buffer (default 1 MiB)"},
  {"RINGRUN_TIMELINE_MARK_CYCLES", "engine: 1: an instant mark in the timeline per cycle with work"},
};
// clang-format on

std::optional<std::string> env_string(const char* name);  // unset or empty: nullopt
// The integer value of name; nullopt when unset; RuntimeError (bootstrap) when not an integer
// in [min, max].
std::optional<long long> env_int(const char* name, long long min, long long max);
// The same for a decimal number ("2.5"): the launcher passes --cycle-time-ms and kin as given.
std::optional<double> env_number(const char* name, double min, double max);

}  // namespace ringrun::core
