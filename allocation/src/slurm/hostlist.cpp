// Slurm hostlists ("n[01-04,10],gpu[1-2]-ib") and per-node count lists ("2(x3),1").
//
// The hostlist grammar follows Slurm's src/common/hostlist.c (_next_tok, _parse_single_range,
// _push_range_list, _hostlist_create_bracketed) so that the result equals `scontrol show
// hostnames`, including its quirks (strtoul-style numbers, "1-" meaning "1"), with two choices of
// newer Slurm: a '[' without ']' is an error (23.02) and a suffix after ']' is kept (23.11).
#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <limits>

#include "ringrun/slurm.hpp"

namespace ringrun {
namespace {

// Slurm's limits (hostlist.h): hosts in one numeric range, ranges in one bracket, expansions of one
// prefix bracket.
constexpr unsigned long max_range = 64 * 1024;
constexpr std::size_t max_ranges = 256 * 1024;
constexpr unsigned long max_prefix_count = 64 * 1024;

// The input as it appears in a one-line message: control characters escaped, long values cut.
std::string quoted(std::string_view text) {
  constexpr std::size_t shown = 200;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < shown; ++i) {
    const char c = text[i];
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  if (text.size() > shown) out += fmt::format("...({} chars)", text.size());
  return out;
}

[[noreturn]] void fail(std::string_view what, std::string_view input, std::string_view problem,
                       std::size_t offset) {
  // Columns are 1-based; an error found past the end points at the last character.
  const std::size_t column = input.empty() ? 1 : std::min(offset, input.size() - 1) + 1;
  throw InputError(fmt::format("{}='{}' : {} at column {}", what, quoted(input), problem, column));
}

bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

struct NumberRange {
  unsigned long lo = 0;
  unsigned long hi = 0;
  int width = 0;  // zero padding: the low bound's length, as a minimum width
};

// One bracket group: its ranges and the literal text that follows its ']'.
struct Group {
  std::vector<NumberRange> ranges;
  std::string after;
  unsigned long count = 0;  // names the group yields
};

// One entry of the list: head, then groups. The last group is the numeric suffix Slurm expands
// fastest; the others (prefix groups) nest with the one nearest the end outermost.
struct Entry {
  std::string head;
  std::vector<Group> groups;  // groups[0] leftmost
};

// strtoul(), as Slurm uses it: leading white space and a '+' or '-' sign are accepted. Returns
// the number of characters consumed (0 = no number); `overflow` when the value does not fit.
std::size_t parse_unsigned(std::string_view s, unsigned long& value, bool& overflow, bool& negative) {
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const std::size_t digits_start = i;
  value = 0;
  overflow = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    const unsigned long digit = static_cast<unsigned long>(s[i] - '0');
    if (value > (std::numeric_limits<unsigned long>::max() - digit) / 10) overflow = true;
    value = value * 10 + digit;
    ++i;
  }
  return i == digits_start ? 0 : i;
}

// Slurm's _parse_single_range(): "N" or "N-M" (a missing M means N). `offset` locates `item` in
// `input` for messages.
NumberRange parse_single_range(std::string_view item, std::string_view what, std::string_view input,
                               std::size_t offset) {
  if (item.find('x') != std::string_view::npos)  // box syntax: multi-dimensional clusters only
    fail(what, input, "invalid range", offset);
  std::string_view low = item;
  std::optional<std::string_view> high;
  if (const auto dash = item.find('-'); dash != std::string_view::npos) {
    low = item.substr(0, dash);
    high = item.substr(dash + 1);
    if (!high->empty() && high->front() == '-') fail(what, input, "invalid range", offset);
  }
  NumberRange range;
  range.width = static_cast<int>(low.size());
  bool overflow = false, negative = false;
  std::size_t used = parse_unsigned(low, range.lo, overflow, negative);
  if (used == 0 || (!high && used != low.size()) || (high && used != low.size()))
    fail(what, input, "invalid range", offset);
  if (overflow || negative) fail(what, input, "invalid range (number out of bounds)", offset);
  range.hi = range.lo;
  if (high && !high->empty()) {
    used = parse_unsigned(*high, range.hi, overflow, negative);
    if (used == 0 || used != high->size()) fail(what, input, "invalid range", offset);
    if (overflow || negative) fail(what, input, "invalid range (number out of bounds)", offset);
  }
  if (range.lo > range.hi) fail(what, input, "invalid range", offset);
  if (range.hi - range.lo + 1 > max_range)
    fail(what, input, fmt::format("too many hosts in range (more than {})", max_range), offset);
  return range;
}

// Slurm's _parse_range_list(): comma-separated ranges between brackets.
Group parse_range_list(std::string_view text, std::string_view what, std::string_view input,
                       std::size_t offset) {
  Group group;
  std::size_t start = 0;
  while (true) {
    if (group.ranges.size() == max_ranges)
      fail(what, input, fmt::format("too many ranges in one bracket (more than {})", max_ranges),
           offset + start);
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    group.ranges.push_back(parse_single_range(item, what, input, offset + start));
    group.count += group.ranges.back().hi - group.ranges.back().lo + 1;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return group;
}

// Slurm's _next_tok(): the next entry, where separators between a '[' and the next ']' do not
// split. Returns [begin, end) offsets; begin == input.size() when there is none.
std::pair<std::size_t, std::size_t> next_token(std::string_view s, std::size_t pos) {
  while (pos < s.size() && is_separator(s[pos])) ++pos;
  const std::size_t tok = pos;
  std::size_t parse = tok;
  std::size_t end = pos;
  while (true) {
    while (end < s.size() && !is_separator(s[end])) ++end;
    bool moved = false;
    while (true) {
      const auto open = s.find('[', parse);
      if (open == s.npos || open > end) break;
      const auto close = s.find(']', parse);
      if (close == s.npos || close < open) break;
      if (close < end) {
        parse = close + 1;
        continue;
      }
      end = close;
      moved = true;
      break;
    }
    if (!moved) break;
  }
  return {tok, end};
}

// Parses one entry at [begin, end) of `input`.
Entry parse_entry(std::string_view input, std::size_t begin, std::size_t end, std::string_view what) {
  const std::string_view token = input.substr(begin, end - begin);
  Entry entry;
  const auto open = token.rfind('[');
  if (open == token.npos) {
    entry.head = std::string(token);
    return entry;
  }
  const auto close = token.find(']', open);
  if (close == token.npos) fail(what, input, "'[' without ']'", begin + open);
  const std::string_view suffix = token.substr(close + 1);
  if (const auto stray = suffix.find(']'); stray != suffix.npos)
    fail(what, input, "']' without '['", begin + close + 1 + stray);
  Group last = parse_range_list(token.substr(open + 1, close - open - 1), what, input, begin + open + 1);
  last.after = std::string(suffix);

  // Prefix groups, right to left, as _push_range_list() recurses: the last '[' of what is left and
  // the last ']' after it. A '[' without a ']' after it ends the recursion: the rest is literal.
  std::vector<Group> prefix_groups;  // right to left
  std::string_view rest = token.substr(0, open);
  while (true) {
    const auto p = rest.rfind('[');
    if (p == rest.npos) break;
    const auto q = rest.rfind(']');
    if (q == rest.npos || q < p) break;
    Group group = parse_range_list(rest.substr(p + 1, q - p - 1), what, input, begin + p + 1);
    if (group.count > max_prefix_count)
      fail(what, input, fmt::format("too many hosts in one prefix bracket (more than {})", max_prefix_count),
           begin + p + 1);
    group.after = std::string(rest.substr(q + 1));
    prefix_groups.push_back(std::move(group));
    rest = rest.substr(0, p);
  }
  entry.head = std::string(rest);
  for (auto it = prefix_groups.rbegin(); it != prefix_groups.rend(); ++it) entry.groups.push_back(std::move(*it));
  entry.groups.push_back(std::move(last));
  return entry;
}

std::uint64_t saturating_multiply(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::numeric_limits<std::uint64_t>::max();
  return a * b;
}

std::uint64_t entry_count(const Entry& entry) {
  std::uint64_t n = 1;
  for (const auto& g : entry.groups) n = saturating_multiply(n, g.count);
  return n;
}

void append_number(std::string& out, unsigned long value, int width) {
  fmt::format_to(std::back_inserter(out), "{:0{}}", value, width);
}

// Every name of one entry. Nesting, outermost first: prefix groups from right to left, then the
// last group (Slurm's order: "a[1-2]b[3-4]c[5-6]" gives a1b3c5 a1b3c6 a2b3c5 ...).
void expand_entry(const Entry& entry, std::vector<std::string>& out) {
  if (entry.groups.empty()) {
    out.push_back(entry.head);
    return;
  }
  const std::size_t prefix_groups = entry.groups.size() - 1;
  // The value chosen for each prefix group; filled outermost (rightmost) first.
  std::vector<std::pair<unsigned long, int>> chosen(prefix_groups);
  auto emit = [&]() {
    std::string prefix = entry.head;
    for (std::size_t g = 0; g < prefix_groups; ++g) {
      append_number(prefix, chosen[g].first, chosen[g].second);
      prefix += entry.groups[g].after;
    }
    const Group& last = entry.groups.back();
    for (const auto& r : last.ranges) {
      for (unsigned long v = r.lo;; ++v) {
        std::string name = prefix;
        append_number(name, v, r.width);
        name += last.after;
        out.push_back(std::move(name));
        if (v == r.hi) break;
      }
    }
  };
  // Recursion depth = number of bracket groups, bounded by the entry's length.
  auto walk = [&](auto& self, std::size_t level) -> void {  // level counts from the right
    if (level == prefix_groups) {
      emit();
      return;
    }
    const std::size_t g = prefix_groups - 1 - level;
    for (const auto& r : entry.groups[g].ranges) {
      for (unsigned long v = r.lo;; ++v) {
        chosen[g] = {v, r.width};
        self(self, level + 1);
        if (v == r.hi) break;
      }
    }
  };
  walk(walk, 0);
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::size_t limit, std::string_view what) {
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  std::size_t pos = 0;
  while (true) {
    const auto [begin, end] = next_token(list, pos);
    if (begin >= list.size()) break;
    entries.push_back(parse_entry(list, begin, end, what));
    // Against the room left, not total + count: a saturated count (2^64 names or more) would
    // wrap the sum past the check.
    const std::uint64_t count = entry_count(entries.back());
    if (count > limit - total)
      throw InputError(fmt::format("{}='{}' : expands to more than {} host names (entry at column {}); "
                                   "check the list or raise the limit",
                                   what, quoted(list), limit, begin + 1));
    total += count;
    pos = end;
  }
  std::vector<std::string> names;
  names.reserve(static_cast<std::size_t>(total));
  for (const auto& entry : entries) expand_entry(entry, names);
  return names;
}

std::vector<int> expand_task_counts(std::string_view counts, std::string_view what, std::size_t limit) {
  struct Run {
    int value;
    std::uint64_t repeat;
  };
  std::vector<Run> runs;
  std::uint64_t total = 0;
  auto number = [&](std::size_t& i, std::string_view expected) -> std::uint64_t {
    const std::size_t start = i;
    std::uint64_t v = 0;
    while (i < counts.size() && std::isdigit(static_cast<unsigned char>(counts[i]))) {
      v = v * 10 + static_cast<std::uint64_t>(counts[i] - '0');
      if (v > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
        fail(what, counts, "number too large", start);
      ++i;
    }
    if (i == start) fail(what, counts, fmt::format("expected {}", expected), i);
    return v;
  };
  std::size_t i = 0;
  if (counts.empty()) throw InputError(fmt::format("{}='' : empty; expected counts like 2(x3),1", what));
  while (true) {
    const std::size_t start = i;
    const int value = static_cast<int>(number(i, "a count"));
    std::uint64_t repeat = 1;
    if (i < counts.size() && counts[i] == '(') {
      ++i;
      if (i >= counts.size() || counts[i] != 'x') fail(what, counts, "expected 'x' after '('", i);
      ++i;
      repeat = number(i, "a repeat count");
      if (repeat == 0) fail(what, counts, "repeat count 0", i - 1);
      if (i >= counts.size() || counts[i] != ')') fail(what, counts, "missing ')'", i);
      ++i;
    }
    total += repeat;
    if (total > limit)
      throw InputError(fmt::format("{}='{}' : more than {} counts (entry at column {})", what,
                                   quoted(counts), limit, start + 1));
    runs.push_back({value, repeat});
    if (i == counts.size()) break;
    if (counts[i] != ',') fail(what, counts, "expected ',' or '(xN)'", i);
    ++i;
  }
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(total));
  for (const auto& r : runs) out.insert(out.end(), static_cast<std::size_t>(r.repeat), r.value);
  return out;
}

}  // namespace ringrun
