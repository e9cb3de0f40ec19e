// The backends' table (backend/table.hpp).
#include "backend/table.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

namespace ringrun {

std::unique_ptr<Backend> make_local_backend();
std::unique_ptr<Backend> make_pod_backend();
std::unique_ptr<Backend> make_srun_backend();
std::unique_ptr<Backend> make_mpirun_backend();

namespace {

bool is(const Allocation& a, AllocationSource s) { return a.source == s; }
bool named_hosts(const Allocation& a) {
  return is(a, AllocationSource::hosts_flag) || is(a, AllocationSource::hostfile) || is(a, AllocationSource::mpijob) ||
         is(a, AllocationSource::discovery_script);
}

// Table order is the automatic choice's: a per-pod job's pods, a SLURM allocation, this host
// alone, then other hosts by mpirun.
constexpr std::array kRows = {
    BackendRow{.kind = LauncherKind::pod,
               .detects = [](const Allocation& a, bool) { return is(a, AllocationSource::pod); },
               .make = make_pod_backend,
               .elastic_fits = [](const Allocation&) { return false; },
               .retag = OutputRetag::none,
               .runs_here = true,
               .on_loopback = false,
               .reaches_hosts = false,
               .uses_ssh = false,
               .follows_allocation = false,
               .reaped_late = false},
    BackendRow{.kind = LauncherKind::srun,
               .detects = [](const Allocation& a, bool) {
                 return is(a, AllocationSource::slurm_env) || is(a, AllocationSource::slurm_job);
               },
               .make = make_srun_backend,
               .elastic_fits = [](const Allocation& a) { return is(a, AllocationSource::slurm_env); },
               .retag = OutputRetag::srun_label,
               .runs_here = false,
               .on_loopback = false,
               .reaches_hosts = true,
               .uses_ssh = false,
               .follows_allocation = true,
               .reaped_late = false},
    BackendRow{.kind = LauncherKind::local,
               .detects = [](const Allocation&, bool all_local) { return all_local; },
               .make = make_local_backend,
               .elastic_fits = [](const Allocation&) { return true; },
               .retag = OutputRetag::none,
               .runs_here = true,
               .on_loopback = true,
               .reaches_hosts = false,
               .uses_ssh = false,
               .follows_allocation = false,
               .reaped_late = false},
    BackendRow{.kind = LauncherKind::mpirun,
               .detects = [](const Allocation&, bool) { return true; },
               .make = make_mpirun_backend,
               .elastic_fits = named_hosts,
               .retag = OutputRetag::mpirun_tag,
               .runs_here = false,
               .on_loopback = false,
               .reaches_hosts = true,
               .uses_ssh = true,
               .follows_allocation = false,
               .reaped_late = true},
};

}  // namespace

std::span<const BackendRow> backend_rows() { return kRows; }

const BackendRow& backend_row(LauncherKind kind) {
  for (const BackendRow& row : kRows)
    if (row.kind == kind) return row;
  throw std::logic_error(fmt::format("no backend row for launcher '{}'", to_string(kind)));
}

const BackendRow* backend_named(std::string_view name) {
  for (const BackendRow& row : kRows)
    if (name == to_string(row.kind)) return &row;
  return nullptr;
}

std::string backend_names(std::string_view last_separator) {
  std::string out;
  for (std::size_t i = 0; i < kRows.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == kRows.size() ? last_separator : ", ", to_string(kRows[i].kind));
  return out;
}

std::unique_ptr<Backend> make_backend(LauncherKind kind) {
  const BackendRow& row = backend_row(kind);
  std::unique_ptr<Backend> backend = row.make();
  backend->retag = row.retag;
  return backend;
}

}  // namespace ringrun
