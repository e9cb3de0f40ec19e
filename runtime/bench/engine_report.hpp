// The engine benchmark's rows and how they are shown: the tables on rank 0, or JSON objects.
#pragma once

#include "engine_bench.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ringrun::bench {

struct WorkloadRow {
  std::string label;
  std::size_t tensors = 0, bytes = 0;
  std::optional<std::size_t> wrong;
  std::optional<double> engine_us, first_step_us, one_big_us, one_by_one_us;
  std::optional<double> peer_one_by_one_us, peer_one_by_one_before_us, peer_one_big_us, one_big_via_engine_us;
  std::optional<double> fused_fraction, speedup_vs_peer;
  std::optional<double> fused_fraction_routed;  // one_big_via_engine_us / engine_us: same phase, same machine state
  std::optional<double> submit_us;  // mean submission loop per engine step, slowest rank
  std::string peer_note;  // why the peer columns are empty
};

struct LatencyRow {
  std::size_t bytes = 0, count = 0;
  std::optional<std::size_t> wrong;
  std::optional<double> engine_us, plain_us, ratio, sync_via_engine_us, peer_us;
};

// "4KiB", "1MiB", "12B": a workload's label.
std::string size_label(std::size_t bytes);

void print_header(const EngineBenchOptions &options, const EngineBenchContext &context);
void print_workload_table(const std::vector<WorkloadRow> &rows);
void print_latency_table(const std::vector<LatencyRow> &rows);
std::string workload_json(const WorkloadRow &row, const EngineBenchOptions &options, const EngineBenchContext &context);
std::string latency_json(const LatencyRow &row, const EngineBenchOptions &options, const EngineBenchContext &context);

}  // namespace ringrun::bench
