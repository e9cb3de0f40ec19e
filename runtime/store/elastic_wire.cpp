#include "ringrun/elastic_wire.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace ringrun::store::elastic {
namespace {

constexpr std::string_view kPrefix = "ringrun/elastic/";

[[noreturn]] void bad(std::string_view key, std::string_view value, std::string_view why) {
  throw std::invalid_argument(fmt::format("elastic store key '{}': value '{}' {}", key, value, why));
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// "name=VALUE" at the front of `rest`, up to the next space; advances `rest`.
std::string_view field(std::string_view& rest, std::string_view name, std::string_view key, std::string_view value) {
  if (rest.substr(0, name.size()) != name || rest.size() <= name.size() || rest[name.size()] != '=')
    bad(key, value, fmt::format("lacks '{}=' where expected", name));
  rest.remove_prefix(name.size() + 1);
  const std::size_t space = rest.find(' ');
  std::string_view out = rest.substr(0, space);
  rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  return out;
}

}  // namespace

std::string world_key(int epoch) { return fmt::format("{}{}/world", kPrefix, epoch); }
std::string latest_key() { return fmt::format("{}latest", kPrefix); }
std::string reset_key(int epoch) { return fmt::format("{}{}/reset", kPrefix, epoch); }
std::string leave_key(std::uint64_t id) { return fmt::format("{}leave/{}", kPrefix, id); }
std::string failed_key(std::uint64_t id) { return fmt::format("{}failed/{}", kPrefix, id); }
std::string addr_prefix(int epoch) { return fmt::format("{}{}/addr", kPrefix, epoch); }

std::string encode_world(const PublishedWorld& world) {
  if (world.end) return fmt::format("end {}", world.reason);
  return fmt::format("e={} added={} ids={}", world.epoch, world.added ? 1 : 0, fmt::join(world.ids, ","));
}

PublishedWorld decode_world(std::string_view value, std::string_view key) {
  PublishedWorld world;
  if (value.substr(0, 4) == "end ") {
    world.end = true;
    world.reason = std::string(value.substr(4));
    return world;
  }
  std::string_view rest = value;
  if (!parse_number(field(rest, "e", key, value), world.epoch) || world.epoch < 0)
    bad(key, value, "has an epoch that is not a whole number >= 0");
  const std::string_view added = field(rest, "added", key, value);
  if (added != "0" && added != "1") bad(key, value, "has added= other than 0 or 1");
  world.added = added == "1";
  std::string_view ids = field(rest, "ids", key, value);
  if (!rest.empty()) bad(key, value, "has text after the ids");
  while (!ids.empty()) {
    const std::size_t comma = ids.find(',');
    std::uint64_t id = 0;
    if (!parse_number(ids.substr(0, comma), id)) bad(key, value, "has an id that is not a whole number");
    if (std::find(world.ids.begin(), world.ids.end(), id) != world.ids.end()) bad(key, value, "names an id twice");
    world.ids.push_back(id);
    if (comma == std::string_view::npos) break;
    ids.remove_prefix(comma + 1);
    if (ids.empty()) bad(key, value, "ends with a comma");
  }
  if (world.ids.empty()) bad(key, value, "names no member");
  return world;
}

int rank_of(const PublishedWorld& world, std::uint64_t id) {
  auto it = std::find(world.ids.begin(), world.ids.end(), id);
  return it == world.ids.end() ? -1 : static_cast<int>(it - world.ids.begin());
}

}  // namespace ringrun::store::elastic
