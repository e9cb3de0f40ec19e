// libFuzzer target: Slurm hostlist expansion. Whatever the input, expand_hostlist() returns at most
// `limit` names or throws InputError; it never crashes, hangs or allocates past the limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ringrun/slurm.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t limit = 20'000;
  const std::string_view list(reinterpret_cast<const char*>(data), size);
  try {
    const auto names = ringrun::expand_hostlist(list, limit, "SLURM_JOB_NODELIST");
    if (names.size() > limit) std::abort();
  } catch (const ringrun::InputError&) {
  }
  return 0;
}
