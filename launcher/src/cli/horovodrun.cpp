#include "cli/horovodrun.hpp"

#include "cli/values.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>
#include <utility>

namespace ringrun::cli_horovodrun {
namespace {

constexpr const char* kGroup = "horovodrun's options (ringrun(1), HOROVODRUN OPTIONS)";

// Flags ringrun takes as they are, each with the reason it changes nothing here.
constexpr std::array<std::pair<const char*, const char*>, 14> kAlreadyDone = {{
    {"--stall-check", "the stall check is on unless --no-stall-check or --stall-check-warning-time-seconds 0"},
    {"--hierarchical-allreduce", "ringrun reduces within each host on shared memory, then across hosts, by itself"},
    {"--no-hierarchical-allreduce", "ringrun reduces within each host on shared memory, then across hosts, by itself"},
    {"--hierarchical-allgather", "ringrun gathers within each host on shared memory by itself"},
    {"--no-hierarchical-allgather", "ringrun gathers within each host on shared memory by itself"},
    {"--torus-allreduce", "ringrun chooses its allreduce path by itself"},
    {"--no-torus-allreduce", "ringrun chooses its allreduce path by itself"},
    {"--mpi-threads-disable", "ringrun's runtime makes no MPI calls"},
    {"--no-mpi-threads-disable", "ringrun's runtime makes no MPI calls"},
    {"--no-autotune", "ringrun does not autotune"},
    {"--log-with-timestamp", "ringrun's runtime logs only warnings and errors, without timestamps"},
    {"--log-without-timestamp", "ringrun's runtime logs only warnings and errors, without timestamps"},
    {"--log-hide-timestamp", "ringrun's runtime logs only warnings and errors, without timestamps"},
    {"--no-log-hide-timestamp", "ringrun's runtime logs only warnings and errors, without timestamps"},
}};

// Options ringrun refuses, with what to do instead.
struct Refused {
  const char* names;
  const char* value;  // its value's name in --help, or null for a flag
  const char* instead;
};
constexpr std::array<Refused, 9> kRefused = {{
    {"--autotune", nullptr, "ringrun does not autotune; set --fusion-threshold-mb and --cycle-time-ms, or drop it"},
    {"--autotune-log-file", "FILE", "ringrun does not autotune; set --fusion-threshold-mb and --cycle-time-ms, or drop it"},
    {"--autotune-warmup-samples", "N", "ringrun does not autotune; drop it"},
    {"--autotune-steps-per-sample", "N", "ringrun does not autotune; drop it"},
    {"--autotune-bayes-opt-max-samples", "N", "ringrun does not autotune; drop it"},
    {"--autotune-gaussian-process-noise", "X", "ringrun does not autotune; drop it"},
    {"--jsrun", nullptr, "ringrun starts ranks here, with srun or with mpirun (--launcher), not with LSF's jsrun"},
    {"--config-file", "FILE", "ringrun reads no config file; give its options on the command line"},
    {"--binding-args", "ARGS", "ringrun binds each rank to its GPU's cores itself: use --bind, --cpus-per-rank, --mem-bind"},
}};

// mpirun's options that ringrun's own mpirun command line sets (backend/cluster.cpp), refused in
// --mpi-args with ringrun's way to ask for the same.
struct Reserved {
  std::array<const char*, 10> names;  // each also as -name and as --name=VALUE
  const char* instead;
};
constexpr std::array<Reserved, 5> kReserved = {{
    {{"np", "n", "c", "N", "npernode", "npersocket"}, "give -np to ringrun"},
    {{"H", "host", "hostfile", "machinefile", "default-hostfile"},
     "give -H or --hostfile to ringrun"},
    {{"bind-to", "map-by", "rank-by", "rankfile", "rf", "cpus-per-proc", "cpus-per-rank", "bind-to-core", "bynode",
      "byslot"},
     "ringrun binds each rank to its GPU's cores: use --bind, --cpus-per-rank, --mem-bind"},
    {{"output-filename", "timestamp-output", "xml"},
     "ringrun reads the ranks' output from mpirun's: use its --output-filename or --prefix-output-with-timestamp"},
    {{"app"}, "give the program after ringrun's options"},
}};

// The word's option name without dashes and =VALUE ("--bind-to=core": "bind-to"), or "" for a value.
std::string option_name(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return {};
  const std::string name = word.substr(word[1] == '-' ? 2 : 1);
  return name.substr(0, name.find('='));
}

// horovodrun's --mpi-args, split as sh splits them, into `L` (ringrun(1), HOROVODRUN OPTIONS).
void apply_mpi_args(const std::string& text, const std::string& launcher, LaunchOptions& L) {
  if (launcher == "local" || launcher == "srun")
    throw UsageError(fmt::format("--mpi-args '{}' : only mpirun takes them, and --launcher {} starts the ranks "
                                 "without it; give --launcher mpirun or drop --mpi-args", text, launcher));
  std::vector<std::string> words;
  try {
    words = cli_values::shell_words(text);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--mpi-args '{}' : {}; quote it as you would for sh", text, e.what()));
  }
  for (const std::string& word : words) {
    const std::string name = option_name(word);
    for (const Reserved& r : kReserved)
      for (const char* reserved : r.names)
        if (reserved && name == reserved)
          throw UsageError(fmt::format("--mpi-args '{}' : ringrun sets {} on mpirun's command line itself; {}", text,
                                       word, r.instead));
    // ringrun's own --oversubscribe also lets its plan put more ranks than slots on a host.
    if (name == "oversubscribe") L.oversubscribe = true;
    else L.mpirun_args.push_back(word);
  }
}

// The long spelling of "-x,--some-option".
std::string long_name(const char* names) {
  const std::string all = names;
  const auto comma = all.find(',');
  return comma == std::string::npos ? all : all.substr(comma + 1);
}

// The option as given, for a message ("--config-file c.yaml"): with its value when it takes one.
std::string as_given(const CLI::App& app, const Refused& r) {
  std::string spelled = r.names;
  if (const auto comma = spelled.find(','); comma != std::string::npos) spelled[comma] = '/';
  if (!r.value) return spelled;
  const auto& values = app.get_option(long_name(r.names))->results();
  return fmt::format("{} {}", spelled, values.empty() ? std::string() : values.front());
}

// Two spellings of one setting given together (horovodrun's and ringrun's, or two choices).
void refuse_both(const CLI::App& app, const char* one, const char* other, const char* what = "set the same thing") {
  if (app.count(one) && app.count(other)) throw UsageError(fmt::format("{} and {} {}; give one of them", one, other, what));
}

}  // namespace

void add_options(CLI::App& app, Choices& c) {
  app.add_flag("--disable-cache", c.disable_cache, "Same as --cache-capacity 0")->group(kGroup);
  app.add_flag("--no-stall-check", c.no_stall_check, "Same as --stall-check-warning-time-seconds 0")->group(kGroup);
  app.add_flag("--no-timeline-mark-cycles", c.no_timeline_mark_cycles, "The default: no cycle marks")->group(kGroup);
  app.add_flag("--mpi", c.mpi, "Same as --launcher mpirun")->group(kGroup);
  app.add_flag("--gloo", c.gloo, "The default: ringrun's own launch and runtime play Gloo's part")->group(kGroup);
  app.add_option("--network-interfaces", c.network_interfaces, "Same as --network-interface (one interface)")
      ->type_name("IF")
      ->group(kGroup);
  app.add_option("--gloo-timeout-seconds", c.gloo_timeout_s, "Same as --start-timeout")
      ->type_name("SECONDS")
      ->check(cli_values::number("--gloo-timeout-seconds", "the timeout", 0, "60", true))
      ->group(kGroup);
  app.add_option("-p,--ssh-port", c.ssh_port, "The port of the -H hosts' ssh, which mpirun reaches them with")
      ->type_name("PORT")
      ->check(cli_values::whole_number("-p/--ssh-port", "the ssh port", 1, "2222", 65535))
      ->group(kGroup);
  app.add_option("-i,--ssh-identity-file", c.ssh_identity_file, "The key mpirun's ssh presents to the -H hosts")
      ->type_name("FILE")
      ->group(kGroup);
  app.add_flag("--prefix-output-with-timestamp", c.prefix_timestamp,
               "Start each output line with the local time, as horovodrun does (Mon Dec  7 02:55:37 2026[0]<stdout>:)")
      ->group(kGroup);
  app.add_option("--mpi-args", c.mpi_args,
                 "mpirun's own options, as one word split as sh would (e.g. --mpi-args=\"-mca btl_tcp_if_include "
                 "eth0\"): mpirun starts the ranks")
      ->type_name("ARGS")
      ->allow_extra_args(false)
      ->group(kGroup);
  app.add_option("--log-level", c.log_level, "Taken as it is: the runtime logs warnings and errors")
      ->type_name("LEVEL")
      ->check(cli_values::one_of("--log-level", {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"},
                                 "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL"))
      ->group(kGroup);
  for (const auto& [name, why] : kAlreadyDone)
    app.add_flag(std::string(name))->description("Taken as it is: " + std::string(why))->group(kGroup);
  app.add_option("--num-nccl-streams", "Taken as it is: ringrun's NCCL transport keeps its own streams")
      ->type_name("N")
      ->check(cli_values::whole_number("--num-nccl-streams", "the NCCL streams", 1, "1"))
      ->group(kGroup);
  app.add_option("--thread-affinity", "Taken as it is: the engine's thread runs on the rank's own cores")
      ->type_name("CPU")
      ->group(kGroup);
  for (const Refused& r : kRefused) {
    const std::string help = "Refused: " + std::string(r.instead);
    if (r.value) app.add_option(r.names, help)->type_name(r.value)->allow_extra_args(false)->group(kGroup);
    else app.add_flag(std::string(r.names))->description(help)->group(kGroup);
  }
}

void apply(const CLI::App& app, const Choices& c, Invocation& inv, std::string& launcher) {
  for (const Refused& r : kRefused)
    if (app.count(long_name(r.names))) throw UsageError(fmt::format("{} : {}", as_given(app, r), r.instead));
  refuse_both(app, "--disable-cache", "--cache-capacity");
  refuse_both(app, "--no-stall-check", "--stall-check-warning-time-seconds");
  refuse_both(app, "--no-stall-check", "--stall-check", "ask for opposite things");
  refuse_both(app, "--no-timeline-mark-cycles", "--timeline-mark-cycles");
  refuse_both(app, "--network-interfaces", "--network-interface");
  refuse_both(app, "--gloo-timeout-seconds", "--start-timeout");
  refuse_both(app, "--mpi", "--gloo", "choose how the ranks start");
  refuse_both(app, "--mpi", "--launcher", "choose how the ranks start");
  LaunchOptions& L = inv.launch;
  if (c.disable_cache) L.cache_capacity = 0;
  if (c.no_stall_check) L.stall_check_warning_s = 0;
  if (c.mpi) launcher = "mpirun";
  if (c.gloo_timeout_s) L.start_timeout_s = c.gloo_timeout_s;
  if (c.network_interfaces) {
    if (c.network_interfaces->find(',') != std::string::npos)
      throw UsageError(fmt::format("--network-interfaces {} : ringrun uses one interface; give one of them",
                                   *c.network_interfaces));
    L.network_interface = c.network_interfaces;
  }
  if (c.prefix_timestamp) inv.supervisor.timestamp_output = true;
  if (c.mpi_args) apply_mpi_args(*c.mpi_args, launcher, L);
  if (c.ssh_port) L.ssh_args.insert(L.ssh_args.end(), {"-p", std::to_string(*c.ssh_port)});
  if (c.ssh_identity_file) {
    const std::string& key = *c.ssh_identity_file;
    // Open MPI splits plm_rsh_args at white space: a path with a space would reach ssh in pieces.
    if (key.find_first_of(" \t\n") != std::string::npos)
      throw UsageError(fmt::format("-i/--ssh-identity-file {} : mpirun cannot pass a key path with white space to "
                                   "ssh; name the key in ~/.ssh/config (IdentityFile) instead", key));
    if (::access(key.c_str(), R_OK) != 0)
      throw UsageError(fmt::format("-i/--ssh-identity-file {} : no readable file there; give the private key ssh "
                                   "uses for the -H hosts", key));
    L.ssh_args.insert(L.ssh_args.end(), {"-i", key});
  }
  auto note = [&inv](const std::string& option, const std::string& why) {
    inv.notes.push_back(fmt::format("ringrun: {} (horovodrun's) changes nothing here: {}", option, why));
  };
  if (c.gloo) note("--gloo", "ringrun's own launch and runtime play Gloo's part");
  if (c.log_level) note("--log-level " + *c.log_level, "the runtime logs warnings and errors");
  for (const auto& [name, why] : kAlreadyDone)
    if (app.count(name)) note(name, why);
  if (app.count("--num-nccl-streams")) note("--num-nccl-streams", "ringrun's NCCL transport keeps its own streams");
  if (app.count("--thread-affinity")) note("--thread-affinity", "the engine's thread runs on the rank's own cores");
}

}  // namespace ringrun::cli_horovodrun
