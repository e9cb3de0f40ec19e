// The NCCL options' names (--nccl-algo, --nccl-proto: validate_nccl_algo and validate_nccl_proto in
// ringrun/plan.hpp) and the user's own NCCL_* variables that contradict ringrun's options.
#pragma once

#include <ringrun/plan.hpp>

#include <map>
#include <string>
#include <vector>

namespace ringrun {

// One warning line for each NCCL_* variable the user sets (by -x, `user_env`, or in ringrun's
// environment) against what ringrun's options ask for; the ranks keep the user's value.
std::vector<std::string> nccl_contradictions(const LaunchOptions& opt, const std::map<std::string, std::string>& user_env,
                                             const Environment& launcher_env);

}  // namespace ringrun
