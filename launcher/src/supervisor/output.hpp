// The supervisor's output side: each pipe it reads (a rank's, or srun's/mpirun's), split into
// whole lines, tagged [RANK]<stdout>: and written with one write() so lines never interleave;
// --output-filename files; and the failing rank as srun or mpirun name it on their stderr.
#pragma once

#include "supervisor/rank_output.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun {

// Writes everything unless the reader is gone (EPIPE and friends are ignored).
void write_all(int fd, const char* data, std::size_t size);

// --output-filename: DIR/rank.N/{stdout,stderr}, opened when a rank first writes (for srun and
// mpirun the ranks are only known from their tagged lines) or up front for local ranks.
struct RankFiles {
  std::optional<std::filesystem::path> dir;
  std::map<std::pair<int, int>, int> fds;  // (rank, 1|2) -> fd
  bool warned = false;

  int get(int rank, int stream);
  RankFiles() = default;
  RankFiles(const RankFiles&) = delete;
  RankFiles& operator=(const RankFiles&) = delete;
  ~RankFiles();
};

// The first failing rank as srun or mpirun reports it on its own stderr:
//   srun:   "srun: error: n2: task 3: Exited with exit code 3"
//   mpirun: "mpirun noticed that process rank 0 with PID 4242 on node vm exited on signal 9 (Killed)."
//           "  Process name: [[32149,1],0]" then "  Exit code:    2"
struct ReportedFailure {
  std::optional<int> rank;
  std::string host;
  std::string what;  // "exited with code 3", "was killed by signal 9"
  // The rank's own status as ringrun reports it (its code, 128+signal); nullopt when the launcher
  // said only "Terminated". srun's own exit status is the worst of all its tasks: ranks it
  // stopped with SIGTERM after the failure make it 143, whatever the failing rank returned.
  std::optional<int> exit_status;
  std::optional<int> pending_rank;  // mpirun's "Process name" line, waiting for its exit code
  // srun said "Node failure on HOST": its tasks there are gone, yet srun itself exits 0.
  std::optional<std::string> failed_node;

  void note(std::string_view line, OutputRetag launcher);
};

// One stream of one process: a pipe we read, split into whole lines, each written with one
// write() so lines from different ranks never interleave. For srun and mpirun the lines of every
// rank arrive on the launcher's pipe as the task shims' records (rank_output.hpp).
struct Stream {
  Stream(int fd, int out_fd, int rank, std::string label, OutputRetag retag, bool tag, RankFiles* files,
         ReportedFailure* reported)
      : fd(fd), out_fd(out_fd), rank(rank), label(std::move(label)), retag(retag), tag(tag), files(files),
        reported(reported), decoder(retag) {}

  int fd = -1;
  int out_fd = -1;     // ringrun's stdout (1) or stderr (2)
  int rank = 0;        // the rank, for OutputRetag::none and single_task
  bool single_task = false;  // srun/mpirun starts one task: its lines are `rank`'s, whatever the tag
  std::string label;   // "[3]" or "[srun]"
  OutputRetag retag = OutputRetag::none;
  bool tag = true;
  bool timestamp = false;  // horovodrun's --prefix-output-with-timestamp: the local time first
  RankFiles* files = nullptr;
  ReportedFailure* reported = nullptr;  // srun/mpirun's own lines name the failing rank
  std::string buffer;                   // read, not yet written (OutputRetag::none)
  LauncherOutputDecoder decoder;        // srun/mpirun

  // Appends what was read; at_eof: the pipe closed, write what is left.
  void feed(std::string_view bytes, bool at_eof);
  // One read of the ready pipe into buffer: its bytes go out as lines; at its end (or an error)
  // what is left goes out and the pipe is closed (fd -1).
  void read_once(std::vector<char>& buffer);

 private:
  // One line (with its newline) of `rank`, or of the process itself when rank is nullopt.
  void emit_line(std::string& out, std::optional<int> rank, std::string_view line);
  // "Mon Dec  7 02:55:37 2026", as Python's time.asctime() (horovodrun's prefix); made once a second.
  std::string_view local_time();
  std::int64_t time_of_text_ = -1;
  std::string time_text_;
};

}  // namespace ringrun
