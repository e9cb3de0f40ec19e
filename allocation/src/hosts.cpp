// -H and --hostfile: horovodrun's spellings. Both produce an Allocation with explicit slots.
#include <ringrun/allocation.hpp>

#include <fmt/format.h>

#include <charconv>
#include <map>

namespace ringrun {

bool valid_hostname(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::optional<int> parse_slots(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) return std::nullopt;
  return value;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

Allocation parse_hosts_flag(std::string_view spec) {
  Allocation alloc;
  alloc.source = AllocationSource::hosts_flag;
  alloc.explicit_slots = true;
  std::map<std::string, std::size_t, std::less<>> seen;
  std::size_t start = 0;
  if (trim(spec).empty()) throw InputError("-H '' : no hosts given (write host:slots,..., e.g. -H n1:4,n2:4)");
  while (start <= spec.size()) {
    std::size_t comma = spec.find(',', start);
    std::string_view item = spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start);
    std::size_t column = start + 1;
    if (item.empty())
      throw InputError(fmt::format("-H '{}' : empty host entry at column {} (write host:slots,..., e.g. -H n1:4,n2:4)",
                                   spec, column));
    std::string_view name = item;
    int slots = 1;
    if (auto colon = item.rfind(':'); colon != std::string_view::npos) {
      name = item.substr(0, colon);
      auto parsed = parse_slots(item.substr(colon + 1));
      if (!parsed)
        throw InputError(fmt::format("-H '{}' : slots '{}' of host '{}' at column {} is not a positive number "
                                     "(write host:slots, e.g. n1:4)",
                                     spec, item.substr(colon + 1), name, column + colon + 1));
      slots = *parsed;
    }
    if (!valid_hostname(name))
      throw InputError(fmt::format("-H '{}' : '{}' at column {} is not a host name (letters, digits, '.', '-', '_')",
                                   spec, name, column));
    if (auto it = seen.find(name); it != seen.end())
      throw InputError(fmt::format("-H '{}' : host '{}' is listed twice; list each host once with its total slots",
                                   spec, name));
    seen.emplace(std::string(name), alloc.hosts.size());
    alloc.hosts.push_back(HostSlots{std::string(name), slots, {}});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return alloc;
}

Allocation parse_hostfile(std::string_view text, std::string_view origin) { return parse_hostfile(text, origin, 1); }

Allocation parse_hostfile(std::string_view text, std::string_view origin, int default_slots) {
  Allocation alloc;
  alloc.source = AllocationSource::hostfile;
  alloc.explicit_slots = true;
  std::map<std::string, int, std::less<>> first_line;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;

    // Split on blanks: the host name, then key=value words.
    std::vector<std::string_view> words;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    std::string_view name = words[0];
    int slots = default_slots;
    // MPICH's and Intel MPI's `host:N` (an MPIJob's hostfile for them).
    if (auto colon = name.rfind(':'); colon != std::string_view::npos && words.size() == 1) {
      auto parsed = parse_slots(name.substr(colon + 1));
      if (!parsed)
        throw InputError(fmt::format("hostfile '{}' line {}: '{}' is not a positive slot count (write 'host:N' or "
                                     "'host slots=N')",
                                     origin, line_no, name.substr(colon + 1)));
      slots = *parsed;
      name = name.substr(0, colon);
    }
    if (!valid_hostname(name))
      throw InputError(fmt::format("hostfile '{}' line {}: '{}' is not a host name (write 'host slots=N')", origin,
                                   line_no, name));
    for (std::size_t w = 1; w < words.size(); ++w) {
      std::string_view word = words[w];
      if (word.starts_with("slots=")) {
        auto parsed = parse_slots(word.substr(6));
        if (!parsed)
          throw InputError(fmt::format("hostfile '{}' line {}: '{}' is not a positive slot count (write 'host slots=N')",
                                       origin, line_no, word));
        slots = *parsed;
      } else if (word.starts_with("max_slots=")) {
        // Open MPI's hostfile key; ringrun's limit is `slots`, so it is accepted and ignored.
      } else {
        throw InputError(fmt::format("hostfile '{}' line {}: unknown word '{}' (write 'host slots=N')", origin, line_no,
                                     word));
      }
    }
    if (auto it = first_line.find(name); it != first_line.end())
      throw InputError(fmt::format("hostfile '{}' line {}: host '{}' is listed again (first on line {}); list each "
                                   "host once with its total slots",
                                   origin, line_no, name, it->second));
    first_line.emplace(std::string(name), line_no);
    alloc.hosts.push_back(HostSlots{std::string(name), slots, {}});
  }
  if (alloc.hosts.empty())
    throw InputError(fmt::format("hostfile '{}' lists no hosts (write one 'host slots=N' line per host)", origin));
  return alloc;
}

}  // namespace ringrun
