// Applying a slot's cpuset and NUMA nodes to the calling process (the task shim, before exec),
// with the same system calls as the local backend's child: no hwloc topology load (milliseconds),
// and no dependence on what hwloc sees of NUMA inside a container or a namespace.
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "ringrun/topology.hpp"

namespace ringrun::topology {
namespace {

constexpr int kMpolBind = 2;          // MPOL_BIND (linux/mempolicy.h)
constexpr unsigned kMaxNumaNodes = 1024;

}  // namespace

void bind_to_cpus(const std::vector<unsigned>& cpus, const std::vector<int>& mem_numa_nodes) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    throw TopologyError(fmt::format("cannot bind to cpus {}: {}; run with --bind none to skip binding",
                                    format_cpulist(cpus), std::strerror(errno)));
  if (mem_numa_nodes.empty()) return;
  std::array<unsigned long, kMaxNumaNodes / (CHAR_BIT * sizeof(unsigned long))> mask{};
  for (int node : mem_numa_nodes) {
    if (node < 0 || static_cast<unsigned>(node) >= kMaxNumaNodes)
      throw TopologyError(fmt::format("cannot bind memory to NUMA node {}: beyond the {} this build binds to; run "
                                      "with --mem-bind none",
                                      node, kMaxNumaNodes));
    const auto n = static_cast<unsigned>(node);
    mask[n / (CHAR_BIT * sizeof(unsigned long))] |= 1UL << (n % (CHAR_BIT * sizeof(unsigned long)));
  }
  // maxnode counts bits, plus one: the kernel drops the last bit (set_mempolicy(2), BUGS).
  if (::syscall(SYS_set_mempolicy, kMpolBind, mask.data(), kMaxNumaNodes + 1) != 0) {
    std::vector<unsigned> nodes(mem_numa_nodes.begin(), mem_numa_nodes.end());
    throw TopologyError(fmt::format("cannot bind memory to NUMA node(s) {} (of cpus {}): set_mempolicy: {}; run with "
                                    "--mem-bind none",
                                    format_cpulist(nodes), format_cpulist(cpus), std::strerror(errno)));
  }
}

}  // namespace ringrun::topology
