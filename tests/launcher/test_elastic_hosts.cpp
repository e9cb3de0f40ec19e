// Elastic mode (README, Elastic training), the launcher's pure core: the discovery script's output,
// the blacklist with Horovod's cooldown, the world after a change and the discovery poll policy.
#include "elastic/hosts.hpp"

#include <limits>

#include <ringrun/plan.hpp>

#include <doctest/doctest.h>

#include "error_of.hpp"
#include <fmt/format.h>

#include <string>
#include <vector>

using namespace ringrun;
using namespace std::chrono_literals;

namespace {

std::string parse_error(std::string_view text, int default_slots = 4) {
  return error_of([&] { parse_discovered_hosts(text, default_slots); });
}

const SteadyTime t0 = SteadyTime{} + 1000h;

std::vector<SlotRef> places(std::initializer_list<std::pair<const char*, int>> list) {
  std::vector<SlotRef> out;
  for (auto [host, slot] : list) out.push_back(SlotRef{host, slot});
  return out;
}

// "host:slot" of each new rank, in rank order.
std::vector<std::string> layout(const ElasticWorld& world) {
  std::vector<std::string> out;
  for (const ElasticRank& r : world.ranks) out.push_back(r.place.host + ":" + std::to_string(r.place.slot));
  return out;
}

std::vector<int> old_ranks(const ElasticWorld& world) {
  std::vector<int> out;
  for (const ElasticRank& r : world.ranks) out.push_back(r.old_rank.value_or(-1));
  return out;
}

std::vector<std::pair<int, RemovalReason>> removals(const ElasticWorld& world) {
  std::vector<std::pair<int, RemovalReason>> out;
  for (const RemovedRank& r : world.removed) out.emplace_back(r.old_rank, r.reason);
  return out;
}

// local_rank/local_size/cross_rank/cross_size of each rank, as one string per rank.
std::vector<std::string> numbers(const ElasticWorld& world) {
  std::vector<std::string> out;
  for (const ElasticRank& r : world.ranks) {
    const RankIdentity& id = r.identity;
    out.push_back(fmt::format("{} {}/{} {}/{} g{}", id.rank, id.local_rank, id.local_size, id.cross_rank,
                              id.cross_size, id.group_rank));
  }
  return out;
}

ElasticWorldInputs world_inputs(std::vector<SlotRef> previous, std::vector<HostSlots> usable, int min_np = 1,
                                std::optional<int> max_np = std::nullopt) {
  ElasticWorldInputs in;
  in.previous = std::move(previous);
  in.usable = std::move(usable);
  in.min_np = min_np;
  in.max_np = max_np;
  return in;
}

}  // namespace

TEST_CASE("discovery output: host[:slots] lines, in order, --slots-per-host for bare names") {
  auto hosts = parse_discovered_hosts("n1:4\nn2\n\n   n3:2  \r\n\t\nnode-7.cluster_a : 3\n", 8);
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0].name == "n1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].name == "n2");
  CHECK(hosts[1].slots == 8);
  CHECK(hosts[2].name == "n3");
  CHECK(hosts[2].slots == 2);
  CHECK(hosts[3].name == "node-7.cluster_a");
  CHECK(hosts[3].slots == 3);
  CHECK(hosts[0].gpus.empty());
  // Nothing printed: no host is ready yet, which is not an error (Horovod's scripts do this).
  CHECK(parse_discovered_hosts("", 1).empty());
  CHECK(parse_discovered_hosts("\n  \n\r\n", 0).empty());
  // Slots given on every line: --slots-per-host is not needed.
  CHECK(parse_discovered_hosts("a:1\nb:2", 0).size() == 2);
}

TEST_CASE("discovery output: a bad line is one message naming the line, its text and the fix") {
  CHECK(parse_error(":4") ==
        "--host-discovery-script line 1 ':4' : no host name (print host[:slots] per line, e.g. n1:4)");
  CHECK(parse_error("n1:2\nn2:") == "--host-discovery-script line 2 'n2:' : slots '' of host 'n2' is not a positive "
                                    "whole number (print host:slots, e.g. n2:4)");
  CHECK(parse_error("n1:0") == "--host-discovery-script line 1 'n1:0' : slots '0' of host 'n1' is not a positive "
                               "whole number (print host:slots, e.g. n1:4)");
  CHECK(parse_error("n1:-2") == "--host-discovery-script line 1 'n1:-2' : slots '-2' of host 'n1' is not a "
                                "positive whole number (print host:slots, e.g. n1:4)");
  CHECK(parse_error("n1:four") == "--host-discovery-script line 1 'n1:four' : slots 'four' of host 'n1' is not a "
                                  "positive whole number (print host:slots, e.g. n1:4)");
  CHECK(parse_error("n1:2:3") == "--host-discovery-script line 1 'n1:2:3' : slots '2:3' of host 'n1' is not a "
                                 "positive whole number (print host:slots, e.g. n1:4)");
  CHECK(parse_error("n1:99999999999") == "--host-discovery-script line 1 'n1:99999999999' : slots '99999999999' of "
                                         "host 'n1' is not a positive whole number (print host:slots, e.g. n1:4)");
  CHECK(parse_error("n 1:2") == "--host-discovery-script line 1 'n 1:2' : 'n 1' is not a host name (letters, "
                                "digits, '.', '-', '_'; print host[:slots], e.g. n1:4)");
  CHECK(parse_error("\n\nuser@n1") == "--host-discovery-script line 3 'user@n1' : 'user@n1' is not a host name "
                                      "(letters, digits, '.', '-', '_'; print host[:slots], e.g. n1:4)");
  CHECK(parse_error("n1:2\nn2\n  n1:4 ") == "--host-discovery-script line 3 'n1:4' : host 'n1' is printed again "
                                            "(first on line 1); print each host once with its total slots");
  CHECK(parse_error("n1:2\nn2", 0) == "--host-discovery-script line 2 'n2' : no slot count and no --slots-per-host "
                                      "(print n2:SLOTS or pass --slots-per-host N)");
  CHECK(error_of([] { parse_discovered_hosts("n1:x", 1, "./discover.sh"); }) ==
        "./discover.sh line 1 'n1:x' : slots 'x' of host 'n1' is not a positive whole number (print host:slots, "
        "e.g. n1:4)");
  CHECK_THROWS_AS(parse_discovered_hosts(std::string(254, 'a'), 1), InputError);
}

TEST_CASE("cooldown: Horovod's MIN * 2^count + jitter * MIN, clamped to [MIN, MAX]") {
  const CooldownRange range{10, 100};
  CHECK(cooldown_duration(range, 1, 0.0).count() == doctest::Approx(20));
  CHECK(cooldown_duration(range, 1, 0.5).count() == doctest::Approx(25));
  CHECK(cooldown_duration(range, 2, 0.0).count() == doctest::Approx(40));
  CHECK(cooldown_duration(range, 3, 0.99).count() == doctest::Approx(89.9));
  CHECK(cooldown_duration(range, 4, 0.0).count() == doctest::Approx(100));
  CHECK(cooldown_duration(range, 1000, 0.5).count() == doctest::Approx(100));
  CHECK(cooldown_duration(CooldownRange{30, 40}, 1, 0.0).count() == doctest::Approx(40));
  CHECK(cooldown_duration(CooldownRange{5, 5}, 1, 0.9).count() == doctest::Approx(5));
}

TEST_CASE("cooldown range: Horovod's limits, one line naming the option") {
  CHECK(error_of([] { validate_cooldown_range({0, 10}); }) ==
        "--blacklist-cooldown-range 0 10 : MIN must be at least 1 second (e.g. --blacklist-cooldown-range 10 300)");
  CHECK(error_of([] { validate_cooldown_range({1, 3601}); }) ==
        "--blacklist-cooldown-range 1 3601 : MAX must be at most 3600 seconds (one hour) (e.g. "
        "--blacklist-cooldown-range 10 300)");
  CHECK(error_of([] { validate_cooldown_range({20, 10}); }) ==
        "--blacklist-cooldown-range 20 10 : MIN must not be above MAX (e.g. --blacklist-cooldown-range 10 300)");
  CHECK_NOTHROW(validate_cooldown_range({1, 3600}));
  CHECK_THROWS_AS(HostBlacklist(CooldownRange{0, 1}), InputError);
}

TEST_CASE("blacklist without a cooldown range: a failed host is out for good") {
  HostBlacklist blacklist;
  CHECK_FALSE(blacklist.is_blacklisted("a", t0));
  CHECK(blacklist.record_failure("a", t0));
  CHECK(blacklist.is_blacklisted("a", t0));
  CHECK(blacklist.is_blacklisted("a", t0 + 24h * 365));
  CHECK_FALSE(blacklist.cooldown_end("a"));
  CHECK_FALSE(blacklist.record_failure("a", t0 + 1h));  // already out
  CHECK(blacklist.blacklist_count("a") == 1);
  CHECK(blacklist.release_expired(t0 + 24h * 365).empty());
  CHECK_FALSE(blacklist.is_blacklisted("b", t0));
}

TEST_CASE("blacklist with a cooldown: out until it ends, longer after each return") {
  HostBlacklist blacklist(CooldownRange{10, 100}, 7);
  CHECK(blacklist.record_failure("a", t0));
  const SteadyTime end1 = *blacklist.cooldown_end("a");
  CHECK(end1 >= t0 + 20s);  // first: 2 * MIN + jitter * MIN
  CHECK(end1 < t0 + 30s);
  CHECK(blacklist.is_blacklisted("a", t0 + 19s));
  CHECK(blacklist.is_blacklisted("a", end1 - 1ns));
  CHECK_FALSE(blacklist.is_blacklisted("a", end1));

  // Another failure inside the cooldown changes nothing (Horovod's HostState.blacklist).
  CHECK_FALSE(blacklist.record_failure("a", t0 + 5s));
  CHECK(*blacklist.cooldown_end("a") == end1);
  CHECK(blacklist.blacklist_count("a") == 1);

  CHECK(blacklist.release_expired(end1 - 1ns).empty());
  CHECK(blacklist.release_expired(end1) == std::vector<std::string>{"a"});
  CHECK(blacklist.release_expired(end1 + 1s).empty());  // released once
  CHECK_FALSE(blacklist.cooldown_end("a"));

  // The count is never reset: each new blacklisting doubles the base, up to MAX.
  const SteadyTime t1 = end1 + 60s;
  CHECK(blacklist.record_failure("a", t1));
  CHECK(*blacklist.cooldown_end("a") >= t1 + 40s);
  CHECK(*blacklist.cooldown_end("a") < t1 + 50s);
  CHECK(blacklist.blacklist_count("a") == 2);
  const SteadyTime t2 = t1 + 60s;  // past the second cooldown without release_expired: a new one starts
  CHECK(blacklist.record_failure("a", t2));
  CHECK(*blacklist.cooldown_end("a") >= t2 + 80s);
  CHECK(*blacklist.cooldown_end("a") < t2 + 90s);
  const SteadyTime t3 = t2 + 200s;
  CHECK(blacklist.record_failure("a", t3));
  CHECK(*blacklist.cooldown_end("a") == t3 + 100s);  // 160 + jitter, clamped to MAX
  CHECK(blacklist.blacklist_count("a") == 4);
}

TEST_CASE("blacklist: the jitter comes from the seed, so a run can be repeated") {
  auto ends = [](std::uint64_t seed) {
    HostBlacklist blacklist(CooldownRange{10, 3600}, seed);
    std::vector<SteadyTime> out;
    for (const char* host : {"a", "b", "c", "d"}) {
      blacklist.record_failure(host, t0);
      out.push_back(*blacklist.cooldown_end(host));
    }
    return out;
  };
  CHECK(ends(42) == ends(42));
  CHECK(ends(42) != ends(43));
}

TEST_CASE("blacklist: usable hosts are the discovered ones not blacklisted, in order") {
  HostBlacklist blacklist(CooldownRange{1, 10}, 1);
  blacklist.record_failure("b", t0);
  std::vector<HostSlots> discovered = parse_discovered_hosts("a:2\nb:2\nc:1", 1);
  auto usable = blacklist.usable_hosts(discovered, t0 + 1s);
  REQUIRE(usable.size() == 2);
  CHECK(usable[0].name == "a");
  CHECK(usable[1].name == "c");
  CHECK(blacklist.usable_hosts(discovered, *blacklist.cooldown_end("b")).size() == 3);
}

TEST_CASE("world at the start: block order host by host, numbered as make_plan numbers it") {
  auto world = assign_elastic_world(world_inputs({}, parse_discovered_hosts("a:3\nb:1\nc:2", 1)));
  REQUIRE(world.outcome == ElasticWorld::Outcome::formed);
  CHECK(layout(world) == std::vector<std::string>{"a:0", "a:1", "a:2", "b:0", "c:0", "c:1"});
  CHECK(world.added == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(world.removed.empty());
  CHECK(world.hosts == std::vector<std::string>{"a", "b", "c"});
  CHECK(world.available_slots == 6);

  // The plan of the same hosts numbers every rank alike.
  PlanInputs plan_inputs;
  plan_inputs.allocation = parse_hosts_flag("a:3,b:1,c:2");
  plan_inputs.master_addr = "a";
  plan_inputs.store_addr = "a:4000";
  plan_inputs.job_secret = std::string(64, 's');
  LaunchOptions options;
  options.num_proc = 6;
  options.program = {"train"};
  Plan plan = make_plan(plan_inputs, options);
  REQUIRE(plan.ranks.size() == world.ranks.size());
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankIdentity& id = world.ranks[r].identity;
    CAPTURE(r);
    CHECK(id.rank == plan.ranks[r].rank);
    CHECK(id.hostname == plan.ranks[r].host);
    CHECK(id.group_rank == plan.ranks[r].host_index);
    CHECK(id.local_rank == plan.ranks[r].local_rank);
    CHECK(id.local_size == plan.ranks[r].local_size);
    CHECK(id.cross_rank == plan.ranks[r].cross_rank);
    CHECK(id.cross_size == plan.ranks[r].cross_size);
  }
}

TEST_CASE("world after failures: survivors keep their order, the lowest becomes rank 0") {
  auto in = world_inputs(places({{"a", 0}, {"a", 1}, {"b", 0}, {"b", 1}, {"c", 0}, {"c", 1}}),
                         parse_discovered_hosts("a:2\nc:2", 1));  // b blacklisted
  in.exited = {0};
  auto world = assign_elastic_world(in);
  REQUIRE(world.outcome == ElasticWorld::Outcome::formed);
  CHECK(old_ranks(world) == std::vector<int>{1, 4, 5, -1});
  CHECK(layout(world) == std::vector<std::string>{"a:1", "c:0", "c:1", "a:0"});  // a:0 refilled, appended
  CHECK(removals(world) == std::vector<std::pair<int, RemovalReason>>{{0, RemovalReason::exited},
                                                                        {2, RemovalReason::host_unusable},
                                                                        {3, RemovalReason::host_unusable}});
  CHECK(world.removed[1].place == SlotRef{"b", 0});
  CHECK(world.added == std::vector<int>{3});
  CHECK(world.changes_world());
  // The runtime's numbering: local rank by order on the host, cross rank among equal local ranks.
  CHECK(numbers(world) == std::vector<std::string>{"0 0/2 0/2 g0", "1 0/2 1/2 g1", "2 1/2 0/2 g1", "3 1/2 1/2 g0"});
  CHECK(world.hosts == std::vector<std::string>{"a", "c"});
}

TEST_CASE("world: an exited rank's slot stays empty when its host is blacklisted (Horovod's way)") {
  HostBlacklist blacklist(CooldownRange{10, 100}, 3);
  const auto discovered = parse_discovered_hosts("a:2\nb:2", 1);
  auto in = world_inputs(places({{"a", 0}, {"a", 1}, {"b", 0}, {"b", 1}}), {}, 2);
  in.exited = {2};
  blacklist.record_failure("b", t0);
  in.usable = blacklist.usable_hosts(discovered, t0);
  auto shrunk = assign_elastic_world(in);
  REQUIRE(shrunk.outcome == ElasticWorld::Outcome::formed);
  CHECK(layout(shrunk) == std::vector<std::string>{"a:0", "a:1"});
  CHECK(removals(shrunk) == std::vector<std::pair<int, RemovalReason>>{{2, RemovalReason::exited},
                                                                         {3, RemovalReason::host_unusable}});
  CHECK(shrunk.added.empty());

  // b comes back when its cooldown ends: its slots are appended after the survivors.
  const SteadyTime later = *blacklist.cooldown_end("b");
  CHECK(blacklist.release_expired(later) == std::vector<std::string>{"b"});
  auto regrown = assign_elastic_world(
      world_inputs(places({{"a", 0}, {"a", 1}}), blacklist.usable_hosts(discovered, later), 2));
  CHECK(layout(regrown) == std::vector<std::string>{"a:0", "a:1", "b:0", "b:1"});
  CHECK(old_ranks(regrown) == std::vector<int>{0, 1, -1, -1});
  CHECK(regrown.added == std::vector<int>{2, 3});
}

TEST_CASE("world growth: new slots host by host, old hosts first, capped at max_np") {
  auto in = world_inputs(places({{"b", 0}, {"b", 1}}), parse_discovered_hosts("c:2\na:2\nb:3", 1), 1, 5);
  auto world = assign_elastic_world(in);
  // b's third slot first (an old host), then the new hosts in discovery order, until 5 ranks.
  CHECK(layout(world) == std::vector<std::string>{"b:0", "b:1", "b:2", "c:0", "c:1"});
  CHECK(world.added == std::vector<int>{2, 3, 4});
  CHECK(world.available_slots == 7);
  CHECK(numbers(world) == std::vector<std::string>{"0 0/3 0/2 g0", "1 1/3 0/2 g0", "2 2/3 0/1 g0", "3 0/2 1/2 g1",
                                                   "4 1/2 1/2 g1"});

  // Slot counts up to INT_MAX add up without overflow.
  auto huge = assign_elastic_world(world_inputs({}, parse_discovered_hosts("a:2147483647\nb:2147483647", 1), 1, 3));
  CHECK(huge.available_slots == 2147483647);
  CHECK(layout(huge) == std::vector<std::string>{"a:0", "a:1", "a:2"});

  in.max_np = 2;  // already full: nothing to start, nothing changes
  auto full = assign_elastic_world(in);
  CHECK(layout(full) == std::vector<std::string>{"b:0", "b:1"});
  CHECK_FALSE(full.changes_world());
}

TEST_CASE("world: survivors beyond max_np and beyond a host's slots are removed") {
  auto in = world_inputs(places({{"a", 0}, {"a", 1}, {"a", 2}, {"a", 3}, {"b", 0}}),
                         parse_discovered_hosts("a:2\nb:1", 1), 1, 2);
  auto world = assign_elastic_world(in);
  CHECK(layout(world) == std::vector<std::string>{"a:0", "a:1"});
  CHECK(removals(world) == std::vector<std::pair<int, RemovalReason>>{{2, RemovalReason::slots_reduced},
                                                                        {3, RemovalReason::slots_reduced},
                                                                        {4, RemovalReason::over_max_np}});
  CHECK(std::string(to_string(RemovalReason::over_max_np)) == "over --max-np");
}

TEST_CASE("world: below min_np it waits; with no survivor it ends") {
  auto in = world_inputs(places({{"a", 0}, {"a", 1}, {"b", 0}, {"b", 1}}), parse_discovered_hosts("a:2", 1), 3);
  auto world = assign_elastic_world(in);
  CHECK(world.outcome == ElasticWorld::Outcome::wait);
  CHECK(world.available_slots == 2);
  CHECK(world.ranks.empty());
  CHECK(world.added.empty());
  CHECK(removals(world) == std::vector<std::pair<int, RemovalReason>>{{2, RemovalReason::host_unusable},
                                                                        {3, RemovalReason::host_unusable}});
  // Nothing discovered yet at the start: wait as well.
  CHECK(assign_elastic_world(world_inputs({}, {}, 1)).outcome == ElasticWorld::Outcome::wait);

  // Every old rank gone: no state to sync from, even though slots are free.
  auto lost = world_inputs(places({{"a", 0}}), parse_discovered_hosts("b:4", 1));
  auto gone = assign_elastic_world(lost);
  CHECK(gone.outcome == ElasticWorld::Outcome::no_survivors);
  CHECK(removals(gone) == std::vector<std::pair<int, RemovalReason>>{{0, RemovalReason::host_unusable}});

  CHECK(elastic_timeout_message(1, 2, 600) ==
        "only 1 of the 2 slots --min-np needs became available within --elastic-timeout 600 s; add hosts or slots, "
        "lower --min-np or raise --elastic-timeout");
}

TEST_CASE("world: held-back slots stay empty and are not counted; a survivor in one stays") {
  // Slot a:1's process failed (blacklisted on its own) and b:0's left: neither is refilled.
  auto in = world_inputs(places({{"a", 0}, {"a", 1}, {"b", 0}}), parse_discovered_hosts("a:3\nb:2", 1));
  in.exited = {1, 2};
  in.held_back = places({{"a", 1}, {"b", 0}, {"b", 0}, {"z", 0}, {"a", 9}});  // repeats, unknown hosts, no such slot
  auto world = assign_elastic_world(in);
  REQUIRE(world.outcome == ElasticWorld::Outcome::formed);
  CHECK(layout(world) == std::vector<std::string>{"a:0", "a:2", "b:1"});
  CHECK(world.added == std::vector<int>{1, 2});
  CHECK(world.available_slots == 3);  // 5 slots, 2 held

  // Held slots count against min_np: 3 left, 4 needed.
  in.min_np = 4;
  auto short_world = assign_elastic_world(in);
  CHECK(short_world.outcome == ElasticWorld::Outcome::wait);
  CHECK(short_world.available_slots == 3);

  // A held slot its survivor still occupies: the survivor stays and the slot counts.
  auto kept = world_inputs(places({{"a", 0}, {"a", 1}}), parse_discovered_hosts("a:2", 1), 2);
  kept.held_back = places({{"a", 1}});
  auto same = assign_elastic_world(kept);
  REQUIRE(same.outcome == ElasticWorld::Outcome::formed);
  CHECK(layout(same) == std::vector<std::string>{"a:0", "a:1"});
  CHECK(same.available_slots == 2);
  CHECK_FALSE(same.changes_world());
}

TEST_CASE("world: inputs no caller can mean are refused") {
  const auto usable = parse_discovered_hosts("a:2", 1);
  CHECK_THROWS_AS(assign_elastic_world(world_inputs({}, usable, 0)), std::invalid_argument);
  CHECK_THROWS_AS(assign_elastic_world(world_inputs({}, usable, 2, 1)), std::invalid_argument);
  CHECK_THROWS_AS(assign_elastic_world(world_inputs(places({{"a", 0}, {"a", 0}}), usable)), std::invalid_argument);
  CHECK_THROWS_AS(assign_elastic_world(world_inputs(places({{"a", -1}}), usable)), std::invalid_argument);
  auto in = world_inputs(places({{"a", 0}}), usable);
  in.exited = {1};
  CHECK_THROWS_AS(assign_elastic_world(in), std::invalid_argument);
}

TEST_CASE("discovery polls: the first failure ends the job, later ones keep the last hosts") {
  DiscoveryPollPolicy first_fails;
  CHECK(first_fails.due(t0));
  CHECK(first_fails.on_result(false, t0).action == DiscoveryPollPolicy::Action::end_job);

  DiscoveryPollPolicy poll;
  CHECK_FALSE(poll.next_poll());
  auto ok = poll.on_result(true, t0);
  CHECK(ok.action == DiscoveryPollPolicy::Action::use_hosts);
  CHECK_FALSE(ok.warn);
  CHECK(*poll.next_poll() == t0 + 1s);  // a second after the run ended
  CHECK_FALSE(poll.due(t0 + 999ms));
  CHECK(poll.due(t0 + 1s));

  auto failed = poll.on_result(false, t0 + 2s);
  CHECK(failed.action == DiscoveryPollPolicy::Action::keep_last_hosts);
  CHECK(failed.warn);  // the first of a run of failures is reported
  auto again = poll.on_result(false, t0 + 3s);
  CHECK(again.action == DiscoveryPollPolicy::Action::keep_last_hosts);
  CHECK_FALSE(again.warn);  // not once a second
  CHECK(poll.consecutive_failures() == 2);
  CHECK(*poll.failing_since() == t0 + 2s);
  CHECK(*poll.next_poll() == t0 + 4s);

  CHECK(poll.on_result(true, t0 + 4s).action == DiscoveryPollPolicy::Action::use_hosts);
  CHECK(poll.consecutive_failures() == 0);
  CHECK_FALSE(poll.failing_since());
  CHECK(poll.on_result(false, t0 + 5s).warn);
}

TEST_CASE("discovery: this host's names, and the first run's verdict") {
  CHECK(names_this_host("localhost", "n1.example.org"));
  CHECK(names_this_host("127.0.0.1", "n1.example.org"));
  CHECK(names_this_host("n1.example.org", "n1.example.org"));
  CHECK(names_this_host("n1", "n1.example.org"));
  CHECK_FALSE(names_this_host("n2", "n1.example.org"));
  CHECK_FALSE(names_this_host("n1.example", "n1.example.org"));
  const LocalDiscovery split = split_local_hosts({{"localhost", 2, {}}, {"n7", 4, {}}, {"n1", 1, {}}}, "n1");
  CHECK(split.slots == 3);
  CHECK(split.foreign == std::vector<std::string>{"n7"});

  auto text = [](const std::vector<HostSlots>& hosts) {
    std::string out;
    for (const HostSlots& h : hosts) out += h.name + ":" + std::to_string(h.slots) + " ";
    return out;
  };
  CHECK(text(first_discovered_hosts(DiscoveryResult{true, "localhost\n", ""}, "d.sh", 3)) == "localhost:3 ");
  CHECK(error_of([] { first_discovered_hosts(DiscoveryResult{false, "", "exited with code 3"}, "d.sh", 0); }) ==
        "--host-discovery-script 'd.sh' : its first run exited with code 3; fix it to print host[:slots] lines and "
        "exit 0");
  // Other hosts come back as printed: a job on them starts through mpirun (launch.cpp decides).
  const std::vector<HostSlots> two = first_discovered_hosts(DiscoveryResult{true, "localhost:2\nn7:4\n", ""}, "d.sh", 0);
  CHECK(text(two) == "localhost:2 n7:4 ");
  CHECK(total_slots(two) == 6);
  CHECK(total_slots({{"a", std::numeric_limits<int>::max(), {}}, {"b", 5, {}}}) == std::numeric_limits<int>::max());
  CHECK(first_discovered_hosts(DiscoveryResult{true, "\n", ""}, "d.sh", 0).empty());  // waits for --min-np
  CHECK(error_of([] { first_discovered_hosts(DiscoveryResult{true, "localhost\n", ""}, "d.sh", 0); })
            .find("line 1 'localhost' : no slot count and no --slots-per-host") != std::string::npos);
}
