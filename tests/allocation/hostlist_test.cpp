// Hostlist and count-list expansion: every rule and example of shared/fixtures/slurm-env.md
// (expected values are what Slurm 22.05.8's `scontrol show hostnames` printed, or 23.11's where
// the two differ).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ringrun/slurm.hpp"

using ringrun::expand_hostlist;
using ringrun::expand_task_counts;
using ringrun::InputError;
using Names = std::vector<std::string>;

namespace {
std::string error_of(std::string_view list, std::size_t limit = 1'000'000, std::string_view what = "hostlist") {
  try {
    expand_hostlist(list, limit, what);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}
std::string count_error_of(std::string_view counts, std::string_view what = "SLURM_TASKS_PER_NODE") {
  try {
    expand_task_counts(counts, what);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("fixture section 2: real and synthetic hostlists expand as Slurm's") {
  CHECK(expand_hostlist("gpu[001-004,010],cpu-a[1-2]") ==
        Names{"gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "cpu-a1", "cpu-a2"});
  CHECK(expand_hostlist("nid0[0001-0003]") == Names{"nid00001", "nid00002", "nid00003"});
  CHECK(expand_hostlist("nid00[111,169-170,174]") == Names{"nid00111", "nid00169", "nid00170", "nid00174"});
  CHECK(expand_hostlist("rack[1-2]-node[01-02]") ==
        Names{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"});
  const auto foo = expand_hostlist("foo-[10-20]-[01-02]");
  REQUIRE(foo.size() == 22);
  CHECK(foo[0] == "foo-10-01");
  CHECK(foo[1] == "foo-10-02");
  CHECK(foo[2] == "foo-11-01");
  CHECK(foo[21] == "foo-20-02");
  CHECK(expand_hostlist("a[1-2]b[3-4]c[5-6]") ==
        Names{"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"});
  CHECK(expand_hostlist("b04-[09-10]") == Names{"b04-09", "b04-10"});
  CHECK(expand_hostlist("ml-16-node-[001-002,004],ml-17-node-[001-003]") ==
        Names{"ml-16-node-001", "ml-16-node-002", "ml-16-node-004", "ml-17-node-001", "ml-17-node-002",
              "ml-17-node-003"});
  CHECK(expand_hostlist("d05-[41-42]") == Names{"d05-41", "d05-42"});
  CHECK(expand_hostlist("c457-[011-012]") == Names{"c457-011", "c457-012"});
  CHECK(expand_hostlist("c427-032,c429-002") == Names{"c427-032", "c429-002"});
  CHECK(expand_hostlist("host-[001-002]") == Names{"host-001", "host-002"});
  CHECK(expand_hostlist("c[1-2]") == Names{"c1", "c2"});
  CHECK(expand_hostlist("linux[1,2]") == Names{"linux1", "linux2"});
  CHECK(expand_hostlist("alpha,beta,gamma") == Names{"alpha", "beta", "gamma"});
  CHECK(expand_hostlist("nodes[006,011]") == Names{"nodes006", "nodes011"});
  CHECK(expand_hostlist("host[001,003-004,006]") == Names{"host001", "host003", "host004", "host006"});
  CHECK(expand_hostlist("nodeA,nodeB[001,003],nodeC") == Names{"nodeA", "nodeB001", "nodeB003", "nodeC"});
  CHECK(expand_hostlist("frontier[00144,00256]") == Names{"frontier00144", "frontier00256"});
  CHECK(expand_hostlist("t-cn0117") == Names{"t-cn0117"});
}

TEST_CASE("H1: separators are ',', space, tab and newline; not inside brackets; empty entries skipped") {
  CHECK(expand_hostlist("a b\tc\nd") == Names{"a", "b", "c", "d"});
  CHECK(expand_hostlist(" a , b ") == Names{"a", "b"});
  CHECK(expand_hostlist("a[1-2],,b") == Names{"a1", "a2", "b"});
  CHECK(expand_hostlist("x,[1,2]") == Names{"x", "1", "2"});
  CHECK(expand_hostlist("").empty());
  CHECK(expand_hostlist(" , ").empty());
}

TEST_CASE("H2: the last '[' opens the numeric range; earlier text is the prefix") {
  CHECK(expand_hostlist("n[[1-2]") == Names{"n[1", "n[2"});  // scontrol 22.05.8
  CHECK(expand_hostlist("a]b") == Names{"a]b"});
  CHECK(expand_hostlist("[1-3]") == Names{"1", "2", "3"});
}

TEST_CASE("H3: range items; lo > hi, negatives, non-digits, empty items and boxes are errors") {
  CHECK(error_of("node[3-1]", 1'000'000, "SLURM_JOB_NODELIST") ==
        "SLURM_JOB_NODELIST='node[3-1]' : invalid range at column 6");
  CHECK(error_of("n[3-1]", 1'000'000, "SLURM_JOB_NODELIST") == "SLURM_JOB_NODELIST='n[3-1]' : invalid range at column 3");
  CHECK(error_of("node[-1]") == "hostlist='node[-1]' : invalid range at column 6");
  CHECK(error_of("node[a-c]") == "hostlist='node[a-c]' : invalid range at column 6");
  CHECK(error_of("node[1x2]") == "hostlist='node[1x2]' : invalid range at column 6");
  CHECK(error_of("node[]") == "hostlist='node[]' : invalid range at column 6");
  CHECK(error_of("n[1--2]") == "hostlist='n[1--2]' : invalid range at column 3");
  CHECK(error_of("n[-]") == "hostlist='n[-]' : invalid range at column 3");
  CHECK(error_of("n[,1]") == "hostlist='n[,1]' : invalid range at column 3");
  CHECK(error_of("n[1,]") == "hostlist='n[1,]' : invalid range at column 5");
  CHECK(error_of("n[1-2 ]") == "hostlist='n[1-2 ]' : invalid range at column 3");
  CHECK(error_of("a[]b[1]") == "hostlist='a[]b[1]' : invalid range at column 3");
  CHECK(error_of("a[1]b[]") == "hostlist='a[1]b[]' : invalid range at column 7");
  CHECK(error_of("ok,n[2-1]") == "hostlist='ok,n[2-1]' : invalid range at column 6");
  // strtoul quirks scontrol shows: a missing high bound is the low one, leading blanks and '+'
  CHECK(expand_hostlist("n[1-]") == Names{"n1"});
  CHECK(expand_hostlist("n[ 1-2]") == Names{"n01", "n02"});
  CHECK(expand_hostlist("n[+1-+3]") == Names{"n01", "n02", "n03"});
  CHECK(expand_hostlist("n[1- 2]") == Names{"n1", "n2"});
}

TEST_CASE("H4: zero padding is the low bound's width, as a minimum") {
  CHECK(expand_hostlist("node[08-11]") == Names{"node08", "node09", "node10", "node11"});
  CHECK(expand_hostlist("node[8-011]") == Names{"node8", "node9", "node10", "node11"});
  CHECK(expand_hostlist("node[098-101]") == Names{"node098", "node099", "node100", "node101"});
  CHECK(expand_hostlist("n[01-2]") == Names{"n01", "n02"});
  CHECK(expand_hostlist("n[00-1]") == Names{"n00", "n01"});
  CHECK(expand_hostlist("n[007]") == Names{"n007"});
  CHECK(expand_hostlist("n[0-0]") == Names{"n0"});
  CHECK(expand_hostlist("node9,node010") == Names{"node9", "node010"});
}

TEST_CASE("H5: bracket ranges in the prefix; the prefix cap") {
  CHECK(expand_hostlist("n[1-2]-[3-4]") == Names{"n1-3", "n1-4", "n2-3", "n2-4"});
  CHECK(expand_hostlist("n[1-2][3]") == Names{"n13", "n23"});
  CHECK(expand_hostlist("r[1-2]n[01-02]c[3,4]") ==
        Names{"r1n01c3", "r1n01c4", "r2n01c3", "r2n01c4", "r1n02c3", "r1n02c4", "r2n02c3", "r2n02c4"});
  CHECK(expand_hostlist("a[1-300]b[1-300]c[1]").size() == 90000);
  CHECK(error_of("a[1-2]x]y[3]") == "hostlist='a[1-2]x]y[3]' : invalid range at column 3");
  // a '[' without a ']' after it ends the prefix groups: the rest is literal (scontrol 22.05.8)
  CHECK(expand_hostlist("a[1]b[c[2]") == Names{"a[1]b[c2"});
  CHECK(error_of("a[0-70000].b[0-9]").find("too many hosts in range") != std::string::npos);
  CHECK(error_of("a[0-40000,0-40000].b[0-9]").find("too many hosts in one prefix bracket") != std::string::npos);
}

TEST_CASE("H6: a suffix after ']' is kept (Slurm 23.11)") {
  CHECK(expand_hostlist("node[1-3]-ib") == Names{"node1-ib", "node2-ib", "node3-ib"});
  CHECK(expand_hostlist("node[0001-0002]-int") == Names{"node0001-int", "node0002-int"});
  CHECK(expand_hostlist("n[1-2]x[3]") == Names{"n1x3", "n2x3"});
  CHECK(expand_hostlist("rack[1-2]-n[1-2]-ib") == Names{"rack1-n1-ib", "rack1-n2-ib", "rack2-n1-ib", "rack2-n2-ib"});
  CHECK(error_of("n[1-2]]") == "hostlist='n[1-2]]' : ']' without '[' at column 7");
}

TEST_CASE("H7: at most 65536 hosts in one range") {
  CHECK(expand_hostlist("x[1-65536]").size() == 65536);
  CHECK(expand_hostlist("x[0-65535]").back() == "x65535");
  CHECK(error_of("x[1-65537]") == "hostlist='x[1-65537]' : too many hosts in range (more than 65536) at column 3");
  CHECK(error_of("n[99999999999999999999999]").find("out of bounds") != std::string::npos);
}

TEST_CASE("H8: order and duplicates are kept") {
  CHECK(expand_hostlist("host[5-9,1]") == Names{"host5", "host6", "host7", "host8", "host9", "host1"});
  CHECK(expand_hostlist("node[1-3],node[2-4]").size() == 6);
  CHECK(expand_hostlist("n[1,1,1]") == Names{"n1", "n1", "n1"});
}

TEST_CASE("H9: a '[' without ']' is an error (Slurm 23.02)") {
  CHECK(error_of("node[1-2", 1'000'000, "SLURM_NODELIST") == "SLURM_NODELIST='node[1-2' : '[' without ']' at column 5");
  CHECK(error_of("n[1-2],m[") == "hostlist='n[1-2],m[' : '[' without ']' at column 9");
}

TEST_CASE("H10: braces are plain characters here") { CHECK(expand_hostlist("n{a}") == Names{"n{a}"}); }

TEST_CASE("the limit is checked before any name is built") {
  CHECK(expand_hostlist("n[1-10]", 10).size() == 10);
  CHECK(error_of("n[1-10]", 9) ==
        "hostlist='n[1-10]' : expands to more than 9 host names (entry at column 1); check the list or raise the limit");
  // 65536^4 names: refused at once (building them would need exabytes)
  const std::string huge = "a[1-65536]b[1-65536]c[1-65536]d[1-65536]";
  CHECK(error_of(huge).find("expands to more than 1000000 host names") != std::string::npos);
  CHECK(error_of("x[1-60000],y[1-60000]", 100'000).find("entry at column 12") != std::string::npos);
  // A count that saturates at 2^64 - 1 after other entries: the running total must not wrap past
  // the check (found by fuzz_hostlist; it then tried to build all the names).
  CHECK(error_of("a,b,c[0-65535]x[0-65535]y[0-65535]z[0-65535]", 20'000).find("entry at column 5") != std::string::npos);
}

TEST_CASE("messages stay on one line and quote long values in part") {
  const auto e = error_of("a\nb[2-1]");
  CHECK(e == "hostlist='a\\nb[2-1]' : invalid range at column 5");
  std::string long_list(500, 'a');
  long_list += "[2-1]";
  const auto l = error_of(long_list);
  CHECK(l.find("...(505 chars)") != std::string::npos);
  CHECK(l.find("column 502") != std::string::npos);
}

TEST_CASE("task counts: N(xM) runs") {
  CHECK(expand_task_counts("2(x3),1", "SLURM_TASKS_PER_NODE") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_task_counts("72(x2),36", "SLURM_JOB_CPUS_PER_NODE") == std::vector<int>{72, 72, 36});
  CHECK(expand_task_counts("1(x2)", "x") == std::vector<int>{1, 1});
  CHECK(expand_task_counts("3(x2)", "x") == std::vector<int>{3, 3});
  CHECK(expand_task_counts("8(x2)", "x") == std::vector<int>{8, 8});
  CHECK(expand_task_counts("40,8", "x") == std::vector<int>{40, 8});
  CHECK(expand_task_counts("4", "x") == std::vector<int>{4});
  CHECK(count_error_of("2(x3") == "SLURM_TASKS_PER_NODE='2(x3' : missing ')' at column 4");
  CHECK(count_error_of("2(3)") == "SLURM_TASKS_PER_NODE='2(3)' : expected 'x' after '(' at column 3");
  CHECK(count_error_of("2(x)") == "SLURM_TASKS_PER_NODE='2(x)' : expected a repeat count at column 4");
  CHECK(count_error_of("2,,1") == "SLURM_TASKS_PER_NODE='2,,1' : expected a count at column 3");
  CHECK(count_error_of("2,") == "SLURM_TASKS_PER_NODE='2,' : expected a count at column 2");
  CHECK(count_error_of("a") == "SLURM_TASKS_PER_NODE='a' : expected a count at column 1");
  CHECK(count_error_of("2 ") == "SLURM_TASKS_PER_NODE='2 ' : expected ',' or '(xN)' at column 2");
  CHECK(count_error_of("2(x0)") == "SLURM_TASKS_PER_NODE='2(x0)' : repeat count 0 at column 4");
  CHECK(count_error_of("") == "SLURM_TASKS_PER_NODE='' : empty; expected counts like 2(x3),1");
  CHECK(count_error_of("99999999999") == "SLURM_TASKS_PER_NODE='99999999999' : number too large at column 1");
  // refused before allocating: 2 billion entries
  CHECK(count_error_of("1(x2000000000)").find("more than 1000000 counts") != std::string::npos);
}
