// plan_node's GPU ids by vendor: AMD GPUs get ROCr's numbering (hwloc's rsmiN, not PCI bus order),
// the inherited ROCR_VISIBLE_DEVICES list is read in that numbering, and a node with NVIDIA and AMD
// GPUs plans its NVIDIA ones, numbered among themselves as CUDA numbers them.
#include <doctest/doctest.h>

#include "fixtures.hpp"

using namespace ringrun::topology;
using namespace ringrun::topology::test;
using Strings = std::vector<std::string>;

namespace {

NodeOptions visible_amd(std::vector<std::string> ids) {
  NodeOptions o;
  o.visible_amd_gpus = std::move(ids);
  return o;
}

const std::string& gpu_name(const Topology& t, const LocalSlot& slot) {
  REQUIRE(slot.gpu_index.has_value());
  return t.gpus[static_cast<size_t>(*slot.gpu_index)].name;
}

}  // namespace

TEST_CASE("plan: MI250X (Tioga), one rank per GCD, ROCr ids, the GCD's NUMA cores and Slingshot NIC") {
  const Topology t = load_fixture("hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml");
  CHECK(planned_gpu_vendor(t) == "amd");
  const auto slots = plan_node(t, 8, {});
  const Strings cpus = {"48-55,112-119", "56-63,120-127", "16-23,80-87", "24-31,88-95",
                        "0-7,64-71",     "8-15,72-79",    "32-39,96-103", "40-47,104-111"};
  for (size_t r = 0; r < 8; ++r) {
    CAPTURE(r);
    CHECK(slots[r].gpu == std::to_string(r));
    CHECK(slots[r].gpu_vendor == "amd");
    CHECK(gpu_name(t, slots[r]) == "rsmi" + std::to_string(r));
    CHECK(format_cpulist(slots[r].cpus) == cpus[r]);
    CHECK(slots[r].nic == fmt::format("hsi{}", r / 2));
  }
  // Each GCD of a package is its own PCI function.
  CHECK(t.gpus[0].bus_id == "0000:c1:00.0");
  CHECK(t.gpus[1].bus_id == "0000:c6:00.0");
}

TEST_CASE("plan: MI300A CPX (Tuolumne), six ROCr devices per APU are six ranks, ids 0..23") {
  const Topology t = load_fixture("hpe-ex255a-tuolumne-4xmi300a-cpx.xml");
  const auto slots = plan_node(t, 24, {});
  for (size_t r = 0; r < 24; ++r) {
    CAPTURE(r);
    CHECK(slots[r].gpu == std::to_string(r));
    CHECK(slots[r].gpu_vendor == "amd");
    CHECK(slots[r].nic == fmt::format("hsi{}", r / 6));
    CHECK(format_cpulist(slots[r].cpus) == fmt::format("{}-{},{}-{}", 4 * r, 4 * r + 3, 96 + 4 * r, 96 + 4 * r + 3));
  }
}

TEST_CASE("plan: Corona, AMD ids are rsmi numbers, not PCI bus order") {
  const Topology t = load_fixture("llnl-corona-8xmi50-1xib.xml");
  const auto slots = plan_node(t, 8, {});
  for (size_t r = 0; r < 8; ++r) {
    CHECK(slots[r].gpu == std::to_string(r));
    CHECK(gpu_name(t, slots[r]) == "rsmi" + std::to_string(r));
  }
  CHECK(t.gpus[static_cast<size_t>(*slots[0].gpu_index)].bus_id == "0000:63:00.0");

  SUBCASE("the inherited ROCR_VISIBLE_DEVICES list is in ROCr's numbering") {
    const auto listed = plan_node(t, 2, visible_amd(Strings{"2", "4"}));
    CHECK(listed[0].gpu == "2");
    CHECK(gpu_name(t, listed[0]) == "rsmi2");  // 0000:03:00.0, the first on the bus
    CHECK(listed[1].gpu == "4");
    CHECK(gpu_name(t, listed[1]) == "rsmi4");
    check_on_numa(t, listed[0], 0);
    check_on_numa(t, listed[1], 1);
    CHECK(usable_gpu_count(t, visible_amd(Strings{"2", "4"})) == 2);
  }
  SUBCASE("an AMD list wins over the CUDA one; the CUDA one serves when it is alone (HIP reads it)") {
    NodeOptions both = visible_amd(Strings{"5"});
    both.visible_gpus = Strings{"0", "1"};
    CHECK(plan_node(t, 1, both)[0].gpu == "5");
    CHECK(gpu_name(t, plan_node(t, 1, visible(Strings{"6"}))[0]) == "rsmi6");
  }
  SUBCASE("ids that name no GPU are given as they are, without locality") {
    const auto slots_by_uuid = plan_node(t, 1, visible_amd(Strings{"GPU-4a7c19da329a2b8c"}));
    CHECK(slots_by_uuid[0].gpu == "GPU-4a7c19da329a2b8c");
    CHECK_FALSE(slots_by_uuid[0].gpu_index.has_value());
    CHECK_THROWS_AS(plan_node(t, 3, visible_amd(Strings{"0", "1"})), std::invalid_argument);
  }
}

TEST_CASE("plan: NVIDIA fixtures keep CUDA ids in PCI bus order, and the AMD list is ignored there") {
  const Topology t = load_fixture("dell-xe8640-4xh100-4xib.xml");
  CHECK(planned_gpu_vendor(t) == "nvidia");
  const auto slots = plan_node(t, 4, visible_amd(Strings{"3"}));
  for (size_t r = 0; r < 4; ++r) {
    CHECK(slots[r].gpu == std::to_string(r));
    CHECK(slots[r].gpu_index == static_cast<int>(r));
    CHECK(slots[r].gpu_vendor == "nvidia");
  }
}

TEST_CASE("plan: a node with NVIDIA and AMD GPUs gives its NVIDIA GPUs, numbered as CUDA numbers them") {
  Topology t = load_fixture("llnl-pascal-2xp100-1xib.xml");
  // An AMD GPU first on the bus (an integrated GPU, say): CUDA does not count it.
  Gpu amd = t.gpus.front();
  amd.vendor = "amd";
  amd.name = "rsmi0";
  amd.bus_id = "0000:01:00.0";
  t.gpus.insert(t.gpus.begin(), amd);
  t.nic_distance.insert(t.nic_distance.begin(), t.nic_distance.front());
  CHECK(planned_gpu_vendor(t) == "nvidia");
  CHECK(usable_gpu_count(t, {}) == 2);
  const auto slots = plan_node(t, 2, {});
  CHECK(slots[0].gpu == "0");
  CHECK(slots[0].gpu_index == 1);
  CHECK(slots[1].gpu == "1");
  CHECK(slots[1].gpu_index == 2);
  CHECK(slots[0].gpu_vendor == "nvidia");
  CHECK_THROWS_AS(plan_node(t, 3, {}), std::invalid_argument);
}

TEST_CASE("ringrun topo: the slots name the vendor's device variable, in the table and the JSON") {
  const Topology tioga = load_fixture("hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml");
  const auto amd_slots = plan_node(tioga, 8, {});
  CHECK(render_topology_table(tioga, &amd_slots).find("hsi2           -       ROCR_VISIBLE_DEVICES=4") !=
        std::string::npos);
  CHECK(topology_to_json(tioga, &amd_slots).find(R"("gpu":"4","gpu_index":4,"gpu_variable":"ROCR_VISIBLE_DEVICES")") !=
        std::string::npos);
  const Topology pascal = load_fixture("llnl-pascal-2xp100-1xib.xml");
  const auto nvidia_slots = plan_node(pascal, 2, {});
  CHECK(render_topology_table(pascal, &nvidia_slots).find("CUDA_VISIBLE_DEVICES=1 NCCL_IB_HCA==mlx5_0:1") !=
        std::string::npos);
  const auto cpu_slots = plan_node(pascal, 1, cpu_only());
  CHECK(topology_to_json(pascal, &cpu_slots).find(R"("gpu_variable":null)") != std::string::npos);
}
