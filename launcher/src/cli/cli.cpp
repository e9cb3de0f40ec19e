#include <ringrun/cli.hpp>
#include <ringrun/environment_variables.hpp>

#include "backend/table.hpp"
#include "cli/horovodrun.hpp"
#include "cli/values.hpp"
#include "elastic/hosts.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <set>

#ifndef RINGRUN_VERSION
#define RINGRUN_VERSION "0.0.0"
#endif

namespace ringrun {
namespace {

// --launcher's words: auto, then the backends' names (backend/table.hpp).
std::vector<std::string> launcher_choices() {
  std::vector<std::string> words = {"auto"};
  for (const BackendRow& row : backend_rows()) words.emplace_back(to_string(row.kind));
  return words;
}

using cli_values::number;
using cli_values::one_of;
using cli_values::table_value;
using cli_values::whole_number;

// horovodrun spells some long options with one dash; CLI11 wants two. Rewrite them up to the
// program name only, so the program's own arguments reach it untouched.
std::vector<std::string> normalize(const std::vector<std::string>& args, const CLI::App& app) {
  static const std::map<std::string, std::string> kAliases = {
      {"-np", "--num-proc"}, {"-hostfile", "--hostfile"}, {"-cb", "--check-build"},
      {"-prefix-timestamp", "--prefix-output-with-timestamp"}};
  std::vector<std::string> out;
  bool done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (done || i == 0) {
      out.push_back(a);
      continue;
    }
    if (a == "--") {
      done = true;
      out.push_back(a);
      continue;
    }
    std::string name = a;
    if (auto it = kAliases.find(a); it != kAliases.end()) name = it->second;
    out.push_back(name);
    if (name.size() < 2 || name[0] != '-') {
      // Options may follow a subcommand's name (`ringrun topo -np 4`); the program starts at the
      // first other word, and from there on nothing is rewritten.
      static const std::set<std::string> kSubcommands = {"topo", "template", "check-build", "doctor"};
      if (kSubcommands.count(name)) continue;
      done = true;
      continue;
    }
    if (name.find('=') != std::string::npos) continue;
    const CLI::Option* opt = app.get_option_no_throw(name);
    // Its values are not options (--blacklist-cooldown-range takes two).
    for (int k = opt ? opt->get_items_expected_min() : 0; k > 0 && i + 1 < args.size(); --k) out.push_back(args[++i]);
  }
  return out;
}

// Elastic mode (ringrun(1), Elastic mode): horovodrun's names. --blacklist-cooldown-range is read
// as two words (check_elastic_options reads them), so that a bad value is named with both.
void add_elastic_options(CLI::App& app, ElasticOptions& e, std::vector<std::string>& cooldown_words) {
  app.add_option("--min-np,--min-num-proc", e.min_np, "Elastic mode: the fewest ranks the job runs with (default: -np); below it "
                                       "the job waits --elastic-timeout for slots")
      ->type_name("N")
      ->check(whole_number("--min-np", "the fewest ranks", 1, "2"));
  app.add_option("--max-np,--max-num-proc", e.max_np, "Elastic mode: the most ranks (default: no limit)")
      ->type_name("N")
      ->check(whole_number("--max-np", "the most ranks", 1, "8"));
  app.add_option("--host-discovery-script", e.discovery_script,
                 "Elastic mode: a command printing host[:slots] lines, run every second; the job grows and shrinks "
                 "with the slots and hosts it prints (other hosts: one mpirun per process)")
      ->type_name("CMD");
  app.add_option("--slots-per-host", e.slots_per_host, "Elastic mode: slots of a host the discovery script prints "
                                                       "without :slots")
      ->type_name("N")
      ->check(whole_number("--slots-per-host", "the slots per host", 1, "4"));
  app.add_option("--reset-limit", e.reset_limit, "Elastic mode: end the job when it would be reset (re-formed) more "
                                                 "than N times (default: no limit)")
      ->type_name("N")
      ->check(whole_number("--reset-limit", "the number of resets", 0, "3"));
  app.add_option("--blacklist-cooldown-range", cooldown_words, "Elastic mode: use a blacklisted host (a failed slot "
                                                                 "on -np slots or SLURM nodes) again after MIN to MAX "
                                                                 "seconds, longer each time (default: never)")
      ->expected(2)
      ->allow_extra_args(false)  // exactly two: the program follows
      ->option_text("MIN MAX");
  app.add_option("--discovery-interval", e.discovery_interval_s,
                 fmt::format("Elastic mode: seconds between the end of one run of --host-discovery-script (or the "
                             "job's node query) and the next (default {}, also {})",
                             variables::kDiscoveryInterval.default_value, variables::kDiscoveryInterval.name))
      ->type_name("SECONDS")
      ->check(number("--discovery-interval", "the interval", 0, variables::kDiscoveryInterval.default_value, true));
  app.add_option("--elastic-timeout", e.elastic_timeout_s,
                 fmt::format("Elastic mode: seconds to wait for --min-np slots before ending the job (default {})",
                             variables::kElasticTimeout.default_value))
      ->type_name("SECONDS")
      ->check(number("--elastic-timeout", "the timeout", 0, variables::kElasticTimeout.default_value, true,
                     variables::kElasticTimeout.max));
}

// One whole number of seconds of --blacklist-cooldown-range, or a one-line UsageError.
int cooldown_seconds(const std::vector<std::string>& words, const std::string& word) {
  int value = 0;
  auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size() || word.empty())
    throw UsageError(fmt::format("--blacklist-cooldown-range '{}' '{}' : MIN and MAX must be whole seconds (e.g. "
                                 "--blacklist-cooldown-range 10 300)",
                                 words.at(0), words.at(1)));
  return value;
}

// The elastic options together, once parsed: each bad combination is one line (exit 2).
void check_elastic_options(const CLI::App& app, ElasticOptions& e, const std::vector<std::string>& cooldown_words,
                           LaunchOptions& launch) {
  if (cooldown_words.size() == 2) {
    e.cooldown_min_s = cooldown_seconds(cooldown_words, cooldown_words[0]);
    e.cooldown_max_s = cooldown_seconds(cooldown_words, cooldown_words[1]);
  }
  if (!e.enabled()) {
    for (const char* name : {"--slots-per-host", "--reset-limit", "--blacklist-cooldown-range", "--elastic-timeout",
                             "--discovery-interval"})
      if (app.count(name))
        throw UsageError(fmt::format("{} applies in elastic mode only; add --min-np N (or --max-np N) to make the job "
                                     "elastic, or drop {}",
                                     name, name));
    return;
  }
  if (e.discovery_script && e.discovery_script->empty())
    throw UsageError("--host-discovery-script '' : names no program; give a script that prints host[:slots] lines");
  if (e.slots_per_host && !e.discovery_script)
    throw UsageError(fmt::format("--slots-per-host {} : applies to the hosts --host-discovery-script prints; give the "
                                 "script or drop --slots-per-host",
                                 *e.slots_per_host));
  if (e.min_np && e.max_np && *e.max_np < *e.min_np)
    throw UsageError(fmt::format("--max-np {} : below --min-np {}; give --max-np at least {}", *e.max_np, *e.min_np,
                                 *e.min_np));
  // horovodrun: -np is what the job starts with, --min-np defaults to it. Without -np, launch.cpp
  // starts with --min-np on this host, with the slots a discovery script's first run finds, or
  // with the SLURM allocation's slots, up to --max-np.
  if (const auto np = launch.num_proc) {
    if (e.min_np && e.max_np && (*np < *e.min_np || *np > *e.max_np))
      throw UsageError(fmt::format("-np {} : outside --min-np {} to --max-np {}; give -np from {} to {}", *np,
                                   *e.min_np, *e.max_np, *e.min_np, *e.max_np));
    if (e.min_np && *np < *e.min_np)
      throw UsageError(fmt::format("-np {} : below --min-np {}; give -np at least {} or lower --min-np", *np,
                                   *e.min_np, *e.min_np));
    if (e.max_np && *np > *e.max_np)
      throw UsageError(fmt::format("-np {} : above --max-np {}; give -np at most {} or raise --max-np", *np,
                                   *e.max_np, *e.max_np));
  }
  if (e.cooldown_min_s) validate_cooldown_range(CooldownRange{*e.cooldown_min_s, *e.cooldown_max_s});
}

// The host sources and the program, once parsed: each bad one is one line (exit 2).
void check_hosts_and_program(const Invocation& inv, bool program_after_dashes) {
  const auto& L = inv.launch;
  if ((inv.hosts ? 1 : 0) + (inv.hostfile ? 1 : 0) + (inv.job_id ? 1 : 0) > 1)
    throw UsageError("-H, --hostfile and --jobid name the hosts each; give one of them");
  if (L.num_proc && *L.num_proc < 1)
    throw UsageError(fmt::format("-np {} : the number of ranks must be at least 1", *L.num_proc));
  if (inv.command == Command::run && !program_after_dashes && !L.program.empty() && L.program.front().size() > 1 &&
      L.program.front().starts_with("-"))
    throw UsageError(fmt::format("unknown option '{}' (see ringrun --help); a program whose name starts with '-' "
                                 "goes after --",
                                 L.program.front()));
  if (L.program.empty() && !inv.dry_run && inv.command == Command::run)
    throw UsageError("no program given; write: ringrun [OPTIONS] [--] PROGRAM [ARGS...] (see ringrun --help)");
}

// What the options parse into before parse_command_line turns it into the Invocation.
struct RawChoices {
  std::optional<int> num_proc;
  std::string launcher = "auto";
  std::optional<std::string> output_dir;
  bool no_tag = false;
  std::string bind = "cores";
  std::string mem_bind = "none";
  std::optional<int> template_nodes;
  bool check_build_flag = false;
  std::vector<std::string> cooldown_words;
};

struct Subcommands {
  CLI::App* topo = nullptr;
  CLI::App* tmpl = nullptr;
  CLI::App* check_build = nullptr;
  CLI::App* doctor = nullptr;
  CLI::App* task = nullptr;
};

// The options in --help's order: where the ranks run and how the job is supervised,
void add_job_options(CLI::App& app, Invocation& inv, RawChoices& raw) {
  auto& L = inv.launch;
  app.add_option("--num-proc", raw.num_proc, "Number of ranks (also -np). Default: the allocation's tasks, else its "
                                         "GPUs, else 1 per host; locally the GPUs, else 1")
      ->option_text("N (-np N)")
      ->check(whole_number("-np", "the number of ranks", 1, "4"));
  app.add_option("-H,--hosts", inv.hosts, "Hosts and slots, e.g. n1:4,n2:4 (mpirun backend)");
  app.add_option("--hostfile", inv.hostfile, "File of 'host slots=N' lines (also -hostfile)");
  app.add_option("--jobid", inv.job_id, "Plan for this running SLURM job, read through libslurm (e.g. from a login "
                                       "node, with --dry-run)")
      ->type_name("ID");
  app.add_option("--launcher", raw.launcher, "auto (pod in a per-pod Kubernetes job, srun in a SLURM allocation, "
                                         "mpirun for other hosts (-H, an MPIJob) and for MPI programs, else local), " +
                                         backend_names(" or "))
      ->check(one_of("--launcher", launcher_choices(), "auto, " + backend_names(" or ")));
  app.add_option("--srun-mpi", L.srun_mpi, "auto (default: PMIx when srun offers it), pmix or none; none skips "
                                         "PMIx setup (about 170 ms a step) for programs that use no MPI")
      ->check(one_of("--srun-mpi", {"auto", "pmix", "none"}, "auto, pmix or none"));
  app.add_option("-x,--env", L.env_args, "Set NAME=VALUE, or pass NAME from this environment, in every rank "
                                         "(repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME[=VALUE]");
  app.add_option("--output-filename", raw.output_dir, "Also write each rank's output to DIR/rank.N/stdout and stderr")
      ->type_name("DIR");
  app.add_flag("--no-tag-output", raw.no_tag, "Do not prefix output lines with [RANK]<stdout>:");
  app.add_option("--network-interface", L.network_interface,
                 "Interface for NCCL and the runtime (NCCL_SOCKET_IFNAME=='IF'); skips detection")
      ->type_name("IF");
  app.add_option("--start-timeout", L.start_timeout_s, "Seconds the ranks may take to meet (default 30 + 1 per 8 "
                                                        "hosts)")
      ->type_name("SECONDS")
      ->check(number("--start-timeout", "the timeout", 0, "60", true, variables::kStartTimeout.max));
  app.add_option("--grace-period", inv.supervisor.grace_period_s,
                 "Seconds between SIGTERM and SIGKILL when the job stops (default 10)")
      ->type_name("SECONDS")
      ->check(number("--grace-period", "the grace period in seconds", 0, "10"));
}

// how they are planned and bound,
void add_plan_options(CLI::App& app, Invocation& inv, RawChoices& raw) {
  auto& L = inv.launch;
  app.add_flag("--oversubscribe", L.oversubscribe, "Allow more ranks than slots");
  app.add_flag("--dry-run", inv.dry_run, "Print the plan and start nothing");
  app.add_flag("--json", inv.json, "With --dry-run (and topo, doctor): print JSON");
  app.add_option("--topology", inv.topology_file, "Plan with this hwloc XML export (or synthetic:DESCRIPTION, hwloc's "
                                                    "synthetic syntax) instead of this host's topology")
      ->type_name("FILE");
  app.add_flag("-v,--verbose", inv.verbose, "Print the plan, the backend's command and why choices were made");
  app.add_option("--gpus-per-rank", L.node.gpus_per_rank, "GPUs per rank: 1 (default) or 0 for CPU-only ranks")
      ->check(whole_number("--gpus-per-rank", "the GPUs per rank (0: CPU-only ranks)", 0, "1", 1));
  app.add_option("--bind", raw.bind, "cores (default: the cores local to the rank's GPU) or none")
      ->check(one_of("--bind", {"cores", "none"}, "cores (the cores local to the rank's GPU) or none"));
  app.add_option("--cpus-per-rank", L.node.cpus_per_rank, "Cap the cores each rank is bound to")
      ->check(whole_number("--cpus-per-rank", "the cores per rank", 1, "4"))
      ->type_name("N");
  app.add_option("--mem-bind", raw.mem_bind, "none (default) or local: bind each rank's memory to the NUMA node(s) of "
                                         "its cores")
      ->check(one_of("--mem-bind", {"none", "local"}, "none or local (the NUMA nodes of the rank's cores)"));
}

// NCCL's settings,
void add_nccl_options(CLI::App& app, LaunchOptions& L) {
  app.add_option("--nccl-algo", L.nccl.algo, "Set NCCL_ALGO, checked against the found NCCL (e.g. Ring,Tree or "
                                             "^NVLS)")
      ->type_name("LIST");
  app.add_option("--nccl-proto", L.nccl.proto, "Set NCCL_PROTO: LL, LL128, Simple (^ excludes)")
      ->type_name("LIST");
  app.add_option("--nccl-ib-gid-index", L.nccl.ib_gid_index,
                 "Set NCCL_IB_GID_INDEX: auto (the RoCE v2 IPv4 GID in sysfs) or N; by default only for NCCL < 2.21")
      ->type_name("auto|N");
  app.add_flag("--tcp", L.nccl.tcp, "NCCL over TCP sockets only (NCCL_IB_DISABLE=1)");
}

// the engine's,
void add_engine_options(CLI::App& app, LaunchOptions& L) {
  namespace v = variables;
  app.add_option("--fusion-threshold-mb", L.fusion_threshold_mb,
                 fmt::format("Engine: fusion buffer size in MiB (default {})", v::kFusionThresholdMb.default_value))
      ->type_name("MB")
      ->check(table_value("--fusion-threshold-mb", "the fusion buffer size in MiB", v::kFusionThresholdMb));
  app.add_option("--cycle-time-ms", L.cycle_time_ms,
                 fmt::format("Engine: cycle time in ms (default {})", v::kCycleTimeMs.default_value))
      ->type_name("MS")
      ->check(table_value("--cycle-time-ms", "the cycle time in ms", v::kCycleTimeMs));
  app.add_option("--timeline-filename", L.timeline_filename, "Engine: write a Chrome trace timeline to FILE")
      ->type_name("FILE");
  app.add_flag("--timeline-mark-cycles", L.timeline_mark_cycles, "Engine: mark each cycle with work in the timeline");
  app.add_option("--cache-capacity", L.cache_capacity,
                 fmt::format("Engine: response-cache entries (default {}; 0 negotiates every name in full)",
                             v::kCacheCapacity.default_value))
      ->type_name("N")
      ->check(table_value("--cache-capacity", "the response-cache entries", v::kCacheCapacity));
  app.add_option("--stall-check-warning-time-seconds", L.stall_check_warning_s,
                 fmt::format("Engine: warn about tensors waiting this long (default {})",
                             v::kStallCheckWarningTimeSeconds.default_value))
      ->type_name("SECONDS")
      ->check(table_value("--stall-check-warning-time-seconds", "the stall warning time",
                          v::kStallCheckWarningTimeSeconds));
  app.add_option("--stall-check-shutdown-time-seconds", L.stall_check_shutdown_s,
                 "Engine: fail a tensor that waits this long on every rank (InternalError in Python; default: never)")
      ->type_name("SECONDS")
      ->check(table_value("--stall-check-shutdown-time-seconds", "the stall shutdown time",
                          v::kStallCheckShutdownTimeSeconds, "600"));
}

// and (after the elastic options) the subcommands. Options given after the subcommand name fall
// through to the ones above.
Subcommands add_subcommands(CLI::App& app, Invocation& inv, RawChoices& raw) {
  app.fallthrough();
  Subcommands sub;
  sub.topo = app.add_subcommand("topo", "Show this host's (or --topology FILE's) GPUs, cores and NICs, and the "
                                              "slots -np N ranks would get");
  CLI::App* tmpl = sub.tmpl = app.add_subcommand("template", "Print a filled-in sbatch template");
  tmpl->add_option("name", inv.template_name, "single-node, multi-node-srun, multi-node-mpirun, preemptible or elastic")
      ->required();
  tmpl->add_option("--nodes", raw.template_nodes, "Nodes of the job")->check(whole_number("--nodes", "the nodes of the job", 1, "2"));
  tmpl->add_option("--gpus-per-node", inv.template_gpus_per_node, "GPUs per node")
      ->check(whole_number("--gpus-per-node", "the GPUs per node", 0, "4"));
  tmpl->add_option("--time", inv.template_time, "Time limit (HH:MM:SS)");
  tmpl->prefix_command();
  app.add_flag("--check-build", raw.check_build_flag, "Same as the check-build subcommand (also -cb)");
  sub.check_build = app.add_subcommand("check-build", "Show the APIs, launchers, transports and topology "
                                                            "available, each missing one with its reason");
  CLI::App* doctor = sub.doctor = app.add_subcommand("doctor", "Check this host and allocation: PASS/WARN/FAIL with a one-line "
                                                  "fix (exit 1 on FAIL)");
  doctor->add_flag("--all-nodes", inv.doctor_all_nodes,
                   "Inside a SLURM allocation: run doctor on every node, a table per node");
  doctor->add_flag("--report", inv.doctor_report, "Print a paste-ready environment report, secrets redacted");
  CLI::App* task = sub.task = app.add_subcommand("task", "Task shim run by srun/mpirun on each rank (internal)");
  task->prefix_command();
  task->group("");
  return sub;
}

}  // namespace

Invocation parse_command_line(const std::vector<std::string>& args) {
  Invocation inv;
  auto& L = inv.launch;
  CLI::App app{"ringrun: launch a distributed training job on this host, under srun in a SLURM allocation, or "
               "under mpirun; one GPU, its closest cores and NIC per rank.",
               "ringrun"};
  app.footer("Usage: ringrun [OPTIONS] [--] PROGRAM [ARGS...]  |  ringrun topo|template|check-build|doctor [OPTIONS]\n"
             "Exit status: the failing rank's code (128+signal), 2 for bad usage, 127 when the program cannot be "
             "executed.\nPyTorch: `import ringrun.torch as hvd` (Horovod's API) in the program; ringrun puts the "
             "package on every rank's PYTHONPATH.\nSee ringrun(1), ringrun-torch(3).");
  app.prefix_command();  // everything from the program name on belongs to the program
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", std::string("ringrun ") + RINGRUN_VERSION);
  app.get_formatter()->column_width(40);

  RawChoices raw;
  add_job_options(app, inv, raw);
  add_plan_options(app, inv, raw);
  add_nccl_options(app, L);
  add_engine_options(app, L);
  add_elastic_options(app, inv.elastic, raw.cooldown_words);
  cli_horovodrun::Choices horovodrun;
  cli_horovodrun::add_options(app, horovodrun);
  const Subcommands sub = add_subcommands(app, inv, raw);

  std::vector<std::string> normalized = normalize(args, app);
  std::vector<std::string> reversed(normalized.rbegin(), normalized.rend() - 1);
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    inv.command = Command::help;
    inv.help_text = app.help();
    return inv;
  } catch (const CLI::CallForVersion&) {
    inv.command = Command::version;
    inv.help_text = std::string("ringrun ") + RINGRUN_VERSION + "\n";
    return inv;
  } catch (const CLI::ParseError& e) {
    throw UsageError(cli_values::describe_parse_error(e));
  }

  L.num_proc = raw.num_proc;
  // A subcommand's own prefix_command leaves what follows its positionals in the vector parse()
  // was given (reversed); the top-level app keeps them in remaining().
  std::vector<std::string> leftover(reversed.rbegin(), reversed.rend());
  // An option ringrun does not know ends its options and would be taken for the program.
  const bool program_after_dashes = !leftover.empty() && leftover.front() == "--";
  auto program_of = [&leftover](std::vector<std::string> rest) {
    rest.insert(rest.end(), leftover.begin(), leftover.end());
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    return rest;
  };
  L.program = program_of({});
  if (sub.topo->parsed()) inv.command = Command::topo;
  if (sub.check_build->parsed() || raw.check_build_flag) inv.command = Command::check_build;
  if (sub.doctor->parsed()) inv.command = Command::doctor;
  if (sub.tmpl->parsed()) {
    inv.command = Command::template_;
    inv.template_nodes = raw.template_nodes.value_or(0);
    L.program = program_of(sub.tmpl->remaining());
  }
  if (sub.task->parsed()) {
    inv.command = Command::task;
    L.program = program_of(sub.task->remaining());
    return inv;
  }
  check_elastic_options(app, inv.elastic, raw.cooldown_words, L);
  cli_horovodrun::apply(app, horovodrun, inv, raw.launcher);
  if (const BackendRow* row = backend_named(raw.launcher)) L.launcher = row->kind;
  L.node.bind = raw.bind != "none";
  L.mem_bind_local = raw.mem_bind == "local";
  inv.supervisor.tag_output = !raw.no_tag;
  inv.supervisor.output_directory = raw.output_dir;
  inv.supervisor.verbose = inv.verbose;
  check_hosts_and_program(inv, program_after_dashes);
  return inv;
}

}  // namespace ringrun
