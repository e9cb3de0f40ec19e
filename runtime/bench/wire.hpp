// The wire bound of an allreduce across hosts (RESULTS.md, "The wire bound (wire_frac)"): the bytes
// each host must send for the TCP part of the algorithm at a size, at the rate raw TCP streams
// between the same ranks, on the same addresses, reach when they all stream at once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ringrun::bench {

// What the raw streams reached: every rank sends to the next host's rank of its local index and
// receives from the previous host's at once, one plain TCP connection each way (the allreduce's
// cross-host ring, whose busiest link carries the same bytes both ways).
struct WireRate {
  double host_GBps = 0;  // bytes one host sends per second (all its ranks' streams together)
  int hosts = 0;
  int ranks_per_host = 0;
};

// wire_frac is shown from this size on: below it the allreduce is latency, not the wire.
constexpr std::size_t kWireMinBytes = std::size_t{1} << 20;

// measure_wire_rate's why_not for a job on one host, where the table leaves the line out.
inline constexpr std::string_view kOneHost = "every rank is on one host";

// Collective: every rank calls it. nullopt with `why_not` set when the job is on one host, or on
// a transport without a model (TCP with several ranks on a host, hosts with unequal rank counts).
std::optional<WireRate> measure_wire_rate(std::string_view transport, std::string &why_not);

// wire_time in seconds: the bytes one host sends in the ring over the hosts, 2 (H-1)/H x size
// (its ranks each send that much of their 1/L shard), at the raw rate.
double allreduce_wire_seconds(std::size_t bytes, const WireRate &rate);

// The `# wire:` header line of the allreduce table (with its newline).
std::string wire_header(const std::optional<WireRate> &rate, std::string_view why_not);

}  // namespace ringrun::bench
