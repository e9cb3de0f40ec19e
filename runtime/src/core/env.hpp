// Reading the environment in the runtime: the table's variables through their typed readers
// (ringrun/variable_read.hpp: the table's default and bounds apply), with a malformed value as a
// RuntimeError (RINGRUN_ERR_BOOTSTRAP) naming the variable; and other launchers' variables that
// carry the rank under them (bootstrap.cpp: OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID,
// PMI_RANK), checked the same way.
#pragma once

#include <ringrun/variable_read.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace ringrun::core {

std::optional<std::string> env_set(const variables::Variable& v);  // as set; no default
std::optional<std::string> env_text(const variables::Variable& v);
std::optional<long long> env_integer(const variables::Variable& v);
std::optional<double> env_number(const variables::Variable& v);
std::optional<bool> env_flag(const variables::Variable& v);
// A number of seconds with a default in the table (RINGRUN_START_TIMEOUT), as milliseconds.
std::chrono::milliseconds env_seconds(const variables::Variable& v);
// The table's default of such a variable, for a struct's initialiser.
consteval std::chrono::milliseconds default_seconds(const variables::Variable& v) {
  return std::chrono::milliseconds(static_cast<long long>(variables::default_number(v) * 1000));
}

// Another launcher's variable: unset or empty is nullopt; env_int checks [min, max].
std::optional<std::string> env_string(const char* name);
std::optional<long long> env_int(const char* name, long long min, long long max);

}  // namespace ringrun::core
