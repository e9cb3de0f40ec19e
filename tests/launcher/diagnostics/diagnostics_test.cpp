// The pure diagnostics: doctor's checks from plain facts, their JSON round trip, the --all-nodes
// tables, the report's redaction and check-build's layout.
#include "doctor/doctor.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace ringrun;
using namespace ringrun::diagnostics;

namespace {

const Check& find_check(const std::vector<Check>& checks, const std::string& name) {
  auto it = std::find_if(checks.begin(), checks.end(), [&](const Check& c) { return c.name == name; });
  REQUIRE_MESSAGE(it != checks.end(), "no check named " << name);
  return *it;
}

Environment slurm_env() {
  return {{"SLURM_JOB_ID", "42"},       {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_NTASKS", "8"},        {"SLURM_JOB_GPUS", "0,1,2,3"},    {"SLURM_GPUS_ON_NODE", "4"},
          {"SLURM_GPUS_PER_NODE", "4"}, {"SLURMD_NODENAME", "n1"}};
}

}  // namespace

TEST_CASE("outside SLURM the allocation check passes and says what ringrun does instead") {
  auto checks = check_slurm({});
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].status == Status::pass);
  CHECK(checks[0].detail.find("SLURM_JOB_ID unset") != std::string::npos);
}

TEST_CASE("a coherent SLURM allocation passes every check") {
  auto checks = check_slurm(slurm_env());
  for (const auto& check : checks) CHECK_MESSAGE(check.status == Status::pass, check.name << ": " << check.detail);
  CHECK(find_check(checks, "slurm allocation").detail.find("job 42") != std::string::npos);
}

TEST_CASE("a malformed SLURM variable fails with the variable named and a fix") {
  Environment env = slurm_env();
  env["SLURM_TASKS_PER_NODE"] = "4(x2";
  auto checks = check_slurm(env);
  const Check& check = find_check(checks, "slurm allocation");
  CHECK(check.status == Status::fail);
  CHECK(check.detail.find("SLURM_TASKS_PER_NODE") != std::string::npos);
  CHECK_FALSE(check.fix.empty());
}

TEST_CASE("more tasks than GPUs on a node fails with the ntasks-per-node to request") {
  Environment env = slurm_env();
  env["SLURM_TASKS_PER_NODE"] = "8(x2)";
  env["SLURM_NTASKS"] = "16";
  const Check check = find_check(check_slurm(env), "tasks vs GPUs");
  CHECK(check.status == Status::fail);
  CHECK(check.detail.find("8 tasks but 4 GPUs") != std::string::npos);
  CHECK(check.fix.find("--ntasks-per-node=4") != std::string::npos);
}

TEST_CASE("SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES naming different counts fails") {
  Environment env = slurm_env();
  env["SLURM_STEP_ID"] = "0";
  env["SLURM_STEP_NODELIST"] = "n[1-2]";
  env["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
  env["SLURM_STEP_GPUS"] = "4,5,6,7";
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  const Check check = find_check(check_slurm(env), "GPU lists");
  CHECK(check.status == Status::fail);
  CHECK(check.detail.find("SLURM_STEP_GPUS='4,5,6,7' names 4") != std::string::npos);
  CHECK(check.detail.find("CUDA_VISIBLE_DEVICES='0,1' names 2") != std::string::npos);
  CHECK(check.fix.find("CUDA_VISIBLE_DEVICES") != std::string::npos);

  env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";  // renumbered by the cgroup: same count is coherent
  CHECK(find_check(check_slurm(env), "GPU lists").status == Status::pass);
}

TEST_CASE("duplicate hostnames in the expanded node list fail") {
  Environment env = slurm_env();
  env["SLURM_JOB_NODELIST"] = "n1,n[1-2]";
  env["SLURM_TASKS_PER_NODE"] = "4(x3)";
  env["SLURM_NTASKS"] = "12";
  auto checks = check_slurm(env);
  const Check& check = find_check(checks, "duplicate hostnames");
  CHECK(check.status == Status::fail);
  CHECK(check.detail.find("n1 (2x)") != std::string::npos);

  CHECK(check_duplicate_hostnames({"a", "b", "c"}, "hosts").status == Status::pass);
  Check repeated = check_duplicate_hostnames({"a", "b", "a", "b", "a"}, "SLURM_JOB_NODELIST");
  CHECK(repeated.status == Status::fail);
  CHECK(repeated.detail == "SLURM_JOB_NODELIST names a (3x), b (2x) more than once");
}

TEST_CASE("memlock: unlimited passes, a low limit warns when RDMA devices are present") {
  CHECK(check_memlock(std::nullopt, true).status == Status::pass);
  Check low = check_memlock(64 * 1024, true);
  CHECK(low.status == Status::warn);
  CHECK(low.detail.find("64 KiB") != std::string::npos);
  CHECK(low.fix.find("memlock unlimited") != std::string::npos);
  CHECK(check_memlock(64 * 1024, false).status == Status::pass);
}

TEST_CASE("/dev/shm: missing or Docker's 64 MiB warns") {
  CHECK(check_shm(std::nullopt).status == Status::warn);
  Check small = check_shm(64ull << 20);
  CHECK(small.status == Status::warn);
  CHECK(small.fix.find("--shm-size") != std::string::npos);
  CHECK(check_shm(16ull << 30).status == Status::pass);
}

TEST_CASE("the chosen network interface must exist, be up and not be loopback") {
  std::vector<NetInterface> interfaces = {{"eth0", "up", false}, {"eth1", "down", false}, {"lo", "unknown", true}};
  CHECK(check_network_interface(std::nullopt, interfaces).status == Status::pass);
  CHECK(check_network_interface(std::string("eth0"), interfaces).status == Status::pass);
  Check missing = check_network_interface(std::string("ib0"), interfaces);
  CHECK(missing.status == Status::fail);
  CHECK(missing.fix.find("eth0") != std::string::npos);
  CHECK(check_network_interface(std::string("lo"), interfaces).status == Status::fail);
  CHECK(check_network_interface(std::string("eth1"), interfaces).status == Status::fail);
  CHECK(check_network_interface(std::nullopt, {{"lo", "unknown", true}}).status == Status::warn);
}

TEST_CASE("NCCL_SOCKET_IFNAME excluding interfaces but not lo warns") {
  CHECK_FALSE(check_nccl_socket_ifname({}).has_value());
  CHECK_FALSE(check_nccl_socket_ifname({{"NCCL_SOCKET_IFNAME", "=eth0"}}).has_value());
  auto check = check_nccl_socket_ifname({{"NCCL_SOCKET_IFNAME", "^docker0"}});
  REQUIRE(check.has_value());
  CHECK(check->status == Status::warn);
  CHECK(check->fix.find("^docker0,lo") != std::string::npos);
  CHECK(check_nccl_socket_ifname({{"NCCL_SOCKET_IFNAME", "^docker,lo"}})->status == Status::pass);
}

TEST_CASE("RDMA ports: down ports and RoCE without an IPv4 GID warn; a stale NCCL_IB_GID_INDEX warns") {
  HostFacts facts;
  facts.rdma_ports = {{"mlx5_0", 1, "4: ACTIVE", "InfiniBand", std::nullopt},
                      {"mlx5_1", 1, "1: DOWN", "InfiniBand", std::nullopt},
                      {"mlx5_2", 1, "4: ACTIVE", "Ethernet", std::nullopt},
                      {"mlx5_3", 1, "4: ACTIVE", "Ethernet", 3}};
  auto checks = check_rdma(facts);
  CHECK(find_check(checks, "rdma mlx5_0:1").status == Status::pass);
  CHECK(find_check(checks, "rdma mlx5_1:1").status == Status::warn);
  CHECK(find_check(checks, "rdma mlx5_1:1").fix.find("NCCL_IB_HCA=^=mlx5_1") != std::string::npos);
  CHECK(find_check(checks, "rdma mlx5_2:1").status == Status::warn);
  CHECK(find_check(checks, "rdma mlx5_3:1").detail.find("GID index 3") != std::string::npos);

  facts.env["NCCL_IB_GID_INDEX"] = "3";
  facts.nccl.version = "2.23.4";
  CHECK(find_check(check_rdma(facts), "NCCL_IB_GID_INDEX").status == Status::warn);
  facts.nccl.version = "2.18.1";
  facts.env["NCCL_IB_GID_INDEX"] = "0";
  CHECK(find_check(check_rdma(facts), "NCCL_IB_GID_INDEX").fix.find("NCCL_IB_GID_INDEX=3") != std::string::npos);
}

TEST_CASE("GPUs seen fewer than allocated fails; CUDA driver missing with GPUs fails") {
  HostFacts facts;
  facts.env = slurm_env();
  facts.hostname = "n1";
  facts.gpus_seen = 3;
  Check count = check_gpu_count(facts);
  CHECK(count.status == Status::fail);
  CHECK(count.detail.find("3 GPU(s) but the allocation gives this node 4") != std::string::npos);
  facts.gpus_seen = 4;
  CHECK(check_gpu_count(facts).status == Status::pass);

  facts.cuda_driver.error = "libcuda.so.1: cannot open shared object file";
  CHECK(check_cuda_driver(facts).status == Status::fail);
  facts.gpus_seen = 0;
  CHECK(check_cuda_driver(facts).status == Status::pass);
}

TEST_CASE("srun missing inside an allocation fails; PMIx is found in srun --mpi=list") {
  HostFacts facts;
  facts.env = slurm_env();
  CHECK(check_srun(facts).status == Status::fail);
  facts.srun_path = "/usr/bin/srun";
  facts.srun_mpi_list = "MPI plugin types are...\n\tnone\n\tpmi2\n\tcray_shasta\n";
  CHECK(check_pmix(facts).status == Status::warn);
  facts.srun_mpi_list =
      "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: pmix_v4\n";
  CHECK(check_pmix(facts).status == Status::pass);
  facts.mpirun_path = "/usr/bin/mpirun";
  facts.mpirun_version = "HYDRA build details:";
  CHECK(check_mpirun(facts).status == Status::warn);
  facts.mpirun_version = "mpirun (Open MPI) 4.1.4";
  CHECK(check_mpirun(facts).status == Status::pass);
}

TEST_CASE("doctor's JSON is one array of {name, status, detail, fix} and reads back") {
  std::vector<Check> checks = {{"a \"quoted\" name", Status::pass, "tab\there", ""},
                               {"memlock", Status::warn, "64 KiB", "raise it"},
                               {"gpu count", Status::fail, "3 < 4", "drain"}};
  std::string text = checks_to_json(checks);
  CHECK(text.front() == '[');
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text.find("{\"name\": \"memlock\", \"status\": \"WARN\", \"detail\": \"64 KiB\", \"fix\": \"raise it\"}") !=
        std::string::npos);
  auto back = checks_from_json(text, "test");
  REQUIRE(back.size() == 3);
  CHECK(back[0].name == "a \"quoted\" name");
  CHECK(back[0].detail == "tab\there");
  CHECK(back[2].status == Status::fail);
  CHECK(any_failed(back));
  CHECK(checks_from_json(" [ ] ", "test").empty());
  CHECK_THROWS_AS(checks_from_json("[{\"name\": \"x\"}]", "node n3"), InputError);
  CHECK_THROWS_WITH(checks_from_json("[{\"status\": \"MAYBE\"}]", "doctor output of n3"),
                    doctest::Contains("doctor output of n3"));
}

TEST_CASE("--all-nodes tables name the failing node and nodes that share a hostname") {
  std::vector<NodeChecks> nodes = {
      {"n1", {{"hostname", Status::pass, "node", ""}, {"memlock", Status::pass, "unlimited", ""}}, ""},
      {"n2", {{"hostname", Status::pass, "node", ""}, {"gpu count", Status::fail, "3 < 4", "drain it"}}, ""},
      {"n3", {}, "no doctor output from n3"}};
  std::string text = render_node_tables(nodes);
  CHECK(text.find("== n1 ==") != std::string::npos);
  CHECK(text.find("fix: drain it") != std::string::npos);
  CHECK(text.find("nodes n1, n2 all report hostname 'node'") != std::string::npos);
  CHECK(text.find("FAIL on n2, n3; nodes share a hostname") != std::string::npos);
  CHECK(any_node_failed(nodes));

  std::vector<NodeChecks> healthy = {{"n1", {{"hostname", Status::pass, "n1", ""}}, ""},
                                     {"n2", {{"hostname", Status::pass, "n2", ""}}, ""}};
  CHECK_FALSE(any_node_failed(healthy));
  healthy[1].checks[0].detail = "n1";  // two servers named alike: the only failure
  CHECK(any_node_failed(healthy));
  CHECK(render_node_tables(healthy).find("FAIL: nodes share a hostname") != std::string::npos);
}

TEST_CASE("the report lists the relevant variables and redacts secrets") {
  CHECK(is_secret_name("RINGRUN_JOB_SECRET"));
  CHECK(is_secret_name("SLURM_AUTH_TOKEN"));
  CHECK(is_secret_name("ncclApiKey"));
  CHECK(is_secret_name("OMPI_MCA_password"));
  CHECK_FALSE(is_secret_name("SLURM_JOB_ID"));
  CHECK(is_reported_variable("NCCL_DEBUG"));
  CHECK_FALSE(is_reported_variable("HOME"));

  ReportFacts facts;
  facts.ringrun_version = "0.1.0";
  facts.os = "Debian GNU/Linux 12 (bookworm)";
  facts.env = {{"RINGRUN_JOB_SECRET", "deadbeef"}, {"NCCL_DEBUG", "INFO"}, {"HOME", "/root"},
               {"CUDA_API_KEY", "abc123"},         {"SLURM_JOB_ID", "42"}, {"AWS_SECRET_ACCESS_KEY", "zzz"}};
  std::string report = render_report(facts);
  CHECK(report.find("- ringrun: 0.1.0") != std::string::npos);
  CHECK(report.find("NCCL_DEBUG=INFO") != std::string::npos);
  CHECK(report.find("SLURM_JOB_ID=42") != std::string::npos);
  CHECK(report.find("RINGRUN_JOB_SECRET=<redacted>") != std::string::npos);
  CHECK(report.find("CUDA_API_KEY=<redacted>") != std::string::npos);
  CHECK(report.find("deadbeef") == std::string::npos);
  CHECK(report.find("abc123") == std::string::npos);
  CHECK(report.find("HOME") == std::string::npos);
  CHECK(report.find("zzz") == std::string::npos);
}

TEST_CASE("check-build and doctor: the Python binding, its module and torch, each missing one with its fix") {
  PythonBindingFacts facts;
  facts.searched = "/opt/rr/python or /opt/rr/lib/python3/dist-packages";
  facts.torch_error = "ModuleNotFoundError: No module named 'torch'";
  auto [ready, line] = python_binding_line(facts);
  CHECK_FALSE(ready);
  CHECK(line == "Python binding: the ringrun package is not in /opt/rr/python or /opt/rr/lib/python3/dist-packages, "
                "nor importable by /usr/bin/python3 (pip install . into the environment that runs the ranks, or build "
                "with python3-dev and pybind11-dev installed (the ringrun_python target))");
  CHECK(check_python_binding(facts).status == Status::warn);

  facts.package_dir = "/opt/rr/lib/python3/dist-packages";
  std::tie(ready, line) = python_binding_line(facts);
  CHECK_FALSE(ready);
  CHECK(line.find("no _ringrun*.so in /opt/rr/lib/python3/dist-packages/ringrun (build the ringrun_python target") !=
        std::string::npos);

  facts.module = "/opt/rr/lib/python3/dist-packages/ringrun/_ringrun.cpython-311-x86_64-linux-gnu.so";
  std::tie(ready, line) = python_binding_line(facts);
  CHECK_FALSE(ready);
  CHECK(line == "Python binding: ringrun.torch in /opt/rr/lib/python3/dist-packages, but /usr/bin/python3 cannot "
                "import it with torch: ModuleNotFoundError: No module named 'torch' (apt-get install python3-torch)");
  Check check = check_python_binding(facts);
  CHECK(check.status == Status::warn);
  CHECK(check.fix == "apt-get install python3-torch");

  // python3 on PATH is another interpreter (pyenv, a virtualenv) without torch; Debian's has it.
  facts.interpreter = "/root/.pyenv/shims/python3";
  facts.system_torch_version = "1.13.0a0";
  check = check_python_binding(facts);
  CHECK(check.status == Status::warn);
  CHECK(check.detail == "ringrun.torch in /opt/rr/lib/python3/dist-packages, but python3 on PATH "
                        "(/root/.pyenv/shims/python3) cannot import it with torch: ModuleNotFoundError: No module "
                        "named 'torch'; /usr/bin/python3 can (torch 1.13.0a0)");
  CHECK(check.fix == "start the ranks with /usr/bin/python3 (ringrun /usr/bin/python3 train.py), or install torch "
                     "for /root/.pyenv/shims/python3");
  facts.system_torch_version.reset();
  CHECK(check_python_binding(facts).fix ==
        "install torch for /root/.pyenv/shims/python3 (pip install torch), or start the ranks with /usr/bin/python3 "
        "after apt-get install python3-torch");

  facts.torch_version = "2.11.0";
  std::tie(ready, line) = python_binding_line(facts);
  CHECK(ready);
  CHECK(line == "Python binding: ringrun.torch in /opt/rr/lib/python3/dist-packages (torch 2.11.0, "
                "/root/.pyenv/shims/python3)");
  CHECK(check_python_binding(facts).status == Status::pass);
  facts.python_version = "3.11.7";
  CHECK(python_binding_line(facts).second == "Python binding: ringrun.torch in /opt/rr/lib/python3/dist-packages "
                                             "(torch 2.11.0, Python 3.11.7, /root/.pyenv/shims/python3)");

  // torch imports, ringrun.torch does not (a torch older than the supported range).
  facts.torch_version = "1.10.0";
  facts.binding_error = "ImportError: ringrun.torch needs torch >= 1.13, found torch 1.10.0";
  check = check_python_binding(facts);
  CHECK(check.status == Status::warn);
  CHECK(check.detail.find("does not import with torch 1.10.0") != std::string::npos);
  CHECK(check.detail.find("needs torch >= 1.13") != std::string::npos);

  // TensorFlow: missing, importable without the binding, and with it.
  CHECK_FALSE(tensorflow_binding_line(facts).first);
  facts.tensorflow_version = "2.21.0";
  facts.tensorflow_status = "ModuleNotFoundError: No module named 'ringrun.tensorflow'";
  auto [tf_ready, tf_line] = tensorflow_binding_line(facts);
  CHECK_FALSE(tf_ready);
  CHECK(tf_line.find("TensorFlow 2.21.0 imports, ringrun.tensorflow does not") != std::string::npos);
  facts.tensorflow_status = "ok";
  std::tie(tf_ready, tf_line) = tensorflow_binding_line(facts);
  CHECK(tf_ready);
  CHECK(tf_line == "TensorFlow binding: ringrun.tensorflow (TensorFlow 2.21.0, /root/.pyenv/shims/python3)");
}

TEST_CASE("check-build: checkbox layout, every unchecked box with its reason on the line") {
  BuildFacts facts;
  facts.version = "0.1.0";
  facts.runtime_library = "/opt/ringrun/lib/libringrun_runtime.so.0";
  facts.runtime_has_nccl = true;
  facts.srun_path = "/usr/bin/srun";
  facts.srun_mpi_list = "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n";
  facts.mpirun_path = "/usr/bin/mpirun";
  facts.mpirun_version = "mpirun (Open MPI) 4.1.4";
  facts.ompi_info = "                 MCA ras: slurm (MCA v2.1.0, API v2.0.0, Component v4.1.4)\n";
  facts.shm_total_bytes = 64ull << 20;
  facts.shm_free_bytes = 60ull << 20;
  facts.nccl.error = "libnccl.so.2 not found in LD_LIBRARY_PATH or /usr/local/cuda/lib64 (cannot open)";
  facts.hwloc_version = "2.9.0";
  facts.gpus = std::vector<std::string>{};
  facts.nics = std::vector<std::string>{"mlx5_0 infiniband"};
  std::string text = render_check_build(facts);
  CHECK(text.rfind("ringrun v0.1.0:\n\nAvailable APIs:\n", 0) == 0);
  CHECK(text.find("    [X] C (ringrun/ringrun.h, /opt/ringrun/lib/libringrun_runtime.so.0)\n") != std::string::npos);
  CHECK(text.find("    [ ] Python binding: the ringrun package is not in ") != std::string::npos);
  CHECK(text.find("    [X] srun (/usr/bin/srun; MPI plugins: none, pmi2, pmix)\n") != std::string::npos);
  CHECK(text.find("    [X] mpirun (/usr/bin/mpirun; mpirun (Open MPI) 4.1.4; SLURM support: yes)\n") !=
        std::string::npos);
  CHECK(text.find("    [X] Shared memory (/dev/shm: 64 MiB, 60 MiB free)\n") != std::string::npos);
  CHECK(text.find("    [ ] NCCL: libnccl.so.2 not found in LD_LIBRARY_PATH or /usr/local/cuda/lib64") !=
        std::string::npos);
  CHECK(text.find("    [ ] GPUs: none seen by hwloc") != std::string::npos);
  CHECK(text.find("    [X] NICs: 1 (mlx5_0 infiniband)\n") != std::string::npos);
  for (const char* section : {"\nAvailable launchers:\n", "\nAvailable transports:\n", "\nTopology:\n"})
    CHECK(text.find(section) != std::string::npos);

  facts.runtime_has_nccl = false;
  facts.nccl.version = "2.21.5";
  facts.nccl.path = "/usr/lib/libnccl.so.2";
  CHECK(render_check_build(facts).find("[ ] NCCL: the runtime library was built without the NCCL transport") !=
        std::string::npos);
  CHECK_FALSE(ompi_has_slurm_support("                 MCA ras: simulator (MCA v2.1.0)\n"));
}

TEST_CASE("size formatting") {
  CHECK(format_bytes(64ull << 20) == "64 MiB");
  CHECK(format_bytes(3ull << 29) == "1.5 GiB");
}

TEST_CASE("check-build without a reachable controller: PMIx support unknown until inside an allocation") {
  BuildFacts facts;
  facts.version = "0.1.0";
  facts.srun_path = "/usr/bin/srun";
  facts.srun_mpi_list_error = "srun: fatal: Could not establish a configuration source";
  std::string text = render_check_build(facts);
  CHECK(text.find("    [X] srun (/usr/bin/srun; PMIx support unknown until inside an allocation: `srun --mpi=list` "
                  "needs a reachable SLURM controller)\n") != std::string::npos);
  CHECK(text.find("fatal") == std::string::npos);
}

TEST_CASE("in an MPIJob launcher pod doctor checks the hostfile, the workers' DNS and ssh") {
  PodJobFacts f;
  f.mpijob = "MPIJob hostfile /etc/mpi/hostfile (K_MPI_JOB_ROLE=launcher): 3 hosts x 2 slots";
  f.slots = {2, 2, 2};
  f.ssh_checked = 3;
  auto checks = check_pod_job(f);
  CHECK(find_check(checks, "mpijob hostfile").status == Status::pass);
  CHECK(find_check(checks, "mpijob dns").detail == "all 3 hosts resolve");
  CHECK(find_check(checks, "mpijob ssh").detail == "ssh reaches all 3 hosts (BatchMode)");

  f.slots = {2, 4, 2};
  f.unresolved = {"job-worker-2.job.default.svc"};
  f.ssh_checked = 2;
  f.ssh_failures = {"job-worker-1.job.default.svc: Permission denied (publickey)."};
  checks = check_pod_job(f);
  CHECK(find_check(checks, "mpijob hostfile").status == Status::warn);
  const Check& dns = find_check(checks, "mpijob dns");
  CHECK(dns.status == Status::fail);
  CHECK(dns.detail == "1 of 3 hosts do not resolve: job-worker-2.job.default.svc");
  const Check& ssh = find_check(checks, "mpijob ssh");
  CHECK(ssh.status == Status::fail);
  CHECK(ssh.detail == "ssh failed on 1 of the first 2 of 3 hosts: job-worker-1.job.default.svc: Permission denied "
                      "(publickey).");
  CHECK(ssh.fix.find("/root/.ssh") != std::string::npos);
}

TEST_CASE("in a per-pod job doctor names the pod and whether pod 0 resolves; a bad contract fails") {
  PodJobFacts f;
  f.pod = "pod 1 of 3, 2 ranks each, store at job-node-0-0.job:29500";
  f.master_addr = "job-node-0-0.job";
  auto checks = check_pod_job(f);
  CHECK(find_check(checks, "pod job").detail == f.pod);
  CHECK(find_check(checks, "pod job store").status == Status::warn);
  f.master_resolves = true;
  CHECK(find_check(check_pod_job(f), "pod job store").status == Status::pass);
  PodJobFacts bad;
  bad.error = "PET_NODE_RANK='3' : this pod's index among PET_NNODES must be a whole number from 0 to 2";
  checks = check_pod_job(bad);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].status == Status::fail);
  CHECK(checks[0].detail == bad.error);
}
