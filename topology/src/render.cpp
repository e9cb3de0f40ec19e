// `ringrun topo`: the topology and a node's slots as a table or as JSON.
#include <fmt/format.h>

#include <algorithm>

#include "nic_choice.hpp"
#include "ringrun/topology.hpp"

namespace ringrun::topology {
namespace {

std::string join_ints(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += fmt::format("{}{}", i ? separator : "", values[i]);
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out += c;
    }
  }
  return out + "\"";
}

// Appended rather than "[" + ... + "]": GCC 12's -Wrestrict misfires on operator+ with a temporary
// in Release builds (and -Werror makes that fatal).
std::string json_ints(const std::vector<int>& values) {
  std::string out = "[";
  out += join_ints(values, ",");
  out += ']';
  return out;
}

std::string json_strings(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += json_string(values[i]);
  }
  return out + "]";
}

std::string json_optional(const std::optional<std::string>& value) {
  return value ? json_string(*value) : "null";
}

std::string device_variable(const LocalSlot& slot) {
  return slot.gpu_vendor == "amd" ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
}

}  // namespace

std::string render_topology_table(const Topology& topo, const std::vector<LocalSlot>* slots) {
  size_t pus = 0;
  for (const auto& core : topo.cores) pus += core.pus.size();
  std::string out = fmt::format("topology: {} ({} GPUs, {} NICs, {} NUMA nodes with cores, {} cores, {} PUs)\n",
                                topo.origin, topo.gpus.size(), topo.nics.size(), topo.numa_nodes.size(),
                                topo.cores.size(), pus);
  if (!topo.gpus.empty()) {
    out += fmt::format("{:<4} {:<13} {:<10} {:<6} {:<24} {:<14} {}\n", "GPU", "BUS ID", "NAME", "NUMA", "CORES",
                       "CLOSEST NIC", "DISTANCE");
    for (size_t g = 0; g < topo.gpus.size(); ++g) {
      const Gpu& gpu = topo.gpus[g];
      const auto nic = closest_nic(topo, g);
      out += fmt::format("{:<4} {:<13} {:<10} {:<6} {:<24} {:<14} {}\n", g, gpu.bus_id, gpu.name.empty() ? "-" : gpu.name,
                         join_ints(gpu.numa_nodes, ","), format_cpulist(gpu.local_cpus),
                         nic ? topo.nics[*nic].name : "-", nic ? to_string(topo.nic_distance[g][*nic]) : "-");
    }
  }
  if (!topo.nics.empty()) {
    out += fmt::format("{:<14} {:<11} {:<13} {:<6} {:<8} {}\n", "NIC", "KIND", "BUS ID", "NUMA", "PORT", "NETDEVS");
    for (const Nic& nic : topo.nics) {
      std::string netdevs;
      for (const auto& name : nic.netdevs) netdevs += (netdevs.empty() ? "" : ",") + name;
      const auto port = first_active_port(nic);
      const std::string port_text = nic.ports.empty() ? "-" : port ? fmt::format("{}", *port) : "down";
      out += fmt::format("{:<14} {:<11} {:<13} {:<6} {:<8} {}\n", nic.name, nic.kind,
                         nic.bus_id.empty() ? "-" : nic.bus_id, join_ints(nic.numa_nodes, ","), port_text,
                         netdevs.empty() ? "-" : netdevs);
    }
  }
  if (slots) {
    out += fmt::format("{:<5} {:<6} {:<24} {:<14} {:<7} {}\n", "RANK", "GPU", "CPUS", "NIC", "GID_IDX", "ENV");
    for (size_t r = 0; r < slots->size(); ++r) {
      const LocalSlot& slot = (*slots)[r];
      // The device variable first: which one a rank gets depends on the GPU's vendor.
      std::string env = slot.gpu ? fmt::format("{}={}", device_variable(slot), *slot.gpu) : std::string();
      for (const auto& [name, value] : slot.env) env += fmt::format("{}{}={}", env.empty() ? "" : " ", name, value);
      out += fmt::format("{:<5} {:<6} {:<24} {:<14} {:<7} {}\n", r, slot.gpu.value_or("-"),
                         slot.cpus.empty() ? "unbound" : format_cpulist(slot.cpus), slot.nic.value_or("-"),
                         slot.roce_gid_index ? fmt::format("{}", *slot.roce_gid_index) : "-", env.empty() ? "-" : env);
    }
  }
  return out;
}

std::string topology_to_json(const Topology& topo, const std::vector<LocalSlot>* slots) {
  std::string out = fmt::format("{{\"origin\":{},\"gpus\":[", json_string(topo.origin));
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    const Gpu& gpu = topo.gpus[g];
    const auto nic = closest_nic(topo, g);
    out += fmt::format(
        "{}{{\"index\":{},\"bus_id\":{},\"vendor\":{},\"name\":{},\"numa_nodes\":{},\"cpus\":{},"
        "\"closest_nic\":{},\"distance\":{}}}",
        g ? "," : "", g, json_string(gpu.bus_id), json_string(gpu.vendor), json_string(gpu.name),
        json_ints(gpu.numa_nodes), json_string(format_cpulist(gpu.local_cpus)),
        nic ? json_string(topo.nics[*nic].name) : "null",
        nic ? json_string(to_string(topo.nic_distance[g][*nic])) : "null");
  }
  out += "],\"nics\":[";
  for (size_t n = 0; n < topo.nics.size(); ++n) {
    const Nic& nic = topo.nics[n];
    const auto port = first_active_port(nic);
    out += fmt::format(
        "{}{{\"name\":{},\"kind\":{},\"bus_id\":{},\"numa_nodes\":{},\"ports\":{},\"port_states\":{},"
        "\"active_port\":{},\"netdevs\":{}}}",
        n ? "," : "", json_string(nic.name), json_string(nic.kind), json_string(nic.bus_id),
        json_ints(nic.numa_nodes), json_ints(nic.ports), json_ints(nic.port_states),
        port ? fmt::format("{}", *port) : "null", json_strings(nic.netdevs));
  }
  std::vector<unsigned> pus;
  for (const auto& core : topo.cores) pus.insert(pus.end(), core.pus.begin(), core.pus.end());
  out += fmt::format("],\"numa_nodes\":{},\"cores\":{},\"cpus\":{}", json_ints(topo.numa_nodes), topo.cores.size(),
                     json_string(format_cpulist(pus)));
  if (slots) {
    out += ",\"slots\":[";
    for (size_t r = 0; r < slots->size(); ++r) {
      const LocalSlot& slot = (*slots)[r];
      std::string env;
      for (const auto& [name, value] : slot.env) {
        env += fmt::format("{}{}:{}", env.empty() ? "" : ",", json_string(name), json_string(value));
      }
      out += fmt::format(
          "{}{{\"local_rank\":{},\"gpu\":{},\"gpu_index\":{},\"gpu_variable\":{},\"cpus\":{},\"nic\":{},"
          "\"numa_nodes\":{},\"roce_gid_index\":{},\"env\":{{{}}}}}",
          r ? "," : "", r, json_optional(slot.gpu), slot.gpu_index ? fmt::format("{}", *slot.gpu_index) : "null",
          slot.gpu ? json_string(device_variable(slot)) : "null",
          json_string(format_cpulist(slot.cpus)), json_optional(slot.nic), json_ints(slot.numa_nodes),
          slot.roce_gid_index ? fmt::format("{}", *slot.roce_gid_index) : "null", env);
    }
    out += "]";
  }
  return out + "}";
}

}  // namespace ringrun::topology
