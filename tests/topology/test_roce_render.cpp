// The RoCE GID index from fixture sysfs trees, cpu lists, and the `ringrun topo` renderers.
#include <doctest/doctest.h>

#include "fixtures.hpp"

using namespace ringrun::topology;
using namespace ringrun::topology::test;

TEST_CASE("roce_gid_index: the first valid IPv4-mapped RoCE v2 GID with a netdev") {
  // Entries 0/1: link-local v1/v2; 2: IPv4 v1; 3: IPv4 v2 without netdev (stale); 4: IPv4 v2.
  CHECK(roce_gid_index(data_path("sysfs-roce-v2"), "mlx5_0", 1) == 4);
}

TEST_CASE("roce_gid_index: nothing for RoCE v1 only, InfiniBand, or a missing HCA/port") {
  CHECK_FALSE(roce_gid_index(data_path("sysfs-roce-v1"), "mlx5_0", 1).has_value());
  // The IB tree even holds an IPv4-mapped "RoCE v2" entry: the link layer decides first.
  CHECK_FALSE(roce_gid_index(data_path("sysfs-ib"), "mlx5_0", 1).has_value());
  CHECK_FALSE(roce_gid_index(data_path("sysfs-roce-v2"), "mlx5_9", 1).has_value());
  CHECK_FALSE(roce_gid_index(data_path("sysfs-roce-v2"), "mlx5_0", 2).has_value());
  CHECK_FALSE(roce_gid_index(data_path("no-such-sysfs"), "mlx5_0", 1).has_value());
}

TEST_CASE("format_cpulist and parse_cpulist") {
  CHECK(format_cpulist({}) == "");
  CHECK(format_cpulist({3}) == "3");
  CHECK(format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpulist({11, 10, 3, 3, 2}) == "2-3,10-11");
  CHECK(parse_cpulist("0-3,8,10-11") == std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpulist("") == std::vector<unsigned>{});
  CHECK(parse_cpulist("5,1-2,2") == std::vector<unsigned>{1, 2, 5});
  for (const char* bad : {"1-", "a", "3-1", "1,,2", "1,", "1 2"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_cpulist(bad), std::invalid_argument);
  }
  try {
    parse_cpulist("0-3,x");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("column 5") != std::string::npos);
  }
}

TEST_CASE("to_string(NicDistance)") {
  CHECK(std::string(to_string(NicDistance::same_pci_switch)) == "same_pci_switch");
  CHECK(std::string(to_string(NicDistance::across_packages)) == "across_packages");
}

TEST_CASE("render_topology_table: one row per GPU with its closest usable NIC, then the slots") {
  const Topology t = load_fixture("jsc-juwels-booster-4xa100-4xhdr.xml");
  const auto slots = plan_node(t, 2, {});
  const std::string table = render_topology_table(t, &slots);
  CHECK(table.find("0000:03:00.0") != std::string::npos);
  CHECK(table.find("18-23,66-71") != std::string::npos);
  CHECK(table.find("same_pci_switch") != std::string::npos);
  CHECK(table.find("NCCL_IB_HCA==mlx5_1:1") != std::string::npos);
  CHECK(render_topology_table(t).find("RANK") == std::string::npos);

  // Tioga: GPU 4's nearest netdev is the Ethernet ens2, but the table names the Slingshot NIC the
  // plan gives it.
  const Topology tioga = load_fixture("hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml");
  const std::string tioga_table = render_topology_table(tioga);
  CHECK(tioga_table.find("ens2           ethernet") != std::string::npos);
  CHECK(tioga_table.find("rsmi4      0      0-7,64-71                hsi2") != std::string::npos);
}

TEST_CASE("topology_to_json: GPUs, NICs and slots") {
  const Topology t = load_fixture("llnl-pascal-2xp100-1xib.xml");
  const auto slots = plan_node(t, 2, {});
  const std::string json = topology_to_json(t, &slots);
  CHECK(json.front() == '{');
  CHECK(json.back() == '}');
  CHECK(json.find(R"("bus_id":"0000:04:00.0")") != std::string::npos);
  CHECK(json.find(R"("closest_nic":"mlx5_0","distance":"same_pci_switch")") != std::string::npos);
  CHECK(json.find(R"("env":{"NCCL_IB_HCA":"=mlx5_0:1"})") != std::string::npos);
  CHECK(json.find(R"("cpus":"0-8,36-44")") != std::string::npos);
  CHECK(topology_to_json(t).find("slots") == std::string::npos);
}
