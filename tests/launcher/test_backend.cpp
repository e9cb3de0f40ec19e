// The mpirun backend's command line: every variable travels by name (-x), never by value: the
// plan's shared ones, and ringrun's own environment as horovodrun passes it, less what each node
// has of its own (ringrun(1), DESCRIPTION); horovodrun's -p/-i only in mpirun's own environment.
#include "backend/table.hpp"

#include <ringrun/plan.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace ringrun;

namespace {

bool passes(const std::vector<std::string>& argv, const std::string& name) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "-x" && argv[i + 1] == name) return true;
  return false;
}

}  // namespace

TEST_CASE("mpirun: ringrun's environment reaches every host's ranks by name, less each node's own") {
  PlanInputs in;
  in.allocation = parse_hosts_flag("n1:2,n2:2");
  in.master_addr = "n1";
  in.master_port = 29500;
  in.store_addr = "n1:4000";
  in.job_secret = std::string(64, 'a');
  LaunchOptions options;
  options.num_proc = 4;
  options.launcher = LauncherKind::mpirun;
  options.program = {"train"};
  options.ssh_args = {"-p", "2222"};
  const Plan plan = make_plan(in, options);
  const Environment env = {{"PATH", "/venv/bin:/usr/bin"}, {"NCCL_DEBUG", "INFO"}, {"HOROVOD_FUSION_THRESHOLD", "1"},
                           {"CUDA_VISIBLE_DEVICES", "0,1"}, {"ROCR_VISIBLE_DEVICES", "0"}, {"SLURM_JOB_ID", "5"},
                           {"OMPI_MCA_btl", "self"}, {"PMIX_RANK", "0"}, {"BASH_FUNC_f%%", "() { :; }"},
                           {"HOSTNAME", "n1"}, {"PWD", "/home/u"}, {"_", "/usr/bin/ringrun"}};
  const auto backend = make_backend(LauncherKind::mpirun);
  const std::vector<std::string> argv = backend->command(plan, options, env);
  for (const char* name : {"PATH", "NCCL_DEBUG", "HOROVOD_FUSION_THRESHOLD", "RINGRUN_JOB_SECRET", "RINGRUN_STORE_ADDR"})
    CHECK_MESSAGE(passes(argv, name), name << " does not reach the ranks");
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "SLURM_JOB_ID", "OMPI_MCA_btl", "PMIX_RANK",
                           "BASH_FUNC_f%%", "HOSTNAME", "PWD", "_"})
    CHECK_MESSAGE(!passes(argv, name), name << " is each node's own, yet passed");
  for (const std::string& a : argv) CHECK_MESSAGE(a.find("INFO") == std::string::npos, "a value on the command line: " << a);
  CHECK(std::count(argv.begin(), argv.end(), "RINGRUN_JOB_SECRET") == 1);

  // horovodrun's --mpi-args: after ringrun's own options and names, before the task shim; the
  // same on the mpirun of each elastic member.
  options.mpirun_args = {"--mca", "btl", "self"};
  const std::vector<std::string> with_args = backend->command(plan, options, env);
  const auto mca = std::find(with_args.begin(), with_args.end(), "--mca");
  REQUIRE(mca != with_args.end());
  CHECK(std::vector<std::string>(mca, mca + 3) == options.mpirun_args);
  CHECK(*(mca - 2) == "-x");
  CHECK(mca[4] == "task");
  const std::vector<std::string> member = backend->elastic_slots(plan, env).front().argv;
  const auto member_mca = std::find(member.begin(), member.end(), "--mca");
  REQUIRE(member_mca != member.end());
  CHECK(std::vector<std::string>(member_mca, member_mca + 3) == options.mpirun_args);
  CHECK(member_mca[4] == "task");
  // Each member's mpirun has a session directory tree of its own (members start and end at once).
  std::set<std::string> session_dirs;
  for (const ProcessSpec& p : backend->elastic_slots(plan, env))
    for (const std::string& kv : p.env)
      if (kv.starts_with("OMPI_MCA_orte_top_session_dir=/tmp/ompi.ringrun.")) session_dirs.insert(kv);
  CHECK(session_dirs.size() == plan.ranks.size());
  options.mpirun_args.clear();
  const std::vector<std::string> without_args = backend->command(plan, options, env);
  CHECK(std::find(without_args.begin(), without_args.end(), "--mca") == without_args.end());

  // mpirun itself gets horovodrun's -p in OMPI_MCA_plm_rsh_args; the ranks are not sent it.
  const std::vector<ProcessSpec> processes = backend->processes(plan, env);
  REQUIRE(processes.size() == 1);
  const auto& penv = processes.front().env;
  CHECK(std::count(penv.begin(), penv.end(), "OMPI_MCA_plm_rsh_args=-p 2222") == 1);
  CHECK_FALSE(passes(argv, "OMPI_MCA_plm_rsh_args"));
}
