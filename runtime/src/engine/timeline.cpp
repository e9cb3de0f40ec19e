#include "engine/timeline.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ringrun/environment_variables.hpp"
#include "ringrun/json.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::engine {

std::string json_quote(const std::string& s) { return json::quote(s); }

namespace {

std::FILE* create_timeline_file(const std::string& filename) {
  std::FILE* file = std::fopen(filename.c_str(), "w");
  if (!file)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}='{}': cannot create it: {}", variables::kTimelineFilename.name, filename,
                                   std::strerror(errno)));
  return file;
}

// The file opened for writing over its closing "\n]", or null when it is not a flushed timeline.
std::FILE* reopen_timeline_file(const std::string& filename) {
  std::FILE* file = std::fopen(filename.c_str(), "r+");
  if (!file) return nullptr;
  char tail[2] = {};
  if (std::fseek(file, -2, SEEK_END) == 0 && std::fread(tail, 1, 2, file) == 2 && tail[0] == '\n' && tail[1] == ']' &&
      std::fseek(file, -2, SEEK_END) == 0)
    return file;
  std::fclose(file);
  return nullptr;
}

}  // namespace

Timeline::Timeline(const std::string& filename) : origin_(Clock::now()) {
  file_ = create_timeline_file(filename);
  std::fputs("[", file_);
  write_process_name();
  flush();
}

void Timeline::write_process_name() {
  // The wall-clock time of ts 0 too, under Horovod's key: tools line traces of several jobs up by it.
  const auto since_epoch = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch() - (Clock::now() - origin_))
                               .count();
  event(fmt::format(R"J("name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {{"name": "ringrun engine (rank 0)", )J"
                    R"J("start_time_since_epoch_in_micros": {}}})J",
                    since_epoch));
}

Timeline::Timeline(const std::string& filename, const Continuation& continuation)
    : origin_(), row_base_(continuation.epoch * kRowsPerWorld) {
  if (continuation.epoch > 0) file_ = reopen_timeline_file(filename);
  if (file_) {
    first_event_ = false;
  } else {
    file_ = create_timeline_file(filename);
    std::fputs("[", file_);
    write_process_name();
  }
  mark(continuation.mark, Clock::now());
  flush();
}

Timeline::~Timeline() {
  if (!file_) return;
  flush();
  std::fclose(file_);
}

long long Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

int Timeline::row(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int id = row_base_ + static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, id);
  event(fmt::format(R"J("name": "thread_name", "ph": "M", "pid": 0, "tid": {}, "args": {{"name": {}}})J", id,
                    json_quote(tensor)));
  return id;
}

void Timeline::event(const std::string& json_body) {
  std::fputs(first_event_ ? "\n{" : ",\n{", file_);
  first_event_ = false;
  std::fputs(json_body.c_str(), file_);
  std::fputs("}", file_);
  dirty_ = true;
}

void Timeline::span(const std::string& tensor, const char* phase, Clock::time_point start, Clock::time_point end) {
  int tid = row(tensor);
  long long ts = micros(start);
  long long dur = micros(end) - ts;
  event(fmt::format(R"J("name": "{}", "ph": "X", "pid": 0, "tid": {}, "ts": {}, "dur": {}, "args": {{"tensor": {}}})J",
                    phase, tid, ts, dur < 0 ? 0 : dur, json_quote(tensor)));
}

void Timeline::tick(const std::string& tensor, const std::string& label, Clock::time_point at) {
  int tid = row(tensor);
  event(fmt::format(R"J("name": {}, "ph": "i", "s": "t", "pid": 0, "tid": {}, "ts": {}, "args": {{"tensor": {}}})J",
                    json_quote(label), tid, micros(at), json_quote(tensor)));
}

void Timeline::mark(const std::string& label, Clock::time_point at) {
  event(fmt::format(R"J("name": {}, "ph": "i", "s": "p", "pid": 0, "tid": 0, "ts": {})J", json_quote(label), micros(at)));
}

void Timeline::flush() {
  if (!dirty_) return;
  // Close the list, flush, then step back over the closing bracket so the next event replaces it.
  std::fputs("\n]", file_);
  std::fflush(file_);
  std::fseek(file_, -2, SEEK_CUR);
  dirty_ = false;
}

}  // namespace ringrun::engine
