// The stall inspector: when a name that some ranks submitted and others did not has waited long
// enough for a warning on stderr, or for its shutdown (the op fails with RINGRUN_ERR_TIMEOUT on
// every rank), and what those say. Only rank 0's engine asks it (its clock alone decides; it
// sends the shutdowns in its negotiation record, kRecordStallFailure), as in Horovod.
//
// Owns: the warning and shutdown times, when rank 0 last looked (it looks every kCheckEvery, not
// every cycle), and the wording. Touches nothing: times come in as arguments (tests pass a fake
// clock's), the engine walks its table and acts on the verdicts (Engine::check_stalls).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ringrun::engine {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;
  // Stalls are a matter of seconds: rank 0 looks a few times a second, not every cycle.
  static constexpr std::chrono::milliseconds kCheckEvery{50};

  // warning, shutdown: 0 (or less) turns each off.
  StallInspector(std::chrono::milliseconds warning, std::chrono::milliseconds shutdown)
      : warning_(warning), shutdown_(shutdown) {}

  // Whether a look is due at `now` (the engine then calls looked(now) and inspects its names).
  bool due(Clock::time_point now) const { return now - last_look_ >= kCheckEvery; }
  void looked(Clock::time_point now) { last_look_ = now; }
  // Whether any verdict can be other than none.
  bool enabled() const { return warning_.count() > 0 || shutdown_.count() > 0; }

  enum class Verdict { none, warn, shut_down };
  // For a name pending on some ranks but not all since first_seen, last warned at last_warned
  // (first_seen when never): shut down once shutdown has passed; else warn once warning has
  // passed, and again every further warning.
  Verdict judge(Clock::time_point first_seen, Clock::time_point last_warned, Clock::time_point now) const;

  // "tensor 'a' (allreduce float32 sum of 4) has waited 2.0 s: submitted by rank 0, not by rank 1 (host h)"
  static std::string describe(const std::string& name, const std::string& what, Clock::duration waited,
                              const std::vector<int>& submitted, const std::string& missing);
  // What the stalled op fails with on every rank.
  std::string shutdown_message(const std::string& description) const;
  // Prints the warning on stderr ("ringrun: stall warning: ...").
  static void warn(const std::string& description);

 private:
  std::chrono::milliseconds warning_;
  std::chrono::milliseconds shutdown_;
  Clock::time_point last_look_{};
};

}  // namespace ringrun::engine
