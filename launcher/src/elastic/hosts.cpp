// Elastic mode's planning core: discovery output, blacklist, world assignment, poll policy.
#include "elastic/hosts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

namespace ringrun {
namespace {

std::string_view trim(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// One non-blank line of the script's output.
HostSlots parse_discovered_line(std::string_view line, int line_no, int default_slots, std::string_view origin) {
  auto fail = [&](const std::string& problem) {
    return InputError(fmt::format("{} line {} '{}' : {}", origin, line_no, line, problem));
  };
  const std::size_t colon = line.find(':');
  const std::string_view name = trim(line.substr(0, colon));
  if (name.empty()) throw fail("no host name (print host[:slots] per line, e.g. n1:4)");
  if (!valid_hostname(name))
    throw fail(fmt::format("'{}' is not a host name (letters, digits, '.', '-', '_'; print host[:slots], e.g. n1:4)",
                           name));
  if (colon == std::string_view::npos) {
    if (default_slots < 1)
      throw fail(fmt::format("no slot count and no --slots-per-host (print {}:SLOTS or pass --slots-per-host N)",
                             name));
    return HostSlots{std::string(name), default_slots, {}};
  }
  const std::string_view slots_text = trim(line.substr(colon + 1));
  auto slots = parse_slots(slots_text);
  if (!slots)
    throw fail(fmt::format("slots '{}' of host '{}' is not a positive whole number (print host:slots, e.g. {}:4)",
                           slots_text, name, name));
  return HostSlots{std::string(name), *slots, {}};
}

}  // namespace

std::vector<HostSlots> parse_discovered_hosts(std::string_view script_output, int default_slots,
                                              std::string_view origin) {
  std::vector<HostSlots> hosts;
  std::map<std::string, int, std::less<>> first_line;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < script_output.size()) {
    const std::size_t nl = script_output.find('\n', pos);
    std::string_view line = script_output.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? script_output.size() : nl + 1;
    ++line_no;
    line = trim(line);
    if (line.empty()) continue;
    HostSlots host = parse_discovered_line(line, line_no, default_slots, origin);
    if (auto it = first_line.find(host.name); it != first_line.end())
      throw InputError(fmt::format("{} line {} '{}' : host '{}' is printed again (first on line {}); print each host "
                                   "once with its total slots",
                                   origin, line_no, line, host.name, it->second));
    first_line.emplace(host.name, line_no);
    hosts.push_back(std::move(host));
  }
  return hosts;
}

bool names_this_host(std::string_view host, std::string_view self) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1" || host == self) return true;
  const std::size_t dot = self.find('.');
  return dot != std::string_view::npos && host == self.substr(0, dot);
}

LocalDiscovery split_local_hosts(const std::vector<HostSlots>& hosts, std::string_view self) {
  LocalDiscovery found;
  long long slots = 0;  // saturating, as assign_elastic_world's count
  for (const HostSlots& host : hosts) {
    if (names_this_host(host.name, self))
      slots = std::min<long long>(slots + host.slots, std::numeric_limits<int>::max());
    else
      found.foreign.push_back(host.name);
  }
  found.slots = static_cast<int>(slots);
  return found;
}

std::vector<HostSlots> first_discovered_hosts(const DiscoveryResult& result, std::string_view script,
                                              int slots_per_host) {
  const std::string origin = fmt::format("--host-discovery-script '{}'", script);
  if (!result.ok)
    throw InputError(fmt::format("{} : its first run {}; fix it to print host[:slots] lines and exit 0", origin,
                                 result.error));
  return parse_discovered_hosts(result.output, slots_per_host, origin);
}

int total_slots(const std::vector<HostSlots>& hosts) {
  long long slots = 0;
  for (const HostSlots& host : hosts) slots = std::min<long long>(slots + host.slots, std::numeric_limits<int>::max());
  return static_cast<int>(slots);
}

// ---- Blacklist -----------------------------------------------------------------------------------

void validate_cooldown_range(const CooldownRange& range) {
  auto fail = [&](const char* problem) {
    return InputError(fmt::format("--blacklist-cooldown-range {} {} : {} (e.g. --blacklist-cooldown-range 10 300)",
                                  range.min_s, range.max_s, problem));
  };
  if (range.min_s < kCooldownMinLowestSeconds) throw fail("MIN must be at least 1 second");
  if (range.max_s > kCooldownMaxHighestSeconds) throw fail("MAX must be at most 3600 seconds (one hour)");
  if (range.min_s > range.max_s) throw fail("MIN must not be above MAX");
}

std::chrono::duration<double> cooldown_duration(const CooldownRange& range, int failure_count, double jitter) {
  const double lower = range.min_s, upper = range.max_s;
  // 2^count overflows nothing in double; past 2^64 the clamp to MAX decides anyway.
  const double delay = lower * std::ldexp(1.0, std::min(failure_count, 64)) + jitter * lower;
  return std::chrono::duration<double>(std::max(lower, std::min(upper, delay)));
}

HostBlacklist::HostBlacklist(std::optional<CooldownRange> cooldown, std::uint64_t seed)
    : cooldown_(cooldown), random_(seed) {
  if (cooldown_) validate_cooldown_range(*cooldown_);
}

bool HostBlacklist::record_failure(const std::string& host, SteadyTime now) {
  Entry& entry = entries_[host];
  if (entry.active && (!entry.until || now < *entry.until)) return false;  // already excluded
  entry.active = true;
  ++entry.count;
  if (!cooldown_) return true;  // for good
  // A uniform draw in [0, 1) from the engine's 53 high bits: the same numbers with every standard
  // library (std::uniform_real_distribution's algorithm is left to the library).
  const double jitter = static_cast<double>(random_() >> 11) * 0x1.0p-53;
  const auto cooldown = cooldown_duration(*cooldown_, entry.count, jitter);
  entry.until = now + std::chrono::duration_cast<SteadyTime::duration>(cooldown);
  return true;
}

bool HostBlacklist::is_blacklisted(const std::string& host, SteadyTime now) const {
  auto it = entries_.find(host);
  if (it == entries_.end() || !it->second.active) return false;
  return !it->second.until || now < *it->second.until;
}

std::optional<SteadyTime> HostBlacklist::cooldown_end(const std::string& host) const {
  auto it = entries_.find(host);
  if (it == entries_.end() || !it->second.active) return std::nullopt;
  return it->second.until;
}

int HostBlacklist::blacklist_count(const std::string& host) const {
  auto it = entries_.find(host);
  return it == entries_.end() ? 0 : it->second.count;
}

std::vector<std::string> HostBlacklist::release_expired(SteadyTime now) {
  std::vector<std::string> released;
  for (auto& [host, entry] : entries_) {
    if (!entry.active || !entry.until || now < *entry.until) continue;
    entry.active = false;
    entry.until.reset();
    released.push_back(host);
  }
  return released;
}

bool HostBlacklist::release(const std::string& host) {
  auto it = entries_.find(host);
  if (it == entries_.end() || !it->second.active) return false;
  it->second.active = false;
  it->second.until.reset();
  return true;
}

std::vector<HostSlots> HostBlacklist::usable_hosts(const std::vector<HostSlots>& discovered, SteadyTime now) const {
  std::vector<HostSlots> usable;
  for (const HostSlots& host : discovered)
    if (!is_blacklisted(host.name, now)) usable.push_back(host);
  return usable;
}

// ---- The world after a change ----------------------------------------------------------------------

const char* to_string(RemovalReason reason) {
  switch (reason) {
    case RemovalReason::exited: return "exited";
    case RemovalReason::host_unusable: return "host not usable";
    case RemovalReason::slots_reduced: return "host has fewer slots";
    case RemovalReason::over_max_np: return "over --max-np";
  }
  return "removed";
}

namespace {

void check_world_inputs(const ElasticWorldInputs& in) {
  if (in.min_np < 1) throw std::invalid_argument(fmt::format("elastic world: min_np {} is below 1", in.min_np));
  if (in.max_np && *in.max_np < in.min_np)
    throw std::invalid_argument(fmt::format("elastic world: max_np {} is below min_np {}", *in.max_np, in.min_np));
  for (int rank : in.exited)
    if (rank < 0 || static_cast<std::size_t>(rank) >= in.previous.size())
      throw std::invalid_argument(fmt::format("elastic world: exited rank {} is not one of the {} old ranks", rank,
                                              in.previous.size()));
  std::set<std::pair<std::string_view, int>> places;
  for (const SlotRef& place : in.previous)
    if (place.slot < 0 || !places.emplace(place.host, place.slot).second)
      throw std::invalid_argument(fmt::format("elastic world: slot {} of host {} is held twice or invalid", place.slot,
                                              place.host));
}

// Why old rank `rank` cannot stay, or nullopt when it survives.
std::optional<RemovalReason> removal_reason(const ElasticWorldInputs& in, int rank,
                                            const std::map<std::string_view, int>& slots_of) {
  if (in.exited.count(rank)) return RemovalReason::exited;
  const SlotRef& place = in.previous[static_cast<std::size_t>(rank)];
  auto host = slots_of.find(place.host);
  if (host == slots_of.end()) return RemovalReason::host_unusable;
  if (place.slot >= host->second) return RemovalReason::slots_reduced;
  return std::nullopt;
}

// The hosts new slots are taken from, in order: those of the old world (oldest first, as
// Horovod's order_available_hosts), then the others in discovery order.
std::vector<const HostSlots*> new_slot_host_order(const ElasticWorldInputs& in) {
  std::map<std::string_view, const HostSlots*> unlisted;
  for (const HostSlots& host : in.usable) unlisted.emplace(host.name, &host);
  std::vector<const HostSlots*> order;
  auto add = [&](std::string_view name) {
    if (auto it = unlisted.find(name); it != unlisted.end()) {
      order.push_back(it->second);
      unlisted.erase(it);
    }
  };
  for (const SlotRef& place : in.previous) add(place.host);
  for (const HostSlots& host : in.usable) add(host.name);
  return order;
}

// local_rank: the rank's position among its host's ranks; cross_rank: its position among the ranks
// with its local_rank; group_rank: its host's index in order of first rank. The runtime's
// compute_local_and_cross, and for block layouts make_plan's numbering.
void number_ranks(std::vector<ElasticRank>& ranks, std::vector<std::string>& hosts) {
  std::map<std::string_view, int> on_host;
  std::map<std::string_view, std::size_t> host_index;
  std::map<int, int> with_local;
  for (ElasticRank& r : ranks) {
    RankIdentity& id = r.identity;
    id.hostname = r.place.host;
    auto [it, added] = host_index.emplace(r.place.host, hosts.size());
    if (added) hosts.push_back(r.place.host);
    id.group_rank = it->second;
    id.local_rank = on_host[r.place.host]++;
    id.cross_rank = with_local[id.local_rank]++;
  }
  for (ElasticRank& r : ranks) {
    r.identity.local_size = on_host[r.place.host];
    r.identity.cross_size = with_local[r.identity.local_rank];
  }
}

}  // namespace

ElasticWorld assign_elastic_world(const ElasticWorldInputs& in) {
  check_world_inputs(in);
  ElasticWorld world;
  std::map<std::string_view, int> slots_of;
  long long available = 0;  // saturating: a script may print INT_MAX slots per host
  for (const HostSlots& host : in.usable) {
    slots_of.emplace(host.name, host.slots);
    available = std::min<long long>(available + host.slots, std::numeric_limits<int>::max());
  }
  world.available_slots = static_cast<int>(available);
  const std::size_t limit = in.max_np ? static_cast<std::size_t>(*in.max_np) : std::numeric_limits<std::size_t>::max();
  std::set<std::pair<std::string_view, int>> occupied;
  for (int old = 0; old < static_cast<int>(in.previous.size()); ++old) {
    const SlotRef& place = in.previous[static_cast<std::size_t>(old)];
    auto reason = removal_reason(in, old, slots_of);
    if (!reason && world.ranks.size() == limit) reason = RemovalReason::over_max_np;
    if (reason) {
      world.removed.push_back(RemovedRank{old, place, *reason});
      continue;
    }
    world.ranks.push_back(ElasticRank{place, RankIdentity{}, old});
    occupied.emplace(place.host, place.slot);
  }
  if (!in.previous.empty() && world.ranks.empty()) {
    world.outcome = ElasticWorld::Outcome::no_survivors;
    return world;
  }
  // Held slots that nobody occupies are not available; an occupied one counts for its survivor.
  std::set<std::pair<std::string_view, int>> held;
  for (const SlotRef& place : in.held_back) {
    auto host = slots_of.find(place.host);
    if (host == slots_of.end() || place.slot < 0 || place.slot >= host->second) continue;
    if (!occupied.count({place.host, place.slot}) && held.emplace(place.host, place.slot).second)
      --world.available_slots;
  }
  if (world.available_slots < in.min_np) {
    world.outcome = ElasticWorld::Outcome::wait;
    world.ranks.clear();
    return world;
  }
  for (const HostSlots* host : new_slot_host_order(in))
    for (int slot = 0; slot < host->slots && world.ranks.size() < limit; ++slot)
      if (!occupied.count({host->name, slot}) && !held.count({host->name, slot})) {
        world.added.push_back(static_cast<int>(world.ranks.size()));
        world.ranks.push_back(ElasticRank{SlotRef{host->name, slot}, RankIdentity{}, std::nullopt});
      }
  for (std::size_t r = 0; r < world.ranks.size(); ++r) world.ranks[r].identity.rank = static_cast<int>(r);
  number_ranks(world.ranks, world.hosts);
  return world;
}

std::string elastic_timeout_message(int available_slots, int min_np, double elastic_timeout_s) {
  return fmt::format("only {} of the {} slots --min-np needs became available within --elastic-timeout {} s; add "
                     "hosts or slots, lower --min-np or raise --elastic-timeout",
                     available_slots, min_np, elastic_timeout_s);
}

// ---- Poll policy -----------------------------------------------------------------------------------

std::string DiscoveryPollPolicy::every(double interval_s) {
  return interval_s == kIntervalSeconds ? std::string("every second") : fmt::format("every {} s", interval_s);
}

DiscoveryPollPolicy::Decision DiscoveryPollPolicy::on_result(bool ok, SteadyTime now) {
  const bool first = !first_run_done_;
  first_run_done_ = true;
  next_poll_ = now + interval_;
  if (ok) {
    consecutive_failures_ = 0;
    failing_since_.reset();
    return {Action::use_hosts, false};
  }
  if (first) return {Action::end_job, false};
  if (++consecutive_failures_ == 1) failing_since_ = now;
  return {Action::keep_last_hosts, consecutive_failures_ == 1};
}

}  // namespace ringrun
