// Checks of option values for the command line. CLI11's own checks answer with machine limits
// ("Value 0 not in range 0.000000 to 1797693134862315...") and its conversions with "Could not
// convert"; these answer in one line naming the option, the value and what to give instead, by
// throwing UsageError from inside CLI11's parse.
#pragma once

#include <ringrun/environment_variables.hpp>

#include <CLI/CLI.hpp>

#include <limits>
#include <string>
#include <vector>

namespace ringrun::cli_values {

// A whole number from `min` to `max` (`max` is left unsaid when it is the type's limit). `option`
// is the spelling the user knows (-np), `what` names the quantity ("the number of ranks"),
// `example` a good value.
CLI::Validator whole_number(std::string option, std::string what, long long min, std::string example,
                            long long max = std::numeric_limits<int>::max());

// A finite decimal number, at least `min` (or above it when `min_exclusive`), at most `max`.
CLI::Validator number(std::string option, std::string what, double min, std::string example,
                      bool min_exclusive = false, double max = std::numeric_limits<double>::infinity());

// The value of an option that sets a variable of the table (ringrun/environment_variables.hpp),
// checked against the variable's type and bounds, with its default as the example: an option and
// its variable accept the same values. `example` when the default is not a good one (0: never).
CLI::Validator table_value(std::string option, std::string what, const variables::Variable& v,
                           std::string example = "");

// One of `choices`; `meaning` says what each does, e.g. "cores (bind to the GPU's cores) or none".
CLI::Validator one_of(std::string option, std::vector<std::string> choices, std::string meaning);

// Splits `text` into words as sh does, without expansions: white space separates, '...' keeps
// everything, "..." keeps all but \" \\ \$ \` (and a backslash-newline), a backslash outside
// quotes keeps the next character. Throws std::invalid_argument naming what is unclosed.
std::vector<std::string> shell_words(const std::string& text);

// The one-line message for CLI11's own parse errors that remain (a missing value, a stray
// argument), naming the option as the user spells it.
std::string describe_parse_error(const CLI::ParseError& error);

}  // namespace ringrun::cli_values
