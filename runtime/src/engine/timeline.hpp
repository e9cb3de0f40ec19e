// Chrome trace-event JSON (chrome://tracing, Perfetto), written by rank 0's engine thread. Each
// tensor is a row (tid) named after it; its phases (NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER, ALLREDUCE,
// MEMCPY_OUT_FUSION_BUFFER, BROADCAST, ALLGATHER, ...) are complete events, and each rank's
// submission is an instant tick on that row. After every flush() the file ends in "\n]" and is
// valid JSON; the next event is written over that closing bracket (as Horovod's timeline does).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>

namespace ringrun::engine {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Elastic mode: every world's rank 0 (possibly another process) continues one file. Times are
  // then on the host's monotonic clock rather than from the file's creation, so that the worlds
  // line up; each world's rows get ids of their own (epoch * kRowsPerWorld + n).
  struct Continuation {
    int epoch = 0;
    std::string mark;  // the process-wide instant event that opens this world's part
  };
  static constexpr int kRowsPerWorld = 100000;

  // Throws RuntimeError naming the file when it cannot be created.
  explicit Timeline(const std::string& filename);
  // World 0 creates the file; a later world appends to it when it ends as a flushed timeline does
  // ("\n]"), else starts it over (it was removed or is not a timeline).
  Timeline(const std::string& filename, const Continuation& continuation);
  ~Timeline();  // flushes; the file stays valid JSON
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A phase of tensor's life from start to end.
  void span(const std::string& tensor, const char* phase, Clock::time_point start, Clock::time_point end);
  // An instant event on tensor's row, e.g. "rank 3 ready".
  void tick(const std::string& tensor, const std::string& label, Clock::time_point at);
  // A process-wide instant event (cycle marks, stall warnings).
  void mark(const std::string& label, Clock::time_point at);
  void flush();

 private:
  int row(const std::string& tensor);
  void write_process_name();
  void event(const std::string& json_body);
  long long micros(Clock::time_point t) const;

  std::FILE* file_ = nullptr;
  Clock::time_point origin_;  // ts 0; the clock's own epoch for a continued timeline
  std::unordered_map<std::string, int> rows_;
  bool first_event_ = true;
  bool dirty_ = false;
  int row_base_ = 0;
};

// s as a JSON string literal, quotes included.
std::string json_quote(const std::string& s);

}  // namespace ringrun::engine
