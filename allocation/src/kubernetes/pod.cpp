// A per-pod job (ringrun/kubernetes.hpp): torchrun's PET_* variables, as Kubeflow Trainer v2's
// torch runtime sets them in every pod of a TrainJob.
#include <ringrun/kubernetes.hpp>

#include <fmt/format.h>

#include <charconv>

namespace ringrun {
namespace {

// A whole number from `low` to `high`, or InputError naming the variable and what it must be.
int whole_number(const Environment& env, std::string_view name, int low, int high, std::string_view what) {
  const std::string& text = env.at(std::string(name));
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high)
    throw InputError(fmt::format("{}='{}' : {} must be a whole number from {} to {}", name, text, what, low, high));
  return value;
}

bool has(const Environment& env, std::string_view name) {
  auto it = env.find(std::string(name));
  return it != env.end() && !it->second.empty();
}

}  // namespace

std::optional<PodContract> pod_contract(const Environment& env) {
  if (!has(env, "PET_NNODES")) return std::nullopt;
  const std::string& nnodes = env.at("PET_NNODES");
  if (nnodes.find(':') != std::string::npos)
    throw InputError(fmt::format("PET_NNODES='{}' : a range of pods is elastic torchrun's; ringrun's per-pod mode "
                                 "needs a fixed count (set the TrainJob's numNodes)",
                                 nnodes));
  PodContract c;
  c.nnodes = whole_number(env, "PET_NNODES", 1, 1'000'000, "the number of pods");
  const char* rank_name = has(env, "PET_NODE_RANK") ? "PET_NODE_RANK" : "JOB_COMPLETION_INDEX";
  if (!has(env, rank_name))
    throw InputError(fmt::format("PET_NNODES={} but neither PET_NODE_RANK nor JOB_COMPLETION_INDEX says which pod "
                                 "this is; set PET_NODE_RANK (an Indexed Job sets JOB_COMPLETION_INDEX)",
                                 c.nnodes));
  c.node_rank = whole_number(env, rank_name, 0, c.nnodes - 1, "this pod's index among PET_NNODES");
  if (has(env, "PET_NPROC_PER_NODE") && env.at("PET_NPROC_PER_NODE") != "auto")
    c.nproc_per_node = whole_number(env, "PET_NPROC_PER_NODE", 1, 1'000'000, "the ranks per pod (or auto)");
  for (const char* name : {"PET_MASTER_ADDR", "PET_MASTER_PORT"})
    if (!has(env, name))
      throw InputError(fmt::format("PET_NNODES={} but {} is not set; pod 0's address and port must be given to "
                                   "every pod (Trainer's torch runtime sets them)",
                                   c.nnodes, name));
  c.master_addr = env.at("PET_MASTER_ADDR");
  c.master_port = whole_number(env, "PET_MASTER_PORT", 1, 65535, "pod 0's store port");
  return c;
}

Allocation pod_allocation(const PodContract& contract, int nproc_per_node, const std::string& self) {
  Allocation alloc;
  alloc.source = AllocationSource::pod;
  alloc.explicit_slots = true;
  for (int i = 0; i < contract.nnodes; ++i)
    alloc.hosts.push_back(HostSlots{i == contract.node_rank ? self : fmt::format("pod-{}", i), nproc_per_node, {}});
  return alloc;
}

}  // namespace ringrun
