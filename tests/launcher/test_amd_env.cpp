// The environment of ranks on AMD nodes, planned from the real MI250X (Tioga) and MI300A
// (Tuolumne) exports: ROCR_VISIBLE_DEVICES in ROCr's numbering (never CUDA_*), the inherited
// ROCR_VISIBLE_DEVICES list respected, HIP-level lists renumbered to the rank's own devices, and the
// NCCL variables RCCL reads as on NVIDIA nodes.
#include "plan/device_env.hpp"

#include <ringrun/plan.hpp>

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>

using namespace ringrun;

namespace {

topology::Topology load(const std::string& name) {
  return topology::load_xml(std::string(RINGRUN_SOURCE_DIR) + "/tests/data/topology/hwloc/" + name);
}

const std::string kTioga = "hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml";
const std::string kTuolumne = "hpe-ex255a-tuolumne-4xmi300a-cpx.xml";

// One host with `topo`, -np np, the GPU lists inherited from `env` as ringrun reads them.
Plan plan_for(const topology::Topology& topo, int np, const Environment& env = {},
              std::vector<std::string> env_args = {}, int gpus_per_rank = 1) {
  LaunchOptions o;
  o.num_proc = np;
  o.node.gpus_per_rank = gpus_per_rank;
  o.launcher = LauncherKind::local;
  o.program = {"train"};
  o.network_interface = "hsn0";
  o.env_args = std::move(env_args);
  inherit_visible_gpus(env, o.node);
  PlanInputs in;
  in.allocation = parse_hosts_flag("n1:" + std::to_string(np));
  in.launcher_env = env;
  in.master_addr = "n1";
  in.master_port = 29500;
  in.store_addr = "n1:4000";
  in.job_secret = std::string(64, 'a');
  in.node_layout = [&topo, node = o.node](std::size_t, int local_size) {
    return topology::plan_node(topo, local_size, node);
  };
  return make_plan(in, o);
}

std::string env_of(const RankSlot& r, const std::string& name) {
  return r.env.value_of(name).value_or("<unset>");
}

}  // namespace

TEST_CASE("AMD env: MI250X, one rank per GCD with ROCR_VISIBLE_DEVICES, its cores and NIC, no CUDA_*") {
  const topology::Topology topo = load(kTioga);
  const Plan p = plan_for(topo, 8);
  REQUIRE(p.ranks.size() == 8);
  const char* cpus[] = {"48-55,112-119", "56-63,120-127", "16-23,80-87", "24-31,88-95",
                        "0-7,64-71",     "8-15,72-79",    "32-39,96-103", "40-47,104-111"};
  for (const RankSlot& r : p.ranks) {
    CAPTURE(r.rank);
    const auto i = static_cast<std::size_t>(r.rank);
    CHECK(r.gpu == std::to_string(r.rank));
    CHECK(env_of(r, "ROCR_VISIBLE_DEVICES") == std::to_string(r.rank));
    CHECK(env_of(r, "CUDA_VISIBLE_DEVICES") == "<unset>");
    CHECK(env_of(r, "CUDA_DEVICE_ORDER") == "<unset>");
    CHECK(env_of(r, "HIP_VISIBLE_DEVICES") == "<unset>");
    CHECK(topology::format_cpulist(r.cpus) == cpus[i]);
    CHECK(env_of(r, "OMP_NUM_THREADS") == "16");
    CHECK(r.nic == fmt::format("hsi{}", i / 2));
    CHECK(env_of(r, "NCCL_SOCKET_IFNAME") == "=hsn0");  // RCCL reads NCCL_* as NCCL does
    CHECK(env_of(r, "NCCL_IB_HCA") == "<unset>");         // Slingshot: no verbs HCA
  }
  const std::string json = plan_to_json(p);
  CHECK(json.find(R"("gpu": "4", "cpus": "0-7,64-71", "nic": "hsi2")") != std::string::npos);
  CHECK(json.find(R"("ROCR_VISIBLE_DEVICES": "4")") != std::string::npos);
  CHECK(json.find("CUDA_VISIBLE_DEVICES") == std::string::npos);
}

TEST_CASE("AMD env: MI300A CPX, 24 ranks with ROCR_VISIBLE_DEVICES 0..23, six per APU and NIC") {
  const topology::Topology topo = load(kTuolumne);
  const Plan p = plan_for(topo, 24);
  REQUIRE(p.ranks.size() == 24);
  for (const RankSlot& r : p.ranks) {
    CAPTURE(r.rank);
    const int apu = r.rank / 6;
    CHECK(env_of(r, "ROCR_VISIBLE_DEVICES") == std::to_string(r.rank));
    CHECK(env_of(r, "CUDA_VISIBLE_DEVICES") == "<unset>");
    CHECK(r.nic == fmt::format("hsi{}", apu));
    CHECK(topology::format_cpulist(r.cpus) ==
          fmt::format("{}-{},{}-{}", 4 * r.rank, 4 * r.rank + 3, 96 + 4 * r.rank, 96 + 4 * r.rank + 3));
    CHECK(r.numa_nodes == std::vector<int>{apu});
  }
}

TEST_CASE("AMD env: the inherited ROCR_VISIBLE_DEVICES list gives each rank one of its ids") {
  const topology::Topology topo = load(kTioga);
  // Slurm's gres/gpu for AMD (AutoDetect=rsmi): the job's GCDs 4-7, NUMA nodes 0 and 2.
  const Plan p = plan_for(topo, 4, {{"ROCR_VISIBLE_DEVICES", "4,5,6,7"}});
  const char* cpus[] = {"0-7,64-71", "8-15,72-79", "32-39,96-103", "40-47,104-111"};
  for (const RankSlot& r : p.ranks) {
    CAPTURE(r.rank);
    const auto i = static_cast<std::size_t>(r.rank);
    CHECK(env_of(r, "ROCR_VISIBLE_DEVICES") == std::to_string(4 + r.rank));
    CHECK(topology::format_cpulist(r.cpus) == cpus[i]);
    CHECK(r.nic == (r.rank < 2 ? "hsi2" : "hsi3"));
  }
  CHECK_THROWS_AS(plan_for(topo, 5, {{"ROCR_VISIBLE_DEVICES", "4,5,6,7"}}), InputError);
}

TEST_CASE("AMD env: inherited HIP-level lists are renumbered to the rank's own devices; -x wins") {
  const topology::Topology topo = load(kTioga);
  // Slurm's default gres flags set all three lists to the same node-wide ids; HIP applies
  // CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL after ROCr, where only the rank's GCD is left.
  const Environment slurm = {{"ROCR_VISIBLE_DEVICES", "4,5,6,7"},
                             {"CUDA_VISIBLE_DEVICES", "4,5,6,7"},
                             {"GPU_DEVICE_ORDINAL", "4,5,6,7"}};
  const Plan p = plan_for(topo, 4, slurm);
  for (const RankSlot& r : p.ranks) {
    CHECK(env_of(r, "ROCR_VISIBLE_DEVICES") == std::to_string(4 + r.rank));
    CHECK(env_of(r, "CUDA_VISIBLE_DEVICES") == "0");
    CHECK(env_of(r, "GPU_DEVICE_ORDINAL") == "0");
    CHECK(env_of(r, "HIP_VISIBLE_DEVICES") == "<unset>");
    CHECK(env_of(r, "CUDA_DEVICE_ORDER") == "<unset>");
  }
  // Only HIP_VISIBLE_DEVICES set: it is the list (HIP and ROCr number alike without ROCr's list).
  const Plan hip = plan_for(topo, 2, {{"HIP_VISIBLE_DEVICES", "6,7"}});
  CHECK(env_of(hip.ranks[1], "ROCR_VISIBLE_DEVICES") == "7");
  CHECK(env_of(hip.ranks[1], "HIP_VISIBLE_DEVICES") == "0");
  // The user's -x value is the user's choice.
  const Plan chosen = plan_for(topo, 2, slurm, {"HIP_VISIBLE_DEVICES=0"});
  CHECK(env_of(chosen.ranks[1], "HIP_VISIBLE_DEVICES") == "0");
  CHECK(env_of(chosen.ranks[1], "ROCR_VISIBLE_DEVICES") == "5");
}

TEST_CASE("AMD env: two GCDs per rank, from an inherited CUDA_VISIBLE_DEVICES (HIP reads it too)") {
  const topology::Topology topo = load(kTioga);
  const Plan p = plan_for(topo, 2, {{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}}, {}, 2);
  CHECK(env_of(p.ranks[0], "ROCR_VISIBLE_DEVICES") == "4,5");
  CHECK(env_of(p.ranks[1], "ROCR_VISIBLE_DEVICES") == "6,7");
  CHECK(env_of(p.ranks[1], "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(topology::format_cpulist(p.ranks[1].cpus) == "32-47,96-111");
}

TEST_CASE("AMD env: MI50 (Corona), ROCr ids by rsmi number and the InfiniBand HCA for RCCL") {
  const topology::Topology topo = load("llnl-corona-8xmi50-1xib.xml");
  const Plan p = plan_for(topo, 8);
  for (const RankSlot& r : p.ranks) {
    CHECK(env_of(r, "ROCR_VISIBLE_DEVICES") == std::to_string(r.rank));
    CHECK(env_of(r, "NCCL_IB_HCA") == "=mlx5_0:1");
  }
  CHECK(topology::format_cpulist(p.ranks[0].cpus) == "0-5,48-53");  // rsmi0: NUMA 0
  CHECK(topology::format_cpulist(p.ranks[4].cpus) == "24-29,72-77");  // rsmi4: NUMA 1
}

TEST_CASE("AMD env: NVIDIA nodes keep CUDA_VISIBLE_DEVICES with PCI_BUS_ID and get no ROCR_*") {
  const topology::Topology topo = load("dell-xe8640-4xh100-4xib.xml");
  const Plan p = plan_for(topo, 2, {{"ROCR_VISIBLE_DEVICES", "3"}, {"CUDA_VISIBLE_DEVICES", "2,3"}});
  CHECK(env_of(p.ranks[0], "CUDA_VISIBLE_DEVICES") == "2");
  CHECK(env_of(p.ranks[1], "CUDA_VISIBLE_DEVICES") == "3");
  CHECK(env_of(p.ranks[1], "CUDA_DEVICE_ORDER") == "PCI_BUS_ID");
  CHECK(env_of(p.ranks[1], "ROCR_VISIBLE_DEVICES") == "<unset>");
}
