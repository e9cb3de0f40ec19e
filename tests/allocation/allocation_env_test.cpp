// allocation_from_slurm_env() on environments recorded from real Slurm jobs (tests/data/slurm),
// default_num_ranks() and parse_srun_mpi_list().
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "ringrun/slurm.hpp"

using namespace ringrun;
using Ids = std::vector<std::string>;

namespace {

// KEY=VALUE lines, '#' comments.
Environment load_env(const std::string& name) {
  const std::string path = std::string(RINGRUN_SOURCE_DIR) + "/tests/data/slurm/" + name;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  Environment env;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    REQUIRE(eq != std::string::npos);
    env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

std::string error_of(const Environment& env) {
  try {
    allocation_from_slurm_env(env);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("outside a job there is no allocation") {
  CHECK_FALSE(allocation_from_slurm_env({}).has_value());
  CHECK_FALSE(allocation_from_slurm_env({{"SLURM_JOB_NODELIST", "n[1-2]"}}).has_value());
}

TEST_CASE("srun task on one node: the step, 2 slots, no GPUs") {
  const auto a = allocation_from_slurm_env(load_env("srun-single-node-task0.env"));
  REQUIRE(a);
  CHECK(a->source == AllocationSource::slurm_env);
  CHECK(a->explicit_slots);
  CHECK(a->inside_step);
  CHECK(a->job_id == "2");
  CHECK(a->ntasks == 2);
  REQUIRE(a->hosts.size() == 1);
  CHECK(a->hosts[0].name == "vm");
  CHECK(a->hosts[0].slots == 2);
  CHECK(a->hosts[0].gpus.empty());
  CHECK(default_num_ranks(*a) == 2);
}

TEST_CASE("batch script: not a step") {
  const auto a = allocation_from_slurm_env(load_env("sbatch-single-node.env"));
  REQUIRE(a);
  CHECK_FALSE(a->inside_step);
  CHECK(a->job_id == "3");
  CHECK(a->ntasks == 2);
  REQUIRE(a->hosts.size() == 1);
  CHECK(a->hosts[0].slots == 2);
}

TEST_CASE("salloc shell: no task count, one node, -np defaults to the nodes") {
  const auto a = allocation_from_slurm_env(load_env("salloc-N1.env"));
  REQUIRE(a);
  CHECK_FALSE(a->inside_step);
  CHECK_FALSE(a->ntasks.has_value());
  REQUIRE(a->hosts.size() == 1);
  CHECK(a->hosts[0].slots == 1);
  CHECK(default_num_ranks(*a) == 1);
}

TEST_CASE("pmix step on 2 nodes with 2 GPUs each: this node's GPUs from SLURM_STEP_GPUS") {
  const auto a = allocation_from_slurm_env(load_env("srun-pmix-2node-task3.env"));
  REQUIRE(a);
  CHECK(a->inside_step);
  CHECK(a->ntasks == 4);
  REQUIRE(a->hosts.size() == 2);
  CHECK(a->hosts[0].name == "n1");
  CHECK(a->hosts[1].name == "n2");
  CHECK(a->hosts[0].slots == 2);
  CHECK(a->hosts[1].slots == 2);
  CHECK(a->hosts[1].gpus == Ids{"0", "1"});  // SLURMD_NODENAME=n2
  CHECK(a->hosts[0].gpus.empty());           // no SLURM_GPUS_PER_NODE: unknown
}

TEST_CASE("batch of -N2 --gpus-per-node=4: SLURM_JOB_GPUS here, the same ids on the other node") {
  const auto a = allocation_from_slurm_env(load_env("sbatch-2node-4gpu.env"));
  REQUIRE(a);
  CHECK_FALSE(a->inside_step);
  REQUIRE(a->hosts.size() == 2);
  CHECK(a->hosts[0].slots == 4);
  CHECK(a->hosts[0].gpus == Ids{"0", "1", "2", "3"});
  CHECK(a->hosts[1].gpus == Ids{"0", "1", "2", "3"});
  CHECK(a->total_slots() == 8);
  CHECK(default_num_ranks(*a) == 8);
}

TEST_CASE("a real site's srun task (hpx #692): step on one node without SLURMD_NODENAME") {
  const auto a = allocation_from_slurm_env(load_env("hpx-srun-N1-n4.env"));
  REQUIRE(a);
  CHECK(a->inside_step);
  REQUIRE(a->hosts.size() == 1);
  CHECK(a->hosts[0].name == "t-cn0117");
  CHECK(a->hosts[0].slots == 4);
}

TEST_CASE("which GPU variable wins") {
  Environment env{{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "g[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"},
                  {"SLURMD_NODENAME", "g2"}};
  auto gpus = [&](const Environment& e) { return allocation_from_slurm_env(e)->hosts[1].gpus; };
  env["SLURM_GPUS_ON_NODE"] = "2";
  CHECK(gpus(env) == Ids{"0", "1"});
  env["CUDA_VISIBLE_DEVICES"] = "1";  // narrowed to one task by --gpu-bind
  CHECK(gpus(env) == Ids{"1"});
  env["SLURM_JOB_GPUS"] = "2,3";
  CHECK(gpus(env) == Ids{"2", "3"});
  env["SLURM_STEP_GPUS"] = "3";
  CHECK(gpus(env) == Ids{"3"});
  env["CUDA_VISIBLE_DEVICES"] = "NoDevFiles";
  env.erase("SLURM_STEP_GPUS");
  env.erase("SLURM_JOB_GPUS");
  CHECK(gpus(env).empty());
}

TEST_CASE("other hosts' GPUs from SLURM_GPUS_PER_NODE / _PER_TASK") {
  Environment env{{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "g[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x3)"},
                  {"SLURMD_NODENAME", "g1"}, {"SLURM_JOB_GPUS", "4,5"}};
  env["SLURM_GPUS_PER_NODE"] = "gpu:a100:2";
  auto a = allocation_from_slurm_env(env);
  CHECK(a->hosts[0].gpus == Ids{"4", "5"});
  CHECK(a->hosts[2].gpus == Ids{"4", "5"});  // same count: same ids assumed
  env["SLURM_GPUS_PER_NODE"] = "3";
  a = allocation_from_slurm_env(env);
  CHECK(a->hosts[1].gpus == Ids{"0", "1", "2"});
  env.erase("SLURM_GPUS_PER_NODE");
  env["SLURM_GPUS_PER_TASK"] = "1";
  a = allocation_from_slurm_env(env);
  CHECK(a->hosts[1].gpus == Ids{"4", "5"});  // 2 tasks x 1
  CHECK(default_num_ranks(*a) == 6);         // no SLURM_NTASKS: the GPUs
  env["SLURM_GPUS_PER_NODE"] = "lots";
  CHECK(error_of(env) == "SLURM_GPUS_PER_NODE='lots' : expected a GPU count like 4 or gpu:4");
}

TEST_CASE("step variables win inside a step, job variables outside") {
  Environment env{{"SLURM_JOB_ID", "5"},
                  {"SLURM_JOB_NODELIST", "n[1-4]"},
                  {"SLURM_TASKS_PER_NODE", "2(x4)"},
                  {"SLURM_STEP_NODELIST", "n[2-3]"},
                  {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}};
  auto a = allocation_from_slurm_env(env);
  CHECK(a->hosts.size() == 4);  // no SLURM_STEP_ID: stale step variables are ignored
  env["SLURM_STEPID"] = "0";
  a = allocation_from_slurm_env(env);
  REQUIRE(a->hosts.size() == 2);
  CHECK(a->hosts[0].name == "n2");
  CHECK(a->hosts[0].slots == 1);
  env.erase("SLURM_STEP_TASKS_PER_NODE");  // incomplete step pair: the job's
  CHECK(allocation_from_slurm_env(env)->hosts.size() == 4);
}

TEST_CASE("slots fall back to SLURM_JOB_CPUS_PER_NODE; SLURM_JOBID and SLURM_NODELIST work") {
  const Environment env{{"SLURM_JOBID", "5"}, {"SLURM_NODELIST", "n[1-2]"}, {"SLURM_JOB_CPUS_PER_NODE", "40,8"}};
  const auto a = allocation_from_slurm_env(env);
  REQUIRE(a);
  CHECK(a->job_id == "5");
  CHECK(a->hosts[0].slots == 40);
  CHECK(a->hosts[1].slots == 8);
  CHECK(default_num_ranks(*a) == 2);
}

TEST_CASE("inconsistent or missing variables are errors naming them") {
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}) ==
        "SLURM_JOB_NODELIST='n[1-3]' names 3 hosts but SLURM_TASKS_PER_NODE='2(x2)' gives 2 counts; they must match");
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[3-1]"}, {"SLURM_TASKS_PER_NODE", "1"}}) ==
        "SLURM_JOB_NODELIST='n[3-1]' : invalid range at column 3");
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "2(x3"}}) ==
        "SLURM_TASKS_PER_NODE='2(x3' : missing ')' at column 4");
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_TASKS_PER_NODE", "1"}}).starts_with(
      "SLURM_JOB_ID=5 is set but SLURM_JOB_NODELIST is not"));
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n1"}}).starts_with(
      "SLURM_JOB_ID=5 is set but neither SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE is"));
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "1"},
                  {"SLURM_NTASKS", "two"}}) == "SLURM_NTASKS='two' : expected a non-negative number");
  CHECK(error_of({{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"},
                  {"SLURM_JOB_NUM_NODES", "3"}}) ==
        "SLURM_JOB_NODELIST='n[1-2]' names 2 hosts but SLURM_JOB_NUM_NODES=3; they must match");
}

TEST_CASE("default_num_ranks: tasks, else GPUs, else nodes") {
  Allocation a;
  a.hosts = {{"a", 2, {}}, {"b", 2, {}}, {"c", 2, {}}};
  CHECK(default_num_ranks(a) == 3);
  a.hosts[0].gpus = {"0", "1"};
  a.hosts[1].gpus = {"0"};
  CHECK(default_num_ranks(a) == 3);
  a.hosts[2].gpus = {"0", "1", "2"};
  CHECK(default_num_ranks(a) == 6);
  a.ntasks = 5;
  CHECK(default_num_ranks(a) == 5);
}

TEST_CASE("srun --mpi=list output") {
  // Slurm 22.05.8 on this machine, verbatim.
  const std::string v22 =
      "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
      "specific pmix plugin versions available: pmix_v4\n";
  CHECK(parse_srun_mpi_list(v22) == Ids{"pmix", "none", "cray_shasta", "pmi2", "pmix_v4"});
  // 20.x style with "srun: " prefixes
  const std::string v20 =
      "srun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: pmix_v3\nsrun: pmix\n";
  CHECK(parse_srun_mpi_list(v20) == Ids{"none", "pmi2", "pmix_v3", "pmix"});
  CHECK(parse_srun_mpi_list("srun: error: Unable to load plugin\n").empty());
  CHECK(parse_srun_mpi_list("").empty());
}
