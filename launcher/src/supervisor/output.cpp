#include "supervisor/output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace ringrun {
namespace {

std::optional<int> number(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  std::size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == start || i - start > 9) return std::nullopt;
  return std::stoi(std::string(s.substr(start, i - start)));
}

}  // namespace

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EPIPE and friends: the reader is gone; keep draining the ranks regardless.
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

int RankFiles::get(int rank, int stream) {
  if (!dir) return -1;
  auto key = std::make_pair(rank, stream);
  if (auto it = fds.find(key); it != fds.end()) return it->second;
  std::filesystem::path d = *dir / fmt::format("rank.{}", rank);
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  int fd = ec ? -1 : ::open((d / (stream == 1 ? "stdout" : "stderr")).c_str(),
                            O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 && !warned) {
    warned = true;
    std::string line = fmt::format("ringrun: --output-filename: cannot write under '{}': {}\n", d.string(),
                                   ec ? ec.message() : std::strerror(errno));
    write_all(STDERR_FILENO, line.data(), line.size());
  }
  fds[key] = fd;
  return fd;
}
RankFiles::~RankFiles() {
  for (auto& [k, fd] : fds)
    if (fd >= 0) ::close(fd);
}

void ReportedFailure::note(std::string_view line, OutputRetag launcher) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (constexpr std::string_view lost = "srun: error: Node failure on ";
      launcher == OutputRetag::srun_label && line.starts_with(lost)) {
    failed_node = std::string(line.substr(lost.size()));
    return;
  }
  if (rank) return;
  if (launcher == OutputRetag::srun_label) {
    constexpr std::string_view prefix = "srun: error: ";
    if (!line.starts_with(prefix)) return;
    line.remove_prefix(prefix.size());
    std::size_t colon = line.find(": task ");
    if (colon == std::string_view::npos) return;
    std::string_view host = line.substr(0, colon);
    std::string_view rest = line.substr(colon + 7);
    auto r = number(rest);
    std::size_t after = rest.find(": ");
    if (!r || after == std::string_view::npos) return;
    std::string_view status = rest.substr(after + 2);
    constexpr std::string_view exited = "Exited with exit code ";
    if (status.starts_with(exited)) {
      what = fmt::format("exited with code {}", status.substr(exited.size()));
      exit_status = number(status.substr(exited.size()));
    } else {
      what = fmt::format("was stopped ({})", status);
    }
    rank = r;
    this->host = std::string(host);
  } else if (launcher == OutputRetag::mpirun_tag) {
    constexpr std::string_view noticed = "mpirun noticed that process rank ";
    if (line.starts_with(noticed)) {
      std::string_view rest = line.substr(noticed.size());
      auto r = number(rest);
      std::size_t node = rest.find(" on node ");
      std::size_t sig = rest.find(" exited on signal ");
      if (!r || node == std::string_view::npos || sig == std::string_view::npos || sig < node) return;
      rank = r;
      host = std::string(rest.substr(node + 9, sig - node - 9));
      auto signal = number(rest.substr(sig + 18));
      what = signal ? fmt::format("was killed by signal {}", *signal) : "was killed by a signal";
      if (signal) exit_status = 128 + *signal;
      return;
    }
    std::size_t name = line.find("Process name: [[");  // [[jobid,vpid],rank]
    if (name != std::string_view::npos) {
      std::size_t job_end = line.find("],", name);
      if (job_end != std::string_view::npos) pending_rank = number(line.substr(job_end + 2));
      return;
    }
    std::size_t code = line.find("Exit code:");
    if (code != std::string_view::npos && pending_rank) {
      auto c = number(line.substr(code + 10));
      if (!c) return;
      rank = pending_rank;
      what = fmt::format("exited with code {}", *c);
      exit_status = *c;
    }
  }
}

std::string_view Stream::local_time() {
  const std::time_t now = std::time(nullptr);
  if (now != time_of_text_) {
    std::tm local{};
    ::localtime_r(&now, &local);
    char text[64];
    const std::size_t n = std::strftime(text, sizeof text, "%a %b %e %H:%M:%S %Y", &local);
    time_text_.assign(text, n);
    time_of_text_ = now;
  }
  return time_text_;
}

void Stream::emit_line(std::string& out, std::optional<int> line_rank, std::string_view line) {
  const char* name = out_fd == STDOUT_FILENO ? "<stdout>:" : "<stderr>:";
  if (!line_rank && reported) reported->note(line, retag);
  if (timestamp) {
    out += local_time();
    if (!tag) out += ' ';
  }
  if (tag) {
    if (line_rank) out += fmt::format("[{}]", *line_rank);
    else out += label;
    out += name;
  }
  out.append(line);
  if (files && line_rank) {
    int f = files->get(*line_rank, out_fd);
    if (f >= 0) write_all(f, line.data(), line.size());
  }
}

void Stream::feed(std::string_view bytes, bool at_eof) {
  std::string out;
  if (retag != OutputRetag::none) {
    // An elastic member's srun step has one task (srun's rank 0): its lines are the member's.
    auto sink = [&](std::optional<int> line_rank, std::string_view line) {
      emit_line(out, line_rank && single_task ? std::optional<int>(rank) : line_rank, line);
    };
    decoder.feed(bytes, sink);
    if (at_eof) decoder.finish(sink);
  } else {
    buffer.append(bytes);
    std::size_t start = 0;
    for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1)
      emit_line(out, rank, std::string_view(buffer).substr(start, nl + 1 - start));
    if ((at_eof && start < buffer.size()) || buffer.size() - start > kMaxLine) {
      emit_line(out, rank, buffer.substr(start) + "\n");
      start = buffer.size();
    }
    buffer.erase(0, start);
  }
  if (!out.empty()) write_all(out_fd, out.data(), out.size());
}

void Stream::read_once(std::vector<char>& buffer) {
  const ssize_t n = ::read(fd, buffer.data(), buffer.size());
  if (n > 0) {
    feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)), false);
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    feed({}, true);
    ::close(fd);
    fd = -1;
  }
}

}  // namespace ringrun
