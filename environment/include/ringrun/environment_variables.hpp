// The environment contract: every variable ringrun reads or sets for its ranks, defined once here
// with its meaning, unit, type, default and bounds. The launcher (plan, backends, task shim), the
// topology and allocation readers, the runtime (bootstrap, engine, transports), the Python package
// (through its extension: ringrun._ringrun.variables) and the benchmarks all spell a name through
// this table, and read a value through ringrun/variable_read.hpp, which applies the default and
// the bounds written here (README, Architecture: "Contracts"). ringrun(1)'s ENVIRONMENT
// documents every variable marked `documented` (tests/launcher/test_environment_variables.cpp
// checks the man page, the defaults and the bounds against the table;
// tests/launcher/variable_literals.py that no reader spells a name or a default again).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ringrun::variables {

// Who sets a variable and who reads it.
enum class Role {
  launcher_input,  // read from ringrun's own environment (the launcher, its topology and SLURM readers)
  task_shim,       // set by the srun and mpirun backends for the task shim, which plans its node with them
  rank,            // set by the plan in every rank
  runtime_input,   // read by the runtime in each rank; ringrun passes it on but does not set it
};

// The number or name of the rank's place in the job that a variable carries: the same value
// travels under ringrun's, torch.distributed's and Horovod's names.
enum class Carries { nothing, rank, size, local_rank, local_size, cross_rank, cross_size, group_rank, hostname };

// What a value is. integer and number take [min, max]; flag is 0 or 1; text is any non-empty
// string (its reader checks a choice of words itself).
enum class Type { text, integer, number, flag };

struct Variable {
  const char* name;
  const char* meaning;
  const char* unit;           // of the value ("seconds", "MiB", ...); "" for a name, a flag or a list
  // What the reader takes when it is unset, in the variable's type ("30", "0.5", "native"); the
  // one place the default is written. "" when there is none (or it is computed: default_note).
  const char* default_value;
  Type type = Type::text;
  double min = 0;  // integer and number: the least value accepted
  double max = 0;  // ... and the greatest
  const char* default_note = "";  // a default the reader computes, in words (for the man page)
  Role role = Role::rank;
  Carries carries = Carries::nothing;
  // The plan sets it for every rank, so `-x` may not override it (ranks would disagree on who
  // they are or where they meet).
  bool fixed_by_plan = false;
  // The launcher's value goes to the task shim under srun and mpirun (srun exports ringrun's
  // environment, mpirun gets `-x NAME`): values every node's shim cannot plan by itself.
  bool travels = false;
  bool documented = true;  // in ringrun(1)'s ENVIRONMENT section
};

// The prefix of ringrun's own variables (the doctor's report lists those set).
inline constexpr std::string_view kPrefix = "RINGRUN_";

// ---- read from ringrun's own environment -----------------------------------------------------

inline constexpr Variable kTopologyLoader{
    .name = "RINGRUN_TOPOLOGY_LOADER",
    .meaning = "how XML topologies are read: native (a one-pass reader of hwloc 2.x exports, hwloc for "
               "anything else) or hwloc (always hwloc)",
    .unit = "",
    .default_value = "native",
    .role = Role::launcher_input};
inline constexpr Variable kMaxHostlist{
    .name = "RINGRUN_MAX_HOSTLIST",
    .meaning = "the most host names (and per-node counts) a SLURM hostlist may expand to",
    .unit = "names",
    .default_value = "1000000", .type = Type::integer, .min = 1, .max = 1000000000,
    .role = Role::launcher_input};
inline constexpr Variable kDiscoveryInterval{
    .name = "RINGRUN_DISCOVERY_INTERVAL",
    .meaning = "elastic mode: the time from the end of one run of the host discovery script (or of the "
               "SLURM job's node query) to the next (--discovery-interval wins)",
    .unit = "seconds",
    .default_value = "1", .type = Type::number, .min = 0.001, .max = 86400,
    .role = Role::launcher_input};
inline constexpr Variable kSysfsRoot{
    .name = "RINGRUN_SYSFS_ROOT",
    .meaning = "the sysfs tree the RoCE GID index is read from (tests give fixture trees)",
    .unit = "path",
    .default_value = "/sys",
    .role = Role::launcher_input};

// ---- set by the srun and mpirun backends for the task shim --------------------------------------

inline constexpr Variable kLayout{
    .name = "RINGRUN_LAYOUT",
    .meaning = "ranks per host, in host order, as a comma list",
    .unit = "ranks",
    .default_value = "",
    .role = Role::task_shim};
inline constexpr Variable kHosts{
    .name = "RINGRUN_HOSTS",
    .meaning = "the job's hosts, in order, as a comma list",
    .unit = "",
    .default_value = "",
    .role = Role::task_shim};
inline constexpr Variable kGpusPerRank{
    .name = "RINGRUN_GPUS_PER_RANK",
    .meaning = "--gpus-per-rank",
    .unit = "GPUs",
    .default_value = "1", .type = Type::integer, .min = 0, .max = 1024,
    .role = Role::task_shim};
inline constexpr Variable kBind{
    .name = "RINGRUN_BIND",
    .meaning = "--bind: cores (pin each rank to its cores) or none",
    .unit = "",
    .default_value = "cores",
    .role = Role::task_shim};
inline constexpr Variable kCpusPerRank{
    .name = "RINGRUN_CPUS_PER_RANK",
    .meaning = "--cpus-per-rank: the most cores a rank is pinned to",
    .unit = "cores",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 20),
    .role = Role::task_shim};
inline constexpr Variable kElasticSlot{
    .name = "RINGRUN_ELASTIC_SLOT",
    .meaning = "elastic mode: the plan's slot a one-task srun or mpirun step plans for its member",
    .unit = "slot",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .role = Role::task_shim,
    .documented = false};

// ---- set in every rank --------------------------------------------------------------------------

inline constexpr Variable kRank{
    .name = "RINGRUN_RANK",
    .meaning = "the rank in the job",
    .unit = "rank",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::rank,
    .fixed_by_plan = true};
inline constexpr Variable kSize{
    .name = "RINGRUN_SIZE",
    .meaning = "the number of ranks",
    .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30),
    .carries = Carries::size,
    .fixed_by_plan = true,
    .travels = true};
inline constexpr Variable kLocalRank{
    .name = "RINGRUN_LOCAL_RANK",
    .meaning = "the rank's index among the ranks of its host",
    .unit = "rank",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::local_rank,
    .fixed_by_plan = true};
inline constexpr Variable kLocalSize{
    .name = "RINGRUN_LOCAL_SIZE",
    .meaning = "the number of ranks on the rank's host",
    .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30),
    .carries = Carries::local_size,
    .fixed_by_plan = true};
inline constexpr Variable kCrossRank{
    .name = "RINGRUN_CROSS_RANK",
    .meaning = "the rank's index among the ranks with the same local rank",
    .unit = "rank",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::cross_rank,
    .fixed_by_plan = true};
inline constexpr Variable kCrossSize{
    .name = "RINGRUN_CROSS_SIZE",
    .meaning = "the number of ranks with the rank's local rank",
    .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30),
    .carries = Carries::cross_size,
    .fixed_by_plan = true};
inline constexpr Variable kHostname{
    .name = "RINGRUN_HOSTNAME",
    .meaning = "the host the rank runs on (the runtime's same-host detection)",
    .unit = "",
    .default_value = "", .default_note = "gethostname()",
    .carries = Carries::hostname,
    .fixed_by_plan = true};
inline constexpr Variable kStoreAddr{
    .name = "RINGRUN_STORE_ADDR",
    .meaning = "the rendezvous store that ringrun hosts for the job",
    .unit = "host:port",
    .default_value = "",
    .fixed_by_plan = true,
    .travels = true};
inline constexpr Variable kJobSecret{
    .name = "RINGRUN_JOB_SECRET",
    .meaning = "the per-job secret presented to the store (never on a command line)",
    .unit = "64 hex digits",
    .default_value = "",
    .fixed_by_plan = true,
    .travels = true};
inline constexpr Variable kStartTimeout{
    .name = "RINGRUN_START_TIMEOUT",
    .meaning = "how long the runtime waits for every rank at start-up",
    .unit = "seconds",
    .default_value = "60", .type = Type::number, .min = 0.001, .max = 86400,
    .travels = true};
inline constexpr Variable kNetworkInterface{
    .name = "RINGRUN_NETWORK_INTERFACE",
    .meaning = "the interface whose IPv4 address the rank listens on and advertises (--network-interface, or "
               "the launcher's choice for a job on several hosts)",
    .unit = "",
    .default_value = "",
    .travels = true};
inline constexpr Variable kFusionThresholdMb{
    .name = "RINGRUN_FUSION_THRESHOLD_MB",
    .meaning = "engine: the fusion buffer's size; 0: no fusion (--fusion-threshold-mb)",
    .unit = "MiB",
    .default_value = "128", .type = Type::number, .min = 0, .max = double(1ll << 20),
    .travels = true};
inline constexpr Variable kCycleTimeMs{
    .name = "RINGRUN_CYCLE_TIME_MS",
    .meaning = "engine: the longest wait between negotiation cycles while ops are pending (--cycle-time-ms)",
    .unit = "milliseconds",
    .default_value = "1", .type = Type::number, .min = 0, .max = 60000,
    .travels = true};
inline constexpr Variable kTimelineFilename{
    .name = "RINGRUN_TIMELINE_FILENAME",
    .meaning = "engine: rank 0 writes a Chrome trace-event JSON timeline there (--timeline-filename)",
    .unit = "path",
    .default_value = "",
    .travels = true};
inline constexpr Variable kTimelineMarkCycles{
    .name = "RINGRUN_TIMELINE_MARK_CYCLES",
    .meaning = "engine: 1: an instant mark in the timeline per cycle with work (--timeline-mark-cycles)",
    .unit = "",
    .default_value = "0", .type = Type::flag,
    .travels = true};
inline constexpr Variable kCacheCapacity{
    .name = "RINGRUN_CACHE_CAPACITY",
    .meaning = "engine: response-cache entries; 0: no cache (--cache-capacity)",
    .unit = "entries",
    .default_value = "1024", .type = Type::integer, .min = 0, .max = double(1ll << 20),
    .travels = true};
inline constexpr Variable kStallCheckWarningTimeSeconds{
    .name = "RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS",
    .meaning = "engine: warn about ops not submitted by every rank after this long; 0: never "
               "(--stall-check-warning-time-seconds)",
    .unit = "seconds",
    .default_value = "60", .type = Type::number, .min = 0, .max = double(1ll << 24),
    .travels = true};
inline constexpr Variable kStallCheckShutdownTimeSeconds{
    .name = "RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS",
    .meaning = "engine: fail such ops after this long; 0: never (--stall-check-shutdown-time-seconds)",
    .unit = "seconds",
    .default_value = "0", .type = Type::number, .min = 0, .max = double(1ll << 24),
    .travels = true};
inline constexpr Variable kMemBind{
    .name = "RINGRUN_MEM_BIND",
    .meaning = "--mem-bind local: the task shim binds the rank's memory to its NUMA nodes",
    .unit = "",
    .default_value = "",
    .travels = true};
inline constexpr Variable kMemBindNodes{
    .name = "RINGRUN_MEM_BIND_NODES",
    .meaning = "the NUMA nodes of the rank's cores, which the local backend binds its memory to",
    .unit = "NUMA node list",
    .default_value = ""};
inline constexpr Variable kNcclAlgo{
    .name = "RINGRUN_NCCL_ALGO",
    .meaning = "--nccl-algo, for the task shim's NCCL_ALGO",
    .unit = "",
    .default_value = "",
    .travels = true};
inline constexpr Variable kNcclProto{
    .name = "RINGRUN_NCCL_PROTO",
    .meaning = "--nccl-proto, for the task shim's NCCL_PROTO",
    .unit = "",
    .default_value = "",
    .travels = true};
inline constexpr Variable kNcclIbGidIndex{
    .name = "RINGRUN_NCCL_IB_GID_INDEX",
    .meaning = "--nccl-ib-gid-index (auto or a GID index), for the task shim's NCCL_IB_GID_INDEX",
    .unit = "",
    .default_value = "",
    .travels = true};
inline constexpr Variable kTcp{
    .name = "RINGRUN_TCP",
    .meaning = "1: --tcp (NCCL over sockets: no HCA, NCCL_IB_DISABLE=1)",
    .unit = "",
    .default_value = "0", .type = Type::flag,
    .travels = true};
inline constexpr Variable kElasticId{
    .name = "RINGRUN_ELASTIC_ID",
    .meaning = "elastic mode: the process's id, unique in the job and never reused",
    .unit = "",
    .default_value = "", .type = Type::integer, .min = 0, .max = 1000000000000000};
inline constexpr Variable kElasticEpoch{
    .name = "RINGRUN_ELASTIC_EPOCH",
    .meaning = "elastic mode: the world the process was started for; rank and size come from that world",
    .unit = "world",
    .default_value = "", .type = Type::integer, .min = 0, .max = 2147483647};
inline constexpr Variable kElasticTimeout{
    .name = "RINGRUN_ELASTIC_TIMEOUT",
    .meaning = "elastic mode: how long to wait for a world to be published and for its members' addresses "
               "(--elastic-timeout, at least --start-timeout)",
    .unit = "seconds",
    .default_value = "600", .type = Type::number, .min = 0.001, .max = 604800};

// torch.distributed's env:// names, so such scripts run unchanged.
inline constexpr Variable kTorchRank{
    .name = "RANK", .meaning = "the rank in the job", .unit = "rank", .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::rank, .fixed_by_plan = true};
inline constexpr Variable kTorchWorldSize{
    .name = "WORLD_SIZE", .meaning = "the number of ranks", .unit = "ranks", .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30),
    .carries = Carries::size, .fixed_by_plan = true, .travels = true};
inline constexpr Variable kTorchLocalRank{
    .name = "LOCAL_RANK", .meaning = "the rank's index on its host", .unit = "rank", .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::local_rank, .fixed_by_plan = true};
inline constexpr Variable kTorchLocalWorldSize{
    .name = "LOCAL_WORLD_SIZE", .meaning = "the number of ranks on the rank's host", .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30), .carries = Carries::local_size, .fixed_by_plan = true};
inline constexpr Variable kTorchGroupRank{
    .name = "GROUP_RANK", .meaning = "the host's index among the job's hosts", .unit = "host",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30), .carries = Carries::group_rank, .fixed_by_plan = true};
inline constexpr Variable kMasterAddr{
    .name = "MASTER_ADDR", .meaning = "the first host's address (torch.distributed's rendezvous)", .unit = "",
    .default_value = "", .travels = true};
inline constexpr Variable kMasterPort{
    .name = "MASTER_PORT", .meaning = "a port that was free on the first host", .unit = "port",
    .default_value = "29500", .type = Type::integer, .min = 1, .max = 65535, .travels = true};

// horovodrun's names with the same values, since scripts read them before hvd.init().
inline constexpr Variable kHorovodRank{
    .name = "HOROVOD_RANK", .meaning = "the rank in the job", .unit = "rank", .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::rank, .fixed_by_plan = true};
inline constexpr Variable kHorovodSize{
    .name = "HOROVOD_SIZE", .meaning = "the number of ranks", .unit = "ranks", .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30),
    .carries = Carries::size, .fixed_by_plan = true, .travels = true};
inline constexpr Variable kHorovodLocalRank{
    .name = "HOROVOD_LOCAL_RANK", .meaning = "the rank's index on its host", .unit = "rank", .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30),
    .carries = Carries::local_rank, .fixed_by_plan = true};
inline constexpr Variable kHorovodLocalSize{
    .name = "HOROVOD_LOCAL_SIZE", .meaning = "the number of ranks on the rank's host", .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30), .carries = Carries::local_size, .fixed_by_plan = true};
inline constexpr Variable kHorovodCrossRank{
    .name = "HOROVOD_CROSS_RANK", .meaning = "the rank's index among the ranks with the same local rank",
    .unit = "rank", .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 30), .carries = Carries::cross_rank, .fixed_by_plan = true};
inline constexpr Variable kHorovodCrossSize{
    .name = "HOROVOD_CROSS_SIZE", .meaning = "the number of ranks with the rank's local rank", .unit = "ranks",
    .default_value = "", .type = Type::integer, .min = 1, .max = double(1ll << 30), .carries = Carries::cross_size, .fixed_by_plan = true};
inline constexpr Variable kHorovodHostname{
    .name = "HOROVOD_HOSTNAME", .meaning = "the host the rank runs on", .unit = "", .default_value = "",
    .carries = Carries::hostname, .fixed_by_plan = true};

// ---- read by the runtime; ringrun passes them on from its environment ---------------------------

inline constexpr Variable kDisableShm{
    .name = "RINGRUN_DISABLE_SHM",
    .meaning = "1: never use the shared-memory transport (on one host, or within hosts between them)",
    .unit = "",
    .default_value = "0", .type = Type::flag,
    .role = Role::runtime_input};
inline constexpr Variable kShmSlotBytes{
    .name = "RINGRUN_SHM_SLOT_BYTES",
    .meaning = "the shared-memory transport's slot and ring chunk per rank",
    .unit = "bytes",
    .default_value = "", .type = Type::integer, .min = 4096, .max = double(1ll << 30), .default_note = "256 KiB slots, ring chunks of half the L2 cache (256 KiB to 1 MiB)",
    .role = Role::runtime_input};
inline constexpr Variable kTcpStreams{
    .name = "RINGRUN_TCP_STREAMS",
    .meaning = "TCP connections per pair of ranks, 1 to 8; large ring steps are striped across them",
    .unit = "connections",
    .default_value = "", .type = Type::integer, .min = 1, .max = 8, .default_note = "one per CPU a rank has to itself on its machine, 1 to 4",
    .role = Role::runtime_input};
inline constexpr Variable kPeerTimeout{
    .name = "RINGRUN_PEER_TIMEOUT",
    .meaning = "how long a peer may stop answering before it fails the collective",
    .unit = "seconds",
    .default_value = "30", .type = Type::integer, .min = 1, .max = 86400,
    .role = Role::runtime_input};
inline constexpr Variable kEngineAtInit{
    .name = "RINGRUN_ENGINE_AT_INIT",
    .meaning = "0: start the engine at the first async op instead of in ringrun_init (synchronous calls take "
               "the direct path until then)",
    .unit = "",
    .default_value = "1", .type = Type::flag,
    .role = Role::runtime_input};
inline constexpr Variable kRunSecret{
    .name = "RINGRUN_RUN_SECRET",
    .meaning = "set by the Python ringrun.run for its job (passed as -x passes a variable): the secret a rank "
               "proves before the calling process hands it the function or takes its return value",
    .unit = "64 hex digits",
    .default_value = "",
    .role = Role::runtime_input};
inline constexpr Variable kFp16Compression{
    .name = "RINGRUN_FP16_COMPRESSION",
    .meaning = "engine: 1: float32 allreduces travel as float16",
    .unit = "",
    .default_value = "0", .type = Type::flag,
    .role = Role::runtime_input};
inline constexpr Variable kInlineBytes{
    .name = "RINGRUN_INLINE_BYTES",
    .meaning = "engine: input bytes per rank that ride in each negotiation record; 0: none",
    .unit = "bytes",
    .default_value = "4096", .type = Type::integer, .min = 0, .max = double(1ll << 20),
    .role = Role::runtime_input};
inline constexpr Variable kUnfusedMinBytes{
    .name = "RINGRUN_UNFUSED_MIN_BYTES",
    .meaning = "engine: allreduces of at least this many bytes skip the fusion buffer",
    .unit = "bytes",
    .default_value = "1048576", .type = Type::integer, .min = 0, .max = double(1ll << 40),
    .role = Role::runtime_input};

// The NCCL and CUDA runtime libraries, found and loaded when a job first passes a device buffer
// (runtime/gpu/ringrun/gpu_libraries.hpp spells the search once; these are its inputs).
inline constexpr Variable kNcclLibrary{
    .name = "RINGRUN_NCCL_LIBRARY",
    .meaning = "the libnccl.so.2 to load (first in the search; it must load)",
    .unit = "",
    .default_value = "",
    .role = Role::runtime_input};
inline constexpr Variable kCudartLibrary{
    .name = "RINGRUN_CUDART_LIBRARY",
    .meaning = "the CUDA runtime (libcudart.so.13 or .12) to load (first in the search; it must load)",
    .unit = "",
    .default_value = "",
    .role = Role::runtime_input};
inline constexpr Variable kPmixLibrary{
    .name = "RINGRUN_PMIX_LIBRARY",
    .meaning = "the host's libpmix.so.2, for ranks that meet through a PMIx launcher (first in the search; it "
               "must load)",
    .unit = "",
    .default_value = "",
    .role = Role::runtime_input};
inline constexpr Variable kCacheDir{
    .name = "RINGRUN_CACHE_DIR",
    .meaning = "where ringrun.tensorflow keeps the op libraries it compiles on first import for a TensorFlow it "
               "was not built for",
    .unit = "",
    .default_value = "", .default_note = "$XDG_CACHE_HOME/ringrun, else ~/.cache/ringrun",
    .role = Role::runtime_input};
inline constexpr Variable kNcclHome{
    .name = "NCCL_HOME", .meaning = "an NCCL installation: its lib/ is searched after the Python environment",
    .unit = "", .default_value = "", .role = Role::runtime_input};
inline constexpr Variable kCudaHome{
    .name = "CUDA_HOME", .meaning = "a CUDA installation: its lib64/ is searched for the CUDA runtime after the "
    "Python environment", .unit = "", .default_value = "", .role = Role::runtime_input};

// Horovod's own knobs, in Horovod's units, read by the runtime where the job's environment sets them
// and the ringrun option for the same knob was not given (the option wins).
inline constexpr Variable kHorovodFusionThreshold{
    .name = "HOROVOD_FUSION_THRESHOLD", .meaning = "Horovod's --fusion-threshold-mb", .unit = "bytes",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 40), .role = Role::runtime_input};
inline constexpr Variable kHorovodCycleTime{
    .name = "HOROVOD_CYCLE_TIME", .meaning = "Horovod's --cycle-time-ms", .unit = "ms", .default_value = "", .type = Type::number, .min = 0, .max = 60000,
    .role = Role::runtime_input};
inline constexpr Variable kHorovodTimeline{
    .name = "HOROVOD_TIMELINE",
    .meaning = "Horovod's --timeline-filename; DYNAMIC: none until start_timeline() is called",
    .unit = "",
    .default_value = "",
    .role = Role::runtime_input};
inline constexpr Variable kHorovodTimelineMarkCycles{
    .name = "HOROVOD_TIMELINE_MARK_CYCLES", .meaning = "Horovod's --timeline-mark-cycles (1)", .unit = "",
    .default_value = "", .type = Type::flag, .role = Role::runtime_input};
inline constexpr Variable kHorovodStallCheckTimeSeconds{
    .name = "HOROVOD_STALL_CHECK_TIME_SECONDS", .meaning = "Horovod's --stall-check-warning-time-seconds",
    .unit = "seconds", .default_value = "", .type = Type::number, .min = 0, .max = double(1ll << 24), .role = Role::runtime_input};
inline constexpr Variable kHorovodStallShutdownTimeSeconds{
    .name = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", .meaning = "Horovod's --stall-check-shutdown-time-seconds",
    .unit = "seconds", .default_value = "", .type = Type::number, .min = 0, .max = double(1ll << 24), .role = Role::runtime_input};
inline constexpr Variable kHorovodCacheCapacity{
    .name = "HOROVOD_CACHE_CAPACITY", .meaning = "Horovod's --cache-capacity", .unit = "entries",
    .default_value = "", .type = Type::integer, .min = 0, .max = double(1ll << 20), .role = Role::runtime_input};

// Every variable above, once. A new variable is a constant above and an entry here.
inline constexpr std::array kAll = {
    &kTopologyLoader, &kMaxHostlist, &kSysfsRoot, &kDiscoveryInterval,
    &kLayout, &kHosts, &kGpusPerRank, &kBind, &kCpusPerRank, &kElasticSlot,
    &kRank, &kSize, &kLocalRank, &kLocalSize, &kCrossRank, &kCrossSize, &kHostname,
    &kStoreAddr, &kJobSecret, &kStartTimeout, &kNetworkInterface,
    &kFusionThresholdMb, &kCycleTimeMs, &kTimelineFilename, &kTimelineMarkCycles, &kCacheCapacity,
    &kStallCheckWarningTimeSeconds, &kStallCheckShutdownTimeSeconds,
    &kMemBind, &kMemBindNodes, &kNcclAlgo, &kNcclProto, &kNcclIbGidIndex, &kTcp,
    &kElasticId, &kElasticEpoch, &kElasticTimeout,
    &kTorchRank, &kTorchWorldSize, &kTorchLocalRank, &kTorchLocalWorldSize, &kTorchGroupRank,
    &kMasterAddr, &kMasterPort,
    &kHorovodRank, &kHorovodSize, &kHorovodLocalRank, &kHorovodLocalSize, &kHorovodCrossRank, &kHorovodCrossSize,
    &kHorovodHostname,
    &kDisableShm, &kShmSlotBytes, &kTcpStreams, &kPeerTimeout, &kEngineAtInit, &kRunSecret, &kFp16Compression,
    &kInlineBytes, &kUnfusedMinBytes, &kNcclLibrary, &kCudartLibrary, &kPmixLibrary, &kCacheDir,
    &kNcclHome, &kCudaHome,
    &kHorovodFusionThreshold, &kHorovodCycleTime, &kHorovodTimeline, &kHorovodTimelineMarkCycles,
    &kHorovodStallCheckTimeSeconds, &kHorovodStallShutdownTimeSeconds, &kHorovodCacheCapacity,
};

// The variables that carry the rank's own numbers or host (the world's size aside, which every
// rank shares).
constexpr bool is_rank_identity(const Variable& v) {
  return v.carries != Carries::nothing && v.carries != Carries::size;
}

// The rank's identity and the world's size: what elastic mode sets anew for each world.
constexpr bool is_world_identity(const Variable& v) { return v.carries != Carries::nothing; }

// The table's entry for `name`; nullptr when ringrun neither reads nor sets it.
constexpr const Variable* find(std::string_view name) {
  for (const Variable* v : kAll)
    if (name == v->name) return v;
  return nullptr;
}

// How many variables of the table `keep` selects (the size of an array derived from it).
constexpr std::size_t count_if(bool (*keep)(const Variable&)) {
  std::size_t n = 0;
  for (const Variable* v : kAll) n += keep(*v) ? 1 : 0;
  return n;
}

// A plain decimal ("30", "0.5"; no sign, no exponent), as constexpr code can parse it: how the
// table's defaults are checked and read at compile time. nullopt when `text` is not one.
constexpr std::optional<double> parse_decimal(std::string_view text) {
  double value = 0, scale = 1;
  bool digits = false, point = false;
  for (char c : text) {
    if (c == '.' && !point) {
      point = true;
    } else if (c >= '0' && c <= '9') {
      digits = true;
      if (point) value += (scale /= 10) * (c - '0');
      else value = value * 10 + (c - '0');
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  return value;
}

// The default of an integer, number or flag variable as a number, for an initialiser that must
// agree with the table (the engine's configuration): a compile error when there is none.
consteval double default_number(const Variable& v) {
  auto value = parse_decimal(v.default_value);
  if (!value || v.type == Type::text) throw "the variable has no numeric default";
  return *value;
}

// Every default reads as its type and lies within its bounds; text variables have no bounds.
constexpr bool defaults_within_bounds() {
  for (const Variable* v : kAll) {
    if (v->type == Type::text) {
      if (v->min != 0 || v->max != 0) return false;
      continue;
    }
    const double lo = v->type == Type::flag ? 0 : v->min, hi = v->type == Type::flag ? 1 : v->max;
    if (lo > hi) return false;
    if (std::string_view(v->default_value).empty()) continue;
    auto value = parse_decimal(v->default_value);
    if (!value || *value < lo || *value > hi) return false;
    if (v->type != Type::number && *value != static_cast<double>(static_cast<long long>(*value))) return false;
  }
  return true;
}
static_assert(defaults_within_bounds(), "a default of environment_variables.hpp is not of its type or out of bounds");

}  // namespace ringrun::variables
