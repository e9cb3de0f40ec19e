// The backends, one row each (README, Architecture). `--launcher NAME`, the automatic choice and
// launch/ ask a row what its backend does, never which backend it is: a new backend is one file
// (its Backend), one row here and its name in LauncherKind (ringrun/plan.hpp).
#pragma once

#include "backend/backend.hpp"

#include <memory>
#include <span>
#include <string_view>

namespace ringrun {

struct BackendRow {
  LauncherKind kind;  // its name is to_string(kind): --launcher NAME, the plan's "launcher"
  // The automatic choice (no --launcher): the first row in table order that detects the job.
  // `all_local`: every host of the allocation is this host.
  bool (*detects)(const Allocation&, bool all_local);
  std::unique_ptr<Backend> (*make)();
  // Elastic mode (--min-np/--max-np) on this allocation: whether it fits. Its processes are one
  // per slot (Backend::elastic_slots).
  bool (*elastic_fits)(const Allocation&);
  OutputRetag retag;   // how its processes' output names ranks
  bool runs_here;      // every rank is a child of ringrun on this host, planned from its topology
  bool on_loopback;    // the whole world is on this host: the store listens on 127.0.0.1
  bool reaches_hosts;  // starts ranks on other hosts itself (the interface probe; elastic hosts added)
  bool uses_ssh;       // reaches them by ssh (horovodrun's -p/-i apply)
  // Elastic mode: the hosts are the allocation's nodes as the scheduler has them now (squeue), not
  // a discovery script's.
  bool follows_allocation;
  // A process's death reaches ringrun only after its launcher tore its job down (mpirun: over 1 s),
  // so a reset waits longer for the deaths that belong to it (ElasticConfig::reset_settle_s).
  bool reaped_late;
};

std::span<const BackendRow> backend_rows();
const BackendRow& backend_row(LauncherKind kind);
// The row of `--launcher NAME`; nullptr for a name no row has ("auto" included).
const BackendRow* backend_named(std::string_view name);
// "local, srun, mpirun or pod": the names of --launcher, for its help and its error.
std::string backend_names(std::string_view last_separator);

// The backend of `kind`, its output tagged as its row says.
std::unique_ptr<Backend> make_backend(LauncherKind kind);

}  // namespace ringrun
