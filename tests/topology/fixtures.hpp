// Shared by the topology tests: fixture paths and the invariants every plan must keep.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <set>
#include <string>

#include "ringrun/topology.hpp"

namespace ringrun::topology::test {

inline std::string data_path(const std::string& relative) {
  return std::string(RINGRUN_SOURCE_DIR) + "/tests/data/topology/" + relative;
}

// NodeOptions with one field changed (designated initializers trip -Wmissing-field-initializers).
inline NodeOptions gpus_per_rank(int n) {
  NodeOptions o;
  o.gpus_per_rank = n;
  return o;
}
inline NodeOptions cpu_only() { return gpus_per_rank(0); }
inline NodeOptions visible(std::vector<std::string> ids) {
  NodeOptions o;
  o.visible_gpus = std::move(ids);
  return o;
}
inline NodeOptions capped(int cpus) {
  NodeOptions o;
  o.cpus_per_rank = cpus;
  return o;
}
inline NodeOptions unbound() {
  NodeOptions o;
  o.bind = false;
  return o;
}

inline Topology load_fixture(const std::string& name) { return load_xml(data_path("hwloc/" + name)); }

inline std::vector<std::string> gpu_names(const Topology& t) {
  std::vector<std::string> names;
  for (const auto& g : t.gpus) names.push_back(g.name);
  return names;
}

inline std::vector<std::string> gpu_bus_ids(const Topology& t) {
  std::vector<std::string> ids;
  for (const auto& g : t.gpus) ids.push_back(g.bus_id);
  return ids;
}

inline std::vector<int> gpu_numa(const Topology& t) {
  std::vector<int> numa;
  for (const auto& g : t.gpus) {
    REQUIRE(g.numa_nodes.size() == 1);
    numa.push_back(g.numa_nodes.front());
  }
  return numa;
}

inline std::vector<std::string> slot_nics(const std::vector<LocalSlot>& slots) {
  std::vector<std::string> nics;
  for (const auto& s : slots) nics.push_back(s.nic.value_or("-"));
  return nics;
}

inline const Nic& nic_named(const Topology& t, const std::string& name) {
  for (const auto& n : t.nics) {
    if (n.name == name) return n;
  }
  FAIL("no NIC " << name);
  throw 0;
}

inline int nic_index(const Topology& t, const std::string& name) {
  for (size_t i = 0; i < t.nics.size(); ++i) {
    if (t.nics[i].name == name) return static_cast<int>(i);
  }
  FAIL("no NIC " << name);
  return -1;
}

// No PU given to two ranks, every PU allowed (a core of the topology), and — when `whole_cores` —
// hyperthread siblings never split between ranks.
inline void check_cpusets(const Topology& t, const std::vector<LocalSlot>& slots, bool whole_cores = true) {
  std::set<unsigned> allowed;
  std::map<unsigned, size_t> core_of;
  for (size_t c = 0; c < t.cores.size(); ++c) {
    for (unsigned pu : t.cores[c].pus) {
      allowed.insert(pu);
      core_of[pu] = c;
    }
  }
  std::set<unsigned> used;
  std::map<size_t, size_t> owner;  // core -> rank
  for (size_t r = 0; r < slots.size(); ++r) {
    for (unsigned pu : slots[r].cpus) {
      CHECK_MESSAGE(allowed.count(pu), "rank " << r << " got PU " << pu << " outside the allowed cpuset");
      CHECK_MESSAGE(used.insert(pu).second, "PU " << pu << " given twice (rank " << r << ")");
      if (whole_cores) {
        auto [it, inserted] = owner.emplace(core_of[pu], r);
        CHECK_MESSAGE((inserted || it->second == r), "core of PU " << pu << " split between ranks");
      }
    }
  }
}

// Cores of the slot, all on the given NUMA node.
inline void check_on_numa(const Topology& t, const LocalSlot& slot, int numa) {
  REQUIRE_FALSE(slot.cpus.empty());
  for (unsigned pu : slot.cpus) {
    bool found = false;
    for (const auto& core : t.cores) {
      for (unsigned p : core.pus) {
        if (p == pu) {
          found = true;
          CHECK_MESSAGE(core.numa == numa, "PU " << pu << " is on NUMA " << core.numa << ", expected " << numa);
        }
      }
    }
    CHECK(found);
  }
}

}  // namespace ringrun::topology::test
