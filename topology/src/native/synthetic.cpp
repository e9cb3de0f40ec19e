// Synthetic topologies ("synthetic:pack:16 numa:8 l3:25 core:32 pu:1") built directly: hwloc
// generates them object by object with a quadratic insertion (about 22 s for 102,400 cores),
// while the Topology of a plain "type:count" description follows from the counts alone.
#include <climits>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string_view>

#include "readers.hpp"

namespace ringrun::topology::native {
namespace {

// Rank of each level type hwloc accepts in this order (top to bottom, NUMA placed more freely:
// see read_synthetic); other types, other orders
// and attributes ("numa:2(memory=1GB)", "pu:4(indexes=...)") are left to hwloc.
int rank_of(std::string_view type) {
  static const std::map<std::string_view, int, std::less<>> ranks = {
      {"pack", 0}, {"package", 0}, {"die", 1}, {"numa", 2}, {"node", 2}, {"numanode", 2},
      {"l3", 3},   {"l3cache", 3}, {"l2", 4},  {"l2cache", 4}, {"l1", 5}, {"l1cache", 5},
      {"l1d", 5},  {"l1dcache", 5}, {"core", 6}, {"pu", 7}};
  const auto it = ranks.find(type);
  return it == ranks.end() ? -1 : it->second;
}

}  // namespace

std::optional<Topology> read_synthetic(const std::string& description, const std::string& origin) {
  constexpr unsigned long kMaxPus = 1ul << 22;  // beyond this hwloc is asked (and may refuse)
  std::istringstream in(description);
  std::string token;
  int last_rank = -1;  // of the levels other than NUMA
  bool numa_seen = false;
  // Product of the counts above and including each level kind seen.
  unsigned long total = 1, packages = 0, numas = 0, cores = 0;
  while (in >> token) {
    const size_t colon = token.find(':');
    if (colon == std::string::npos || colon + 1 == token.size()) return std::nullopt;
    const int rank = rank_of(std::string_view(token).substr(0, colon));
    if (rank < 0) return std::nullopt;
    if (rank == 2) {
      // A NUMA level may sit above or below the cache levels, but once, under packages and dies
      // and above cores.
      if (numa_seen || last_rank > 5) return std::nullopt;
      numa_seen = true;
    } else {
      if (rank <= last_rank || (numa_seen && rank <= 1)) return std::nullopt;
      last_rank = rank;
    }
    unsigned long count = 0;
    for (char c : token.substr(colon + 1)) {
      if (c < '0' || c > '9') return std::nullopt;
      count = count * 10 + static_cast<unsigned long>(c - '0');
      if (count > kMaxPus) return std::nullopt;
    }
    if (count == 0) return std::nullopt;
    total *= count;
    if (total > kMaxPus) return std::nullopt;
    if (rank == 0) packages = total;
    if (rank == 2) numas = total;
    if (rank == 6) cores = total;
  }
  if (last_rank != 7) return std::nullopt;  // hwloc requires the PU level last
  const unsigned long pus = total;
  // Each object of a level covers a contiguous block of PUs (synthetic PUs are numbered in
  // logical order), so a core's NUMA node and package are its first PU divided by their size.
  // Without a NUMA level hwloc makes one node (os_index 0) for the whole machine.
  const unsigned long per_core = cores ? pus / cores : 1;
  const unsigned long per_numa = numas ? pus / numas : pus;
  const unsigned long per_package = packages ? pus / packages : 0;
  Topology t;
  t.origin = origin;
  for (unsigned long n = 0; n < (numas ? numas : 1); ++n) t.numa_nodes.push_back(static_cast<int>(n));
  t.cores.reserve(pus / per_core);
  for (unsigned long first = 0; first < pus; first += per_core) {
    Core c;
    c.numa = static_cast<int>(first / per_numa);
    c.package = packages ? static_cast<int>(first / per_package) : -1;
    for (unsigned long pu = first; pu < first + per_core; ++pu) c.pus.push_back(static_cast<unsigned>(pu));
    t.cores.push_back(std::move(c));
  }
  return t;
}

}  // namespace ringrun::topology::native
