// libFuzzer target: allocation_from_slurm_env() and make_plan() from an arbitrary SLURM
// environment. The input is NAME=VALUE lines; a line "NP=N" sets -np. Every accepted plan has
// world_size ranks numbered in order, each on a host of the allocation.
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ringrun/plan.hpp"
#include "ringrun/slurm.hpp"

namespace {

// Larger worlds are valid but only slow the fuzzer down (ringrun would start that many processes).
constexpr int kMaxFuzzRanks = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ringrun::Environment env;
  ringrun::LaunchOptions options;
  options.program = {"/bin/true"};
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == text.npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const std::size_t equals = line.find('=');
    if (equals == line.npos) continue;
    const std::string_view name = line.substr(0, equals), value = line.substr(equals + 1);
    if (name == "NP") {
      int np = 0;
      if (std::from_chars(value.data(), value.data() + value.size(), np).ec == std::errc{}) options.num_proc = np;
      continue;
    }
    env[std::string(name)] = std::string(value);
  }
  env["RINGRUN_MAX_HOSTLIST"] = "20000";  // the fuzzer's memory, not the parser's, is the limit here
  try {
    auto allocation = ringrun::allocation_from_slurm_env(env);
    if (!allocation) return 0;
    const int world = options.num_proc ? *options.num_proc : ringrun::default_num_proc(*allocation, 0);
    if (world > kMaxFuzzRanks) return 0;
    ringrun::PlanInputs inputs;
    inputs.allocation = std::move(*allocation);
    inputs.launcher_env = env;
    inputs.master_addr = "127.0.0.1";
    inputs.master_port = 29500;
    inputs.store_addr = "127.0.0.1:29501";
    inputs.job_secret = "fuzz-secret";
    const ringrun::Plan plan = ringrun::make_plan(inputs, options);
    if (plan.world_size != static_cast<int>(plan.ranks.size())) std::abort();
    for (int r = 0; r < plan.world_size; ++r) {
      const auto& slot = plan.ranks[static_cast<std::size_t>(r)];
      if (slot.rank != r || slot.host_index >= inputs.allocation.hosts.size()) std::abort();
      if (slot.local_rank < 0 || slot.local_rank >= slot.local_size) std::abort();
    }
  } catch (const ringrun::InputError&) {
  }
  return 0;
}
