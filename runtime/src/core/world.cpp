#include "core/world.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::core {

std::string World::describe(int peer) const {
  if (peer >= 0 && peer < static_cast<int>(peers.size()) && !peers[peer].host.empty())
    return fmt::format("rank {} (host {})", peer, peers[peer].host);
  return fmt::format("rank {}", peer);
}

Group whole_world(const World& world) {
  Group group;
  group.ranks.resize(static_cast<std::size_t>(world.size));
  for (int r = 0; r < world.size; ++r) group.ranks[static_cast<std::size_t>(r)] = r;
  group.index = world.rank;
  return group;
}

std::vector<std::vector<int>> ranks_by_host(const World& world) {
  std::map<std::string, std::size_t> host_index;
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < world.size; ++r) {
    auto [it, added] = host_index.emplace(world.peers[static_cast<std::size_t>(r)].host, hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  return hosts;
}

void compute_local_and_cross(World& world) {
  std::map<std::string, int> next_local;
  std::vector<int> local_rank_of(world.size);
  for (int r = 0; r < world.size; ++r) local_rank_of[r] = next_local[world.peers[r].host]++;
  world.local_rank = local_rank_of[world.rank];
  world.local_size = next_local[world.peers[world.rank].host];
  world.cross_rank = 0;
  world.cross_size = 0;
  for (int r = 0; r < world.size; ++r) {
    if (local_rank_of[r] != world.local_rank) continue;
    if (r < world.rank) ++world.cross_rank;
    ++world.cross_size;
  }
}

int automatic_tcp_streams(const std::vector<PeerInfo>& peers) {
  if (peers.empty() ||
      std::all_of(peers.begin(), peers.end(), [&](const PeerInfo& p) { return p.host == peers.front().host; }))
    return 1;
  std::map<std::string, std::pair<int, int>> machines;  // boot id -> (ranks, fewest CPUs reported)
  for (const PeerInfo& p : peers) {
    auto [it, added] = machines.try_emplace(p.machine, 0, p.cpus);
    ++it->second.first;
    it->second.second = std::min(it->second.second, p.cpus);
  }
  int streams = kMaxAutomaticTcpStreams;
  for (const auto& [machine, counts] : machines) streams = std::min(streams, counts.second / counts.first);
  return std::max(streams, 1);
}

bool machine_oversubscribed(const World& world) {
  if (world.peers.empty()) return false;
  const PeerInfo& me = world.peers[static_cast<std::size_t>(world.rank)];
  const auto ranks = std::count_if(world.peers.begin(), world.peers.end(),
                                   [&](const PeerInfo& p) { return p.machine == me.machine; });
  return ranks > me.cpus;
}

std::string rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t kMost = 32;
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < kMost; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMost) out += " and " + std::to_string(ranks.size() - kMost) + " more";
  return out;
}

std::string name_ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

const CollectiveRow& collective_row(Collective kind) {
  if (const CollectiveRow* row = find_collective(static_cast<unsigned>(kind))) [[likely]]
    return *row;
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("collective kind {} is not in the list", static_cast<int>(kind)));
}

const char* collective_name(Collective kind) { return collective_row(kind).name; }

std::size_t OpHeader::bytes() const { return count * dtype_size(dtype); }

bool OpHeader::matches(const OpHeader& o) const {
  if (seq != o.seq || kind != o.kind) return false;
  const unsigned agree = collective_row(kind).agree;
  return (!(agree & RINGRUN_AGREE_COUNT) || count == o.count) && (!(agree & RINGRUN_AGREE_DTYPE) || dtype == o.dtype) &&
         (!(agree & RINGRUN_AGREE_OP) || op == o.op) && (!(agree & RINGRUN_AGREE_ROOT) || root == o.root);
}

// "allreduce #5 of 1000 float32 (sum)", "broadcast #2 of 4 int32 from root 1", "barrier #7": the
// parts every rank must agree on.
std::string OpHeader::describe() const {
  const CollectiveRow& row = collective_row(kind);
  std::string text = fmt::format("{} #{}", row.name, seq);
  if (row.agree & RINGRUN_AGREE_COUNT) text += fmt::format(" of {} {}", count, dtype_name(dtype));
  else if (row.agree & RINGRUN_AGREE_DTYPE) text += fmt::format(" of {}", dtype_name(dtype));
  if (row.agree & RINGRUN_AGREE_OP) text += fmt::format(" ({})", op_name(op));
  if (row.agree & RINGRUN_AGREE_ROOT) text += fmt::format(" from root {}", root);
  return text;
}

void throw_mismatch(const World& world, const OpHeader& mine, int peer, const OpHeader& theirs) {
  throw RuntimeError(RINGRUN_ERR_MISMATCH,
                     fmt::format("{}: ranks disagree: rank {} called {}, but {} called {}", collective_name(mine.kind),
                                 world.rank, mine.describe(), world.describe(peer), theirs.describe()));
}

}  // namespace ringrun::core
