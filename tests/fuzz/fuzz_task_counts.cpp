// libFuzzer target: Slurm per-node count lists ("2(x3),1"). At most `limit` counts or InputError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ringrun/slurm.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t limit = 20'000;
  const std::string_view counts(reinterpret_cast<const char*>(data), size);
  try {
    const auto values = ringrun::expand_task_counts(counts, "SLURM_TASKS_PER_NODE", limit);
    if (values.size() > limit) std::abort();
    for (int v : values)
      if (v < 0) std::abort();
  } catch (const ringrun::InputError&) {
  }
  return 0;
}
