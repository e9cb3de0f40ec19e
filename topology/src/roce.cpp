// NCCL_IB_GID_INDEX for RoCE ports, read from sysfs the way NCCL's automatic selection
// (ncclIbGetGidIndex, NCCL >= 2.21) picks it with its defaults: address family AF_INET (an
// IPv4-mapped GID), RoCE version 2, a valid (non-zero, not link-local) GID.
#include <cctype>
#include <fstream>
#include <string>

#include "ringrun/topology.hpp"

namespace ringrun::topology {
namespace {

// The first line of a sysfs attribute, trailing whitespace removed; nullopt when it cannot be
// read (missing file, or EINVAL for an unused GID table entry).
std::optional<std::string> read_attribute(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// "0000:0000:0000:0000:0000:ffff:0a00:0001" -> 16 bytes; nullopt if malformed.
std::optional<std::string> parse_gid(const std::string& text) {
  std::string bytes;
  std::string hex;
  for (char c : text) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    hex += c;
  }
  if (hex.size() != 32) return std::nullopt;
  for (size_t i = 0; i < 32; i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

bool is_ipv4_mapped(const std::string& gid) {
  for (size_t i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  if (static_cast<unsigned char>(gid[10]) != 0xff || static_cast<unsigned char>(gid[11]) != 0xff) return false;
  return gid[12] != 0 || gid[13] != 0 || gid[14] != 0 || gid[15] != 0;  // ::ffff:0.0.0.0 is not an address
}

}  // namespace

std::optional<int> roce_gid_index(const std::string& sysfs_root, const std::string& hca, int port) {
  const std::string port_dir = sysfs_root + "/class/infiniband/" + hca + "/ports/" + std::to_string(port);
  const auto link_layer = read_attribute(port_dir + "/link_layer");
  if (link_layer && *link_layer == "InfiniBand") return std::nullopt;  // IB: NCCL uses 0 (or the FLID index)
  // The GID table has gid_tbl_len entries; sysfs lists them all. Stop after a long run of
  // missing files so a missing port costs little.
  constexpr int max_gap = 16;
  int missing = 0;
  for (int index = 0; missing < max_gap && index < 4096; ++index) {
    const auto text = read_attribute(port_dir + "/gids/" + std::to_string(index));
    if (!text) {
      ++missing;
      continue;
    }
    missing = 0;
    const auto gid = parse_gid(*text);
    if (!gid || !is_ipv4_mapped(*gid)) continue;
    const auto type = read_attribute(port_dir + "/gid_attrs/types/" + std::to_string(index));
    if (!type || *type != "RoCE v2") continue;
    // An entry without a netdev is stale (its interface is gone).
    const auto netdev = read_attribute(port_dir + "/gid_attrs/ndevs/" + std::to_string(index));
    if (!netdev || netdev->empty()) continue;
    return index;
  }
  return std::nullopt;
}

}  // namespace ringrun::topology
