// plan_node on the real machines' exports: GPU per local rank, disjoint NUMA-local cpusets, the
// closest NIC (with the fallbacks the fixtures' README names) and NCCL_IB_HCA.
#include <doctest/doctest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "fixtures.hpp"

using namespace ringrun::topology;
using namespace ringrun::topology::test;
using Strings = std::vector<std::string>;

TEST_CASE("plan: every fixture, one rank per GPU, keeps cpusets disjoint and allowed") {
  for (const auto& entry : std::filesystem::directory_iterator(data_path("hwloc"))) {
    const std::string name = entry.path().filename().string();
    CAPTURE(name);
    const Topology t = load_fixture(name);
    REQUIRE_FALSE(t.gpus.empty());
    const auto slots = plan_node(t, static_cast<int>(t.gpus.size()), {});
    REQUIRE(slots.size() == t.gpus.size());
    for (size_t r = 0; r < slots.size(); ++r) {
      CHECK(slots[r].gpu == std::to_string(r));
      // Rank r has device r: CUDA's r-th in PCI bus order; for AMD, ROCr's (hwloc's rsmiN).
      const Gpu& gpu = t.gpus[static_cast<size_t>(slots[r].gpu_index.value_or(0))];
      if (gpu.vendor == "amd") CHECK(gpu.name == "rsmi" + std::to_string(r));
      else CHECK(slots[r].gpu_index == static_cast<int>(r));
    }
    check_cpusets(t, slots);
    const auto cpu_plan = plan_node(t, 3, cpu_only());
    check_cpusets(t, cpu_plan);
    for (const auto& slot : cpu_plan) {
      CHECK_FALSE(slot.gpu.has_value());
      CHECK_FALSE(slot.cpus.empty());
    }
  }
}

TEST_CASE("plan: Pascal, two ranks split NUMA 0's cores, whole cores, one HCA") {
  const Topology t = load_fixture("llnl-pascal-2xp100-1xib.xml");
  const auto slots = plan_node(t, 2, {});
  CHECK(format_cpulist(slots[0].cpus) == "0-8,36-44");
  CHECK(format_cpulist(slots[1].cpus) == "9-17,45-53");
  CHECK(slot_nics(slots) == Strings{"mlx5_0", "mlx5_0"});
  CHECK(slots[0].env.at("NCCL_IB_HCA") == "=mlx5_0:1");
  CHECK(slots[0].env.size() == 1);

  SUBCASE("more ranks than GPUs names both counts") {
    try {
      plan_node(t, 3, {});
      FAIL("no error");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("3 ranks") != std::string::npos);
      CHECK(what.find("only 2") != std::string::npos);
    }
  }
  SUBCASE("CPU-only ranks are NUMA balanced") {
    const auto cpu = plan_node(t, 4, cpu_only());
    check_on_numa(t, cpu[0], 0);
    check_on_numa(t, cpu[1], 0);
    check_on_numa(t, cpu[2], 1);
    check_on_numa(t, cpu[3], 1);
    check_cpusets(t, cpu);
    CHECK(cpu[0].cpus.size() == 18);  // 9 cores x 2 hyperthreads
  }
  SUBCASE("cpus_per_rank caps the cores") {
    const auto two_cores = plan_node(t, 2, capped(2));
    CHECK(format_cpulist(two_cores[0].cpus) == "0-1,36-37");
    CHECK(format_cpulist(two_cores[1].cpus) == "9-10,45-46");
  }
  SUBCASE("bind=false gives no cpus but still a GPU and a NIC") {
    const auto free_ranks = plan_node(t, 2, unbound());
    CHECK(free_ranks[0].cpus.empty());
    CHECK(free_ranks[1].gpu == "1");
    CHECK(free_ranks[1].nic == "mlx5_0");
  }
  SUBCASE("zero ranks") { CHECK(plan_node(t, 0, {}).empty()); }
  SUBCASE("two GPUs per rank") {
    const auto pair = plan_node(t, 1, gpus_per_rank(2));
    CHECK(pair[0].gpu == "0,1");
    CHECK_THROWS_AS(plan_node(t, 2, gpus_per_rank(2)), std::invalid_argument);
  }
}

TEST_CASE("plan: visible GPU list, the rank's GPU is an id from the list, never a raw local rank") {
  const Topology t = load_fixture("dell-xe8640-4xh100-4xib.xml");
  SUBCASE("numeric ids are topology indexes") {
    const auto slots = plan_node(t, 2, visible(Strings{"2", "3"}));
    CHECK(slots[0].gpu == "2");
    CHECK(slots[0].gpu_index == 2);
    CHECK(slots[1].gpu == "3");
    check_on_numa(t, slots[0], 7);
    check_on_numa(t, slots[1], 5);
    CHECK(slots[0].cpus.size() == 28);  // all 14 cores of NUMA 7
  }
  SUBCASE("more ranks than listed GPUs") {
    CHECK_THROWS_AS(plan_node(t, 3, visible(Strings{"2", "3"})), std::invalid_argument);
  }
  SUBCASE("UUIDs: given as they are, cores planned as for CPU-only ranks") {
    const auto slots = plan_node(t, 2, visible(Strings{"GPU-aa", "GPU-bb"}));
    CHECK(slots[0].gpu == "GPU-aa");
    CHECK_FALSE(slots[0].gpu_index.has_value());
    CHECK_FALSE(slots[0].cpus.empty());
    check_cpusets(t, slots);
  }
  SUBCASE("an empty list means no GPU to give: CPU-only") {
    const auto slots = plan_node(t, 2, visible(Strings{}));
    CHECK_FALSE(slots[0].gpu.has_value());
  }
}

TEST_CASE("plan: XE8640, a NIC with its port down is never chosen; with all ports up, nvml2 falls back") {
  Topology t = load_fixture("dell-xe8640-4xh100-4xib.xml");
  const auto as_exported = plan_node(t, 4, {});
  CHECK(slot_nics(as_exported) == Strings{"mlx5_0", "mlx5_0", "mlx5_0", "mlx5_0"});
  for (const auto& slot : as_exported) CHECK(slot.env.at("NCCL_IB_HCA") == "=mlx5_0:1");
  check_on_numa(t, as_exported[0], 3);
  check_on_numa(t, as_exported[2], 7);

  for (auto& nic : t.nics) {
    for (auto& state : nic.port_states) state = 4;
  }
  const auto all_up = plan_node(t, 4, {});
  // GPU 2 (NUMA 7) has no HCA on its node: mlx5_3 (NUMA 5, same package) rather than one across
  // packages; GPU 0's two equally close HCA functions are spread over ranks (only one rank here).
  CHECK(slot_nics(all_up) == Strings{"mlx5_0", "mlx5_2", "mlx5_3", "mlx5_3"});
  CHECK(all_up[2].env.at("NCCL_IB_HCA") == "=mlx5_3:1");
}

TEST_CASE("plan: g4dn, every GPU uses the single EFA, no NCCL_IB_HCA for EFA") {
  const Topology t = load_fixture("aws-g4dn-metal-8xt4-efa.xml");
  const auto slots = plan_node(t, 8, {});
  for (size_t r = 0; r < 8; ++r) {
    CHECK(slots[r].nic == "rdmap197s0");
    CHECK(slots[r].env.empty());
    check_on_numa(t, slots[r], r < 4 ? 0 : 1);
    CHECK(slots[r].cpus.size() == 12);  // 24 cores of the NUMA node / 4 ranks, 2 PUs each
  }
}

TEST_CASE("plan: Corona, one HCA for all 8 GPUs") {
  const Topology t = load_fixture("llnl-corona-8xmi50-1xib.xml");
  const auto slots = plan_node(t, 8, {});
  CHECK(slot_nics(slots) == Strings(8, "mlx5_0"));
  for (size_t r = 0; r < 8; ++r) check_on_numa(t, slots[r], r < 4 ? 0 : 1);
  check_cpusets(t, slots);
}

TEST_CASE("plan: Tioga and Tuolumne, Slingshot NIC of the GPU's NUMA node, no NCCL variables") {
  SUBCASE("Tioga") {
    const Topology t = load_fixture("hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml");
    const auto slots = plan_node(t, 8, {});
    CHECK(slot_nics(slots) == Strings{"hsi0", "hsi0", "hsi1", "hsi1", "hsi2", "hsi2", "hsi3", "hsi3"});
    CHECK(format_cpulist(slots[0].cpus) == "48-55,112-119");
    CHECK(format_cpulist(slots[1].cpus) == "56-63,120-127");
    for (const auto& slot : slots) CHECK(slot.env.empty());
  }
  SUBCASE("Tuolumne CPX, 6 ranks per APU and per NIC") {
    const Topology t = load_fixture("hpe-ex255a-tuolumne-4xmi300a-cpx.xml");
    const auto slots = plan_node(t, 24, {});
    for (size_t r = 0; r < 24; ++r) {
      CHECK(slots[r].nic == fmt::format("hsi{}", r / 6));
      check_on_numa(t, slots[r], static_cast<int>(r / 6));
      CHECK(slots[r].cpus.size() == 8);  // 4 cores x 2
    }
    check_cpusets(t, slots);
  }
}

TEST_CASE("plan: Lassen and Sierra, dual-port HCAs spread over the two GPUs of a socket") {
  for (const char* name : {"llnl-lassen-power9-4xv100-4xib.xml", "llnl-sierra-power9-4xv100-gpumem-hwloc1.xml"}) {
    CAPTURE(name);
    const Topology t = load_fixture(name);
    const auto slots = plan_node(t, 4, {});
    CHECK(slot_nics(slots) == Strings{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"});
    CHECK(slots[1].env.at("NCCL_IB_HCA") == "=mlx5_1:1");
    check_on_numa(t, slots[0], 0);
    check_on_numa(t, slots[3], 8);
    check_cpusets(t, slots);
  }
  const auto lassen = plan_node(load_fixture("llnl-lassen-power9-4xv100-4xib.xml"), 4, {});
  CHECK(format_cpulist(lassen[0].cpus) == "8-47");
  CHECK(format_cpulist(lassen[2].cpus) == "96-135");
}

TEST_CASE("plan: JUWELS Booster, each GPU's own HCA; CPU-only ranks take the HCA of their NUMA node") {
  const Topology t = load_fixture("jsc-juwels-booster-4xa100-4xhdr.xml");
  const auto slots = plan_node(t, 4, {});
  CHECK(slot_nics(slots) == Strings{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"});
  CHECK(format_cpulist(slots[0].cpus) == "18-23,66-71");
  const auto cpu = plan_node(t, 8, cpu_only());
  check_cpusets(t, cpu);
  check_on_numa(t, cpu[3], 3);
  CHECK(cpu[3].nic == "mlx5_0");  // NUMA 3 holds mlx5_0
  CHECK(cpu[1].nic == "mlx5_1");
}

TEST_CASE("plan: DGX-2 trimmed to 4 PUs, fewer PUs than ranks on a NUMA node leaves ranks unbound") {
  const Topology t = load_fixture("nvidia-dgx2-16xv100-nvswitch.xml");
  const auto two = plan_node(t, 2, {});  // GPUs 0 and 1, NUMA 0 has 2 cores
  CHECK(two[0].cpus.size() == 1);
  CHECK(two[1].cpus.size() == 1);
  check_cpusets(t, two);
  CHECK_FALSE(two[0].nic.has_value());
  const auto all = plan_node(t, 16, {});
  for (const auto& slot : all) CHECK(slot.cpus.empty());
}

TEST_CASE("plan: a NUMA node with fewer cores than its GPU ranks borrows cores of GPU-less nodes") {
  Topology t = load_fixture("jsc-juwels-booster-4xa100-4xhdr.xml");
  // Shrink NUMA 3 (GPU 0's node) to 1 core; GPUs 0 and 1 both there, 2 ranks.
  std::vector<Core> cores;
  bool kept = false;
  for (const auto& core : t.cores) {
    if (core.numa == 3 && kept) continue;
    kept = kept || core.numa == 3;
    cores.push_back(core);
  }
  t.cores = cores;
  t.gpus[1].numa_nodes = {3};
  const auto slots = plan_node(t, 2, {});
  check_cpusets(t, slots);
  CHECK_FALSE(slots[0].cpus.empty());
  CHECK_FALSE(slots[1].cpus.empty());
}

TEST_CASE("plan: live topology of this machine, CPU-only ranks get disjoint non-empty cpusets") {
  const Topology t = load_live();
  CHECK(t.origin == "live");
  REQUIRE_FALSE(t.cores.empty());
  size_t pus = 0;
  for (const auto& core : t.cores) pus += core.pus.size();
  const int ranks = static_cast<int>(std::min<size_t>(pus, 2));
  const auto slots = plan_node(t, ranks, cpu_only());
  for (const auto& slot : slots) CHECK_FALSE(slot.cpus.empty());
  check_cpusets(t, slots, pus >= 2 * t.cores.size());
}

TEST_CASE("bind_to_cpus: a rank's sched_getaffinity matches its planned cpus (live, in a child process)") {
  const Topology t = load_live();
  size_t pus = 0;
  for (const auto& core : t.cores) pus += core.pus.size();
  const auto slots = plan_node(t, static_cast<int>(std::min<size_t>(pus, 2)), cpu_only());
  for (const auto& slot : slots) {
    CAPTURE(format_cpulist(slot.cpus));
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Child: bind, then report through the exit code whether the kernel agrees (no doctest here).
      try {
        bind_to_cpus(slot.cpus);
      } catch (...) {
        _exit(2);
      }
      cpu_set_t set;
      CPU_ZERO(&set);
      if (sched_getaffinity(0, sizeof(set), &set) != 0) _exit(3);
      std::vector<unsigned> got;
      for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) got.push_back(c);
      }
      _exit(got == slot.cpus ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK_NOTHROW(bind_to_cpus({}));
}
