#include "supervisor/rank_output.hpp"

namespace ringrun {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

// Escaped: control bytes (newline included), DEL, '%' (the escape) and '[' (mpirun's tags start
// with it). Bytes from 0x80 pass as they are: UTF-8 text costs nothing.
bool needs_escape(unsigned char c) { return c < 0x20 || c == 0x7f || c == '%' || c == '['; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

enum class TagMatch { no, yes, incomplete };

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// srun --label: "3: " or, with 10 or more tasks, " 3: ".
TagMatch match_srun_label(std::string_view s, int& rank, std::size_t& length) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  std::size_t digits = i;
  while (i < s.size() && is_digit(s[i]) && i - digits < 9) ++i;
  if (i == s.size()) return TagMatch::incomplete;
  if (i == digits) return TagMatch::no;
  if (s[i] != ':') return TagMatch::no;
  if (i + 1 == s.size()) return TagMatch::incomplete;
  if (s[i + 1] != ' ') return TagMatch::no;
  rank = std::stoi(std::string(s.substr(digits, i - digits)));
  length = i + 2;
  return TagMatch::yes;
}

// mpirun --tag-output: "[JOB,RANK]<stdout>:", also <stderr> and <stddiag>. Open MPI 5 (PRRTE)
// adds a space after the colon: `spaced` is which of the two this mpirun writes, learnt from the
// first tag (the first chunk of a rank starts a record, kRecordStart, or the shim's own message,
// never a space). Under Open MPI 4 a chunk cut mid-record may start with a space of the rank's.
TagMatch match_mpirun_tag(std::string_view s, int& rank, std::size_t& length, std::optional<bool>& spaced) {
  if (s.empty()) return TagMatch::incomplete;
  if (s[0] != '[') return TagMatch::no;
  std::size_t i = 1;
  auto number = [&](char end, std::size_t& start) -> TagMatch {
    start = i;
    while (i < s.size() && is_digit(s[i]) && i - start < 9) ++i;
    if (i == s.size()) return TagMatch::incomplete;
    if (i == start || s[i] != end) return TagMatch::no;
    ++i;
    return TagMatch::yes;
  };
  std::size_t job = 0, vpid = 0;
  if (TagMatch m = number(',', job); m != TagMatch::yes) return m;
  if (TagMatch m = number(']', vpid); m != TagMatch::yes) return m;
  std::string_view rest = s.substr(i);
  for (std::string_view stream : {"<stdout>:", "<stderr>:", "<stddiag>:"}) {
    if (rest.size() < stream.size() && stream.starts_with(rest)) return TagMatch::incomplete;
    if (rest.starts_with(stream)) {
      if (!spaced) {
        if (rest.size() == stream.size()) return TagMatch::incomplete;  // a space may follow
        spaced = rest[stream.size()] == ' ';
      }
      rank = std::stoi(std::string(s.substr(vpid, i - 1 - vpid)));
      length = i + stream.size() + (*spaced ? 1 : 0);
      if (*spaced && rest.size() == stream.size()) return TagMatch::incomplete;
      return TagMatch::yes;
    }
  }
  return TagMatch::no;
}

}  // namespace

void append_records(std::string& out, std::string_view bytes) {
  std::size_t start = out.size();
  auto close_record = [&] {
    std::size_t size = out.size() - start + 1;
    if (size < kMinRecordSize) out.append(kMinRecordSize - size, kRecordPad);
    out += '\n';
  };
  out += kRecordStart;
  for (unsigned char c : bytes) {
    if (out.size() - start + 4 > kMaxRecordSize) {  // room for an escape and the newline
      close_record();
      start = out.size();
      out += kRecordStart;
    }
    if (needs_escape(c)) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  close_record();
}

std::optional<std::string> decode_record(std::string_view line) {
  if (line.empty() || line.front() != kRecordStart) return std::nullopt;
  line.remove_prefix(1);
  while (!line.empty() && line.back() == kRecordPad) line.remove_suffix(1);
  std::string bytes;
  bytes.reserve(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    int high = -1, low = -1;
    if (line[i] == '%' && i + 2 < line.size()) {
      high = hex_value(line[i + 1]);
      low = hex_value(line[i + 2]);
    }
    if (high >= 0 && low >= 0) {
      bytes += static_cast<char>(high * 16 + low);
      i += 2;
    } else {
      bytes += line[i];
    }
  }
  return bytes;
}

void LauncherOutputDecoder::feed(std::string_view bytes, const Sink& sink) {
  pending_.append(bytes);
  parse(false, sink);
}

void LauncherOutputDecoder::finish(const Sink& sink) {
  parse(true, sink);
  if (current_) complete_record(*current_, sink);
  current_.reset();
  for (auto& [rank, source] : sources_) {
    if (!source.record.empty()) complete_record(rank, sink);
    if (!source.text.empty()) sink(rank, source.text + "\n");
    source.text.clear();
  }
}

// Line starts hold a launcher tag or a line of the launcher's own. After a tag the bytes are that
// rank's until a newline or, under mpirun, the tag of the next chunk mpirun read: a record never
// holds '[', so a '[' there is a tag, unless the rank's line is no record (the shim's own message).
void LauncherOutputDecoder::parse(bool at_eof, const Sink& sink) {
  const std::string_view view(pending_);
  auto match = [&](std::string_view s, int& rank, std::size_t& length) {
    TagMatch m = kind_ == OutputRetag::mpirun_tag ? match_mpirun_tag(s, rank, length, mpirun_spaced_)
                                                  : match_srun_label(s, rank, length);
    return m == TagMatch::incomplete && at_eof ? TagMatch::no : m;
  };
  std::size_t i = 0;
  while (i < view.size()) {
    int rank = 0;
    std::size_t length = 0;
    if (!current_) {
      TagMatch m = match(view.substr(i), rank, length);
      if (m == TagMatch::incomplete) break;
      if (m == TagMatch::yes) {
        current_ = rank;
        i += length;
        continue;
      }
      std::size_t newline = view.find('\n', i);
      if (newline == std::string_view::npos) {
        if (!at_eof && view.size() - i <= kMaxLine) break;
        sink(std::nullopt, std::string(view.substr(i)) + "\n");
        i = view.size();
        break;
      }
      sink(std::nullopt, view.substr(i, newline + 1 - i));
      i = newline + 1;
      continue;
    }
    Source& source = sources_[*current_];
    std::size_t stop = kind_ == OutputRetag::mpirun_tag ? view.find_first_of("\n[", i) : view.find('\n', i);
    if (stop == std::string_view::npos) {
      source.record.append(view.substr(i));
      i = view.size();
      if (source.record.size() > kMaxLine) complete_record(*current_, sink);
      break;
    }
    source.record.append(view.substr(i, stop - i));
    if (view[stop] == '\n') {
      i = stop + 1;
      complete_record(*current_, sink);
      current_.reset();
      continue;
    }
    TagMatch m = match(view.substr(stop), rank, length);
    if (m == TagMatch::incomplete) {
      i = stop;
      break;
    }
    if (m == TagMatch::yes) {
      current_ = rank;
      i = stop + length;
    } else {
      source.record += '[';
      i = stop + 1;
    }
  }
  pending_.erase(0, i);
}

void LauncherOutputDecoder::complete_record(int rank, const Sink& sink) {
  Source& source = sources_[rank];
  std::optional<std::string> bytes = decode_record(source.record);
  if (!bytes) {
    // A line of the rank that is no record (the shim's own message before the program ran).
    if (!source.text.empty()) sink(rank, source.text + "\n");
    source.text.clear();
    sink(rank, source.record + "\n");
    source.record.clear();
    return;
  }
  source.record.clear();
  source.text += *bytes;
  std::size_t start = 0;
  for (std::size_t newline; (newline = source.text.find('\n', start)) != std::string::npos; start = newline + 1)
    sink(rank, std::string_view(source.text).substr(start, newline + 1 - start));
  source.text.erase(0, start);
  if (source.text.size() > kMaxLine) {
    sink(rank, source.text + "\n");
    source.text.clear();
  }
}

}  // namespace ringrun
