// Reading the environment: env_string/env_int/env_number, so that a malformed value fails with a
// message naming the variable. Which variables the runtime reads, their meaning, unit and default
// are in one table the launcher shares, ringrun/environment_variables.hpp (variables::kAll); the
// rank under other launchers comes from theirs (bootstrap.cpp: OMPI_COMM_WORLD_RANK, PMIX_RANK,
// SLURM_PROCID, PMI_RANK, with MASTER_ADDR/MASTER_PORT for the store).
#pragma once

#include "ringrun/environment_variables.hpp"

#include <optional>
#include <string>

namespace ringrun::core {

std::optional<std::string> env_string(const char* name);  // unset or empty: nullopt
// The integer value of name; nullopt when unset; RuntimeError (bootstrap) when not an integer
// in [min, max].
std::optional<long long> env_int(const char* name, long long min, long long max);
// The same for a decimal number ("2.5"): the launcher passes --cycle-time-ms and kin as given.
std::optional<double> env_number(const char* name, double min, double max);

}  // namespace ringrun::core
