// The NCCL variables of each rank, with plain data: the HCA and interface forms, the interface
// choice, the RoCE GID index rule by NCCL version, --nccl-algo/--nccl-proto validation, --tcp,
// contradictions with the user's own NCCL_* (reported, the user's value wins), --mem-bind.
#include <ringrun/plan.hpp>

#include <doctest/doctest.h>

#include "error_of.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

using namespace ringrun;

namespace {

std::string fixture(const std::string& relative) {
  return std::string(RINGRUN_SOURCE_DIR) + "/tests/data/topology/" + relative;
}

// One host with the given topology, -np np.
PlanInputs inputs_for(const topology::Topology& topo, const LaunchOptions& options) {
  PlanInputs in;
  in.allocation = parse_hosts_flag("n1:" + std::to_string(*options.num_proc));
  in.master_addr = "n1";
  in.master_port = 29500;
  in.store_addr = "n1:4000";
  in.job_secret = std::string(64, 'a');
  in.node_layout = [&topo, node = options.node](std::size_t, int local_size) {
    return topology::plan_node(topo, local_size, node);
  };
  return in;
}

LaunchOptions options(int np) {
  LaunchOptions o;
  o.num_proc = np;
  o.launcher = LauncherKind::local;
  o.program = {"train"};
  return o;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string env_of(const RankSlot& r, const std::string& name) {
  return r.env.value_of(name).value_or("<unset>");
}

const topology::Topology& juwels() {
  static const topology::Topology t = topology::load_xml(fixture("hwloc/jsc-juwels-booster-4xa100-4xhdr.xml"));
  return t;
}

}  // namespace

TEST_CASE("NCCL_IB_HCA in the exact form for each rank's closest HCA") {
  Plan plan = make_plan(inputs_for(juwels(), options(4)), options(4));
  REQUIRE(plan.ranks.size() == 4);
  for (const RankSlot& r : plan.ranks) {
    REQUIRE(r.nic);
    CHECK(env_of(r, "NCCL_IB_HCA") == "=" + *r.nic + ":1");
  }
  // Four GPUs, four HCAs: each rank its own.
  std::vector<std::string> nics;
  for (const RankSlot& r : plan.ranks) nics.push_back(*r.nic);
  std::sort(nics.begin(), nics.end());
  CHECK(std::unique(nics.begin(), nics.end()) == nics.end());
}

TEST_CASE("NCCL_SOCKET_IFNAME: --network-interface wins over the chosen interface, in the exact form") {
  LaunchOptions o = options(2);
  PlanInputs in = inputs_for(juwels(), o);
  in.chosen_interface = InterfaceChoice{"ib0", "an IPoIB interface"};
  Plan chosen = make_plan(in, o);
  CHECK(env_of(chosen.ranks[0], "NCCL_SOCKET_IFNAME") == "=ib0");
  // The local backend leaves the runtime's own default; srun/mpirun tasks get the launcher's choice.
  CHECK(env_of(chosen.ranks[0], "RINGRUN_NETWORK_INTERFACE") == "<unset>");
  o.launcher = LauncherKind::srun;
  CHECK(env_of(make_plan(in, o).ranks[1], "RINGRUN_NETWORK_INTERFACE") == "ib0");

  o.network_interface = "eth1";
  Plan given = make_plan(in, o);
  CHECK(env_of(given.ranks[1], "NCCL_SOCKET_IFNAME") == "=eth1");
  CHECK(env_of(given.ranks[1], "RINGRUN_NETWORK_INTERFACE") == "eth1");
  CHECK(std::any_of(given.notes.begin(), given.notes.end(),
                    [](const std::string& n) { return contains(n, "eth1: given by --network-interface"); }));
}

TEST_CASE("choose_network_interface: never lo, docker, veth, virbr or link-local-only; ib first, then the NIC's") {
  std::vector<NetworkInterface> interfaces = {{"lo", true, true},       {"docker0", true, true},
                                              {"veth12ab", true, true}, {"virbr0", true, true},
                                              {"eth0", true, true},     {"ens3f0", true, true},
                                              {"eth9", true, false} /* link-local only */,
                                              {"ib1", false, true} /* down */};
  auto chosen = choose_network_interface(interfaces, {});
  REQUIRE(chosen);
  CHECK(chosen->name == "eth0");
  CHECK(choose_network_interface(interfaces, {"ens3f0"})->name == "ens3f0");
  CHECK(contains(choose_network_interface(interfaces, {"ens3f0"})->reason, "NIC the topology chose"));
  interfaces.push_back({"ib0", true, true});
  CHECK(choose_network_interface(interfaces, {"ens3f0"})->name == "ib0");
  CHECK_FALSE(choose_network_interface({{"lo", true, true}, {"docker0", true, true}, {"eth9", true, false}}, {}));
}

TEST_CASE("NCCL_IB_GID_INDEX: reported always, set for NCCL < 2.21 or when asked") {
  LaunchOptions o = options(2);
  PlanInputs in = inputs_for(juwels(), o);
  Plan probe = make_plan(in, o);
  const std::string port = env_of(probe.ranks[0], "NCCL_IB_HCA").substr(1);
  in.roce_gid_indexes = {{port, 3}};

  in.nccl_version = nccl_version_code(2, 21, 5);
  Plan modern = make_plan(in, o);
  CHECK(modern.ranks[0].roce_gid_index == 3);
  CHECK(env_of(modern.ranks[0], "NCCL_IB_GID_INDEX") == "<unset>");
  CHECK(contains(plan_to_json(modern), R"("roce_gid_index": 3)"));
  CHECK(contains(plan_to_table(modern), "      3 "));
  CHECK(std::any_of(modern.notes.begin(), modern.notes.end(), [&](const std::string& n) {
    return contains(n, port + ": RoCE v2 IPv4 GID index 3; NCCL_IB_GID_INDEX not set");
  }));

  in.nccl_version = nccl_version_code(2, 18, 3);
  CHECK(env_of(make_plan(in, o).ranks[0], "NCCL_IB_GID_INDEX") == "3");
  in.nccl_version = nccl_version_code(2, 8, 4);  // old encoding: 2804
  CHECK(env_of(make_plan(in, o).ranks[0], "NCCL_IB_GID_INDEX") == "3");

  in.nccl_version.reset();  // unknown: report only
  CHECK(env_of(make_plan(in, o).ranks[0], "NCCL_IB_GID_INDEX") == "<unset>");
  o.nccl.ib_gid_index = "auto";
  CHECK(env_of(make_plan(in, o).ranks[0], "NCCL_IB_GID_INDEX") == "3");
  CHECK(env_of(make_plan(in, o).ranks[0], "RINGRUN_NCCL_IB_GID_INDEX") == "auto");
  o.nccl.ib_gid_index = "5";
  CHECK(env_of(make_plan(in, o).ranks[1], "NCCL_IB_GID_INDEX") == "5");

  // The user's own value wins.
  in.launcher_env = {{"NCCL_IB_GID_INDEX", "7"}};
  Plan user = make_plan(in, o);
  CHECK(env_of(user.ranks[0], "NCCL_IB_GID_INDEX") == "<unset>");  // the inherited 7 reaches the rank
  REQUIRE(user.warnings.size() == 1);
  CHECK(contains(user.warnings[0], "ringrun: warning: --nccl-ib-gid-index 5 but NCCL_IB_GID_INDEX=7"));

  o.nccl.ib_gid_index = "x";
  in.launcher_env.clear();
  CHECK(contains(error_of([&] { make_plan(in, o); }), "--nccl-ib-gid-index 'x' : give auto"));
}

TEST_CASE("NCCL versions print as NCCL does") {
  CHECK(format_nccl_version(22105) == "2.21.5");
  CHECK(format_nccl_version(2804) == "2.8.4");
  CHECK(nccl_version_code(2, 21, 5) == 22105);
  CHECK(nccl_version_code(2, 8, 4) == 2804);
}

TEST_CASE("--nccl-algo and --nccl-proto: checked against the found NCCL version, case-insensitive, ^ excludes") {
  CHECK_NOTHROW(validate_nccl_algo("ring,tree", nccl_version_code(2, 12, 10)));
  CHECK_NOTHROW(validate_nccl_algo("^NVLS", nccl_version_code(2, 19, 3)));
  CHECK_NOTHROW(validate_nccl_algo("Ring,PAT", std::nullopt));
  CHECK_NOTHROW(validate_nccl_algo("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
                                   nccl_version_code(2, 24, 3)));
  const std::string pat = error_of([] { validate_nccl_algo("Ring,PAT", nccl_version_code(2, 19, 3)); });
  CHECK(contains(pat, "--nccl-algo 'Ring,PAT' : 'PAT' is not a name NCCL 2.19.3 accepts"));
  CHECK(contains(pat, "Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree"));
  CHECK(contains(error_of([] { validate_nccl_algo("NVLS", nccl_version_code(2, 16, 2)); }), "'NVLS' is not"));
  CHECK(contains(error_of([] { validate_nccl_algo("NVLSTree", nccl_version_code(2, 17, 1)); }), "'NVLSTree'"));
  CHECK(contains(error_of([] { validate_nccl_algo("CollnetDirect", nccl_version_code(2, 13, 4)); }), "Collnet"));
  CHECK_NOTHROW(validate_nccl_algo("Collnet", nccl_version_code(2, 13, 4)));
  CHECK(contains(error_of([] { validate_nccl_algo("allreduce:tree", nccl_version_code(2, 21, 5)); }),
                 "needs NCCL 2.24"));
  CHECK(contains(error_of([] { validate_nccl_algo("ring,", std::nullopt); }), "'' is not a name"));

  CHECK_NOTHROW(validate_nccl_proto("ll,LL128,simple"));
  CHECK_NOTHROW(validate_nccl_proto("^LL128"));
  CHECK(contains(error_of([] { validate_nccl_proto("LL256"); }),
                 "--nccl-proto 'LL256' : 'LL256' is not a name NCCL accepts; use a comma list of LL, LL128, Simple"));

  // In the plan: set for every rank, a usage error for a bad value.
  LaunchOptions o = options(2);
  o.nccl.algo = "Ring";
  o.nccl.proto = "^LL128";
  PlanInputs in = inputs_for(juwels(), o);
  Plan plan = make_plan(in, o);
  CHECK(env_of(plan.ranks[1], "NCCL_ALGO") == "Ring");
  CHECK(env_of(plan.ranks[1], "NCCL_PROTO") == "^LL128");
  CHECK(env_of(plan.ranks[1], "RINGRUN_NCCL_ALGO") == "Ring");
  o.nccl.algo = "Rnig";
  CHECK_THROWS_AS(make_plan(in, o), InputError);
}

TEST_CASE("--tcp sets NCCL_IB_DISABLE=1 and drops the HCA; a user's NCCL_IB_DISABLE=0 is reported and kept") {
  LaunchOptions o = options(2);
  o.nccl.tcp = true;
  PlanInputs in = inputs_for(juwels(), o);
  Plan plan = make_plan(in, o);
  CHECK(env_of(plan.ranks[0], "NCCL_IB_DISABLE") == "1");
  CHECK(env_of(plan.ranks[0], "NCCL_IB_HCA") == "<unset>");
  CHECK(env_of(plan.ranks[0], "RINGRUN_TCP") == "1");
  CHECK(plan.warnings.empty());

  in.launcher_env = {{"NCCL_IB_DISABLE", "0"}};
  Plan env_plan = make_plan(in, o);
  REQUIRE(env_plan.warnings.size() == 1);
  CHECK(env_plan.warnings[0].rfind("ringrun: warning: --tcp sets NCCL_IB_DISABLE=1 but NCCL_IB_DISABLE=0 is set in "
                                   "the environment",
                                   0) == 0);
  CHECK(env_plan.warnings[0].find('\n') == std::string::npos);
  CHECK(env_of(env_plan.ranks[0], "NCCL_IB_DISABLE") == "<unset>");  // inherited 0 reaches the rank

  in.launcher_env.clear();
  o.env_args = {"NCCL_IB_DISABLE=0"};
  Plan x_plan = make_plan(in, o);
  REQUIRE(x_plan.warnings.size() == 1);
  CHECK(contains(x_plan.warnings[0], "NCCL_IB_DISABLE=0 is set by -x"));
  CHECK(env_of(x_plan.ranks[0], "NCCL_IB_DISABLE") == "0");
}

TEST_CASE("NCCL_SOCKET_IFNAME contradictions: not selecting --network-interface, ^ list without lo") {
  LaunchOptions o = options(1);
  PlanInputs in = inputs_for(juwels(), o);
  o.network_interface = "ib0";
  in.launcher_env = {{"NCCL_SOCKET_IFNAME", "^ib"}};
  Plan excluded = make_plan(in, o);
  REQUIRE(excluded.warnings.size() == 2);  // and an exclude list without lo
  CHECK(contains(excluded.warnings[0], "--network-interface ib0 but NCCL_SOCKET_IFNAME=^ib set in the environment "
                                       "does not select ib0"));
  CHECK(env_of(excluded.ranks[0], "NCCL_SOCKET_IFNAME") == "<unset>");  // the user's value stays

  for (const char* selecting : {"ib", "=ib0", "^docker,lo", "^=eth0,lo"}) {
    in.launcher_env = {{"NCCL_SOCKET_IFNAME", selecting}};
    CHECK_MESSAGE(make_plan(in, o).warnings.empty(), selecting);
  }
  in.launcher_env = {{"NCCL_SOCKET_IFNAME", "=ib01"}};
  CHECK(make_plan(in, o).warnings.size() == 1);

  o.network_interface.reset();
  in.launcher_env = {{"NCCL_SOCKET_IFNAME", "^docker"}};
  Plan no_lo = make_plan(in, o);
  REQUIRE(no_lo.warnings.size() == 1);
  CHECK(contains(no_lo.warnings[0], "NCCL_SOCKET_IFNAME=^docker set in the environment excludes some interfaces but "
                                    "not lo"));
}

TEST_CASE("--mem-bind local: the rank's NUMA nodes, for the local backend and the task shim") {
  LaunchOptions o = options(4);
  o.mem_bind_local = true;
  PlanInputs in = inputs_for(juwels(), o);
  Plan plan = make_plan(in, o);
  for (const RankSlot& r : plan.ranks) {
    REQUIRE(r.numa_nodes.size() == 1);
    CHECK(env_of(r, "RINGRUN_MEM_BIND") == "local");
    CHECK(env_of(r, "RINGRUN_MEM_BIND_NODES") == std::to_string(r.numa_nodes[0]));
  }
  CHECK(plan.ranks[0].numa_nodes != plan.ranks[1].numa_nodes);
  o.node.bind = false;
  CHECK(contains(error_of([&] { make_plan(inputs_for(juwels(), o), o); }), "--mem-bind local with --bind none"));
}

TEST_CASE("synthetic topologies: --topology synthetic:DESCRIPTION, NUMA-balanced CPU-only ranks") {
  const topology::Topology t = topology::load_xml("synthetic:pack:2 numa:4 core:16 pu:2");
  CHECK(t.cores.size() == 128);
  CHECK(t.numa_nodes.size() == 8);
  LaunchOptions o = options(4);
  o.mem_bind_local = true;
  Plan plan = make_plan(inputs_for(t, o), o);
  REQUIRE(plan.ranks.size() == 4);
  CHECK(plan.ranks[0].cpus.size() == 64);  // 32 cores, both hyperthreads
  CHECK(plan.ranks[0].numa_nodes == std::vector<int>{0, 1});
  CHECK(env_of(plan.ranks[3], "RINGRUN_MEM_BIND_NODES") == "6-7");
  CHECK(contains(error_of([] { topology::load_xml("synthetic:pack:x"); }), "hwloc rejects the synthetic description"));
}

namespace {

// `ringrun ARGS` from the build tree; its stdout.
std::string run_ringrun(const std::string& args) {
  const std::string command = std::string(RINGRUN_BINARY_DIR) + "/bin/ringrun " + args + " 2>/dev/null";
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

}  // namespace

TEST_CASE("ringrun --dry-run --json --topology: gpu, cpus, nic and NCCL_IB_HCA as the golden plans") {
  const std::string juwels_plan =
      run_ringrun("--dry-run --json --topology " + fixture("hwloc/jsc-juwels-booster-4xa100-4xhdr.xml") +
                  " -np 4 --nccl-proto LL128 -- prog");
  REQUIRE_MESSAGE(!juwels_plan.empty(), "ringrun not built in RINGRUN_BINARY_DIR/bin");
  CHECK(contains(juwels_plan, R"("gpu": "0", "cpus": "18-23,66-71", "nic": "mlx5_0", "roce_gid_index": null)"));
  for (const char* hca : {"=mlx5_0:1", "=mlx5_1:1", "=mlx5_2:1", "=mlx5_3:1"})
    CHECK(contains(juwels_plan, std::string(R"("NCCL_IB_HCA": ")") + hca + "\""));
  CHECK(contains(juwels_plan, R"("NCCL_PROTO": "LL128")"));

  const std::string dell_plan = run_ringrun("--dry-run --json --topology " +
                                            fixture("hwloc/dell-xe8640-4xh100-4xib.xml") + " -np 4 --tcp -- prog");
  CHECK(contains(dell_plan, R"("gpu": "3", "cpus": "70-83,182-195", "nic": "mlx5_0")"));
  CHECK(contains(dell_plan, R"("NCCL_IB_DISABLE": "1")"));
  CHECK_FALSE(contains(dell_plan, "NCCL_IB_HCA"));
}
