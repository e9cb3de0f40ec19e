// Who is in the job and how to reach them: the result of bootstrap, shared by every transport.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringrun/ringrun.h"

namespace ringrun::core {

struct PeerInfo {
  int rank = 0;
  std::string host;     // host name used for same-host detection
  std::string address;  // IPv4 address the peer listens on
  std::uint16_t port = 0;
  std::uint64_t nonce = 0;  // random per process; a connecting peer must present it (no stray connects)
  int tcp_streams = 1;      // TCP connections it asks for per peer (RINGRUN_TCP_STREAMS), 0 = automatic; all must agree
  std::string machine;      // its kernel's boot id: the "hosts" that are namespaces of one machine share one
  int cpus = 1;             // CPUs online on that machine
};

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::vector<PeerInfo> peers;  // indexed by rank

  // "rank 2 (host n1)", the way every error names a peer.
  std::string describe(int peer) const;
  bool all_on_one_host() const { return local_size == size; }
};

// The TCP connections per pair of ranks when RINGRUN_TCP_STREAMS is unset: one per CPU each rank
// has to itself on its machine (the kernel's TCP work for a connection runs on a CPU of its own),
// at most kMaxAutomaticTcpStreams, at least 1; the smallest over the machines, so every rank picks
// the same. 1 when every rank is on one host. Ranks are counted per machine (boot id), not per host
// name: network namespaces of one machine share its CPUs.
inline constexpr int kMaxAutomaticTcpStreams = 4;
int automatic_tcp_streams(const std::vector<PeerInfo>& peers);

// More ranks on this rank's machine (boot id, so network namespaces of one machine count together)
// than it has CPUs online: a rank that waits for a peer should not spin.
bool machine_oversubscribed(const World& world);

// Some of the ranks of a World that run collectives among themselves (the ranks of one host, or
// one rank per host): their global ranks in the group's order, and this rank's index there.
struct Group {
  std::vector<int> ranks;
  int index = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int rank() const { return ranks[static_cast<std::size_t>(index)]; }  // this rank, globally
};
Group whole_world(const World& world);

// The ranks of every host, hosts in the order of their first rank, ranks ascending.
std::vector<std::vector<int>> ranks_by_host(const World& world);

// Fills local/cross rank and size from the peers' host names (block or any order: local rank =
// index among the ranks on the same host; cross rank as in Horovod).
void compute_local_and_cross(World& world);

// The runtime's collectives, made from the one list in ringrun.h (RINGRUN_COLLECTIVES): the same
// values as ringrun_collective, so a request's kind converts by value.
enum class Collective : std::uint8_t {
#define RINGRUN_CORE_COLLECTIVE(NAME, name, value, agree) name = value,
  RINGRUN_COLLECTIVES(RINGRUN_CORE_COLLECTIVE)
#undef RINGRUN_CORE_COLLECTIVE
};

// One line of the list: the kind, its name ("allreduce"), Horovod's upper-case name for timeline
// phases ("ALLREDUCE"), and the parts of a call every rank must give alike (RINGRUN_AGREE_*).
struct CollectiveRow {
  Collective kind;
  const char* name;
  const char* upper;
  unsigned agree;
};
inline constexpr CollectiveRow kCollectives[] = {
#define RINGRUN_CORE_COLLECTIVE_ROW(NAME, name, value, agree) {Collective::name, #name, #NAME, agree},
    RINGRUN_COLLECTIVES(RINGRUN_CORE_COLLECTIVE_ROW)
#undef RINGRUN_CORE_COLLECTIVE_ROW
};
// The largest kind's value: arrays indexed by kind have this plus one entries.
inline constexpr std::size_t kMaxCollective = [] {
  std::size_t most = 0;
  for (const CollectiveRow& row : kCollectives) most = std::max(most, static_cast<std::size_t>(row.kind));
  return most;
}();

// The list's lines by kind, made at compile time: a lookup on every collective's header check
// costs an index, no initialisation guard.
inline constexpr auto kCollectiveByKind = [] {
  std::array<const CollectiveRow*, kMaxCollective + 1> table{};
  for (const CollectiveRow& row : kCollectives) table[static_cast<std::size_t>(row.kind)] = &row;
  return table;
}();

// The list's line of a kind received from a peer or a caller; nullptr when the value is none.
constexpr const CollectiveRow* find_collective(unsigned value) {
  return value < kCollectiveByKind.size() ? kCollectiveByKind[value] : nullptr;
}
// The line of a kind this process made (RuntimeError for a value outside the list).
const CollectiveRow& collective_row(Collective kind);
const char* collective_name(Collective kind);

// "0, 2, 5" (the first 32, then " and N more"): ranks named in a message.
std::string rank_list(const std::vector<int>& ranks);
// "rank 3" or "ranks 0, 2": the same with its noun.
std::string name_ranks(const std::vector<int>& ranks);

// Every collective starts with this description; ranks compare theirs to detect mismatches.
struct OpHeader {
  std::uint64_t seq = 0;  // collective number on this communicator
  std::uint64_t count = 0;  // alltoall: 0 (ranks send different counts; checked as they arrive)
  Collective kind = Collective::barrier;
  ringrun_dtype dtype = RINGRUN_UINT8;
  ringrun_op op = RINGRUN_SUM;
  std::int32_t root = 0;

  std::size_t bytes() const;  // count * dtype size
  bool matches(const OpHeader& other) const;
  std::string describe() const;  // "allreduce #5 of 1000 float32 (sum)"
};

// The error every transport raises when another rank described a different collective.
[[noreturn]] void throw_mismatch(const World& world, const OpHeader& mine, int peer, const OpHeader& theirs);

}  // namespace ringrun::core
