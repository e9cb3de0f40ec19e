// The native readers (hwloc 2.x XML in one pass, plain synthetic descriptions from their counts)
// must give exactly the Topology hwloc's import gives: every field, on every fixture.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "fixtures.hpp"

using namespace ringrun::topology;
using namespace ringrun::topology::test;

namespace {

const char* const kFixtures[] = {
    "aws-g4dn-metal-8xt4-efa.xml",
    "dell-xe8640-4xh100-4xib.xml",
    "hpe-ex235a-tioga-8xmi250x-gcd-slingshot.xml",
    "hpe-ex255a-tuolumne-4xmi300a-cpx.xml",
    "jsc-juwels-booster-4xa100-4xhdr.xml",
    "llnl-corona-8xmi50-1xib.xml",
    "llnl-lassen-power9-4xv100-4xib.xml",
    "llnl-pascal-2xp100-1xib.xml",
    "llnl-sierra-power9-4xv100-gpumem-hwloc1.xml",
    "nvidia-dgx2-16xv100-nvswitch.xml",
};

void check_same(const Topology& native, const Topology& hwloc) {
  CHECK(native.origin == hwloc.origin);
  CHECK(native.numa_nodes == hwloc.numa_nodes);
  REQUIRE(native.gpus.size() == hwloc.gpus.size());
  for (size_t g = 0; g < hwloc.gpus.size(); ++g) {
    CAPTURE(g);
    CHECK(native.gpus[g].bus_id == hwloc.gpus[g].bus_id);
    CHECK(native.gpus[g].vendor == hwloc.gpus[g].vendor);
    CHECK(native.gpus[g].name == hwloc.gpus[g].name);
    CHECK(native.gpus[g].numa_nodes == hwloc.gpus[g].numa_nodes);
    CHECK(native.gpus[g].local_cpus == hwloc.gpus[g].local_cpus);
  }
  REQUIRE(native.nics.size() == hwloc.nics.size());
  for (size_t n = 0; n < hwloc.nics.size(); ++n) {
    CAPTURE(n);
    CHECK(native.nics[n].name == hwloc.nics[n].name);
    CHECK(native.nics[n].kind == hwloc.nics[n].kind);
    CHECK(native.nics[n].netdevs == hwloc.nics[n].netdevs);
    CHECK(native.nics[n].ports == hwloc.nics[n].ports);
    CHECK(native.nics[n].bus_id == hwloc.nics[n].bus_id);
    CHECK(native.nics[n].numa_nodes == hwloc.nics[n].numa_nodes);
    CHECK(native.nics[n].port_states == hwloc.nics[n].port_states);
  }
  // The cores carry the allowed cpus: only allowed PUs are in them.
  REQUIRE(native.cores.size() == hwloc.cores.size());
  size_t differing = 0;
  for (size_t c = 0; c < hwloc.cores.size(); ++c) {
    const bool same = native.cores[c].pus == hwloc.cores[c].pus && native.cores[c].numa == hwloc.cores[c].numa &&
                      native.cores[c].package == hwloc.cores[c].package;
    if (!same && differing++ == 0) {
      CHECK_MESSAGE(same, "core " << c << ": native pus " << format_cpulist(native.cores[c].pus) << " numa "
                                  << native.cores[c].numa << " package " << native.cores[c].package << ", hwloc pus "
                                  << format_cpulist(hwloc.cores[c].pus) << " numa " << hwloc.cores[c].numa
                                  << " package " << hwloc.cores[c].package);
    }
  }
  CHECK(differing == 0);
  CHECK(native.nic_distance == hwloc.nic_distance);
}

}  // namespace

TEST_CASE("native: every hwloc 2.x fixture reads the same natively as through hwloc") {
  for (const char* name : kFixtures) {
    CAPTURE(name);
    const std::string path = data_path(std::string("hwloc/") + name);
    const auto native = load_xml_native(path);
    if (std::string(name).find("hwloc1") != std::string::npos) {
      // hwloc 1.x exports (NUMA nodes in the CPU tree, other attribute names) stay with hwloc.
      CHECK_FALSE(native.has_value());
      check_same(load_xml(path), load_xml_hwloc(path));
      continue;
    }
    REQUIRE(native.has_value());
    check_same(*native, load_xml_hwloc(path));
    check_same(load_xml(path), load_xml_hwloc(path));
  }
}

TEST_CASE("native: files hwloc rejects are not read natively, so hwloc's message stays") {
  for (const std::string name : {"invalid/hwloc-3.0-version.xml", "invalid/nccl-topo-azure-ndv5.xml",
                                 "invalid/not-xml.xml", "invalid/no-such-file.xml"}) {
    CAPTURE(name);
    CHECK_FALSE(load_xml_native(data_path(name)).has_value());
  }
}

TEST_CASE("native: plain synthetic descriptions match hwloc's synthetic topology") {
  for (const std::string description :
       {"pack:2 numa:2 core:4 pu:2", "pack:2 numa:2 l3:2 core:4 pu:1", "core:8 pu:2", "pu:6",
        "package:2 l2:3 core:2 pu:2", "pack:4 l3:2 numa:2 core:2 pu:1", "pack:2 numa:4 l3:5 core:8 pu:2"}) {
    CAPTURE(description);
    const std::string path = "synthetic:" + description;
    const auto native = load_xml_native(path);
    REQUIRE(native.has_value());
    check_same(*native, load_xml_hwloc(path));
  }
}

TEST_CASE("native: synthetic descriptions with attributes or unusual orders go to hwloc") {
  for (const std::string description : {"pack:2 numa:2(memory=1GB) core:2 pu:1", "numa:2 pack:2 core:2 pu:1",
                                        "pack:2 core:2", "pu:2 core:2", "pack:2 numa:2 numa:2 pu:1", "core:2 numa:2 pu:1", "pack:0 pu:1", "pack:x pu:1"}) {
    CAPTURE(description);
    CHECK_FALSE(load_xml_native("synthetic:" + description).has_value());
  }
  const Topology t = load_xml("synthetic:pack:2 numa:2(memory=1GB) core:2 pu:1");
  CHECK(t.cores.size() == 8);
}

TEST_CASE("native: an lstopo export with two PUs per core reads the same") {
  // Generated at run time (big exports are hundreds of MB and stay out of the repository); skipped
  // where lstopo is not installed.
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("ringrun-native-test-{}.xml", ::getpid())).string();
  const std::string command =
      fmt::format("lstopo --of xml -i 'pack:2 numa:2 l3:2 core:6 pu:2' '{}' >/dev/null 2>&1", path);
  if (std::system(command.c_str()) != 0) {
    MESSAGE("lstopo not available: export comparison skipped");
    return;
  }
  const auto native = load_xml_native(path);
  REQUIRE(native.has_value());
  check_same(*native, load_xml_hwloc(path));
  CHECK(native->cores.size() == 48);
  std::filesystem::remove(path);
}

TEST_CASE("native: a truncated or damaged export is never read natively (hwloc then judges it)") {
  // The reader walks an mmap'd file with raw pointers: every cut must end in nullopt, not in a
  // read past the end or a half-read Topology.
  std::ifstream in(data_path("hwloc/dell-xe8640-4xh100-4xib.xml"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(text.size() > 1000);
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("ringrun-native-cut-{}.xml", ::getpid())).string();
  auto read_back = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    return load_xml_native(path);
  };
  size_t accepted = 0;
  // Every cut in the header and in the closing tags, every 997th byte in between.
  for (size_t cut = 1; cut < text.size(); cut += (cut < 300 || cut + 300 > text.size()) ? 1 : 997)
    accepted += read_back(text.substr(0, cut)).has_value();
  CHECK(accepted == 0);
  // Damage in the middle of the tree: an unbalanced element, an unknown object type, a bad cpuset.
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_FALSE(read_back(replaced("</object>", "")).has_value());
  CHECK_FALSE(read_back(replaced("type=\"Package\"", "type=\"Socket\"")).has_value());
  CHECK_FALSE(read_back(replaced("cpuset=\"0x", "cpuset=\"zz")).has_value());
  CHECK(read_back(text).has_value());
  std::filesystem::remove(path);
}

TEST_CASE("native: RINGRUN_TOPOLOGY_LOADER=hwloc forces hwloc, an unknown value is a one-line error") {
  const std::string path = data_path("hwloc/llnl-pascal-2xp100-1xib.xml");
  ::setenv("RINGRUN_TOPOLOGY_LOADER", "hwloc", 1);
  check_same(load_xml(path), load_xml_hwloc(path));
  // hwloc's own message for a file it rejects, not a native one.
  CHECK_THROWS_AS(load_xml(data_path("invalid/not-xml.xml")), TopologyError);
  ::setenv("RINGRUN_TOPOLOGY_LOADER", "fast", 1);
  try {
    load_xml(path);
    FAIL("RINGRUN_TOPOLOGY_LOADER=fast accepted");
  } catch (const TopologyError& e) {
    const std::string what = e.what();
    CHECK(what.find("RINGRUN_TOPOLOGY_LOADER='fast'") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  ::setenv("RINGRUN_TOPOLOGY_LOADER", "native", 1);
  check_same(load_xml(path), load_xml_hwloc(path));
  ::unsetenv("RINGRUN_TOPOLOGY_LOADER");
}
