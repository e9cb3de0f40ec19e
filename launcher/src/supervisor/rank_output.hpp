// How a rank's output travels through srun or mpirun whole. The task shim owns the program's
// stdout and stderr (pipes) and writes what the program wrote as records: one line each, short
// enough that neither launcher splits it (srun cuts at 1024 bytes), long enough that mpirun's
// --tag-output does not drop data (it tags each newline into a fixed 8 KiB buffer), and escaped
// so that no '[' or newline of the program's appears in it. The supervisor uses the launcher's
// own tag ("3: " from srun --label, "[1,3]<stdout>:" from mpirun, which tags each chunk it reads,
// mid-line too) only to tell whose bytes follow, joins each rank's records and writes whole lines.
#pragma once

#include <ringrun/process.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ringrun {

// A record: kRecordStart, the escaped bytes, kRecordPad up to kMinRecordSize, '\n'.
inline constexpr char kRecordStart = '\x02';
inline constexpr char kRecordPad = '\x03';
inline constexpr std::size_t kMinRecordSize = 64;
inline constexpr std::size_t kMaxRecordSize = 1000;

// A line longer than this without a newline is written out in pieces: the alternative is
// unbounded memory for a rank that writes binary data to stdout.
inline constexpr std::size_t kMaxLine = 4u << 20;

// Appends `bytes` (any bytes, any cut) to `out` as records.
void append_records(std::string& out, std::string_view bytes);

// The bytes of one record (a line without its newline); nullopt when the line is no record.
std::optional<std::string> decode_record(std::string_view line);

// Splits what a launcher writes on one of its streams into the lines of each rank and its own.
class LauncherOutputDecoder {
 public:
  // rank: nullopt for the launcher's own lines. line: ends in '\n'.
  using Sink = std::function<void(std::optional<int> rank, std::string_view line)>;

  explicit LauncherOutputDecoder(OutputRetag kind) : kind_(kind) {}
  void feed(std::string_view bytes, const Sink& sink);
  // The launcher's stream closed: what is left, each unfinished line with a newline added.
  void finish(const Sink& sink);

 private:
  struct Source {
    std::string record;  // the launcher line being received for this rank
    std::string text;    // decoded bytes not yet ending in a newline
  };
  void parse(bool at_eof, const Sink& sink);
  void complete_record(int rank, const Sink& sink);

  OutputRetag kind_;
  std::string pending_;         // bytes not parsed yet (a tag may be cut)
  std::optional<int> current_;  // whose bytes these are, after a tag and until a newline
  std::optional<bool> mpirun_spaced_;  // mpirun's tags end in ": " (Open MPI 5), not ":" (4.1)
  std::map<int, Source> sources_;
};

}  // namespace ringrun
