// Element types and reduction ops of the C API as the benchmark sees them: names for the command
// line and the table, element sizes, and reading/writing one element as a double (fp16 and bf16
// converted by hand, so the benchmark needs no compiler support for them).
#pragma once

#include <ringrun/ringrun.h>

#include <cstddef>
#include <optional>
#include <string_view>

namespace ringrun::bench {

std::optional<ringrun_dtype> parse_dtype(std::string_view name);
std::optional<ringrun_op> parse_op(std::string_view name);
std::string_view dtype_name(ringrun_dtype dtype);
std::string_view op_name(ringrun_op op);
std::size_t dtype_bytes(ringrun_dtype dtype);
bool dtype_is_integer(ringrun_dtype dtype);

// Writes `value`, rounded (floats) or converted with wrap-around (integers) to `dtype`, at index i.
void store_element(void *buffer, std::size_t index, ringrun_dtype dtype, double value);
double load_element(const void *buffer, std::size_t index, ringrun_dtype dtype);

// The relative error a correct reduction of `ranks` inputs may show in `dtype`.
double dtype_tolerance(ringrun_dtype dtype, int ranks);

}  // namespace ringrun::bench
