// horovodrun's options that ringrun has no spelling of its own for (ringrun(1), HOROVODRUN
// OPTIONS), so that a horovodrun command line runs with its first word changed. Each one maps
// onto ringrun's own option, or is taken as it is because ringrun already does what it asks (a
// note under --verbose), or is refused in one line that says what to do instead.
#pragma once

#include <ringrun/invocation.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ringrun::cli_horovodrun {

// What those options parse into.
struct Choices {
  bool disable_cache = false;           // --disable-cache: --cache-capacity 0
  bool no_stall_check = false;          // --no-stall-check: --stall-check-warning-time-seconds 0
  bool no_timeline_mark_cycles = false; // the default
  bool mpi = false;                     // --mpi: --launcher mpirun
  bool gloo = false;                    // --gloo: ringrun's own launch and runtime
  std::optional<std::string> network_interfaces;  // one interface: --network-interface
  std::optional<double> gloo_timeout_s;            // --start-timeout
  std::optional<std::string> log_level;            // checked, then nothing to set
  bool prefix_timestamp = false;                   // SupervisorOptions::timestamp_output
  std::optional<int> ssh_port;                     // -p: mpirun's ssh (LaunchOptions::ssh_args)
  std::optional<std::string> ssh_identity_file;    // -i: likewise
  std::optional<std::string> mpi_args;             // LaunchOptions::mpirun_args, split as sh would
};

// Adds them to `app`, in a help group of their own.
void add_options(CLI::App& app, Choices& choices);

// After the parse: the mapped ones into `inv` (`launcher`: --launcher's word), a note per option
// taken as it is; UsageError for a refused one, or for one given beside ringrun's own spelling.
void apply(const CLI::App& app, const Choices& choices, Invocation& inv, std::string& launcher);

}  // namespace ringrun::cli_horovodrun
