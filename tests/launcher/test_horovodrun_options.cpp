// Every option spelling horovodrun accepts (horovod/runner/launch.py's parser, Horovod 0.28.1 and
// its head, read through the search tool): each is accepted by ringrun, mapped onto its own, or
// refused with a reason (README's horovodrun table, ringrun(1) HOROVODRUN OPTIONS). None may be
// an unknown option, so a horovodrun command line runs with its first word changed.
#include <ringrun/cli.hpp>

#include <doctest/doctest.h>

#include "error_of.hpp"

#include <string>
#include <vector>

using namespace ringrun;

namespace {

struct Spelling {
  const char* name;
  std::vector<std::string> values;  // a value it takes, as a user would type it
};

// The parser's option strings in its order (62 spellings, `-v/--version` included).
const std::vector<Spelling> kHorovodrunSpellings = {
    {"-v", {}}, {"--version", {}}, {"-np", {"2"}}, {"--num-proc", {"2"}}, {"-cb", {}}, {"--check-build", {}},
    {"--disable-cache", {}}, {"--start-timeout", {"30"}}, {"--network-interfaces", {"lo"}},
    {"--network-interface", {"lo"}}, {"--output-filename", {"/tmp/ringrun-out"}}, {"--verbose", {}},
    {"--config-file", {"horovod.yaml"}}, {"-p", {"2222"}}, {"--ssh-port", {"2222"}},
    {"-i", {RINGRUN_SOURCE_DIR "/README.md"}}, {"--ssh-identity-file", {RINGRUN_SOURCE_DIR "/README.md"}},
    {"--fusion-threshold-mb", {"32"}}, {"--cycle-time-ms", {"2"}}, {"--cache-capacity", {"512"}},
    {"--hierarchical-allreduce", {}}, {"--no-hierarchical-allreduce", {}}, {"--hierarchical-allgather", {}},
    {"--no-hierarchical-allgather", {}}, {"--torus-allreduce", {}}, {"--no-torus-allreduce", {}},
    {"--autotune", {}}, {"--no-autotune", {}}, {"--autotune-log-file", {"tune.csv"}},
    {"--autotune-warmup-samples", {"3"}}, {"--autotune-steps-per-sample", {"10"}},
    {"--autotune-bayes-opt-max-samples", {"20"}}, {"--autotune-gaussian-process-noise", {"0.8"}},
    {"--min-np", {"1"}}, {"--min-num-proc", {"1"}}, {"--max-np", {"4"}}, {"--max-num-proc", {"4"}},
    {"--slots-per-host", {"2"}}, {"--elastic-timeout", {"60"}}, {"--reset-limit", {"3"}},
    {"--blacklist-cooldown-range", {"10", "100"}}, {"--timeline-filename", {"/tmp/ringrun-tl.json"}},
    {"--timeline-mark-cycles", {}}, {"--no-timeline-mark-cycles", {}}, {"--no-stall-check", {}},
    {"--stall-check", {}}, {"--stall-check-warning-time-seconds", {"60"}},
    {"--stall-check-shutdown-time-seconds", {"120"}}, {"--mpi-threads-disable", {}},
    {"--no-mpi-threads-disable", {}}, {"--mpi-args", {"--mca btl_tcp_if_include lo"}}, {"--tcp", {}},
    {"--binding-args", {"--bind-to none"}}, {"--num-nccl-streams", {"2"}}, {"--thread-affinity", {"0"}},
    {"--gloo-timeout-seconds", {"30"}}, {"--log-level", {"DEBUG"}}, {"--log-with-timestamp", {}},
    {"--log-without-timestamp", {}}, {"-prefix-timestamp", {}}, {"--prefix-output-with-timestamp", {}},
    {"--log-hide-timestamp", {}}, {"--no-log-hide-timestamp", {}}, {"-H", {"localhost:2"}},
    {"--hosts", {"localhost:2"}}, {"-hostfile", {RINGRUN_SOURCE_DIR "/README.md"}},
    {"--hostfile", {RINGRUN_SOURCE_DIR "/README.md"}}, {"--host-discovery-script", {"./discover.sh"}},
    {"--gloo", {}}, {"--mpi", {}}, {"--jsrun", {}},
};

// The options the elastic ones need beside them, so that each is judged on its own.
std::vector<std::string> command_line(const Spelling& s) {
  std::vector<std::string> args = {"ringrun", s.name};
  args.insert(args.end(), s.values.begin(), s.values.end());
  const std::string name = s.name;
  if (name == "--slots-per-host") args.insert(args.end(), {"--host-discovery-script", "./discover.sh"});
  if (name == "--elastic-timeout" || name == "--reset-limit" || name == "--blacklist-cooldown-range")
    args.insert(args.end(), {"--min-np", "1"});
  args.push_back("true");
  return args;
}

}  // namespace

TEST_CASE("horovodrun's every option spelling is accepted, mapped or refused with a reason") {
  CHECK(kHorovodrunSpellings.size() == 71);
  for (const Spelling& s : kHorovodrunSpellings) {
    CAPTURE(s.name);
    const std::string error = error_of([&] { (void)parse_command_line(command_line(s)); });
    // Refused: one line naming the option and what to do instead, never "unknown option".
    CHECK(error.find("unknown option") == std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
    if (!error.empty()) CHECK(error.find(std::string(s.name).substr(s.name[1] == '-' ? 2 : 1)) != std::string::npos);
  }
}

TEST_CASE("horovodrun's elastic spellings: --min-num-proc, --max-num-proc, --stall-check") {
  Invocation inv = parse_command_line({"ringrun", "-np", "2", "--min-num-proc", "2", "--max-num-proc", "4", "true"});
  CHECK(inv.elastic.min_np == 2);
  CHECK(inv.elastic.max_np == 4);
  inv = parse_command_line({"ringrun", "--stall-check", "true"});
  CHECK(inv.launch.stall_check_warning_s != 0.0);
  CHECK(error_of([] { (void)parse_command_line({"ringrun", "--stall-check", "--no-stall-check", "true"}); }) ==
        "--no-stall-check and --stall-check ask for opposite things; give one of them");
  CHECK(parse_command_line({"ringrun", "--min-np", "1", "--discovery-interval", "0.01", "true"})
            .elastic.discovery_interval_s == 0.01);
  CHECK(error_of([] { (void)parse_command_line({"ringrun", "--discovery-interval", "1", "true"}); })
            .starts_with("--discovery-interval applies in elastic mode only"));
}
