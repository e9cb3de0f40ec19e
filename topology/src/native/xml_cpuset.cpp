// hwloc bitmap strings into ranges (see xml_cpuset.hpp); parse_uint is the parser's.
#include "xml_cpuset.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "xml_tree.hpp"

namespace ringrun::topology::native::xml {
namespace {

void add_bits(Set& set, unsigned lo, unsigned hi) {
  if (!set.empty() && set.back().hi != UINT_MAX && set.back().hi + 1 == lo) set.back().hi = hi;
  else set.push_back({lo, hi});
}

}  // namespace

Set parse_set(std::string_view s) {
  struct Word {
    size_t field;  // from the left
    uint32_t value;
  };
  std::vector<Word> words;
  bool infinite = false;
  size_t field = 0;
  size_t i = 0;
  while (i <= s.size()) {
    // Runs of empty words are most of a big machine's strings: skip them eight at a time.
    while (i + 8 <= s.size() && std::memcmp(s.data() + i, ",,,,,,,,", 8) == 0) {
      i += 8;
      field += 8;
    }
    size_t comma = s.find(',', i);
    if (comma == std::string_view::npos) comma = s.size();
    const std::string_view text = s.substr(i, comma - i);
    if (!text.empty()) {
      if (text == "0xf...f") {
        if (field != 0) throw std::runtime_error("infinite mark not first");
        infinite = true;
      } else {
        unsigned value = 0;
        if (text.size() < 3 || text.size() > 10 || text[0] != '0' || text[1] != 'x' ||
            !parse_uint(text.substr(2), value, 16))
          throw std::runtime_error("bad cpuset word");
        if (value) words.push_back({field, value});
      }
    }
    ++field;
    i = comma + 1;
  }
  const size_t fields = field;
  Set set;
  for (auto it = words.rbegin(); it != words.rend(); ++it) {
    const unsigned long base = 32ul * (fields - 1 - it->field);
    if (base + 31 >= UINT_MAX) throw std::runtime_error("cpuset too large");
    if (it->value == 0xffffffffu) {
      add_bits(set, static_cast<unsigned>(base), static_cast<unsigned>(base + 31));
      continue;
    }
    for (unsigned b = 0; b < 32; ++b)
      if (it->value >> b & 1u) add_bits(set, static_cast<unsigned>(base + b), static_cast<unsigned>(base + b));
  }
  if (infinite) add_bits(set, static_cast<unsigned>(32ul * (fields - 1)), UINT_MAX);
  return set;
}

Set intersect(const Set& a, const Set& b) {
  Set out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const unsigned lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].hi < b[j].hi) ++i;
    else ++j;
  }
  return out;
}

std::vector<unsigned> to_list(const Set& set) {
  std::vector<unsigned> out;
  for (const auto& r : set) {
    if (r.hi == UINT_MAX) throw std::runtime_error("infinite cpuset");
    for (unsigned v = r.lo;; ++v) {
      out.push_back(v);
      if (v == r.hi) break;
    }
  }
  return out;
}

}  // namespace ringrun::topology::native::xml
