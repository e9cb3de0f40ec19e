// The engine benchmark's tables and JSON rows (engine_report.hpp).
#include "engine_report.hpp"

#include "common.hpp"
#include "dtype.hpp"

#include <fmt/format.h>

#include <ringrun/variable_read.hpp>

#include <cstdio>
#include <cstdlib>

namespace ringrun::bench {
namespace {

constexpr double kFusedFractionTarget = 0.5;  // fused step >= 50 % of one-big's throughput
constexpr double kSpeedupTarget = 2.0;         // fused step >= 2x the peer's one-by-one throughput
constexpr double kLatencyTargetUs = 50;        // one small tensor through the engine
constexpr double kLatencyRatioTarget = 2.0;    // ... within 2x a plain ringrun_allreduce of it
constexpr std::size_t kLatencyTargetMaxBytes = 4096;  // "small": the 50 us target applies up to here

std::string verdict(const std::optional<double> &value, bool met) { return value ? (met ? "met" : "NOT") : "-"; }

// "8 (from RINGRUN_FUSION_THRESHOLD_MB)" or "128 (default)": which setting the run measured.
std::string env_or_default(const ringrun::variables::Variable &v) {
  auto value = ringrun::variables::read_set(v);
  return value ? fmt::format("{} (from {})", *value, v.name) : fmt::format("{} (default)", v.default_value);
}

// Met only when both fractions reach the target: fused_frac takes one_big_us from the phase before
// the engine, and a load change between the phases (another job bound to the same cores, say) can
// slow that phase alone and fake a "met"; frac_routed comes from samples alternated with the engine.
bool fraction_target_met(const WorkloadRow &row) {
  return row.fused_fraction && *row.fused_fraction >= kFusedFractionTarget &&
         (!row.fused_fraction_routed || *row.fused_fraction_routed >= kFusedFractionTarget);
}

}  // namespace

std::string size_label(std::size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return fmt::format("{}MiB", bytes / kMiB);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}KiB", bytes / 1024);
  return fmt::format("{}B", bytes);
}

void print_header(const EngineBenchOptions &options, const EngineBenchContext &context) {
  fmt::print("# ringrun-bench engine: {} ranks, dtype {}, op {}, {} samples (median of the slowest rank), "
             "submission {}\n",
             context.ranks, dtype_name(options.dtype), op_name(options.op), options.iters,
             options.shuffle ? "shuffled (each rank its own random order, new every step)" : "in order on every rank");
  fmt::print("# engine: fusion threshold MiB {}, cycle ms {}, response cache {}; tensors named grad.0, grad.1, ... "
             "in every workload\n",
             env_or_default(ringrun::variables::kFusionThresholdMb), env_or_default(ringrun::variables::kCycleTimeMs),
             env_or_default(ringrun::variables::kCacheCapacity));
  const auto cache_entries = static_cast<std::size_t>(*ringrun::variables::read_integer(ringrun::variables::kCacheCapacity));
  if (options.run_fusion && options.fusion_tensors > cache_entries)
    fmt::print("# note: {} tensors do not fit the response cache ({} entries): the names past it are described in "
               "full every step (raise {} to compare)\n",
               options.fusion_tensors, cache_entries, ringrun::variables::kCacheCapacity.name);
  fmt::print("# peer: {}\n", context.peer ? context.peer->description(Collective::allreduce) : "none (--peer none)");
  fmt::print("# memcpy_1core_GBps {:.2f} (64 MiB glibc memcpy on rank 0, median of 20: how much of the machine was left)\n",
             context.memcpy_GBps);
  std::fflush(stdout);
}

void print_workload_table(const std::vector<WorkloadRow> &rows) {
  fmt::print("#{:>10} {:>7} {:>10} {:>6} {:>10} {:>10} {:>10} {:>13} {:>12} {:>11} {:>14} {:>10} {:>11} {:>7} {:>9} "
             "{:>10}\n",
             "workload", "tensors", "bytes", "wrong", "engine_us", "first_us", "one_big_us", "one_by_one_us",
             "peer_1by1_us", "peer_big_us", "big_routed_us", "fused_frac", "frac_routed", "vs_peer", "frac>=0.5",
             "vs_peer>=2");
  for (const WorkloadRow &row : rows) {
    fmt::print("{:>11} {:>7} {:>10} {:>6} {:>10} {:>10} {:>10} {:>13} {:>12} {:>11} {:>14} {:>10} {:>11} {:>7} {:>9} "
               "{:>10}\n",
               row.label, row.tensors, row.bytes, row.wrong ? fmt::format("{}", *row.wrong) : "-",
               or_dash(row.engine_us, 1), or_dash(row.first_step_us, 1), or_dash(row.one_big_us, 1),
               or_dash(row.one_by_one_us, 1), or_dash(row.peer_one_by_one_us, 1), or_dash(row.peer_one_big_us, 1),
               or_dash(row.one_big_via_engine_us, 1), or_dash(row.fused_fraction, 3),
               or_dash(row.fused_fraction_routed, 3), or_dash(row.speedup_vs_peer, 2),
               verdict(row.fused_fraction, fraction_target_met(row)),
               verdict(row.speedup_vs_peer, row.speedup_vs_peer && *row.speedup_vs_peer >= kSpeedupTarget));
  }
  for (const WorkloadRow &row : rows) {
    fmt::print("# {}: submitting the tensors took {} us of an engine step (mean, slowest rank); peer one-by-one {} us "
               "before the engine started (next to one_big_us), {} us alongside it (next to engine_us){}\n",
               row.label, or_dash(row.submit_us, 1), or_dash(row.peer_one_by_one_before_us, 1),
               or_dash(row.peer_one_by_one_us, 1), row.peer_note.empty() ? "" : "; peer: " + row.peer_note);
  }
  std::fflush(stdout);
}

void print_latency_table(const std::vector<LatencyRow> &rows) {
  fmt::print("#{:>11} {:>9} {:>6} {:>10} {:>9} {:>6} {:>18} {:>9} {:>8} {:>6}\n", "size", "count", "wrong",
             "engine_us", "plain_us", "ratio", "sync_via_engine_us", "peer_us", "<=50us", "<=2x");
  for (const LatencyRow &row : rows) {
    const bool small = row.bytes <= kLatencyTargetMaxBytes;
    fmt::print("{:>12} {:>9} {:>6} {:>10} {:>9} {:>6} {:>18} {:>9} {:>8} {:>6}\n", row.bytes, row.count,
               row.wrong ? fmt::format("{}", *row.wrong) : "-", or_dash(row.engine_us, 2), or_dash(row.plain_us, 2),
               or_dash(row.ratio, 2), or_dash(row.sync_via_engine_us, 2), or_dash(row.peer_us, 2),
               small ? verdict(row.engine_us, row.engine_us && *row.engine_us <= kLatencyTargetUs) : "-",
               verdict(row.ratio, row.ratio && *row.ratio <= kLatencyRatioTarget));
  }
  std::fflush(stdout);
}

std::string workload_json(const WorkloadRow &row, const EngineBenchOptions &options, const EngineBenchContext &context) {
  return fmt::format(
      "{{\"collective\": \"engine\", \"workload\": \"{}\", \"tensors\": {}, \"size\": {}, \"type\": \"{}\", "
      "\"op\": \"{}\", \"ranks\": {}, \"shuffle\": {}, \"wrong\": {}, \"engine_us\": {}, \"first_step_us\": {}, "
      "\"one_big_us\": {}, \"one_by_one_us\": {}, \"peer\": {}, \"peer_one_by_one_us\": {}, "
      "\"peer_one_by_one_before_engine_us\": {}, \"peer_one_big_us\": {}, \"one_big_via_engine_us\": {}, "
      "\"fused_frac\": {}, \"fused_frac_routed\": {}, \"speedup_vs_peer\": {}, \"submit_us\": {}, "
      "\"memcpy_GBps\": {}}}",
      row.label, row.tensors, row.bytes, dtype_name(options.dtype), op_name(options.op), context.ranks,
      options.shuffle ? "true" : "false", row.wrong ? fmt::format("{}", *row.wrong) : "null",
      json_number(row.engine_us), json_number(row.first_step_us), json_number(row.one_big_us),
      json_number(row.one_by_one_us), context.peer ? fmt::format("\"{}\"", context.peer_name) : "null",
      json_number(row.peer_one_by_one_us), json_number(row.peer_one_by_one_before_us),
      json_number(row.peer_one_big_us), json_number(row.one_big_via_engine_us), json_number(row.fused_fraction),
      json_number(row.fused_fraction_routed), json_number(row.speedup_vs_peer), json_number(row.submit_us), json_number(context.memcpy_GBps));
}

std::string latency_json(const LatencyRow &row, const EngineBenchOptions &options, const EngineBenchContext &context) {
  return fmt::format(
      "{{\"collective\": \"engine_latency\", \"size\": {}, \"count\": {}, \"type\": \"{}\", \"op\": \"{}\", "
      "\"ranks\": {}, \"wrong\": {}, \"engine_us\": {}, \"plain_us\": {}, \"ratio\": {}, "
      "\"sync_via_engine_us\": {}, \"peer\": {}, \"peer_time_us\": {}, \"memcpy_GBps\": {}}}",
      row.bytes, row.count, dtype_name(options.dtype), op_name(options.op), context.ranks,
      row.wrong ? fmt::format("{}", *row.wrong) : "null", json_number(row.engine_us), json_number(row.plain_us),
      json_number(row.ratio), json_number(row.sync_via_engine_us),
      context.peer ? fmt::format("\"{}\"", context.peer_name) : "null", json_number(row.peer_us),
      json_number(context.memcpy_GBps));
}

}  // namespace ringrun::bench
