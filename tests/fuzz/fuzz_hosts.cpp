// libFuzzer target: the -H flag and hostfile parsers. The first byte picks the parser; every
// accepted allocation has named hosts with positive slots.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ringrun/allocation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const ringrun::Allocation allocation =
        data[0] & 1 ? ringrun::parse_hostfile(text, "fuzz.hosts") : ringrun::parse_hosts_flag(text);
    for (const auto& host : allocation.hosts)
      if (host.name.empty() || host.slots < 1) std::abort();
  } catch (const ringrun::InputError&) {
  }
  return 0;
}
