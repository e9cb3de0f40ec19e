// Elastic mode's decisions: events in, actions out (elastic/coordinator.hpp).
#include "elastic/coordinator.hpp"

#include "common/subprocess.hpp"

#include <fmt/format.h>

#include <sys/wait.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <limits>
#include <stdexcept>

namespace ringrun {
namespace {

using store::elastic::PublishedWorld;

SteadyTime after(SteadyTime now, double seconds) {
  return now + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(seconds));
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// "; id 5 starts as rank 2" for the processes a world adds.
std::string added_text(const PublishedWorld& world, const std::vector<int>& added) {
  if (added.empty()) return "";
  std::vector<std::uint64_t> ids;
  for (int rank : added) ids.push_back(world.ids[static_cast<std::size_t>(rank)]);
  if (added.size() == 1) return fmt::format("; id {} starts as rank {}", ids[0], added[0]);
  return fmt::format("; ids {} start as ranks {}", fmt::join(ids, ", "), fmt::join(added, ", "));
}

// "; id 2 is removed (it exits at its next commit)" for the running processes a world leaves out.
std::string retired_text(const std::vector<std::uint64_t>& ids) {
  if (ids.empty()) return "";
  return fmt::format("; {} {} {} removed (exiting at {} next commit)", ids.size() == 1 ? "id" : "ids",
                     fmt::join(ids, ", "), ids.size() == 1 ? "is" : "are", ids.size() == 1 ? "its" : "their");
}

// ringrun's own node query (launch.cpp): the job's nodes, `---`, the drained ones. Each node
// listed and not drained offers all of its plan's slots (more than any plan has; capped later).
std::vector<HostSlots> usable_job_nodes(std::string_view output) {
  const std::size_t mark = output.find("\n---\n");
  if (mark == std::string_view::npos && !output.starts_with("---\n"))
    throw InputError("the job's node list (squeue) : no '---' line after the nodes; is squeue or scontrol a wrapper?");
  const std::size_t split = mark == std::string_view::npos ? 0 : mark + 1;
  constexpr int kAll = std::numeric_limits<int>::max();
  std::vector<HostSlots> nodes = parse_discovered_hosts(output.substr(0, split), kAll, "the job's node list (squeue)");
  std::set<std::string, std::less<>> drained;
  for (const HostSlots& h : parse_discovered_hosts(output.substr(split + 4), kAll, "the drained nodes (sinfo)"))
    drained.insert(h.name);
  std::erase_if(nodes, [&](const HostSlots& h) { return drained.count(h.name) > 0; });
  return nodes;
}

}  // namespace

int ElasticConfig::capacity() const {
  long long n = 0;
  for (const HostSlots& h : hosts) n += h.slots;
  return static_cast<int>(std::min<long long>(n, std::numeric_limits<int>::max()));
}

ElasticCoordinator::ElasticCoordinator(ElasticConfig config)
    : config_(std::move(config)), blacklist_(config_.cooldown, config_.seed),
      discovery_poll_(std::chrono::duration<double>(config_.discovery_interval_s)) {
  const int capacity = config_.capacity();
  if (config_.start_np == 0) config_.start_np = capacity;
  const bool hosts_ok = !config_.hosts.empty() && std::ranges::all_of(config_.hosts, [](const HostSlots& h) {
    return h.slots >= 1;
  });
  const bool offered_ok =
      config_.start_offered.empty() ||
      (config_.start_offered.size() == config_.hosts.size() &&
       std::ranges::equal(config_.start_offered, config_.hosts, std::less_equal<>{}, {}, &HostSlots::slots));
  if (!hosts_ok || !offered_ok || config_.min_np < 1 || config_.min_np > config_.start_np ||
      config_.start_np > capacity || (config_.max_np && *config_.max_np < config_.start_np) ||
      config_.elastic_timeout_s <= 0 || config_.discovery_interval_s <= 0)
    throw std::invalid_argument(fmt::format("elastic configuration: {} slots on {} hosts with min_np {} and max_np {} "
                                            "is not a valid start",
                                            capacity, config_.hosts.size(), config_.min_np,
                                            config_.max_np.value_or(-1)));
}

std::string ElasticCoordinator::slot_key(const SlotRef& slot) const { return fmt::format("{}#{}", slot.host, slot.slot); }

std::string ElasticCoordinator::record_failure(Member& m, SteadyTime now) {
  m.failed = true;
  // A host's key is its name, a slot's "host#slot": a host name has no '#'.
  const std::string key = config_.blacklist_hosts ? m.slot.host : slot_key(m.slot);
  const bool started = blacklist_.record_failure(key, now);
  failed_slots_[key] = config_.blacklist_hosts ? SlotRef{m.slot.host, -1} : m.slot;
  if (!config_.blacklist_hosts || !started) return "";
  const std::optional<SteadyTime> until = blacklist_.cooldown_end(key);
  if (!until) return fmt::format("host {} is blacklisted", m.slot.host);
  return fmt::format("host {} is blacklisted for {:.1f} s", m.slot.host,
                     std::chrono::duration<double>(*until - now).count());
}

Notice ElasticCoordinator::waiting_notice(const std::string& cause, int available, SteadyTime now) const {
  // The wall-clock time the wait ends, which a user compares with `date`.
  const auto left = std::chrono::duration_cast<std::chrono::system_clock::duration>(*wait_until_ - now);
  const std::time_t until = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + left);
  std::tm local{};
  ::localtime_r(&until, &local);
  return Notice{fmt::format("ringrun: elastic: {}{}waiting for {} (have {}) until {:02}:{:02}:{:02} "
                            "(--elastic-timeout {} s)",
                            cause, cause.empty() ? "" : "; ", plural(static_cast<std::size_t>(config_.min_np), "slot",
                                                                      "slots"),
                            available, local.tm_hour, local.tm_min, local.tm_sec, config_.elastic_timeout_s)};
}

std::string ElasticCoordinator::member_text(std::uint64_t id) const {
  const Member& m = members_.at(id);
  const int rank = store::elastic::rank_of(newest_, id);
  if (rank < 0) return fmt::format("id {} (host {})", id, m.slot.host);
  return fmt::format("rank {} (id {}, host {})", rank, id, m.slot.host);
}

std::vector<std::uint64_t> ElasticCoordinator::running_members() const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, m] : members_)
    if (m.running) ids.push_back(id);
  return ids;
}

ElasticActions ElasticCoordinator::start(SteadyTime now) {
  // The first world's slots: those on offer, else the hosts' in plan order, start_np in all.
  int left = config_.start_np;
  for (std::size_t h = 0; h < config_.hosts.size(); ++h) {
    offered_.push_back(config_.start_offered.empty() ? std::min(left, config_.hosts[h].slots) : config_.start_offered[h]);
    left -= offered_.back();
  }
  if (!config_.discovery_script.empty()) discovery_poll_.on_result(true, now);  // launch.cpp's run
  const ElasticWorld world = assign_elastic_world(world_inputs(now));
  if (world.outcome != ElasticWorld::Outcome::formed)
    throw std::logic_error("elastic: the first world did not form from -np slots");
  return publish_formed(world, Cause{});
}

// The newest world's members as assign_elastic_world's old ranks: gone or leaving ones exited;
// slots that must stay empty held back (blacklisted, left, or still held by an exiting process).
ElasticWorldInputs ElasticCoordinator::world_inputs(SteadyTime now) const {
  ElasticWorldInputs in;
  for (std::size_t r = 0; r < newest_.ids.size(); ++r) {
    const Member& m = members_.at(newest_.ids[r]);
    in.previous.push_back(m.slot);
    if (!m.running || m.leaving || m.failed) in.exited.insert(static_cast<int>(r));
  }
  for (std::size_t h = 0; h < config_.hosts.size(); ++h)
    if (offered_[h] > 0 && !blacklist_.is_blacklisted(config_.hosts[h].name, now))
      in.usable.push_back(HostSlots{config_.hosts[h].name, offered_[h], {}});
  for (const auto& [id, m] : members_)
    if (m.leaving || (m.running && store::elastic::rank_of(newest_, id) < 0)) in.held_back.push_back(m.slot);
  for (const auto& [key, slot] : failed_slots_)
    if (slot.slot >= 0 && blacklist_.is_blacklisted(key, now)) in.held_back.push_back(slot);
  in.min_np = config_.min_np;
  in.max_np = config_.max_np;
  return in;
}

// A new world after `cause`; with `republish`, also when nothing changed (a reset request).
ElasticActions ElasticCoordinator::reform(const Cause& cause, SteadyTime now, bool republish) {
  const ElasticWorld world = assign_elastic_world(world_inputs(now));
  if (world.outcome == ElasticWorld::Outcome::no_survivors)
    return end_job(cause.exit_status,
                   fmt::format("ringrun: elastic: {}; no rank of world {} is left to carry the job's state", cause.text,
                               newest_.epoch),
                   "no rank is left");
  if (world.outcome == ElasticWorld::Outcome::wait) {
    settle_until_.reset();  // the wait re-forms the world anyway
    if (phase_ != Phase::waiting) {
      phase_ = Phase::waiting;
      wait_until_ = after(now, config_.elastic_timeout_s);
      wait_cause_ = cause;
    } else if (world.available_slots == wait_available_) {
      return {};
    }
    // Said at once, and again whenever the usable slots change while it waits.
    wait_available_ = world.available_slots;
    return {waiting_notice(cause.text, world.available_slots, now)};
  }
  if (!world.changes_world() && !republish) return {};
  if (config_.reset_limit && resets_ >= *config_.reset_limit)
    return end_job(1,
                   fmt::format("ringrun: elastic: {}; the job was reset {}, reaching --reset-limit {}; raise "
                               "--reset-limit to allow more",
                               cause.text, plural(static_cast<std::size_t>(resets_), "time", "times"),
                               *config_.reset_limit),
                   "reset limit reached");
  ++resets_;
  return publish_formed(world, cause);
}

ElasticActions ElasticCoordinator::publish_formed(const ElasticWorld& world, const Cause& cause) {
  ElasticActions out;
  PublishedWorld next;
  next.epoch = last_epoch_ + 1;
  next.added = last_epoch_ >= 0 && !world.added.empty();
  std::vector<SpawnMember> spawns;
  for (const ElasticRank& r : world.ranks) {
    if (r.old_rank) {
      next.ids.push_back(newest_.ids[static_cast<std::size_t>(*r.old_rank)]);
      continue;
    }
    const std::uint64_t id = next_id_++;
    members_.emplace(id, Member{r.place, next.epoch, true, false});
    next.ids.push_back(id);
    spawns.push_back(SpawnMember{id, r.place, next.epoch, r.identity, static_cast<int>(world.ranks.size())});
  }
  std::vector<std::uint64_t> to_retire;  // removed but running and not leaving (slot gone, over --max-np)
  for (const RemovedRank& r : world.removed) {
    const std::uint64_t id = newest_.ids[static_cast<std::size_t>(r.old_rank)];
    Member& m = members_.at(id);
    if (!m.running || m.leaving || m.failed) continue;
    m.retired = true;
    to_retire.push_back(id);
  }
  std::string line;
  if (!cause.text.empty()) {
    const bool same = next.ids == newest_.ids;
    line = fmt::format("ringrun: elastic: {}; world {} has {}{}{}{}", cause.text, next.epoch, same ? "the same " : "",
                       plural(next.ids.size(), "rank", "ranks"), added_text(next, world.added),
                       retired_text(to_retire));
  }
  const PublishedWorld previous = newest_;
  newest_ = next;
  last_epoch_ = next.epoch;
  phase_ = Phase::running;
  wait_until_.reset();
  wait_cause_.reset();
  wait_available_ = -1;
  settle_until_.reset();
  out.emplace_back(PublishWorld{std::move(next), std::move(line)});
  if (!previous.ids.empty()) out.emplace_back(AbandonWorld{previous.epoch, static_cast<int>(previous.ids.size())});
  for (SpawnMember& s : spawns) out.emplace_back(std::move(s));
  for (std::uint64_t id : to_retire) out.emplace_back(RetireMember{id});
  return out;
}

void ElasticCoordinator::publish_end(ElasticActions& out, const std::string& reason) {
  PublishedWorld end;
  end.epoch = ++last_epoch_;
  end.end = true;
  end.reason = reason;
  out.emplace_back(PublishWorld{std::move(end), ""});
  if (!newest_.ids.empty()) out.emplace_back(AbandonWorld{newest_.epoch, static_cast<int>(newest_.ids.size())});
}

ElasticActions ElasticCoordinator::end_job(int status, std::string line, const std::string& reason) {
  ElasticActions out;
  publish_end(out, reason);
  phase_ = Phase::ended;
  wait_until_.reset();
  settle_until_.reset();
  for (std::uint64_t id : running_members()) out.emplace_back(TerminateMember{id});
  out.emplace_back(EndJob{status, std::move(line)});
  return out;
}

ElasticActions ElasticCoordinator::on_exit(std::uint64_t id, int wait_status, bool leave_posted, SteadyTime now,
                                           std::string_view lost) {
  auto it = members_.find(id);
  if (it == members_.end() || !it->second.running) return {};
  Member& m = it->second;
  const std::string who = member_text(id);
  m.running = false;
  m.leaving = m.leaving || leave_posted;
  if (ended()) return {};
  const int epoch = newest_.epoch, rank = store::elastic::rank_of(newest_, id);
  const bool success = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 && lost.empty();
  if (m.failed && rank < 0) return {};  // counted when it said it was failing
  std::string blacklisted;
  if (!m.leaving && !m.retired && !success) blacklisted = record_failure(m, now);
  if (rank < 0) {
    // It was in an older world only: nothing waits for it, but its slot is free now, and a slot
    // offered again while it was exiting (held back until now) gets its new process.
    if (!m.retired) return {};
    return reform(Cause{fmt::format("{} exited, freeing slot {}", who, m.slot.slot), 1}, now, false);
  }
  ElasticActions out;
  if (success && !m.leaving) {
    // Horovod: a worker that succeeds ends the job with success; the others get the grace period.
    publish_end(out, fmt::format("the job finished: {} exited with code 0", who));
    phase_ = Phase::finishing;
    finish_deadline_ = after(now, config_.grace_period_s);
    wait_until_.reset();
    settle_until_.reset();
    out.emplace_back(EndJob{0, ""});
  } else {
    const std::string what = (m.leaving ? "left" : !lost.empty() ? std::string(lost) : describe_status(wait_status)) +
                             (blacklisted.empty() ? "" : " (" + blacklisted + ")");
    const int status = lost.empty() ? exit_code_of(wait_status) : 1;
    out = reform(Cause{fmt::format("{} {}", who, what), status}, now, false);
  }
  out.emplace_back(TombstoneAddress{epoch, rank});
  return out;
}

ElasticActions ElasticCoordinator::on_reset_request(int epoch, const std::vector<std::uint64_t>& leaving,
                                                    const std::vector<std::uint64_t>& failing, SteadyTime now) {
  if (phase_ != Phase::running || epoch != newest_.epoch) return {};
  std::vector<std::string> failed;
  for (std::uint64_t id : failing) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.running || it->second.failed || it->second.leaving ||
        store::elastic::rank_of(newest_, id) < 0)
      continue;
    const std::string who = member_text(id), blacklisted = record_failure(it->second, now);
    failed.push_back(fmt::format("{} is failing (an error ended its training{}{})", who, blacklisted.empty() ? "" : "; ",
                                 blacklisted));
  }
  if (!failed.empty()) return reform(Cause{fmt::format("{}", fmt::join(failed, ", ")), 1}, now, false);
  std::vector<std::string> leavers;
  for (std::uint64_t id : leaving) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.running || it->second.leaving || store::elastic::rank_of(newest_, id) < 0)
      continue;
    leavers.push_back(member_text(id));
    it->second.leaving = true;
  }
  if (!leavers.empty())
    return reform(Cause{fmt::format("{} {}", fmt::join(leavers, ", "), leavers.size() == 1 ? "is leaving" : "are leaving"),
                        0},
                  now, true);
  if (!settle_until_) settle_until_ = after(now, config_.reset_settle_s);
  return {};
}

ElasticActions ElasticCoordinator::on_tick(SteadyTime now) {
  if (phase_ == Phase::finishing && finish_deadline_ && now >= *finish_deadline_) {
    phase_ = Phase::ended;
    finish_deadline_.reset();
    ElasticActions out;
    for (std::uint64_t id : running_members()) out.emplace_back(TerminateMember{id});
    return out;
  }
  if (ended()) return {};
  const std::vector<std::string> released = blacklist_.release_expired(now);
  if (!released.empty()) {
    // "slots 1, 2 of host n1 and slot 0 of host n2 are back after their cooldown"
    std::vector<std::pair<std::string, std::vector<int>>> by_host;
    for (const std::string& key : released) {
      const SlotRef& slot = failed_slots_.at(key);
      if (by_host.empty() || by_host.back().first != slot.host) by_host.emplace_back(slot.host, std::vector<int>{});
      by_host.back().second.push_back(slot.slot);
    }
    std::vector<std::string> parts;
    for (const auto& [host, slots] : by_host)
      parts.push_back(slots == std::vector<int>{-1}
                          ? fmt::format("host {}", host)
                          : fmt::format("{} {} of host {}", slots.size() == 1 ? "slot" : "slots",
                                        fmt::join(slots, ", "), host));
    const bool one = released.size() == 1;
    const Cause cause{fmt::format("{} {} back after {} cooldown", fmt::join(parts, " and "), one ? "is" : "are",
                                  one ? "its" : "their"),
                      0};
    if (ElasticActions out = reform(cause, now, false); !out.empty()) return out;
  }
  if (phase_ == Phase::waiting && wait_until_ && now >= *wait_until_) {
    const int available = assign_elastic_world(world_inputs(now)).available_slots;
    return end_job(1,
                   fmt::format("ringrun: elastic: {}; {}", wait_cause_->text,
                               elastic_timeout_message(available, config_.min_np, config_.elastic_timeout_s)),
                   "not enough slots within --elastic-timeout");
  }
  if (phase_ == Phase::running && settle_until_ && now >= *settle_until_) {
    settle_until_.reset();
    return reform(Cause{fmt::format("a member of world {} asked for a reset", newest_.epoch), 1}, now, true);
  }
  return {};
}

ElasticActions ElasticCoordinator::on_interrupt(const std::string& reason) {
  if (ended()) return {};
  ElasticActions out;
  publish_end(out, reason);
  phase_ = Phase::ended;
  return out;
}

std::string ElasticCoordinator::discovery_name() const {
  if (config_.allocation_discovery) return "the job's node list (squeue)";
  return fmt::format("--host-discovery-script '{}'", config_.discovery_script);
}

std::optional<std::size_t> ElasticCoordinator::plan_host(const std::string& printed) const {
  // A host is the name printed (Horovod's rule): localhost and 127.0.0.1 are two hosts, each with
  // its own slots, HOROVOD_HOSTNAME and blacklist entry, though both are this machine.
  for (std::size_t h = 0; h < config_.hosts.size(); ++h)
    if (config_.hosts[h].name == printed) return h;
  return std::nullopt;
}

std::optional<std::vector<int>> ElasticCoordinator::offered_by(const DiscoveryResult& result, ElasticActions& out) {
  std::vector<HostSlots> printed;
  std::string error = result.error;
  bool ok = result.ok;
  if (ok) {
    try {
      if (config_.allocation_discovery) {
        printed = usable_job_nodes(result.output);
      } else {
        printed = parse_discovered_hosts(result.output, config_.slots_per_host, discovery_name());
      }
    } catch (const InputError& e) {
      error = e.what();
      ok = false;
    }
  }
  if (!ok) {
    last_discovery_error_ = error;
    return std::nullopt;
  }
  std::vector<long long> found(config_.hosts.size(), 0);
  for (const HostSlots& host : printed) {
    std::optional<std::size_t> h = plan_host(host.name);
    const int joining = config_.allocation_discovery                              ? config_.new_host_slots
                        : config_.adds_printed_hosts                              ? host.slots
                        : config_.local_host_slots > 0 && names_this_host(host.name, config_.self) ? config_.local_host_slots
                                                                                  : 0;
    if (!h && joining > 0) {
      // A host the job gains: a host of its own from now on, offered from this run on.
      config_.hosts.push_back(HostSlots{host.name, joining, {}});
      offered_.push_back(0);
      found.push_back(0);
      h = config_.hosts.size() - 1;
      out.emplace_back(AddHost{host.name, joining});
    }
    if (h) {
      found[*h] += host.slots;
    } else if (foreign_told_.insert(host.name).second) {
      out.emplace_back(Notice{fmt::format("ringrun: elastic: {} printed host '{}', which is not {}; ignored: the "
                                          "job's hosts are planned at its start{}",
                                          discovery_name(), host.name,
                                          config_.hosts.size() == 1 ? "this host" : "one of the job's hosts",
                                          config_.allocation_discovery
                                              ? ""
                                              : " (start it with --launcher mpirun to let it grow onto other hosts)")});
    }
  }
  if (config_.replaced_hosts_return)
    for (std::size_t h = 0; h < config_.hosts.size(); ++h)
      if (found[h] == 0 && blacklist_.release(config_.hosts[h].name)) {
        failed_slots_.erase(config_.hosts[h].name);
        out.emplace_back(Notice{fmt::format("ringrun: elastic: host {} is gone from {}; it may come back as a new "
                                            "pod under that name",
                                            config_.hosts[h].name, discovery_name())});
      }
  std::vector<int> offered(config_.hosts.size(), 0);
  for (std::size_t h = 0; h < config_.hosts.size(); ++h) {
    const int planned = config_.hosts[h].slots;
    if (found[h] > planned && !config_.allocation_discovery && capacity_told_.insert(config_.hosts[h].name).second)
      out.emplace_back(Notice{
          config_.adds_printed_hosts
              // Each host's processes are pinned for the slots first printed for it (ringrun task).
              ? fmt::format("ringrun: elastic: host {} offers {} slots but the job planned {} there (the slots the "
                            "script first printed for it); the others stay unused: print every host's full slots "
                            "from the start",
                            config_.hosts[h].name, found[h], planned)
              : fmt::format("ringrun: elastic: host {} offers {} slots but the job was planned for {} there "
                            "(--max-np, else -np or the script's first count); give --max-np {} to use them",
                            config_.hosts[h].name, found[h], planned, config_.capacity() - planned + found[h])});
    offered[h] = static_cast<int>(std::min<long long>(found[h], planned));
  }
  return offered;
}

ElasticActions ElasticCoordinator::on_discovery(const DiscoveryResult& result, SteadyTime now) {
  if (config_.discovery_script.empty() || ended()) return {};
  ElasticActions out;
  const std::optional<std::vector<int>> offered = offered_by(result, out);
  const DiscoveryPollPolicy::Decision decision = discovery_poll_.on_result(offered.has_value(), now);
  if (!offered) {
    // start() counted launch.cpp's first run, so a failure here is a later one: keep the slots.
    int kept = 0;
    for (int n : offered_) kept += n;
    if (decision.warn)
      out.emplace_back(Notice{fmt::format("ringrun: elastic: {} failed ({}); keeping {} {} and retrying {}",
                                          discovery_name(), last_discovery_error_,
                                          config_.hosts.size() == 1 ? "this host's" : "the hosts'",
                                          plural(static_cast<std::size_t>(kept), "slot", "slots"),
                                          DiscoveryPollPolicy::every(config_.discovery_interval_s))});
    return out;
  }
  if (*offered == offered_) return out;
  std::vector<std::string> changes;
  for (std::size_t h = 0; h < offered_.size(); ++h)
    if ((*offered)[h] != offered_[h])
      changes.push_back(fmt::format("host {} offers {} instead of {}", config_.hosts[h].name,
                                    plural(static_cast<std::size_t>((*offered)[h]), "slot", "slots"), offered_[h]));
  offered_ = *offered;
  for (ElasticAction& action : reform(Cause{fmt::format("{}", fmt::join(changes, ", ")), 1}, now, false))
    out.push_back(std::move(action));
  return out;
}

std::optional<SteadyTime> ElasticCoordinator::next_discovery() const {
  if (config_.discovery_script.empty() || ended()) return std::nullopt;
  return discovery_poll_.next_poll();
}

std::optional<SteadyTime> ElasticCoordinator::next_deadline() const {
  std::optional<SteadyTime> next;
  auto consider = [&next](std::optional<SteadyTime> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (phase_ == Phase::finishing) consider(finish_deadline_);
  if (ended()) return next;
  if (phase_ == Phase::waiting) consider(wait_until_);
  if (phase_ == Phase::running) consider(settle_until_);
  for (const auto& [key, slot] : failed_slots_) consider(blacklist_.cooldown_end(key));
  return next;
}

}  // namespace ringrun
