// Reading a variable of the table (ringrun/environment_variables.hpp): one function per type, each
// taking the value from the process's environment or from a captured one, checking it against
// the variable's type and bounds, and applying the table's default when it is unset. A reader
// writes neither a name, a default nor a bound of its own (tests/launcher/variable_literals.py).
#pragma once

#include <ringrun/environment_variables.hpp>
#include <ringrun/input_error.hpp>

#include <map>
#include <optional>
#include <string>

namespace ringrun::variables {

// A captured environment (the task shim's, the launcher's own as it was read once).
using Values = std::map<std::string, std::string>;

// The value as set; nullopt when unset or empty. No default is applied: for a variable whose
// presence is the signal (elastic mode's RINGRUN_ELASTIC_ID) or whose default is computed.
std::optional<std::string> read_set(const Variable& v, const Values* from = nullptr);

// The value, else the table's default; nullopt when neither. A malformed or out-of-bounds value
// throws InputError naming the variable, the value, what it must be and the default.
std::optional<std::string> read_text(const Variable& v, const Values* from = nullptr);
std::optional<long long> read_integer(const Variable& v, const Values* from = nullptr);
std::optional<double> read_number(const Variable& v, const Values* from = nullptr);
std::optional<bool> read_flag(const Variable& v, const Values* from = nullptr);  // 0 or 1

// An integer or number outside the table: another launcher's variable (OMPI_COMM_WORLD_RANK,
// SLURM_PROCID), checked as the table's are.
long long parse_integer(std::string_view name, const std::string& text, double min, double max);
double parse_number(std::string_view name, const std::string& text, double min, double max);

}  // namespace ringrun::variables
