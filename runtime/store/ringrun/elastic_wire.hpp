// Elastic mode's keys and values in the job's rendezvous store (ringrun(3), Elastic mode), shared
// by the launcher's elastic supervisor (which alone decides and publishes each world) and the
// runtime (which posts reset and leave requests and joins the worlds it is named in). Every key has
// one writer. Pure: encoding and decoding only; the sockets are store.hpp's.
//
//   ringrun/elastic/<e>/world   supervisor, once per epoch e: "e=<e> added=<0|1> ids=<id>,<id>,..."
//                               (rank r of world e is the r-th id) or "end <reason>"
//   ringrun/elastic/latest      supervisor: the newest published epoch, as decimal text
//   ringrun/elastic/<e>/reset   a member of world e: its id ("I am leaving world e")
//   ringrun/elastic/leave/<id>  the process <id>, before it agrees to leave: "1"
//   ringrun/elastic/failed/<id> the process <id>, when it is about to fail (an exception leaves the
//                               training): "1"; its peers' reset then forms the world without it at
//                               once, instead of a world of the same members first
//   ringrun/elastic/<e>/addr    the StoreExchange prefix of world e's address exchange; the
//                               supervisor writes kTombstone into the key of a member that died
//                               before writing its own, so that the others stop waiting for it
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun::store::elastic {

std::string world_key(int epoch);
std::string latest_key();
std::string reset_key(int epoch);
std::string leave_key(std::uint64_t id);
std::string failed_key(std::uint64_t id);
std::string addr_prefix(int epoch);

// What a dead member's address key holds instead of an address record.
inline constexpr std::string_view kTombstone = "\x1f!reset";

struct PublishedWorld {
  int epoch = 0;
  bool added = false;               // processes were added (joiners need the state synced to them)
  bool end = false;                 // no further world: the job ends (`reason` says why)
  std::string reason;               // only with end
  std::vector<std::uint64_t> ids;   // rank r is ids[r]
  friend bool operator==(const PublishedWorld&, const PublishedWorld&) = default;
};

std::string encode_world(const PublishedWorld& world);

// Throws std::invalid_argument naming `key` and what is wrong when `value` is not encode_world's.
PublishedWorld decode_world(std::string_view value, std::string_view key);

// The rank of `id` in `world`, or -1 when it is not a member.
int rank_of(const PublishedWorld& world, std::uint64_t id);

}  // namespace ringrun::store::elastic
