// The environment contract's one table (ringrun/environment_variables.hpp) against ringrun(1)'s
// ENVIRONMENT section, and the lists the launcher derives from it.
#include <ringrun/environment_variables.hpp>
#include <ringrun/variable_read.hpp>
#include <ringrun/rank_environment.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

using namespace ringrun;

namespace {

// The text of a man page's ENVIRONMENT section (up to the next .SH).
std::string environment_section(const std::string& page) {
  std::ifstream in(std::string(RINGRUN_SOURCE_DIR) + "/man/" + page);
  REQUIRE_MESSAGE(in, "cannot read man/" << page);
  std::string line, section;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.starts_with(".SH ")) inside = line == ".SH ENVIRONMENT";
    else if (inside) section += line + "\n";
  }
  REQUIRE_MESSAGE(!section.empty(), "man/" << page << " has no ENVIRONMENT section");
  return section;
}

// The words of `text` that look like variable names: upper case, digits and underscores, starting
// with a letter and not ending in an underscore. A plain scan: std::regex trips GCC 12's
// maybe-uninitialized warning in the sanitizer build.
std::set<std::string> variable_words(const std::string& text) {
  auto in_word = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; };
  std::set<std::string> out;
  for (std::size_t i = 0; i < text.size();) {
    if (!in_word(text[i])) { ++i; continue; }
    std::size_t end = i;
    while (end < text.size() && in_word(text[end])) ++end;
    std::string run = text.substr(i, end - i);
    i = end;
    // The regex this replaces matched from the first letter to the last letter or digit.
    const std::size_t first = run.find_first_not_of("0123456789_");
    const std::size_t last = run.find_last_not_of('_');
    if (first != std::string::npos && first < last) out.insert(run.substr(first, last - first + 1));
  }
  return out;
}

}  // namespace

TEST_CASE("ringrun(1) documents every variable the table marks documented") {
  const std::set<std::string> words = variable_words(environment_section("ringrun.1"));
  for (const variables::Variable* v : variables::kAll)
    if (v->documented)
      CHECK_MESSAGE(words.count(v->name), std::string(v->name) << " is missing from man/ringrun.1's ENVIRONMENT");
}

TEST_CASE("the man pages name no RINGRUN_ variable the table lacks") {
  for (const char* page : {"ringrun.1", "ringrun.3"})
    for (const std::string& word : variable_words(environment_section(page)))
      if (word.starts_with(variables::kPrefix))
        CHECK_MESSAGE(variables::find(word), "man/" << page << " names " << word << ", which the table lacks");
}

TEST_CASE("the table names each variable once, with a meaning") {
  std::set<std::string> names;
  for (const variables::Variable* v : variables::kAll) {
    CHECK_MESSAGE(names.insert(v->name).second, std::string(v->name) << " is in the table twice");
    CHECK_MESSAGE(std::string(v->meaning).size() > 0, std::string(v->name) << " has no meaning");
    CHECK(variables::find(v->name) == v);
  }
  CHECK_FALSE(variables::find("RINGRUN_NO_SUCH_VARIABLE"));
}

TEST_CASE("a variable's value travels under every name that carries it") {
  // The identity names the plan renders per rank: derived from the table, sorted by name.
  std::set<std::string> identity;
  std::string previous;
  for (const IdentityVariable& v : kIdentityVariablesByName) {
    CHECK(previous < v.name);
    previous = v.name;
    identity.insert(v.name);
  }
  CHECK(identity == std::set<std::string>{"GROUP_RANK", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
                                          "HOROVOD_HOSTNAME", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                                          "HOROVOD_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK",
                                          "RINGRUN_CROSS_RANK", "RINGRUN_CROSS_SIZE", "RINGRUN_HOSTNAME",
                                          "RINGRUN_LOCAL_RANK", "RINGRUN_LOCAL_SIZE", "RINGRUN_RANK"});
  // What the srun and mpirun backends pass to the task shim.
  std::set<std::string> travel;
  for (const variables::Variable* v : variables::kAll)
    if (v->travels) travel.insert(v->name);
  CHECK(travel == std::set<std::string>{
                      "HOROVOD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RINGRUN_CACHE_CAPACITY", "RINGRUN_CYCLE_TIME_MS",
                      "RINGRUN_FUSION_THRESHOLD_MB", "RINGRUN_JOB_SECRET", "RINGRUN_MEM_BIND", "RINGRUN_NCCL_ALGO",
                      "RINGRUN_NCCL_IB_GID_INDEX", "RINGRUN_NCCL_PROTO", "RINGRUN_NETWORK_INTERFACE", "RINGRUN_SIZE",
                      "RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", "RINGRUN_STALL_CHECK_WARNING_TIME_SECONDS",
                      "RINGRUN_START_TIMEOUT", "RINGRUN_STORE_ADDR", "RINGRUN_TCP", "RINGRUN_TIMELINE_FILENAME",
                      "RINGRUN_TIMELINE_MARK_CYCLES", "WORLD_SIZE"});
}

TEST_CASE("every variable reads through its type: the table's default when unset, its bounds when set") {
  using variables::Type;
  for (const variables::Variable* v : variables::kAll) {
    CAPTURE(v->name);
    const variables::Values unset;
    const bool has_default = *v->default_value != '\0';
    switch (v->type) {
      case Type::integer:
      case Type::number: {
        auto read = [v](const variables::Values& env) {
          return v->type == Type::integer ? static_cast<double>(variables::read_integer(*v, &env).value_or(-1))
                                          : variables::read_number(*v, &env).value_or(-1);
        };
        if (has_default) CHECK(read(unset) == *variables::parse_decimal(v->default_value));
        else CHECK(read(unset) == -1);
        const std::string low = fmt::format("{:.0f}", std::ceil(v->min)), high = fmt::format("{:.0f}", std::floor(v->max));
        CHECK(read({{v->name, low}}) == std::ceil(v->min));
        CHECK(read({{v->name, high}}) == std::floor(v->max));
        for (const std::string& bad : {fmt::format("{:.0f}", v->max * 2 + 1), std::string("x"), std::string("1x")})
          CHECK_THROWS_WITH_AS(read({{v->name, bad}}), doctest::Contains(v->name), InputError);
        if (v->min > 0) CHECK_THROWS_AS(read({{v->name, "0"}}), InputError);
        break;
      }
      case Type::flag:
        CHECK(variables::read_flag(*v, &unset) == (has_default ? std::optional<bool>(std::string(v->default_value) == "1")
                                                              : std::nullopt));
        {
          const variables::Values on{{v->name, "1"}}, bad{{v->name, "yes"}};
          CHECK(variables::read_flag(*v, &on).value_or(false));
          CHECK_THROWS_WITH_AS(variables::read_flag(*v, &bad), doctest::Contains(v->name), InputError);
        }
        break;
      case Type::text:
        CHECK(variables::read_text(*v, &unset) == (has_default ? std::optional<std::string>(v->default_value)
                                                              : std::nullopt));
        CHECK(v->min == 0);
        CHECK(v->max == 0);
        break;
    }
  }
}

TEST_CASE("a read of another type than the table's is a programming error, not bad input") {
  CHECK_THROWS_AS(variables::read_text(variables::kPeerTimeout), std::logic_error);
  CHECK_THROWS_AS(variables::read_integer(variables::kStoreAddr), std::logic_error);
}

TEST_CASE("the message names the variable, the bounds and the default") {
  const variables::Values env{{variables::kPeerTimeout.name, "0"}};
  CHECK_THROWS_WITH(variables::read_integer(variables::kPeerTimeout, &env),
                    "RINGRUN_PEER_TIMEOUT='0': expected an integer from 1 to 86400 (seconds); fix it, or unset it "
                    "for 30");
}
