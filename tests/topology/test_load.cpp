// Golden tests of what load_xml finds in each real machine's hwloc export (see
// tests/data/topology/hwloc and shared/fixtures/topology/README.md for what each machine is).
#include <doctest/doctest.h>

#include "fixtures.hpp"

using namespace ringrun::topology;
using namespace ringrun::topology::test;
using Strings = std::vector<std::string>;
using Ints = std::vector<int>;

TEST_CASE("load: AWS g4dn.metal, one GPU per cuda/nvml/opencl triple, EFA as OpenFabrics only") {
  const Topology t = load_fixture("aws-g4dn-metal-8xt4-efa.xml");
  CHECK(gpu_names(t) == Strings{"cuda0", "cuda1", "cuda2", "cuda3", "cuda4", "cuda5", "cuda6", "cuda7"});
  CHECK(gpu_bus_ids(t) == Strings{"0000:18:00.0", "0000:19:00.0", "0000:35:00.0", "0000:36:00.0", "0000:e7:00.0",
                                  "0000:e8:00.0", "0000:f4:00.0", "0000:f5:00.0"});
  CHECK(gpu_numa(t) == Ints{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(t.gpus[0].vendor == "nvidia");
  const Nic& efa = nic_named(t, "rdmap197s0");
  CHECK(efa.kind == "efa");
  CHECK(efa.netdevs.empty());
  CHECK(efa.bus_id == "0000:c5:00.0");
  CHECK(efa.numa_nodes == Ints{1});
  CHECK(first_active_port(efa) == 1);
  CHECK(nic_named(t, "eth0").kind == "ethernet");
  const int n = nic_index(t, "rdmap197s0");
  CHECK(t.nic_distance[0][n] == NicDistance::across_packages);
  CHECK(t.nic_distance[4][n] == NicDistance::same_numa);
  CHECK(t.cores.size() == 48);
}

TEST_CASE("load: Dell XE8640, GPU numbering not in NUMA order, dual-port HCA, down ports") {
  const Topology t = load_fixture("dell-xe8640-4xh100-4xib.xml");
  CHECK(gpu_bus_ids(t) == Strings{"0000:4e:00.0", "0000:5f:00.0", "0000:cb:00.0", "0000:db:00.0"});
  CHECK(gpu_names(t) == Strings{"cuda0", "cuda1", "cuda2", "cuda3"});
  CHECK(gpu_numa(t) == Ints{3, 1, 7, 5});
  CHECK(t.numa_nodes.size() == 8);
  CHECK(t.cores.size() == 112);
  CHECK(nic_named(t, "mlx5_0").netdevs == Strings{"hsi0"});
  CHECK(nic_named(t, "mlx5_1").netdevs == Strings{"ibs2f1"});
  CHECK(nic_named(t, "mlx5_1").bus_id == "0000:4d:00.1");
  // The export was taken with only mlx5_0's port up (Port1State 4; the others 1 = DOWN).
  CHECK(first_active_port(nic_named(t, "mlx5_0")) == 1);
  CHECK_FALSE(first_active_port(nic_named(t, "mlx5_2")).has_value());
  CHECK(nic_named(t, "eno8303").kind == "ethernet");
  CHECK(t.nic_distance[0][nic_index(t, "mlx5_0")] == NicDistance::same_pci_switch);
  CHECK(t.nic_distance[1][nic_index(t, "mlx5_2")] == NicDistance::same_pci_switch);
  // GPU 2 (NUMA 7) has no HCA on its NUMA node: the nearest is mlx5_3 on NUMA 5, same package.
  CHECK(t.nic_distance[2][nic_index(t, "mlx5_3")] == NicDistance::same_package);
  CHECK(t.nic_distance[2][nic_index(t, "mlx5_0")] == NicDistance::across_packages);
  CHECK(t.nic_distance[3][nic_index(t, "mlx5_3")] == NicDistance::same_pci_switch);
}

TEST_CASE("load: HPE EX235a Tioga, 8 MI250X GCDs over 4 NUMA nodes, Slingshot as plain netdevs") {
  const Topology t = load_fixture("hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml");
  CHECK(gpu_names(t) == Strings{"rsmi0", "rsmi1", "rsmi2", "rsmi3", "rsmi4", "rsmi5", "rsmi6", "rsmi7"});
  CHECK(gpu_numa(t) == Ints{3, 3, 1, 1, 0, 0, 2, 2});
  CHECK(t.gpus[0].vendor == "amd");
  for (const char* name : {"hsi0", "hsi1", "hsi2", "hsi3"}) {
    CHECK(nic_named(t, name).kind == "slingshot");
    CHECK(nic_named(t, name).ports.empty());
  }
  CHECK(nic_named(t, "hsi0").numa_nodes == Ints{3});
  CHECK(nic_named(t, "hsi2").numa_nodes == Ints{0});
  CHECK(t.nic_distance[0][nic_index(t, "hsi0")] == NicDistance::same_numa);
  CHECK(t.nic_distance[1][nic_index(t, "hsi0")] == NicDistance::same_host_bridge);
}

TEST_CASE("load: HPE EX255a Tuolumne CPX, six GPU OS devices per PCI function are six GPUs") {
  const Topology t = load_fixture("hpe-ex255a-tuolumne-4xmi300a-cpx.xml");
  REQUIRE(t.gpus.size() == 24);
  for (size_t g = 0; g < 24; ++g) {
    CHECK(t.gpus[g].name == "rsmi" + std::to_string(g));
    CHECK(t.gpus[g].bus_id == fmt::format("{:04x}:02:00.0", g / 6));
    CHECK(t.gpus[g].numa_nodes == Ints{static_cast<int>(g / 6)});
    CHECK(t.nic_distance[g][nic_index(t, fmt::format("hsi{}", g / 6))] == NicDistance::same_host_bridge);
  }
  CHECK(t.numa_nodes == Ints{0, 1, 2, 3});
  CHECK(t.cores.size() == 96);
  CHECK(t.cores.front().package != t.cores.back().package);  // 4 packages (APUs)
}

TEST_CASE("load: JUWELS Booster, GPUs found by PCI class only (hwloc without CUDA/NVML)") {
  const Topology t = load_fixture("jsc-juwels-booster-4xa100-4xhdr.xml");
  CHECK(gpu_bus_ids(t) == Strings{"0000:03:00.0", "0000:44:00.0", "0000:84:00.0", "0000:c4:00.0"});
  CHECK(gpu_numa(t) == Ints{3, 1, 7, 5});
  CHECK(t.gpus[0].vendor == "nvidia");
  CHECK_FALSE(t.gpus[0].name.empty());
  CHECK(t.numa_nodes.size() == 8);
  // nvidia-smi topo -mp of a JUWELS Booster node: GPU0 18-23,66-71; GPU1 6-11,54-59.
  CHECK(format_cpulist(t.gpus[0].local_cpus) == "18-23,66-71");
  CHECK(format_cpulist(t.gpus[1].local_cpus) == "6-11,54-59");
  for (int g = 0; g < 4; ++g) {
    const int n = nic_index(t, fmt::format("mlx5_{}", g));
    CHECK(t.nic_distance[g][n] == NicDistance::same_pci_switch);
    CHECK(t.nics[n].netdevs == Strings{fmt::format("ib{}", g)});
  }
}

TEST_CASE("load: LLNL Corona, rsmi numbering not in PCI order, one HCA for 8 GPUs") {
  const Topology t = load_fixture("llnl-corona-8xmi50-1xib.xml");
  CHECK(gpu_names(t) == Strings{"rsmi2", "rsmi3", "rsmi1", "rsmi0", "rsmi6", "rsmi7", "rsmi5", "rsmi4"});
  CHECK(gpu_numa(t) == Ints{0, 0, 0, 0, 1, 1, 1, 1});
  const int n = nic_index(t, "mlx5_0");
  CHECK(t.nics[n].numa_nodes == Ints{1});
  CHECK(t.nics[n].netdevs == Strings{"hsi0"});
  CHECK(t.nic_distance[0][n] == NicDistance::across_packages);
  CHECK(t.nic_distance[4][n] == NicDistance::same_numa);
  CHECK(t.nic_distance[6][n] == NicDistance::same_host_bridge);
}

TEST_CASE("load: LLNL Lassen, NUMA nodes 0 and 8, PU numbering from 8, disallowed core left out") {
  const Topology t = load_fixture("llnl-lassen-power9-4xv100-4xib.xml");
  CHECK(t.numa_nodes == Ints{0, 8});
  CHECK(gpu_numa(t) == Ints{0, 0, 8, 8});
  CHECK(gpu_bus_ids(t) == Strings{"0004:04:00.0", "0004:05:00.0", "0035:03:00.0", "0035:04:00.0"});
  CHECK(t.cores.size() == 40);
  CHECK(t.cores.front().pus == std::vector<unsigned>{8, 9, 10, 11});
  for (const auto& core : t.cores) {
    for (unsigned pu : core.pus) CHECK_FALSE((pu < 8 || (pu >= 88 && pu < 96)));
  }
  CHECK(format_cpulist(t.gpus[0].local_cpus) == "8-87");
  CHECK(format_cpulist(t.gpus[2].local_cpus) == "96-175");
  CHECK(nic_named(t, "mlx5_0").bus_id == "0003:01:00.0");
  CHECK(nic_named(t, "mlx5_3").numa_nodes == Ints{8});
}

TEST_CASE("load: LLNL Pascal, both GPUs and the HCA on NUMA 0") {
  const Topology t = load_fixture("llnl-pascal-2xp100-1xib.xml");
  CHECK(gpu_names(t) == Strings{"cuda0", "cuda1"});
  CHECK(gpu_bus_ids(t) == Strings{"0000:04:00.0", "0000:07:00.0"});
  CHECK(gpu_numa(t) == Ints{0, 0});
  const int n = nic_index(t, "mlx5_0");
  CHECK(t.nics[n].bus_id == "0000:08:00.0");
  CHECK(t.nic_distance[0][n] == NicDistance::same_pci_switch);
  CHECK(t.nic_distance[1][n] == NicDistance::same_pci_switch);
}

TEST_CASE("load: LLNL Sierra hwloc 1.x export, CPU-less GPU-memory NUMA nodes and DRM devices") {
  const Topology t = load_fixture("llnl-sierra-power9-4xv100-gpumem-hwloc1.xml");
  CHECK(gpu_names(t) == Strings{"cuda0", "cuda1", "cuda2", "cuda3"});  // card*/renderD* are not GPUs
  CHECK(t.numa_nodes == Ints{0, 8});                                   // 252-255 hold no cores
  CHECK(gpu_numa(t) == Ints{0, 0, 8, 8});
  CHECK(t.cores.size() == 44);
  for (const char* name : {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}) CHECK(nic_named(t, name).kind == "infiniband");
  CHECK(nic_named(t, "mlx5_2").netdevs == Strings{"hsi2"});
}

TEST_CASE("load: NVIDIA DGX-2 (trimmed), 16 NVML GPUs, NVSwitches are not GPUs, no NICs") {
  const Topology t = load_fixture("nvidia-dgx2-16xv100-nvswitch.xml");
  REQUIRE(t.gpus.size() == 16);
  for (size_t g = 0; g < 16; ++g) {
    CHECK(t.gpus[g].name == "nvml" + std::to_string(g));
    CHECK(t.gpus[g].numa_nodes == Ints{g < 8 ? 0 : 1});
  }
  CHECK(t.nics.empty());
  CHECK(t.cores.size() == 4);
}

TEST_CASE("load: files hwloc rejects name the file and the reason") {
  for (const std::string name : {"invalid/hwloc-3.0-version.xml", "invalid/nccl-topo-azure-ndv5.xml",
                                 "invalid/not-xml.xml", "invalid/no-such-file.xml"}) {
    CAPTURE(name);
    const std::string path = data_path(name);
    try {
      load_xml(path);
      FAIL("loaded " << path);
    } catch (const TopologyError& e) {
      const std::string what = e.what();
      CHECK(what.find(path) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("load: the reason says what the file is") {
  auto reason = [](const std::string& name) {
    try {
      load_xml(data_path(name));
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(reason("invalid/hwloc-3.0-version.xml").find("version 3.0") != std::string::npos);
  CHECK(reason("invalid/nccl-topo-azure-ndv5.xml").find("NCCL topology file") != std::string::npos);
  CHECK(reason("invalid/not-xml.xml").find("not an hwloc XML export") != std::string::npos);
  CHECK(reason("invalid/no-such-file.xml").find("no such file") != std::string::npos);
}
