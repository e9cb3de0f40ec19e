// Which GPUs of a node its ranks get, and the id each one has in its vendor's device variable.
//
// NVIDIA: the index among the node's NVIDIA GPUs in PCI bus order, which is CUDA's numbering under
// CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA counts NVIDIA devices only).
// AMD: ROCr's index, which ROCR_VISIBLE_DEVICES takes. ROCr numbers GPUs in the kernel's (KFD)
// order, not PCI bus order (LLNL Corona: rsmi2 is the first on the bus); hwloc's rsmiN OS devices
// carry ROCm SMI's index N, the same numbering Slurm's gres/gpu (AutoDetect=rsmi) writes into
// ROCR_VISIBLE_DEVICES. Without rsmi names (hwloc built without RSMI) PCI bus order is the best
// guess left.
#include <algorithm>
#include <charconv>
#include <string_view>

#include "gpu_ids.hpp"

namespace ringrun::topology {
namespace {

std::optional<int> parse_index(std::string_view id) {
  int value = 0;
  const char* end = id.data() + id.size();
  auto [ptr, ec] = std::from_chars(id.data(), end, value);
  if (id.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

// "rsmi12" -> 12; nullopt for other OS device names.
std::optional<int> rsmi_number(const std::string& name) {
  constexpr std::string_view prefix = "rsmi";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return parse_index(std::string_view(name).substr(prefix.size()));
}

// The planned vendor's GPUs with their device ids, in the order ranks get them (by id).
std::vector<UsableGpu> vendor_gpus(const Topology& topo) {
  const std::string vendor = planned_gpu_vendor(topo);
  bool by_rsmi = vendor == "amd";
  for (const Gpu& gpu : topo.gpus)
    if (gpu.vendor == vendor && !rsmi_number(gpu.name)) by_rsmi = false;
  std::vector<std::pair<int, int>> ids;  // (device id, topology index)
  int ordinal = 0;
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    if (topo.gpus[g].vendor != vendor) continue;
    ids.emplace_back(by_rsmi ? *rsmi_number(topo.gpus[g].name) : ordinal++, static_cast<int>(g));
  }
  std::stable_sort(ids.begin(), ids.end());
  std::vector<UsableGpu> gpus;
  for (const auto& [id, index] : ids) gpus.push_back({std::to_string(id), index});
  return gpus;
}

}  // namespace

std::string planned_gpu_vendor(const Topology& topo) {
  for (const char* vendor : {"nvidia", "amd"})
    for (const Gpu& gpu : topo.gpus)
      if (gpu.vendor == vendor) return vendor;
  return topo.gpus.empty() ? std::string() : topo.gpus.front().vendor;
}

std::vector<UsableGpu> usable_gpus(const Topology& topo, const NodeOptions& options) {
  std::vector<UsableGpu> all = vendor_gpus(topo);
  const bool amd = planned_gpu_vendor(topo) == "amd";
  const auto& inherited = amd && options.visible_amd_gpus ? options.visible_amd_gpus : options.visible_gpus;
  if (!inherited) return all;
  // An inherited id is in the device variable's numbering; ids that name no GPU of the topology
  // (UUIDs, out of range) are given as they are, without locality.
  std::vector<UsableGpu> gpus;
  for (const std::string& id : *inherited) {
    UsableGpu usable{id, std::nullopt};
    const auto number = parse_index(id);
    for (const UsableGpu& gpu : all)
      if (number && parse_index(gpu.id) == number) usable.index = gpu.index;
    gpus.push_back(std::move(usable));
  }
  return gpus;
}

size_t usable_gpu_count(const Topology& topo, const NodeOptions& options) {
  return usable_gpus(topo, options).size();
}

}  // namespace ringrun::topology
