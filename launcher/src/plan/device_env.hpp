// The variables that hand a rank its GPU, by vendor (CUDA's or ROCm's).
#pragma once

#include <ringrun/rank_environment.hpp>

#include <functional>
#include <map>
#include <string>

namespace ringrun {

// Sets the rank's GPU `gpu` (one id or a comma list) in the device variable of `vendor` ("amd":
// ROCR_VISIBLE_DEVICES; anything else: CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID).
// `user_sets(NAME)`: whether the user's -x or ringrun's environment sets NAME.
void set_device_variables(const std::string& gpu, const std::string& vendor,
                          const std::function<bool(const std::string&)>& user_sets,
                          EnvironmentMap& env);

}  // namespace ringrun
