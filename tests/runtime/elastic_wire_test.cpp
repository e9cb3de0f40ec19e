// Elastic mode's store keys and world records (runtime/store/elastic_wire.hpp): round trips and
// the refusal, naming the key, of every malformed value.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "ringrun/elastic_wire.hpp"

using namespace ringrun::store::elastic;

TEST_CASE("keys: one namespace, one key per epoch and per id") {
  CHECK(world_key(3) == "ringrun/elastic/3/world");
  CHECK(latest_key() == "ringrun/elastic/latest");
  CHECK(reset_key(0) == "ringrun/elastic/0/reset");
  CHECK(leave_key(12) == "ringrun/elastic/leave/12");
  CHECK(addr_prefix(2) == "ringrun/elastic/2/addr");
}

TEST_CASE("a world round-trips, and rank_of follows the id order") {
  PublishedWorld world;
  world.epoch = 4;
  world.added = true;
  world.ids = {0, 1, 3, 7};
  CHECK(encode_world(world) == "e=4 added=1 ids=0,1,3,7");
  CHECK(decode_world(encode_world(world), "k") == world);
  CHECK(rank_of(world, 3) == 2);
  CHECK(rank_of(world, 2) == -1);
  PublishedWorld end;
  end.end = true;
  end.reason = "below --min-np 2 for 600 s";
  CHECK(decode_world(encode_world(end), "k") == end);
}

TEST_CASE("malformed worlds are refused with the key and the value named") {
  for (const char* bad : {"", "e=1", "e=x added=0 ids=1", "e=-1 added=0 ids=1", "e=1 added=2 ids=1",
                          "e=1 added=0 ids=", "e=1 added=0 ids=1,", "e=1 added=0 ids=1,1", "e=1 added=0 ids=1 x",
                          "e=1 ids=1 added=0", "e=1 added=0 ids=a"}) {
    CAPTURE(bad);
    try {
      decode_world(bad, "ringrun/elastic/1/world");
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("ringrun/elastic/1/world") != std::string::npos);
    }
  }
}
