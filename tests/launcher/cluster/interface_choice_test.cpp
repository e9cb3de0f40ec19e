// choose_shared_interface and the probe line format, with plain data (no network touched).
#include "facts/interface_probe.hpp"

#include <doctest/doctest.h>

using ringrun::netprobe::choose_shared_interface;
using ringrun::netprobe::Interface;
using ringrun::netprobe::NodeInterfaces;
using ringrun::netprobe::parse_probe_output;

namespace {
Interface up(const std::string& name, std::vector<std::string> ipv4) { return Interface{name, true, false, std::move(ipv4)}; }
Interface lo() { return Interface{"lo", true, true, {"127.0.0.1/8"}}; }
}  // namespace

TEST_CASE("the interface every node has, in one subnet") {
  std::vector<NodeInterfaces> nodes = {
      {"n1", {lo(), up("eth0", {"10.77.0.1/24"})}},
      {"n2", {lo(), up("eth0", {"10.77.0.2/24"})}},
  };
  auto c = choose_shared_interface(nodes);
  REQUIRE(c.name);
  CHECK(*c.name == "eth0");
  CHECK(c.reason.find("10.77.0.0/24") != std::string::npos);
  CHECK(c.reason.find("all 2 nodes") != std::string::npos);
}

TEST_CASE("ib* first, even when another interface shares a subnet") {
  std::vector<NodeInterfaces> nodes = {
      {"n1", {up("eth0", {"10.0.0.1/24"}), up("ib0", {"192.168.1.1/16"})}},
      {"n2", {up("eth0", {"10.0.0.2/24"}), up("ib0", {"192.168.7.2/16"})}},
  };
  auto c = choose_shared_interface(nodes);
  REQUIRE(c.name);
  CHECK(*c.name == "ib0");
  CHECK(c.reason.find("InfiniBand") != std::string::npos);
}

TEST_CASE("the one on a shared subnet beats the first one") {
  std::vector<NodeInterfaces> nodes = {
      {"a", {up("eno1", {"10.1.0.5/24"}), up("eno2", {"172.16.0.1/16"})}},
      {"b", {up("eno1", {"10.2.0.5/24"}), up("eno2", {"172.16.3.9/16"})}},
  };
  auto c = choose_shared_interface(nodes);
  REQUIRE(c.name);
  CHECK(*c.name == "eno2");
}

TEST_CASE("no shared subnet: the first usable one, and the reason says so") {
  std::vector<NodeInterfaces> nodes = {
      {"a", {up("eno1", {"10.1.0.5/24"})}},
      {"b", {up("eno1", {"10.2.0.5/24"})}},
  };
  auto c = choose_shared_interface(nodes);
  REQUIRE(c.name);
  CHECK(*c.name == "eno1");
  CHECK(c.reason.find("no shared interface puts every node in one subnet") != std::string::npos);
}

TEST_CASE("never lo, docker*, veth*, virbr*, a down one, a link-local-only one, or one missing on a node") {
  std::vector<NodeInterfaces> nodes = {
      {"n1",
       {lo(), up("docker0", {"172.17.0.1/16"}), up("veth12ab", {"10.9.0.1/24"}), up("virbr0", {"192.168.122.1/24"}),
        Interface{"eth1", false, false, {"10.5.0.1/24"}}, up("eth2", {"169.254.3.3/16"}), up("eth3", {"10.6.0.1/24"})}},
      {"n2",
       {lo(), up("docker0", {"172.17.0.1/16"}), up("veth99", {"10.9.0.2/24"}), up("virbr0", {"192.168.122.1/24"}),
        up("eth1", {"10.5.0.2/24"}), up("eth2", {"169.254.4.4/16"})}},
  };
  auto c = choose_shared_interface(nodes);
  CHECK_FALSE(c.name);
  CHECK(c.reason.find("n1 has eth3") != std::string::npos);
  CHECK(c.reason.find("n2 has eth1") != std::string::npos);
}

TEST_CASE("no node answered") { CHECK_FALSE(choose_shared_interface({}).name); }

TEST_CASE("probe lines round-trip; other lines are ignored; a malformed line is refused") {
  std::string text = "srun: warning: something\n" +
                     ringrun::netprobe::format_probe_line("n1", {lo(), up("eth0", {"10.77.0.1/24", "10.78.0.1/32"}),
                                                                 Interface{"ifb0", false, false, {}}}) +
                     ringrun::netprobe::format_probe_line("n2", {up("eth0", {"10.77.0.2/24"})});
  auto nodes = parse_probe_output(text);
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].host == "n1");
  REQUIRE(nodes[0].interfaces.size() == 3);
  CHECK(nodes[0].interfaces[0].loopback);
  CHECK(nodes[0].interfaces[1].ipv4 == std::vector<std::string>{"10.77.0.1/24", "10.78.0.1/32"});
  CHECK_FALSE(nodes[0].interfaces[2].up);
  CHECK(nodes[0].interfaces[2].ipv4.empty());
  CHECK(*choose_shared_interface(nodes).name == "eth0");
  CHECK_THROWS_AS(parse_probe_output("ringrun-interfaces n1 eth0-up\n"), ringrun::InputError);
  CHECK_THROWS_AS(parse_probe_output("ringrun-interfaces n1 eth0|sideways|\n"), ringrun::InputError);
}

TEST_CASE("shell_words quotes only what needs it") {
  CHECK(ringrun::netprobe::shell_words({"srun", "--ntasks=8", "a b", "it's"}) == "srun --ntasks=8 'a b' 'it'\\''s'");
}
