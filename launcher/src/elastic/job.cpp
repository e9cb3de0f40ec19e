// Elastic mode's supervisor: processes, signals, pipes and store keys for the coordinator's
// decisions (elastic/job.hpp). Decisions are all elastic/coordinator.cpp's.
#include "elastic/job.hpp"

#include "elastic/discovery.hpp"

#include "supervisor/output.hpp"
#include "supervisor/parts.hpp"

#include <ringrun/elastic_wire.hpp>
#include <ringrun/environment_variables.hpp>
#include <ringrun/store.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>

namespace ringrun {
namespace {

using Clock = std::chrono::steady_clock;
namespace wire = store::elastic;

// How often the store is asked for reset requests: a reset costs the survivors at most this much.
constexpr std::chrono::milliseconds kStorePoll{20};
// srun cancels its step on a second SIGINT within a second of the first.
constexpr std::chrono::milliseconds kSrunSecondInterrupt{200};
// Every process has exited but something they started still holds a pipe: wait this long for it.
constexpr std::chrono::seconds kDrain{2};

struct Process {
  ProcessSpec spec;  // its own: the launch record points into it
  pid_t pid = -1;
  bool running = false;
  std::optional<Clock::time_point> kill_at;  // SIGKILL then (after a SIGTERM)
  int interrupts = 0;                         // an srun step's: SIGINTs sent instead of the SIGKILL
  std::optional<Clock::time_point> term_at;  // retired: SIGTERM then unless it exited by itself
  ReportedFailure reported;                   // its srun step's own lines (a node failure)
};

// The slot's environment with what names the process replaced: its identity in the world it is
// started for, that world's size, and the three elastic variables.
std::vector<std::string> member_environment(const ProcessSpec& slot, const SpawnMember& s, double timeout_s) {
  std::map<std::string, std::string, std::less<>> set;
  for (const IdentityVariable& v : kIdentityVariablesByName) set[v.name] = identity_value(s.identity, v.field);
  for (const variables::Variable* v : variables::kAll)
    if (v->carries == variables::Carries::size) set[v->name] = std::to_string(s.world_size);
  set[variables::kElasticId.name] = std::to_string(s.id);
  set[variables::kElasticEpoch.name] = std::to_string(s.epoch);
  set[variables::kElasticTimeout.name] = fmt::format("{}", timeout_s);
  std::vector<std::string> env;
  env.reserve(slot.env.size() + set.size());
  for (const std::string& entry : slot.env) {
    auto it = set.find(std::string_view(entry).substr(0, entry.find('=')));
    if (it == set.end()) {
      env.push_back(entry);
      continue;
    }
    env.push_back(it->first + "=" + it->second);
    set.erase(it);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

class ElasticJob {
 public:
  ElasticJob(std::vector<ProcessSpec> slots, const ElasticConfig& config, const SupervisorOptions& options,
             const ElasticStoreAddress& store, AddedHostSlots added_host);
  ~ElasticJob();
  ElasticJob(const ElasticJob&) = delete;
  ElasticJob& operator=(const ElasticJob&) = delete;
  int run();

 private:
  void open_output_files();
  void apply(const ElasticActions& actions, Clock::time_point now);
  void spawn(const SpawnMember& s);
  std::size_t plan_rank(const SlotRef& slot) const;
  void publish(const PublishWorld& p);
  void tombstone(const TombstoneAddress& t);
  int signal_running(int sig, std::optional<Clock::time_point> kill_at);
  void kill_now(Process& p, Clock::time_point now);
  void read_signals(Clock::time_point now);
  void reap(Clock::time_point now);
  void poll_store(Clock::time_point now);
  void run_discovery(Clock::time_point now);
  void finish_discovery(Clock::time_point now);
  void read_streams(const std::vector<pollfd>& fds, const std::vector<std::size_t>& stream_of);
  void read_what_is_left(std::uint64_t id);
  int poll_timeout(Clock::time_point now) const;
  void step(Clock::time_point now);
  void abandon();
  int summary() const;
  std::size_t running() const;
  bool decided() const { return end_ || interrupted_by_; }
  Clock::time_point after_grace(Clock::time_point now) const {
    return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_period_s));
  }

  std::vector<ProcessSpec> slots_;  // by plan rank, then the slots of nodes the job gained
  const ElasticConfig config_;
  std::vector<HostSlots> hosts_;    // config_.hosts, then the nodes the job gained
  AddedHostSlots added_host_;
  const SupervisorOptions options_;
  ElasticCoordinator coordinator_;
  store::Client client_;
  RankFiles files_;
  std::map<std::uint64_t, Process> processes_;
  std::deque<Stream> streams_;  // a deque: a Stream never moves once its process writes to it
  std::vector<char> chunk_ = std::vector<char>(1 << 16);
  SignalRoute signals_;  // blocked, read through signals_.fd(); restored last
  int devnull_ = -1;
  const bool stdin_is_tty_ = ::isatty(STDIN_FILENO);
  const pid_t parent_ = ::getpid();
  std::optional<EndJob> end_;
  int interrupted_by_ = 0;
  int stopped_on_signal_ = 0;
  Clock::time_point next_store_poll_{};
  std::optional<Clock::time_point> drain_until_;
  // The discovery script's run in progress. The script runs beside the loop (its pipe is one of
  // the loop's fds, its exit comes on the signalfd) rather than at the 1 s tick with a bounded
  // wait: a run may take seconds, and every rank's reset and output wait on this loop.
  std::optional<DiscoveryRun> discovery_;
  std::optional<RankGuard> guard_;  // last: constructed once everything it needs exists
};

ElasticJob::ElasticJob(std::vector<ProcessSpec> slots, const ElasticConfig& config, const SupervisorOptions& options,
                       const ElasticStoreAddress& store, AddedHostSlots added_host)
    : slots_(std::move(slots)), config_(config), hosts_(config.hosts), added_host_(std::move(added_host)),
      options_(options), coordinator_(config),
      client_(store.host, store.port, store.secret, std::chrono::seconds(10)) {
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Groups alive at once: every slot's process, each replaced once while the old one still exits.
  guard_.emplace(4 * slots_.size() + 64);  // + 64: the processes of nodes the job may gain
}

ElasticJob::~ElasticJob() {
  for (Stream& s : streams_)
    if (s.fd >= 0) ::close(s.fd);
  if (devnull_ >= 0) ::close(devnull_);
}

// Output files first: a directory that cannot be written is a usage error, and nothing has started.
void ElasticJob::open_output_files() {
  if (!options_.output_directory) return;
  files_.dir = std::filesystem::path(*options_.output_directory);
  for (std::size_t id = 0; id < slots_.size(); ++id) {
    const int tag = static_cast<int>(id);
    std::filesystem::path dir = *files_.dir / fmt::format("rank.{}", tag);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || files_.get(tag, 1) < 0 || files_.get(tag, 2) < 0)
      throw LaunchError(fmt::format("ringrun: --output-filename: cannot create '{}': {}", dir.string(),
                                    ec ? ec.message() : std::strerror(errno)), 2);
  }
}

std::size_t ElasticJob::running() const {
  std::size_t n = 0;
  for (const auto& [id, p] : processes_) n += p.running ? 1 : 0;
  return n;
}

void ElasticJob::apply(const ElasticActions& actions, Clock::time_point now) {
  for (const ElasticAction& action : actions) {
    if (const auto* p = std::get_if<PublishWorld>(&action)) {
      publish(*p);
    } else if (const auto* s = std::get_if<SpawnMember>(&action)) {
      spawn(*s);
    } else if (const auto* t = std::get_if<TerminateMember>(&action)) {
      Process& process = processes_.at(t->id);
      if (process.running && !process.kill_at) {
        ::kill(-process.pid, SIGTERM);
        process.kill_at = after_grace(now);
      }
    } else if (const auto* r = std::get_if<RetireMember>(&action)) {
      // Time to learn at its next commit that it was removed, reset and exit 0 by itself.
      Process& process = processes_.at(r->id);
      if (process.running && !process.term_at) process.term_at = after_grace(now);
    } else if (const auto* n = std::get_if<Notice>(&action)) {
      write_all(STDERR_FILENO, (n->line + "\n").data(), n->line.size() + 1);
    } else if (const auto* d = std::get_if<TombstoneAddress>(&action)) {
      tombstone(*d);
    } else if (const auto* a = std::get_if<AddHost>(&action)) {
      if (!added_host_) throw std::logic_error("elastic: a node was added, but the job cannot start processes there");
      std::vector<ProcessSpec> more = added_host_(a->name, a->slots, static_cast<int>(slots_.size()));
      slots_.insert(slots_.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      hosts_.push_back(HostSlots{a->name, a->slots, {}});
    } else if (const auto* w = std::get_if<AbandonWorld>(&action)) {
      for (int rank = 0; rank < w->size; ++rank) tombstone(TombstoneAddress{w->epoch, rank});
    } else if (const auto* e = std::get_if<EndJob>(&action)) {
      if (!e->line.empty()) write_all(STDERR_FILENO, (e->line + "\n").data(), e->line.size() + 1);
      if (!end_) end_ = *e;
    }
  }
}

// The world first, then `latest`: a rank that sees `latest` finds the world it names.
void ElasticJob::publish(const PublishWorld& p) {
  client_.set(wire::world_key(p.world.epoch), wire::encode_world(p.world));
  client_.set(wire::latest_key(), std::to_string(p.world.epoch));
  if (!p.line.empty()) write_all(STDERR_FILENO, (p.line + "\n").data(), p.line.size() + 1);
}

// The address key of round 0 of the world's exchange (StoreExchange: <prefix>/<round>/<rank>). The
// process is reaped, so it can no longer write the key after we found it unset.
void ElasticJob::tombstone(const TombstoneAddress& t) {
  const std::string key = fmt::format("{}/0/{}", wire::addr_prefix(t.epoch), t.rank);
  if (!client_.try_get(key)) client_.set(key, std::string(wire::kTombstone));
}

void ElasticJob::spawn(const SpawnMember& s) {
  const ProcessSpec& slot = slots_.at(plan_rank(s.slot));
  Process& process = processes_[s.id];
  process.spec = slot;
  process.spec.rank = static_cast<int>(s.id);  // its output's tag and its --output-filename folder
  process.spec.env = member_environment(slot, s, config_.rank_timeout_s);
  process.spec.stdin_inherit = slot.stdin_inherit && s.id == 0;
  StartedRank started;
  try {
    started = start_rank(process.spec, RankStart{signals_.exec_mask(), parent_, devnull_, stdin_is_tty_}, *guard_);
  } catch (...) {
    abandon();
    throw;
  }
  if (started.pid > 0) {
    process.pid = started.pid;
    process.running = true;
  }
  if (!started.ok()) {
    abandon();
    if (started.pid < 0)
      throw LaunchError(fmt::format("ringrun: starting id {}: {}", s.id, std::strerror(started.spawn_errno)), 1);
    throw spawn_error(process.spec, started.failure);
  }
  const std::string label = fmt::format("[{}]", s.id);
  RankFiles* files = options_.output_directory ? &files_ : nullptr;
  const int tag = static_cast<int>(s.id);
  // A member started by its own srun step writes records (rank_output.hpp) under srun's tag.
  streams_.emplace_back(started.out_fd, STDOUT_FILENO, tag, label, process.spec.retag, options_.tag_output, files, nullptr);
  streams_.back().single_task = true;
  streams_.back().timestamp = options_.timestamp_output;
  streams_.emplace_back(started.err_fd, STDERR_FILENO, tag, label, process.spec.retag, options_.tag_output, files,
                        process.spec.retag == OutputRetag::none ? nullptr : &process.reported);
  streams_.back().single_task = true;
  streams_.back().timestamp = options_.timestamp_output;
}

// The plan's rank of a slot: the slots of the hosts before its host, plus its index there.
std::size_t ElasticJob::plan_rank(const SlotRef& slot) const {
  std::size_t first = 0;
  for (const HostSlots& host : hosts_) {
    if (host.name == slot.host) return first + static_cast<std::size_t>(slot.slot);
    first += static_cast<std::size_t>(host.slots);
  }
  throw std::logic_error("elastic: slot of a host not in the plan: " + slot.host);
}

// Nothing may be left running when a process cannot be started: the job ends with the error.
void ElasticJob::abandon() {
  for (auto& [id, p] : processes_)
    if (p.running) {
      ::kill(-p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      p.running = false;
    }
  guard_->release();
}

// The end of a process that outstayed its SIGTERM. A member's srun step is not SIGKILLed at once:
// its task on another node would live on until the job ends. srun passes the first SIGINT on to
// its task (--disable-status); a second within a second (apart, or they merge into one pending
// signal) makes it cancel the step (SIGKILL to the task after KillWait) and exit; only an srun
// still there a grace period later is SIGKILLed.
void ElasticJob::kill_now(Process& p, Clock::time_point now) {
  if (p.spec.retag == OutputRetag::srun_label && p.interrupts < 2) {
    ::kill(p.pid, SIGINT);
    ++p.interrupts;
    p.kill_at = p.interrupts == 1 ? now + kSrunSecondInterrupt : after_grace(now);
    return;
  }
  ::kill(-p.pid, SIGKILL);
  p.kill_at.reset();
}

int ElasticJob::signal_running(int sig, std::optional<Clock::time_point> kill_at) {
  int n = 0;
  for (auto& [id, p] : processes_)
    if (p.running) {
      ::kill(-p.pid, sig);
      if (kill_at && !p.kill_at) p.kill_at = kill_at;
      ++n;
    }
  return n;
}

void ElasticJob::read_signals(Clock::time_point now) {
  signalfd_siginfo info;
  while (::read(signals_.fd(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      signal_running(sig, std::nullopt);  // Slurm's checkpoint signals: passed on, the job goes on
    } else if (interrupted_by_) {
      // A second signal: the user does not want to wait.
      for (auto& [id, p] : processes_)
        if (p.running) kill_now(p, now);
    } else {
      interrupted_by_ = sig;
      const char* name = sigabbrev_np(sig);
      apply(coordinator_.on_interrupt(fmt::format("ringrun received SIG{}", name ? name : "?")), now);
      stopped_on_signal_ = signal_running(sig, after_grace(now));
    }
  }
  reap(now);
}

void ElasticJob::reap(Clock::time_point now) {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (discovery_ && pid == discovery_->pid()) {
      discovery_->on_reaped(status);
      guard_->unwatch(pid);
      finish_discovery(now);
      continue;
    }
    for (auto& [id, p] : processes_) {
      if (p.pid != pid || !p.running) continue;
      p.running = false;
      // Whatever it left behind in its process group goes with it (it may hold its GPU).
      ::kill(-pid, SIGKILL);
      guard_->unwatch(pid);
      const bool leave_posted = client_.try_get(wire::leave_key(id)).has_value();
      // srun exits 0 when the node under its task fails: that is no success of the member. It
      // says so on stderr just before it exits, which this loop may not have read yet.
      if (p.spec.retag != OutputRetag::none) read_what_is_left(id);
      std::string lost;
      if (p.reported.failed_node) lost = fmt::format("lost its node (srun: Node failure on {})", *p.reported.failed_node);
      apply(coordinator_.on_exit(id, status, leave_posted, now, lost), now);
      break;
    }
  }
}

// A member of the newest world asking for a reset, with the leave keys of that world's members.
void ElasticJob::poll_store(Clock::time_point now) {
  next_store_poll_ = now + kStorePoll;
  const wire::PublishedWorld world = coordinator_.newest_world();
  if (!client_.try_get(wire::reset_key(world.epoch))) return;
  std::vector<std::uint64_t> leaving, failing;
  for (std::uint64_t id : world.ids) {
    if (!processes_.at(id).running) continue;
    if (client_.try_get(wire::failed_key(id))) failing.push_back(id);
    else if (client_.try_get(wire::leave_key(id))) leaving.push_back(id);
  }
  apply(coordinator_.on_reset_request(world.epoch, leaving, failing, now), now);
}

// The script is due and none runs: start it (its group is guarded like a rank's).
void ElasticJob::run_discovery(Clock::time_point now) {
  const std::optional<Clock::time_point> due = coordinator_.next_discovery();
  if (discovery_ || !due || now < *due) return;
  try {
    discovery_.emplace(config_.discovery_script, signals_.exec_mask(), now);
  } catch (const LaunchError& e) {
    // No process or pipe to spare right now: a failed run like any other, retried in a second.
    apply(coordinator_.on_discovery(DiscoveryResult{false, "", e.what()}, now), now);
    return;
  }
  guard_->watch(discovery_->pid());
}

// The run ended (output closed and exit reaped, or the timeout): hand its result on.
void ElasticJob::finish_discovery(Clock::time_point now) {
  if (!discovery_) return;
  const std::optional<DiscoveryResult> result = discovery_->result();
  if (!result) return;
  discovery_.reset();
  apply(coordinator_.on_discovery(*result, now), now);
}

// What member `id`'s pipes hold now, without waiting for more (something it started may still
// hold them open).
void ElasticJob::read_what_is_left(std::uint64_t id) {
  for (Stream& s : streams_) {
    if (s.rank != static_cast<int>(id)) continue;
    pollfd ready{s.fd, POLLIN, 0};
    while (s.fd >= 0 && ::poll(&ready, 1, 0) > 0) s.read_once(chunk_);
  }
}

void ElasticJob::read_streams(const std::vector<pollfd>& fds, const std::vector<std::size_t>& stream_of) {
  for (std::size_t k = 1; k <= stream_of.size(); ++k)
    if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) streams_[stream_of[k - 1]].read_once(chunk_);
}

int ElasticJob::poll_timeout(Clock::time_point now) const {
  std::optional<Clock::time_point> next = coordinator_.next_deadline();
  auto consider = [&next](std::optional<Clock::time_point> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (!decided()) consider(next_store_poll_);
  if (discovery_) consider(discovery_->deadline());
  else if (!decided()) consider(coordinator_.next_discovery());
  for (const auto& [id, p] : processes_)
    if (p.running) {
      consider(p.kill_at);
      consider(p.term_at);
    }
  consider(drain_until_);
  if (!next) return -1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count() + 1;
  return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
}

// What is due at `now`: SIGKILLs after the grace period, the drain's end, the store, the coordinator.
void ElasticJob::step(Clock::time_point now) {
  for (auto& [id, p] : processes_) {
    if (p.running && p.kill_at && now >= *p.kill_at) kill_now(p, now);
    if (p.running && p.term_at && now >= *p.term_at && !p.kill_at) {
      ::kill(-p.pid, SIGTERM);  // a retired process that did not exit by itself
      p.kill_at = after_grace(now);
    }
    if (p.kill_at || !p.running) p.term_at.reset();
  }
  if (discovery_ && now >= discovery_->deadline()) {
    discovery_->kill_for_timeout();
    guard_->unwatch(discovery_->pid());
    finish_discovery(now);
  }
  if (drain_until_ && now >= *drain_until_) {
    // Every process has exited but something they started still holds the pipes: end it.
    for (auto& [id, p] : processes_) ::kill(-p.pid, SIGKILL);
    for (Stream& s : streams_)
      if (s.fd >= 0) {
        s.feed({}, true);
        ::close(s.fd);
        s.fd = -1;
      }
  }
  if (!decided() && now >= next_store_poll_) poll_store(now);
  if (!decided()) run_discovery(now);
  if (!interrupted_by_) apply(coordinator_.on_tick(now), now);
  if (!decided() && running() == 0 && !coordinator_.next_deadline())
    apply({EndJob{1, "ringrun: elastic: no process is left and none is due to start; ending the job"}}, now);
}

int ElasticJob::run() {
  open_output_files();
  apply(coordinator_.start(Clock::now()), Clock::now());
  for (;;) {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    std::vector<std::size_t> stream_of;
    for (std::size_t i = 0; i < streams_.size(); ++i)
      if (streams_[i].fd >= 0) {
        fds.push_back({streams_[i].fd, POLLIN, 0});
        stream_of.push_back(i);
      }
    const bool reading_discovery = discovery_ && discovery_->fd() >= 0;
    if (reading_discovery) fds.push_back({discovery_->fd(), POLLIN, 0});
    const bool idle = running() == 0 && decided();
    if (idle && stream_of.empty()) break;
    if (idle && !drain_until_) drain_until_ = Clock::now() + kDrain;
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout(Clock::now()));
    if (ready < 0 && errno != EINTR) break;
    const Clock::time_point now = Clock::now();
    if (ready > 0) read_streams(fds, stream_of);
    if (ready > 0 && reading_discovery && fds.back().revents) {
      discovery_->read_some();
      finish_discovery(now);
    }
    if (ready > 0 && (fds[0].revents & POLLIN)) read_signals(now);
    step(now);
  }
  for (auto& [id, p] : processes_) ::kill(-p.pid, SIGKILL);
  discovery_.reset();  // killed with its group and reaped: its result no longer matters
  guard_->release();
  return summary();
}

int ElasticJob::summary() const {
  if (interrupted_by_) {
    const char* name = sigabbrev_np(interrupted_by_);
    const std::string line = fmt::format("ringrun: received SIG{}; stopped {} rank{}\n", name ? name : "?",
                                         stopped_on_signal_, stopped_on_signal_ == 1 ? "" : "s");
    write_all(STDERR_FILENO, line.data(), line.size());
    return 128 + interrupted_by_;
  }
  return end_ ? end_->status : 1;
}

}  // namespace

int run_elastic(std::vector<ProcessSpec> slots, const ElasticConfig& config, const SupervisorOptions& options,
                const ElasticStoreAddress& store, AddedHostSlots added_host) {
  ElasticJob job(std::move(slots), config, options, store, std::move(added_host));
  return job.run();
}

}  // namespace ringrun
