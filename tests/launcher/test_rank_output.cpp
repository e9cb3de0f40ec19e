// Rank output through srun and mpirun (README, Using it): the task shim's records survive the cuts,
// tags and interleaving those launchers apply, and every rank's lines come out whole.
#include "supervisor/rank_output.hpp"
#include "supervisor/output.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

using namespace ringrun;

namespace {

// Bytes that are hard for the framing: newlines, tag look-alikes, escapes, record markers.
std::string awkward_bytes(std::mt19937& rng, std::size_t size) {
  static const std::string alphabet = "ab[]%,:<>\n\n\x02\x03\t\r 0123\xc3\xa9";
  std::string out;
  for (std::size_t i = 0; i < size; ++i) out += alphabet[rng() % alphabet.size()];
  return out;
}

std::vector<std::string> lines_of(const std::string& bytes) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = bytes.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(bytes.substr(start, nl + 1 - start));
  if (start < bytes.size()) out.push_back(bytes.substr(start) + "\n");
  return out;
}

// What Open MPI's --tag-output makes of one chunk it read: a tag first and after every newline
// but the last byte (orte_iof_base_write_output); Open MPI 5 (PRRTE) writes "<stdout>: ", with a
// space (`after`).
std::string mpirun_tagged(int rank, const std::string& chunk, const std::string& after = "") {
  std::string tag = "[1," + std::to_string(rank) + "]<stdout>:" + after;
  std::string out = tag;
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    out += chunk[i];
    if (chunk[i] == '\n' && i + 1 < chunk.size()) out += tag;
  }
  return out;
}

struct Collected {
  std::map<int, std::vector<std::string>> ranks;
  std::vector<std::string> launcher;
  LauncherOutputDecoder::Sink sink() {
    return [this](std::optional<int> rank, std::string_view line) {
      (rank ? ranks[*rank] : launcher).emplace_back(line);
    };
  }
};

void feed_in_pieces(LauncherOutputDecoder& decoder, const std::string& stream, std::mt19937& rng,
                    const LauncherOutputDecoder::Sink& sink) {
  for (std::size_t at = 0; at < stream.size();) {
    std::size_t n = std::min<std::size_t>(1 + rng() % 700, stream.size() - at);
    decoder.feed(std::string_view(stream).substr(at, n), sink);
    at += n;
  }
  decoder.finish(sink);
}

}  // namespace

TEST_CASE("records: short enough for srun, no '[' or inner newline, and they decode to the bytes") {
  std::mt19937 rng(7);
  for (std::size_t size : {0u, 1u, 60u, 999u, 1000u, 5000u, 70000u}) {
    std::string bytes = awkward_bytes(rng, size);
    std::string records;
    append_records(records, bytes);
    std::string decoded;
    for (const std::string& line : lines_of(records)) {
      CHECK(line.size() <= kMaxRecordSize);
      CHECK(line.size() >= kMinRecordSize);
      CHECK(line.find('[') == std::string::npos);
      auto part = decode_record(std::string_view(line).substr(0, line.size() - 1));
      REQUIRE(part);
      decoded += *part;
    }
    CHECK(decoded == bytes);
  }
  CHECK_FALSE(decode_record("ringrun task: rank 3: cannot execute 'x'"));
}

TEST_CASE("mpirun: chunks cut mid-line, tagged and interleaved; its own lines between them") {
  for (const std::string after : {"", " "}) {  // Open MPI 4's tags, then Open MPI 5's
    CAPTURE(after);
    std::mt19937 rng(11);
    constexpr int kRanks = 4;
    std::map<int, std::string> program;  // what each rank's program wrote
    std::map<int, std::string> records;  // what its task shim wrote
    for (int r = 0; r < kRanks; ++r) {
      program[r] = awkward_bytes(rng, 20000 + 3000 * static_cast<std::size_t>(r)) + "last line without newline";
      append_records(records[r], program[r]);
    }
    // Open MPI reads up to 4 KiB at a time from each rank and forwards the chunks in any order.
    std::string stream;
    std::map<int, std::size_t> at;
    for (bool more = true; more;) {
      more = false;
      for (int r = 0; r < kRanks; ++r) {
        if (at[r] >= records[r].size()) continue;
        more = true;
        if (rng() % 3 == 0) continue;
        std::size_t n = std::min<std::size_t>(1 + rng() % 4096, records[r].size() - at[r]);
        stream += mpirun_tagged(r, records[r].substr(at[r], n), after);
        at[r] += n;
        if (stream.back() == '\n' && rng() % 20 == 0) stream += "mpirun: a note of its own [1,2]\n";
      }
    }
    LauncherOutputDecoder decoder(OutputRetag::mpirun_tag);
    Collected got;
    feed_in_pieces(decoder, stream, rng, got.sink());
    for (int r = 0; r < kRanks; ++r) CHECK(got.ranks[r] == lines_of(program[r]));
    for (const std::string& line : got.launcher) CHECK(line == "mpirun: a note of its own [1,2]\n");
  }
}

TEST_CASE("srun --label: padded labels, the shim's raw lines and srun's own lines") {
  std::mt19937 rng(5);
  std::string long_line = std::string(5000, 'x') + " [1,3]<stdout>: 3: %0A\n";
  std::string records;
  append_records(records, "short\n" + long_line + "no newline");
  std::string stream;
  for (const std::string& record : lines_of(records)) stream += "12: " + record + " 3: " + record;
  stream += " 3: ringrun task: rank 3: cannot execute 'nope': No such file or directory\n";
  stream += "srun: error: n2: task 3: Exited with exit code 127\n";
  LauncherOutputDecoder decoder(OutputRetag::srun_label);
  Collected got;
  feed_in_pieces(decoder, stream, rng, got.sink());
  std::vector<std::string> want = {"short\n", long_line, "no newline\n"};
  CHECK(got.ranks[12] == want);
  want.push_back("ringrun task: rank 3: cannot execute 'nope': No such file or directory\n");
  CHECK(got.ranks[3] == want);
  CHECK(got.launcher == std::vector<std::string>{"srun: error: n2: task 3: Exited with exit code 127\n"});
}

TEST_CASE("the failing rank's own status from srun's and mpirun's lines, not the launcher's worst task") {
  ReportedFailure srun;
  srun.note("srun: error: n2: task 3: Exited with exit code 3\n", OutputRetag::srun_label);
  srun.note("srun: error: n1: task 0: Terminated\n", OutputRetag::srun_label);  // the first one counts
  CHECK(srun.rank == 3);
  CHECK(srun.host == "n2");
  CHECK(srun.exit_status == 3);
  ReportedFailure terminated;
  terminated.note("srun: error: n1: tasks 0-1: Terminated\n", OutputRetag::srun_label);
  terminated.note("srun: error: n1: task 0: Terminated\n", OutputRetag::srun_label);
  CHECK(terminated.rank == 0);
  CHECK_FALSE(terminated.exit_status.has_value());
  ReportedFailure signalled;
  signalled.note("mpirun noticed that process rank 5 with PID 0 on node n3 exited on signal 9 (Killed).\n",
                 OutputRetag::mpirun_tag);
  CHECK(signalled.rank == 5);
  CHECK(signalled.exit_status == 128 + 9);
  ReportedFailure exited;
  exited.note("  Process name: [[4711,1],2]\n", OutputRetag::mpirun_tag);
  exited.note("  Exit code:    7\n", OutputRetag::mpirun_tag);
  CHECK(exited.rank == 2);
  CHECK(exited.exit_status == 7);
}
