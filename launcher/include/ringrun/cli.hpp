// The command line: `ringrun [OPTIONS] [--] PROGRAM [ARGS...]` and its subcommands.
#pragma once

#include <ringrun/plan.hpp>
#include <ringrun/supervisor.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// Bad usage: what() is the one-line message; ringrun exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Command { run, help, version, topo, template_, check_build, doctor, task };

struct Invocation {
  Command command = Command::run;
  std::string help_text;                    // for Command::help
  LaunchOptions launch;
  SupervisorOptions supervisor;
  std::optional<std::string> hosts;         // -H
  std::optional<std::string> hostfile;      // --hostfile
  std::optional<std::string> job_id;        // --jobid
  std::optional<std::string> topology_file; // --topology
  bool dry_run = false;
  bool json = false;
  bool verbose = false;
  // Subcommand arguments.
  std::string template_name;
  int template_nodes = 1;
  int template_gpus_per_node = 0;
  std::string template_time = "01:00:00";
  bool doctor_all_nodes = false;
  bool doctor_report = false;
};

// Parses argv (argv[0] is the program name). Throws UsageError.
Invocation parse_command_line(const std::vector<std::string>& args);

}  // namespace ringrun
