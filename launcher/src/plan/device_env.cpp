// The variables that hand a rank its GPU, and the inherited GPU lists they index into.
#include "plan/device_env.hpp"


#include <optional>
#include <vector>

namespace ringrun {
namespace {

// "4,,5" -> {"4", "5"}; nullopt when `name` is unset.
std::optional<std::vector<std::string>> id_list(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  std::vector<std::string> ids;
  std::string id;
  for (char c : it->second + ",") {
    if (c != ',') {
      id += c;
    } else if (!id.empty()) {
      ids.push_back(id);
      id.clear();
    }
  }
  return ids;
}

}  // namespace

// NVIDIA: the topology numbers GPUs in PCI bus order; CUDA's default order is "fastest first",
// hence CUDA_DEVICE_ORDER=PCI_BUS_ID.
// AMD: ROCR_VISIBLE_DEVICES, the lowest layer (ROCr), which HIP, OpenCL and RCCL all sit on; ROCm
// has no CUDA_DEVICE_ORDER. HIP then applies HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES and
// GPU_DEVICE_ORDINAL to what ROCr left, so an inherited node-wide value (Slurm may set them beside
// ROCR_VISIBLE_DEVICES) would name devices the rank no longer has: those set are renumbered to the
// rank's own devices, 0..n-1 (a -x value still wins; make_plan applies it last).
void set_device_variables(const std::string& gpu, const std::string& vendor,
                          const std::function<bool(const std::string&)>& user_sets,
                          EnvironmentMap& env) {
  if (vendor != "amd") {
    env["CUDA_VISIBLE_DEVICES"] = gpu;
    if (!user_sets("CUDA_DEVICE_ORDER")) env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
    return;
  }
  env["ROCR_VISIBLE_DEVICES"] = gpu;
  std::string own = "0";
  for (std::size_t i = 0, n = 1; i < gpu.size(); ++i)
    if (gpu[i] == ',') own += "," + std::to_string(n++);
  for (const char* hip_level : {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"})
    if (user_sets(hip_level)) env[hip_level] = own;
}

void inherit_visible_gpus(const Environment& env, topology::NodeOptions& node) {
  if (!node.visible_gpus) node.visible_gpus = id_list(env, "CUDA_VISIBLE_DEVICES");
  if (!node.visible_amd_gpus) node.visible_amd_gpus = id_list(env, "ROCR_VISIBLE_DEVICES");
  if (!node.visible_amd_gpus) node.visible_amd_gpus = id_list(env, "HIP_VISIBLE_DEVICES");
}

}  // namespace ringrun
