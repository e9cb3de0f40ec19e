// `ringrun doctor`'s transport checks: RDMA ports (and NCCL_IB_GID_INDEX against them), the
// locked-memory limit RDMA needs, /dev/shm for the shared-memory transport, the TCP interface and
// NCCL_SOCKET_IFNAME.
#include "doctor/checks.hpp"

#include <ringrun/environment_variables.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace ringrun::diagnostics {
namespace {

// "2.21.5" >= 2.21?
bool version_at_least(const std::string& version, int major, int minor) {
  int found_major = 0, found_minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &found_major, &found_minor) != 2) return false;
  return found_major > major || (found_major == major && found_minor >= minor);
}

}  // namespace

std::vector<Check> check_rdma(const HostFacts& facts) {
  std::vector<Check> checks;
  if (facts.rdma_ports.empty()) {
    auto allocation = parsed_allocation(facts.env);
    if (allocation && allocation->hosts.size() > 1)
      checks.push_back(warn("rdma devices", "none in /sys/class/infiniband: this multi-node job runs over TCP sockets",
                            "load the HCA drivers (e.g. modprobe mlx5_ib) if the nodes have IB/RoCE cards"));
    else
      checks.push_back(pass("rdma devices", "none in /sys/class/infiniband (TCP sockets between nodes)"));
    return checks;
  }
  for (const auto& port : facts.rdma_ports) {
    std::string name = fmt::format("rdma {}:{}", port.device, port.port);
    bool roce = port.link_layer == "Ethernet";
    std::string what =
        fmt::format("{}, {}{}", port.state, roce ? "RoCE (Ethernet)" : port.link_layer,
                    roce && port.roce_gid_index ? fmt::format(", GID index {}", *port.roce_gid_index) : "");
    if (port.state.find("ACTIVE") == std::string::npos)
      checks.push_back(warn(name, what + ": not ACTIVE",
                            fmt::format("check the cable and switch port (ibstat {}), or leave it out with "
                                        "NCCL_IB_HCA=^={}",
                                        port.device, port.device)));
    else if (roce && !port.roce_gid_index)
      checks.push_back(warn(
          name, what + ": no RoCE v2 GID with an IPv4 address",
          fmt::format("give the netdev of {} an IPv4 address (NCCL picks an IPv4-mapped RoCE v2 GID)", port.device)));
    else
      checks.push_back(pass(name, what));
  }
  if (auto gid_index = lookup(facts.env, "NCCL_IB_GID_INDEX")) {
    if (facts.nccl.version && version_at_least(*facts.nccl.version, 2, 21) && *gid_index != "-1") {
      checks.push_back(warn(
          "NCCL_IB_GID_INDEX",
          fmt::format("NCCL_IB_GID_INDEX={} is set but NCCL {} picks the GID itself", *gid_index, *facts.nccl.version),
          "unset NCCL_IB_GID_INDEX (NCCL's guide: do not set it with NCCL 2.21 and later)"));
    } else {
      for (const auto& port : facts.rdma_ports)
        if (port.roce_gid_index && std::to_string(*port.roce_gid_index) != *gid_index)
          checks.push_back(warn(
              "NCCL_IB_GID_INDEX",
              fmt::format("NCCL_IB_GID_INDEX={} but {} port {} has its RoCE v2 IPv4 GID at index {}", *gid_index,
                          port.device, port.port, *port.roce_gid_index),
              fmt::format("set NCCL_IB_GID_INDEX={} (or upgrade to NCCL >= 2.21 and unset it)", *port.roce_gid_index)));
    }
  }
  return checks;
}

Check check_memlock(std::optional<std::uint64_t> soft_limit_bytes, bool rdma_present) {
  if (!soft_limit_bytes) return pass("memlock", "unlimited");
  std::string limit = format_bytes(*soft_limit_bytes);
  if (!rdma_present) return pass("memlock", limit + " (no RDMA devices here: not needed)");
  return warn("memlock",
              fmt::format("locked-memory limit is {}: RDMA registration (ibv_reg_mr) fails beyond it", limit),
              "set '* soft memlock unlimited' and '* hard memlock unlimited' in /etc/security/limits.conf (and "
              "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf)");
}

Check check_shm(std::optional<std::uint64_t> total_bytes) {
  constexpr std::uint64_t kMinimum = 1ull << 30;
  if (!total_bytes)
    return warn("/dev/shm", "missing: the shared-memory transport is unavailable",
                fmt::format("mount a tmpfs on /dev/shm (docker: --ipc=host), or set {}=1", variables::kDisableShm.name));
  if (*total_bytes < kMinimum)
    return warn(
        "/dev/shm",
        fmt::format("only {} (Docker's default is 64 MiB): shared-memory transfers may fail",
                    format_bytes(*total_bytes)),
        fmt::format("docker run --shm-size=8g (or --ipc=host), or remount /dev/shm larger; {}=1 avoids it",
                    variables::kDisableShm.name));
  return pass("/dev/shm", format_bytes(*total_bytes));
}

Check check_network_interface(const std::optional<std::string>& chosen, const std::vector<NetInterface>& interfaces) {
  std::vector<std::string> usable;
  for (const auto& iface : interfaces)
    if (!iface.loopback && iface.operstate == "up") usable.push_back(iface.name);
  std::string usable_text = usable.empty() ? "none" : join(usable);
  if (!chosen) {
    if (usable.empty())
      return warn("network interface", "none chosen, and no interface but loopback is up",
                  "bring an interface up (ip link set IF up); other nodes cannot reach this one");
    return pass("network interface", "none chosen (ringrun detects it); up and not loopback: " + usable_text);
  }
  auto it =
      std::find_if(interfaces.begin(), interfaces.end(), [&](const NetInterface& i) { return i.name == *chosen; });
  if (it == interfaces.end())
    return fail("network interface", fmt::format("'{}' does not exist in /sys/class/net", *chosen),
                fmt::format("pick an interface that is up: {}", usable_text));
  if (it->loopback)
    return fail("network interface", fmt::format("'{}' is loopback: other nodes cannot reach it", *chosen),
                fmt::format("pick an interface that is up: {}", usable_text));
  if (it->operstate == "down")
    return fail("network interface", fmt::format("'{}' is down", *chosen),
                fmt::format("ip link set {} up, or pick one that is up: {}", *chosen, usable_text));
  if (it->operstate != "up")
    return warn("network interface", fmt::format("'{}' has operstate '{}'", *chosen, it->operstate),
                fmt::format("check `ip link show {}`; interfaces that are up: {}", *chosen, usable_text));
  return pass("network interface", fmt::format("'{}' is up and not loopback", *chosen));
}

std::optional<Check> check_nccl_socket_ifname(const Environment& env) {
  auto value = lookup(env, "NCCL_SOCKET_IFNAME");
  if (!value || (*value)[0] != '^') return std::nullopt;
  std::string list = value->substr(1);
  if (!list.empty() && list[0] == '=') list.erase(0, 1);
  for (const auto& prefix : split_commas(list))
    if (prefix == "lo" || std::string("lo").rfind(prefix, 0) == 0)
      return pass("NCCL_SOCKET_IFNAME", "'" + *value + "' excludes lo");
  return warn("NCCL_SOCKET_IFNAME", fmt::format("'{}' excludes some interfaces but not lo: NCCL may pick lo", *value),
              fmt::format("set NCCL_SOCKET_IFNAME={},lo, or name the interface exactly (=eth0)", *value));
}

}  // namespace ringrun::diagnostics
