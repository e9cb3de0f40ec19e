// libFuzzer target: the rendezvous store's frame parser, fed as the server feeds it (pieces of
// arbitrary size, authenticated after a HELLO). A body is never allocated past the limits, and a
// malformed stream ends in an error, never a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "ringrun/store.hpp"
#include "ringrun/store_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringrun::store;
  if (size == 0) return 0;
  // The first byte chooses the piece size: 1..16 bytes, or everything at once.
  const std::size_t piece = data[0] & 0x10 ? size : (data[0] & 0x0f) + 1u;
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  const std::size_t length = size - 1;
  wire::FrameReader reader;
  bool authenticated = false;
  std::size_t offset = 0;
  while (offset < length) {
    const std::size_t chunk = std::min(piece, length - offset);
    const std::size_t used = reader.feed(bytes + offset, chunk, authenticated);
    if (used > chunk) std::abort();
    offset += used;
    if (!reader.error().empty()) break;
    if (reader.complete()) {
      const auto& header = reader.header();
      if (header.key_len > kMaxKeyBytes) std::abort();
      if (header.value_len > (authenticated ? kMaxValueBytes : kMaxSecretBytes)) std::abort();
      if (reader.key().size() != header.key_len || reader.value().size() != header.value_len) std::abort();
      if (!authenticated && header.type == wire::kHello) authenticated = true;
      reader.next_frame();
    } else if (used == 0) {
      std::abort();  // neither complete nor failed, yet it takes nothing: the server would spin
    }
  }
  return 0;
}
