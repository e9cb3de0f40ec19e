// Inputs that would expand past a limit are refused before anything is allocated.
#include <doctest/doctest.h>

#include <chrono>

#include "ringrun/slurm.hpp"

using namespace ringrun;

TEST_CASE("a hostlist past the limit is refused from its count, before any name is built") {
  // 65536^3 names: building them would take days and terabytes; refusing takes microseconds.
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(expand_hostlist("n[0-65535]x[0-65535]y[0-65535]", 1'000'000, "SLURM_JOB_NODELIST"),
                       doctest::Contains("expands to more than 1000000 host names"), InputError);
  CHECK_THROWS_AS(expand_hostlist("a[1-600000],b[1-600000]"), InputError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(expand_hostlist("a[1-20]b[1-50000]").size() == 1'000'000);
  CHECK_THROWS_AS(expand_task_counts("1(x1000001)", "SLURM_TASKS_PER_NODE"), InputError);
}

TEST_CASE("RINGRUN_MAX_HOSTLIST sets the limit for the SLURM environment") {
  Environment env{{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-20]"}, {"SLURM_TASKS_PER_NODE", "1(x20)"}};
  CHECK(max_hostlist_names(env) == 1'000'000);
  CHECK(allocation_from_slurm_env(env)->hosts.size() == 20);
  env["RINGRUN_MAX_HOSTLIST"] = "10";
  CHECK(max_hostlist_names(env) == 10);
  CHECK_THROWS_WITH_AS(allocation_from_slurm_env(env), doctest::Contains("expands to more than 10 host names"),
                       InputError);
  env["SLURM_JOB_NODELIST"] = "n[1-5]";
  env["SLURM_TASKS_PER_NODE"] = "1(x20)";
  CHECK_THROWS_WITH_AS(allocation_from_slurm_env(env), doctest::Contains("more than 10 counts"), InputError);
  for (const char* bad : {"0", "-1", "lots", "10x"}) {
    env["RINGRUN_MAX_HOSTLIST"] = bad;
    CHECK_THROWS_WITH_AS(max_hostlist_names(env), doctest::Contains("RINGRUN_MAX_HOSTLIST"), InputError);
  }
  env["RINGRUN_MAX_HOSTLIST"] = "";  // empty is unset, as for every variable: the default
  CHECK(max_hostlist_names(env) == 1'000'000);
}

TEST_CASE("GPU counts from the SLURM environment are bounded and do not overflow") {
  Environment env{{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "2147483647"},
                  {"SLURM_GPUS_PER_TASK", "1"}};
  // Found by fuzz_slurm_plan: 1 GPU per task x INT_MAX tasks built 2^31 GPU ids (8+ GiB).
  CHECK_THROWS_WITH_AS(allocation_from_slurm_env(env), doctest::Contains("GPUs on one node"), InputError);
  env.erase("SLURM_GPUS_PER_TASK");
  env["SLURM_GPUS_ON_NODE"] = "2000000000";
  CHECK_THROWS_WITH_AS(allocation_from_slurm_env(env), doctest::Contains("SLURM_GPUS_ON_NODE"), InputError);
  env.erase("SLURM_GPUS_ON_NODE");
  env["SLURM_JOB_NODELIST"] = "n[1-2]";
  env["SLURM_TASKS_PER_NODE"] = "2147483647(x2)";
  CHECK(allocation_from_slurm_env(env)->total_slots() == 2147483647);  // saturates, no overflow
}
