// hwloc's cpuset strings (as the XML export writes them) read into sorted inclusive ranges, and the
// few set operations the native reader needs. Private to topology/.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <string_view>
#include <vector>

namespace ringrun::topology::native::xml {

// A cpuset as sorted, disjoint, non-adjacent inclusive ranges: a PU of a 102,400-PU machine is
// one range instead of a 12.8 kB bitmap. hi == UINT_MAX stands for hwloc's infinite sets.
struct Range {
  unsigned lo, hi;
};
using Set = std::vector<Range>;

// hwloc's bitmap string: 32-bit words, most significant first, "0x%08x" each, zero words left
// empty (",,"), "0x0" for the empty set and a leading "0xf...f" when every higher bit is set.
// Throws std::runtime_error for anything else.
Set parse_set(std::string_view s);

Set intersect(const Set& a, const Set& b);

// The members in order; throws std::runtime_error for an infinite set.
std::vector<unsigned> to_list(const Set& set);

// Inline: the builder asks these once per core and per PU.
inline bool intersects(const Set& a, const Set& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].hi < b[j].lo) ++i;
    else if (b[j].hi < a[i].lo) ++j;
    else return true;
  }
  return false;
}

inline bool contains(const Set& set, unsigned bit) {
  auto it = std::upper_bound(set.begin(), set.end(), bit, [](unsigned v, const Range& r) { return v < r.lo; });
  return it != set.begin() && std::prev(it)->hi >= bit;
}

}  // namespace ringrun::topology::native::xml
