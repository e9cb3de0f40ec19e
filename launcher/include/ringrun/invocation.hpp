// What a command line asks for: the options of a launch, of elastic mode and of the subcommands.
// Below the parser (ringrun/cli.hpp), so that the parts of the parser can fill it.
#pragma once

#include <ringrun/environment_variables.hpp>
#include <ringrun/plan.hpp>
#include <ringrun/process.hpp>
#include <ringrun/supervisor.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// Elastic mode, horovodrun's options (README, Elastic training; ringrun(1), Elastic mode).
struct ElasticOptions {
  std::optional<int> min_np;                      // --min-np/--min-num-proc (default: -np)
  std::optional<int> max_np;                      // --max-np/--max-num-proc (default: no limit)
  std::optional<std::string> discovery_script;    // --host-discovery-script (this host only)
  std::optional<int> slots_per_host;              // --slots-per-host (with the script)
  std::optional<int> reset_limit;                 // --reset-limit (default: no limit)
  std::optional<int> cooldown_min_s, cooldown_max_s;  // --blacklist-cooldown-range MIN MAX
  // --elastic-timeout: RINGRUN_ELASTIC_TIMEOUT's default, Horovod's.
  double elastic_timeout_s = variables::default_number(variables::kElasticTimeout);
  std::optional<double> discovery_interval_s;     // --discovery-interval (else RINGRUN_DISCOVERY_INTERVAL, 1 s)

  // Elastic mode is on when --min-np, --max-np or --host-discovery-script is given (horovodrun's rule).
  bool enabled() const { return min_np || max_np || discovery_script; }
};

enum class Command { run, help, version, topo, template_, check_build, doctor, task };

struct Invocation {
  Command command = Command::run;
  std::string help_text;                    // for Command::help
  LaunchOptions launch;
  SupervisorOptions supervisor;
  ElasticOptions elastic;
  std::optional<std::string> hosts;         // -H
  std::optional<std::string> hostfile;      // --hostfile
  std::optional<std::string> job_id;        // --jobid
  std::optional<std::string> topology_file; // --topology
  bool dry_run = false;
  bool json = false;
  bool verbose = false;
  std::vector<std::string> notes;           // what horovodrun's options changed (printed with --verbose)
  // Subcommand arguments.
  std::string template_name;
  int template_nodes = 1;
  int template_gpus_per_node = 0;
  std::string template_time = "01:00:00";
  bool doctor_all_nodes = false;
  bool doctor_report = false;
};

}  // namespace ringrun
