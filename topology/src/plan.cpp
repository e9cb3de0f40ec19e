// The pure planning of one node: GPU, cores and NIC of each local rank.
//
// Cores, in order of preference (each step only when the previous one cannot give every rank
// something of its own):
//  1. GPU ranks: the cores of the GPU's NUMA node(s), split in contiguous blocks of whole cores
//     among the ranks whose GPUs share those NUMA nodes;
//  2. too few cores there: borrow cores of NUMA nodes that hold no planned GPU, same package first;
//  3. still fewer cores than ranks: split the PUs (hyperthreads of one core may go to two ranks);
//  4. still fewer PUs than ranks: those ranks are not bound (binding would oversubscribe PUs).
// CPU-only ranks (no GPUs, --gpus-per-rank 0, or GPU ids that are not topology indexes): as many
// ranks per NUMA node as its share of the cores when there are at least as many ranks as NUMA
// nodes, else contiguous blocks over the whole node; steps 3 and 4 as above.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <set>

#include "gpu_ids.hpp"
#include "nic_choice.hpp"
#include "ringrun/topology.hpp"

namespace ringrun::topology {
namespace {

// Gives each rank of `ranks` a disjoint share of `pool` (indexes into topo.cores).
void split_cores(const Topology& topo, const std::vector<size_t>& pool, const std::vector<int>& ranks,
                 const NodeOptions& options, std::vector<LocalSlot>& slots) {
  const size_t n = ranks.size();
  if (n == 0) return;
  const size_t cap = options.cpus_per_rank ? static_cast<size_t>(std::max(*options.cpus_per_rank, 1))
                                           : std::numeric_limits<size_t>::max();
  if (pool.size() >= n) {
    const size_t base = pool.size() / n;
    const size_t extra = pool.size() % n;
    size_t next = 0;
    for (size_t r = 0; r < n; ++r) {
      const size_t block = base + (r < extra ? 1 : 0);
      auto& cpus = slots[static_cast<size_t>(ranks[r])].cpus;
      for (size_t c = 0; c < std::min(block, cap); ++c) {
        const auto& pus = topo.cores[pool[next + c]].pus;
        cpus.insert(cpus.end(), pus.begin(), pus.end());
      }
      std::sort(cpus.begin(), cpus.end());
      next += block;
    }
    return;
  }
  std::vector<unsigned> pus;
  for (size_t c : pool) pus.insert(pus.end(), topo.cores[c].pus.begin(), topo.cores[c].pus.end());
  if (pus.size() < n) return;  // step 4: unbound
  const size_t base = pus.size() / n;
  const size_t extra = pus.size() % n;
  size_t next = 0;
  for (size_t r = 0; r < n; ++r) {
    const size_t block = base + (r < extra ? 1 : 0);
    auto& cpus = slots[static_cast<size_t>(ranks[r])].cpus;
    cpus.assign(pus.begin() + static_cast<long>(next), pus.begin() + static_cast<long>(next + std::min(block, cap)));
    std::sort(cpus.begin(), cpus.end());
    next += block;
  }
}

void plan_cpu_only(const Topology& topo, const NodeOptions& options, std::vector<LocalSlot>& slots) {
  const size_t n = slots.size();
  std::vector<int> numas;  // NUMA nodes in the order of their first core
  std::map<int, std::vector<size_t>> cores_of;
  for (size_t c = 0; c < topo.cores.size(); ++c) {
    const int numa = topo.cores[c].numa;
    if (!cores_of.count(numa)) numas.push_back(numa);
    cores_of[numa].push_back(c);
  }
  std::vector<int> all_ranks(n);
  for (size_t r = 0; r < n; ++r) all_ranks[r] = static_cast<int>(r);
  if (numas.size() <= 1 || n < numas.size()) {
    std::vector<size_t> pool(topo.cores.size());
    for (size_t c = 0; c < pool.size(); ++c) pool[c] = c;
    split_cores(topo, pool, all_ranks, options, slots);
    return;
  }
  // Ranks per NUMA node in proportion to its cores (largest remainder), every node at least one.
  const size_t total = topo.cores.size();
  std::vector<size_t> count(numas.size(), 1);
  size_t given = numas.size();
  std::vector<std::pair<size_t, size_t>> remainder;  // (-remainder, node) for sorting
  for (size_t j = 0; j < numas.size(); ++j) {
    const size_t share = (n - numas.size()) * cores_of[numas[j]].size();
    count[j] += share / total;
    given += share / total;
    remainder.emplace_back(total - share % total, j);
  }
  std::sort(remainder.begin(), remainder.end());
  for (size_t i = 0; given < n; ++i, ++given) ++count[remainder[i % remainder.size()].second];
  int rank = 0;
  for (size_t j = 0; j < numas.size(); ++j) {
    std::vector<int> ranks;
    for (size_t k = 0; k < count[j]; ++k) ranks.push_back(rank++);
    split_cores(topo, cores_of[numas[j]], ranks, options, slots);
  }
}

void plan_gpu_cores(const Topology& topo, const NodeOptions& options, std::vector<LocalSlot>& slots) {
  // Ranks grouped by the NUMA nodes of their GPU; smaller NUMA sets first so a GPU local to one
  // node is served before one local to a whole package.
  std::map<std::vector<int>, std::vector<int>> groups;
  for (size_t r = 0; r < slots.size(); ++r) {
    auto numa = topo.gpus[static_cast<size_t>(*slots[r].gpu_index)].numa_nodes;
    std::sort(numa.begin(), numa.end());
    groups[numa].push_back(static_cast<int>(r));
  }
  std::vector<std::pair<std::vector<int>, std::vector<int>>> order(groups.begin(), groups.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first.size(), a.second.front()) < std::make_pair(b.first.size(), b.second.front());
  });
  std::set<int> gpu_numas;
  for (const auto& [numa, ranks] : order) gpu_numas.insert(numa.begin(), numa.end());
  std::vector<bool> taken(topo.cores.size(), false);
  for (const auto& [numa, ranks] : order) {
    std::vector<size_t> pool;
    std::set<int> packages;
    for (size_t c = 0; c < topo.cores.size(); ++c) {
      if (!taken[c] && std::find(numa.begin(), numa.end(), topo.cores[c].numa) != numa.end()) {
        pool.push_back(c);
        packages.insert(topo.cores[c].package);
      }
    }
    for (int pass = 0; pass < 2 && pool.size() < ranks.size(); ++pass) {
      for (size_t c = 0; c < topo.cores.size() && pool.size() < ranks.size(); ++c) {
        const bool same_package = packages.count(topo.cores[c].package) > 0;
        if (!taken[c] && !gpu_numas.count(topo.cores[c].numa) && (pass == 1 || same_package)) {
          pool.push_back(c);
          taken[c] = true;  // borrowed: not again in the second pass nor by another group
        }
      }
    }
    std::sort(pool.begin(), pool.end());
    for (size_t c : pool) taken[c] = true;
    split_cores(topo, pool, ranks, options, slots);
  }
}

// PU OS index -> NUMA node of its core, built once per plan.
std::map<unsigned, int> numa_of_pus(const Topology& topo) {
  std::map<unsigned, int> numa;
  for (const auto& core : topo.cores)
    for (unsigned pu : core.pus) numa.emplace(pu, core.numa);
  return numa;
}

int numa_of_pu(const std::map<unsigned, int>& numa, unsigned pu) {
  auto it = numa.find(pu);
  return it == numa.end() ? -1 : it->second;
}

void plan_numa_nodes(const std::map<unsigned, int>& numa, std::vector<LocalSlot>& slots) {
  for (auto& slot : slots) {
    std::set<int> nodes;
    for (unsigned pu : slot.cpus)
      if (int n = numa_of_pu(numa, pu); n >= 0) nodes.insert(n);
    slot.numa_nodes.assign(nodes.begin(), nodes.end());
  }
}

void plan_nics(const Topology& topo, const std::map<unsigned, int>& pu_numa, std::vector<LocalSlot>& slots) {
  const std::vector<size_t> candidates = nic_candidates(topo);
  if (candidates.empty()) return;
  std::vector<int> uses(topo.nics.size(), 0);
  for (auto& slot : slots) {
    // Rank of each candidate: distance class for a GPU rank; for a CPU-only rank 0 when the NIC
    // is on the NUMA node of the rank's first core, else 1.
    const bool by_gpu = slot.gpu_index && static_cast<size_t>(*slot.gpu_index) < topo.nic_distance.size();
    int numa = -1;
    if (!by_gpu && !slot.cpus.empty()) numa = numa_of_pu(pu_numa, slot.cpus.front());
    std::vector<int> rank_of(topo.nics.size(), std::numeric_limits<int>::max());
    int best = std::numeric_limits<int>::max();
    for (size_t n : candidates) {
      int d = 0;
      if (by_gpu) {
        d = static_cast<int>(topo.nic_distance[static_cast<size_t>(*slot.gpu_index)][n]);
      } else if (!slot.cpus.empty()) {
        const auto& nodes = topo.nics[n].numa_nodes;
        d = std::find(nodes.begin(), nodes.end(), numa) != nodes.end() ? 0 : 1;
      }
      rank_of[n] = d;
      best = std::min(best, d);
    }
    // Ties: the least used of the equally close NICs, so ranks spread over them.
    size_t chosen = candidates.front();
    int chosen_uses = std::numeric_limits<int>::max();
    for (size_t n : candidates) {
      if (rank_of[n] == best && uses[n] < chosen_uses) {
        chosen = n;
        chosen_uses = uses[n];
      }
    }
    ++uses[chosen];
    const Nic& nic = topo.nics[chosen];
    slot.nic = nic.name;
    if (nic.kind == "infiniband") {
      const auto port = first_active_port(nic);
      slot.env["NCCL_IB_HCA"] = fmt::format("={}:{}", nic.name, port.value_or(1));
    }
  }
}

}  // namespace

std::vector<size_t> nic_candidates(const Topology& topo) {
  // A NIC whose ports are all down carries nothing; Ethernet only when there is no fabric.
  auto usable = [](const Nic& nic) {
    if (nic.kind == "infiniband" || nic.kind == "efa") return nic.ports.empty() || first_active_port(nic).has_value();
    return true;
  };
  std::vector<size_t> candidates;
  for (size_t n = 0; n < topo.nics.size(); ++n) {
    if (topo.nics[n].kind != "ethernet" && usable(topo.nics[n])) candidates.push_back(n);
  }
  if (candidates.empty()) {
    for (size_t n = 0; n < topo.nics.size(); ++n) {
      if (topo.nics[n].kind == "ethernet") candidates.push_back(n);
    }
  }
  return candidates;
}

std::optional<size_t> closest_nic(const Topology& topo, size_t gpu) {
  if (gpu >= topo.nic_distance.size()) return std::nullopt;
  std::optional<size_t> best;
  for (size_t n : nic_candidates(topo)) {
    if (n < topo.nic_distance[gpu].size() && (!best || topo.nic_distance[gpu][n] < topo.nic_distance[gpu][*best])) {
      best = n;
    }
  }
  return best;
}

const char* to_string(NicDistance d) {
  switch (d) {
    case NicDistance::same_pci_switch: return "same_pci_switch";
    case NicDistance::same_host_bridge: return "same_host_bridge";
    case NicDistance::same_numa: return "same_numa";
    case NicDistance::same_package: return "same_package";
    case NicDistance::across_packages: return "across_packages";
  }
  return "unknown";
}

std::vector<LocalSlot> plan_node(const Topology& topo, int local_size, const NodeOptions& options) {
  if (local_size < 0) {
    throw std::invalid_argument(fmt::format("ringrun: {} ranks on a node; give a count of 0 or more", local_size));
  }
  if (options.gpus_per_rank < 0) {
    throw std::invalid_argument(
        fmt::format("ringrun: --gpus-per-rank {}: give 0 (CPU-only) or more", options.gpus_per_rank));
  }
  std::vector<LocalSlot> slots(static_cast<size_t>(local_size));
  if (slots.empty()) return slots;

  // GPUs: ids from the inherited list (an index into it, never a raw local rank), else the
  // planned vendor's GPUs by device id. No GPUs at all (and no list) means CPU-only ranks.
  const std::vector<UsableGpu> gpus = usable_gpus(topo, options);
  const size_t per_rank = static_cast<size_t>(options.gpus_per_rank);
  bool gpu_cores = false;
  if (per_rank > 0 && !gpus.empty()) {
    if (slots.size() * per_rank > gpus.size()) {
      throw std::invalid_argument(fmt::format(
          "ringrun: {} ranks on this node need {} GPUs but only {} {} usable ({}); start at most {} ranks per "
          "node or use --gpus-per-rank 0",
          slots.size(), slots.size() * per_rank, gpus.size(), gpus.size() == 1 ? "is" : "are",
          options.visible_gpus ? "from the inherited GPU list" : topo.origin, gpus.size() / per_rank));
    }
    gpu_cores = true;
    for (size_t r = 0; r < slots.size(); ++r) {
      std::string ids;
      for (size_t k = 0; k < per_rank; ++k) {
        ids += (k ? "," : "") + gpus[r * per_rank + k].id;
      }
      slots[r].gpu = ids;
      slots[r].gpu_vendor = planned_gpu_vendor(topo);
      slots[r].gpu_index = gpus[r * per_rank].index;
      if (!slots[r].gpu_index) gpu_cores = false;
      else if (topo.gpus[static_cast<size_t>(*slots[r].gpu_index)].numa_nodes.empty()) gpu_cores = false;
    }
  }

  if (options.bind) {
    if (gpu_cores) plan_gpu_cores(topo, options, slots);
    else plan_cpu_only(topo, options, slots);
  }
  const auto pu_numa = numa_of_pus(topo);
  plan_numa_nodes(pu_numa, slots);
  plan_nics(topo, pu_numa, slots);
  return slots;
}

std::string format_cpulist(const std::vector<unsigned>& cpus) {
  std::vector<unsigned> sorted(cpus);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    i = j + 1;
  }
  return out;
}

std::vector<unsigned> parse_cpulist(const std::string& list) {
  std::vector<unsigned> cpus;
  const char* const begin = list.data();
  const char* const end = begin + list.size();
  auto fail = [&](const char* at, const char* what) {
    throw std::invalid_argument(fmt::format("ringrun: cpu list '{}': {} at column {}; write it like '0-3,8'", list,
                                            what, at - begin + 1));
  };
  const char* p = begin;
  while (p < end) {
    unsigned first = 0;
    auto [after_first, ec] = std::from_chars(p, end, first);
    if (ec != std::errc()) fail(p, "expected a number");
    unsigned last = first;
    p = after_first;
    if (p < end && *p == '-') {
      auto [after_last, ec2] = std::from_chars(p + 1, end, last);
      if (ec2 != std::errc()) fail(p + 1, "expected a number");
      if (last < first) fail(p + 1, "range ends before it starts");
      p = after_last;
    }
    for (unsigned c = first; c <= last; ++c) cpus.push_back(c);
    if (p < end) {
      if (*p != ',') fail(p, "expected ',' or '-'");
      ++p;
      if (p == end) fail(p, "expected a number");
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

}  // namespace ringrun::topology
