// srun gets --cpu-bind only where the cluster's TaskPlugin can bind; the TaskPlugin is
// read once per configuration (a fake scontrol counts its calls) and the srun argv follows it.
#include "backend/table.hpp"
#include "facts/srun.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace ringrun;

namespace {

void write_script(const fs::path& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  fs::permissions(path, fs::perms::owner_all);
}

// A PATH with a fake srun and a scontrol that logs each call and reports TaskPlugin=`plugin`, a
// slurm.conf, and the environment naming both. Removes its files and its cache entries.
struct FakeCluster {
  fs::path dir;
  Environment env;
  explicit FakeCluster(const std::string& plugin) {
    char tmpl[] = "/tmp/ringrun-srun-facts.XXXXXX";
    dir = ::mkdtemp(tmpl);
    write_script(dir / "srun", "exit 0\n");
    write_script(dir / "scontrol", "echo call >>'" + (dir / "calls").string() +
                                       "'\necho 'TaskPluginParam         = (null type)'\necho 'TaskPlugin              = " +
                                       plugin + "'\n");
    std::ofstream(dir / "slurm.conf") << "TaskPlugin=" << plugin << "\n";
    env = {{"PATH", dir.string() + ":/usr/bin:/bin"}, {"SLURM_CONF", (dir / "slurm.conf").string()},
           {"SLURM_CLUSTER_NAME", "facts-test"}};
  }
  int scontrol_calls() const {
    std::ifstream in(dir / "calls");
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
  }
  ~FakeCluster() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_dir(), ec)) {
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find("conf " + (dir / "slurm.conf").string()) != std::string::npos) fs::remove(e.path(), ec);
    }
    fs::remove_all(dir, ec);
  }
  static std::string cache_dir() { return "/tmp/ringrun-" + std::to_string(::getuid()); }
};

Plan two_host_plan() {
  Plan plan;
  plan.launcher = LauncherKind::srun;
  plan.command = {"/bin/true"};
  plan.world_size = 3;
  plan.hosts = {"n1", "n2"};
  for (int r = 0; r < 3; ++r) {
    RankSlot slot;
    slot.rank = r;
    slot.host_index = r < 2 ? 0 : 1;
    slot.host = plan.hosts[slot.host_index];
    plan.ranks.push_back(slot);
  }
  return plan;
}

bool has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

}  // namespace

TEST_CASE("the TaskPlugin line of scontrol show config, not TaskPluginParam") {
  CHECK(parse_task_plugin("TaskEpilog = (null)\nTaskPluginParam = (null type)\nTaskPlugin              = "
                          "task/affinity,task/cgroup\nTaskProlog = (null)\n") == "task/affinity,task/cgroup");
  CHECK(parse_task_plugin("TaskPlugin = task/none") == "task/none");
  CHECK(parse_task_plugin("TaskPluginParam = none\n").empty());
  CHECK(parse_task_plugin("").empty());
}

TEST_CASE("--cpu-bind only where the TaskPlugin can bind (srun warns under exactly task/none)") {
  CHECK_FALSE(srun_offers_cpu_bind("task/none"));
  CHECK(srun_offers_cpu_bind("task/affinity"));
  CHECK(srun_offers_cpu_bind("task/affinity,task/cgroup"));
  CHECK(srun_offers_cpu_bind(""));  // unknown: keep srun from binding what the shim pins
}

TEST_CASE("the TaskPlugin is asked once per configuration, then read from the cache") {
  FakeCluster cluster("task/none");
  CHECK(cached_slurm_task_plugin(cluster.env) == "task/none");
  CHECK(cached_slurm_task_plugin(cluster.env) == "task/none");
  CHECK(cluster.scontrol_calls() == 1);
  // An edited slurm.conf is another configuration: asked again.
  std::ofstream(cluster.dir / "slurm.conf", std::ios::app) << "# edited\n";
  CHECK(cached_slurm_task_plugin(cluster.env) == "task/none");
  CHECK(cluster.scontrol_calls() == 2);
}

TEST_CASE("no readable slurm.conf: scontrol is not started (it would wait 60 s) and the plugin is unknown") {
  FakeCluster cluster("task/none");
  cluster.env["SLURM_CONF"] = (cluster.dir / "missing.conf").string();
  CHECK(cached_slurm_task_plugin(cluster.env).empty());
  CHECK(cluster.scontrol_calls() == 0);
}

TEST_CASE("the srun argv: --cpu-bind=none under task/affinity, none under task/none") {
  const Plan plan = two_host_plan();
  LaunchOptions options;
  options.srun_mpi = "none";
  FakeCluster affinity("task/affinity");
  auto argv = make_backend(LauncherKind::srun)->command(plan, options, affinity.env);
  CHECK(has(argv, "--cpu-bind=none"));
  FakeCluster none("task/none");
  argv = make_backend(LauncherKind::srun)->command(plan, options, none.env);
  CHECK_FALSE(has(argv, "--cpu-bind=none"));
  CHECK(has(argv, "--ntasks=3"));
  CHECK(has(argv, "--nodes=2"));
}

TEST_CASE("SLURM_NTASKS_PER_NODE reaches srun only when the plan's layout matches it") {
  FakeCluster cluster("task/none");
  LaunchOptions options;
  options.srun_mpi = "none";
  auto backend = make_backend(LauncherKind::srun);
  auto env_of = [&](const Plan& plan, const std::string& per_node) {
    Environment env = cluster.env;
    env["SLURM_NTASKS_PER_NODE"] = per_node;
    backend->command(plan, options, env);
    return backend->processes(plan, env).at(0).env;
  };
  const Plan uneven = two_host_plan();  // 2 + 1 ranks
  CHECK_FALSE(has(env_of(uneven, "2"), "SLURM_NTASKS_PER_NODE=2"));
  Plan even = uneven;
  even.world_size = 4;
  RankSlot fourth = even.ranks.back();
  fourth.rank = 3;
  even.ranks.push_back(fourth);
  CHECK(has(env_of(even, "2"), "SLURM_NTASKS_PER_NODE=2"));
}
