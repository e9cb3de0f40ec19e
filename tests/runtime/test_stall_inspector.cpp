// The stall inspector alone, on a fake clock: when rank 0 looks, when a name that some ranks
// have not submitted is warned about (first at the warning time, then every warning time), when
// it is shut down, and what the messages say. No engine, no threads, no sleeping.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/stall_inspector.hpp"

using ringrun::engine::StallInspector;
using Verdict = StallInspector::Verdict;
using namespace std::chrono_literals;

namespace {

// A fake clock: time points from an arbitrary origin, moved by hand.
struct FakeClock {
  StallInspector::Clock::time_point now = StallInspector::Clock::time_point(1000s);
  void advance(StallInspector::Clock::duration d) { now += d; }
};

// A name first seen at `first_seen` and warned about as the engine would: a warning moves
// last_warned to the time of the warning. Returns the verdicts at each of the given times.
std::vector<Verdict> walk(const StallInspector& inspector, StallInspector::Clock::time_point first_seen,
                          const std::vector<StallInspector::Clock::duration>& ages) {
  auto last_warned = first_seen;
  std::vector<Verdict> verdicts;
  for (auto age : ages) {
    const auto now = first_seen + age;
    const Verdict v = inspector.judge(first_seen, last_warned, now);
    if (v == Verdict::warn) last_warned = now;
    verdicts.push_back(v);
  }
  return verdicts;
}

}  // namespace

TEST_CASE("stall inspector: rank 0 looks every kCheckEvery, not every cycle") {
  StallInspector inspector(1000ms, 0ms);
  FakeClock clock;
  CHECK(inspector.due(clock.now));  // never looked
  inspector.looked(clock.now);
  CHECK_FALSE(inspector.due(clock.now));
  clock.advance(StallInspector::kCheckEvery - 1ms);
  CHECK_FALSE(inspector.due(clock.now));
  clock.advance(1ms);
  CHECK(inspector.due(clock.now));
}

TEST_CASE("stall inspector: warns at the warning time, then once per further warning time") {
  StallInspector inspector(1000ms, 0ms);  // no shutdown time: warn only
  FakeClock clock;
  const auto verdicts = walk(inspector, clock.now, {0ms, 999ms, 1000ms, 1500ms, 1999ms, 2000ms, 2999ms, 3000ms, 60s});
  CHECK(verdicts == std::vector<Verdict>{Verdict::none, Verdict::none, Verdict::warn, Verdict::none, Verdict::none,
                                         Verdict::warn, Verdict::none, Verdict::warn, Verdict::warn});
}

TEST_CASE("stall inspector: the shutdown time fails the op, and takes precedence over a warning") {
  StallInspector inspector(1000ms, 3000ms);
  FakeClock clock;
  const auto verdicts = walk(inspector, clock.now, {500ms, 1000ms, 2000ms, 2999ms, 3000ms});
  CHECK(verdicts == std::vector<Verdict>{Verdict::none, Verdict::warn, Verdict::warn, Verdict::none, Verdict::shut_down});
  // A shutdown time shorter than the warning time: no warning first.
  StallInspector quick(5000ms, 2000ms);
  CHECK(walk(quick, clock.now, {1999ms, 2000ms}) == std::vector<Verdict>{Verdict::none, Verdict::shut_down});
}

TEST_CASE("stall inspector: off when both times are zero") {
  StallInspector off(0ms, 0ms);
  CHECK_FALSE(off.enabled());
  FakeClock clock;
  CHECK(walk(off, clock.now, {1s, 1h}) == std::vector<Verdict>{Verdict::none, Verdict::none});
  CHECK(StallInspector(0ms, 1ms).enabled());
  CHECK(StallInspector(1ms, 0ms).enabled());
}

TEST_CASE("stall inspector: the messages name the tensor, the wait, who submitted and who did not") {
  const std::string description =
      StallInspector::describe("grad.7", "allreduce float32 sum of 4", 2500ms, {0, 2}, "rank 1 (host b)");
  CHECK(description == "tensor 'grad.7' (allreduce float32 sum of 4) has waited 2.5 s: submitted by ranks 0, 2, not by rank 1 (host b)");
  StallInspector inspector(1000ms, 3000ms);
  CHECK(inspector.shutdown_message(description) ==
        "stalled: " + description + " (RINGRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS=3)");
  CHECK(StallInspector::describe("x", "barrier", 1s, {1}, "rank 0").find("submitted by rank 1, not by rank 0") !=
        std::string::npos);
}
