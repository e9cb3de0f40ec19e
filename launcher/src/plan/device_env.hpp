// The variables that hand a rank its GPU, by vendor (CUDA's or ROCm's).
#pragma once

#include <ringrun/allocation.hpp>
#include <ringrun/rank_environment.hpp>
#include <ringrun/topology.hpp>

#include <functional>
#include <map>
#include <string>

namespace ringrun {

// The GPU lists a node's ranks may use, from ringrun's (or the task shim's) environment, where
// `node` has none yet: CUDA_VISIBLE_DEVICES, and for AMD nodes ROCR_VISIBLE_DEVICES, else
// HIP_VISIBLE_DEVICES (Slurm's gres/gpu sets ROCR_VISIBLE_DEVICES for AMD GPUs).
void inherit_visible_gpus(const Environment& env, topology::NodeOptions& node);

// Sets the rank's GPU `gpu` (one id or a comma list) in the device variable of `vendor` ("amd":
// ROCR_VISIBLE_DEVICES; anything else: CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID).
// `user_sets(NAME)`: whether the user's -x or ringrun's environment sets NAME.
void set_device_variables(const std::string& gpu, const std::string& vendor,
                          const std::function<bool(const std::string&)>& user_sets,
                          EnvironmentMap& env);

}  // namespace ringrun
