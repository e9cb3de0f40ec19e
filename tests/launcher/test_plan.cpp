// Parsing and planning with plain data: -H, hostfiles, the plan's block order, cross ranks and
// environment, and the command line.
#include <ringrun/cli.hpp>
#include <ringrun/plan.hpp>

#include <doctest/doctest.h>

#include "error_of.hpp"

using namespace ringrun;

namespace {

PlanInputs inputs(Allocation a) {
  PlanInputs in;
  in.allocation = std::move(a);
  in.master_addr = "n1";
  in.master_port = 29500;
  in.store_addr = "n1:4000";
  in.job_secret = std::string(64, 'a');
  return in;
}

LaunchOptions options(int np) {
  LaunchOptions o;
  o.num_proc = np;
  o.program = {"train"};
  return o;
}

}  // namespace

TEST_CASE("-H parses hosts and slots in order") {
  Allocation a = parse_hosts_flag("n1:4,n2:2,n3");
  REQUIRE(a.hosts.size() == 3);
  CHECK(a.hosts[0].name == "n1");
  CHECK(a.hosts[0].slots == 4);
  CHECK(a.hosts[1].slots == 2);
  CHECK(a.hosts[2].slots == 1);
  CHECK(a.explicit_slots);
  CHECK(a.total_slots() == 7);
}

TEST_CASE("-H rejects malformed input with the column and the fix") {
  CHECK(error_of([] { parse_hosts_flag("n1:x"); }).find("slots 'x' of host 'n1'") != std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("n1:0"); }).find("not a positive number") != std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("n1:2,,n2:2"); }).find("empty host entry at column 6") != std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("n1:2,n1:2"); }).find("listed twice") != std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("n 1:2"); }).find("not a host name") != std::string::npos);
  CHECK(error_of([] { parse_hosts_flag(""); }).find("no hosts") != std::string::npos);
}

TEST_CASE("hostfile: 'host slots=N' lines, comments, errors with the line number") {
  Allocation a = parse_hostfile("# cluster\nn1 slots=4\n\n  n2   slots=2 max_slots=8 # gpu\nn3\n", "hf");
  REQUIRE(a.hosts.size() == 3);
  CHECK(a.hosts[0].slots == 4);
  CHECK(a.hosts[1].slots == 2);
  CHECK(a.hosts[2].slots == 1);
  CHECK(error_of([] { parse_hostfile("n1 slots=4\nn2 slots=zero\n", "hf"); }) ==
        "hostfile 'hf' line 2: 'slots=zero' is not a positive slot count (write 'host slots=N')");
  CHECK(error_of([] { parse_hostfile("n1 cores=4\n", "hf"); }).find("unknown word 'cores=4'") != std::string::npos);
  CHECK(error_of([] { parse_hostfile("n1\nn1\n", "hf"); }).find("first on line 1") != std::string::npos);
  CHECK(error_of([] { parse_hostfile("# nothing\n", "hf"); }).find("lists no hosts") != std::string::npos);
}

TEST_CASE("plan: block order over hosts, local and cross ranks as Horovod") {
  Plan p = make_plan(inputs(parse_hosts_flag("n1:2,n2:2,n3:1")), options(5));
  REQUIRE(p.ranks.size() == 5);
  struct Want { int rank; const char* host; int local, local_size, cross, cross_size; };
  Want want[] = {{0, "n1", 0, 2, 0, 3}, {1, "n1", 1, 2, 0, 2}, {2, "n2", 0, 2, 1, 3}, {3, "n2", 1, 2, 1, 2},
                 {4, "n3", 0, 1, 2, 3}};
  for (const Want& w : want) {
    const RankSlot& r = p.ranks[static_cast<std::size_t>(w.rank)];
    CHECK(r.host == w.host);
    CHECK(r.local_rank == w.local);
    CHECK(r.local_size == w.local_size);
    CHECK(r.cross_rank == w.cross);
    CHECK(r.cross_size == w.cross_size);
    CHECK(r.env.at("RINGRUN_CROSS_RANK") == std::to_string(w.cross));
  }
  CHECK(p.hosts == std::vector<std::string>{"n1", "n2", "n3"});
}

TEST_CASE("plan: fewer ranks than slots leave later hosts out") {
  Plan p = make_plan(inputs(parse_hosts_flag("n1:4,n2:4")), options(3));
  CHECK(p.hosts == std::vector<std::string>{"n1"});
  CHECK(p.ranks[2].cross_size == 1);
}

TEST_CASE("plan: the environment README and ringrun(1) give every rank") {
  Plan p = make_plan(inputs(parse_hosts_flag("n1:2,n2:2")), options(4));
  const auto& env = p.ranks[3].env;
  CHECK(env.at("RINGRUN_RANK") == "3");
  CHECK(env.at("RINGRUN_SIZE") == "4");
  CHECK(env.at("RINGRUN_LOCAL_RANK") == "1");
  CHECK(env.at("RINGRUN_LOCAL_SIZE") == "2");
  CHECK(env.at("RINGRUN_HOSTNAME") == "n2");
  CHECK(env.at("RANK") == "3");
  CHECK(env.at("WORLD_SIZE") == "4");
  CHECK(env.at("LOCAL_RANK") == "1");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(env.at("GROUP_RANK") == "1");
  CHECK(env.at("MASTER_ADDR") == "n1");
  CHECK(env.at("MASTER_PORT") == "29500");
  CHECK(env.at("RINGRUN_STORE_ADDR") == "n1:4000");
  CHECK(env.at("RINGRUN_JOB_SECRET").size() == 64);
  CHECK(env.at("OMP_NUM_THREADS") == "1");
}

TEST_CASE("plan: every rank gets horovodrun's names with the values of ringrun's") {
  Plan p = make_plan(inputs(parse_hosts_flag("n1:2,n2:2")), options(4));
  for (const RankSlot& r : p.ranks) {
    const auto& env = r.env;
    CHECK(env.at("HOROVOD_RANK") == env.at("RINGRUN_RANK"));
    CHECK(env.at("HOROVOD_SIZE") == env.at("RINGRUN_SIZE"));
    CHECK(env.at("HOROVOD_LOCAL_RANK") == env.at("RINGRUN_LOCAL_RANK"));
    CHECK(env.at("HOROVOD_LOCAL_SIZE") == env.at("RINGRUN_LOCAL_SIZE"));
    CHECK(env.at("HOROVOD_CROSS_RANK") == env.at("RINGRUN_CROSS_RANK"));
    CHECK(env.at("HOROVOD_CROSS_SIZE") == env.at("RINGRUN_CROSS_SIZE"));
    CHECK(env.at("HOROVOD_HOSTNAME") == env.at("RINGRUN_HOSTNAME"));
    const auto all = env.to_map();
    CHECK(all.at("HOROVOD_RANK") == std::to_string(r.rank));
    CHECK(all.at("HOROVOD_CROSS_RANK") == std::to_string(r.cross_rank));
  }
  CHECK(p.ranks[3].env.at("HOROVOD_LOCAL_RANK") == "1");
  CHECK(p.ranks[3].env.at("HOROVOD_HOSTNAME") == "n2");
  // The plan owns them as it owns ringrun's: -x cannot make ranks disagree on who they are.
  LaunchOptions o = options(4);
  o.env_args = {"HOROVOD_RANK=0"};
  CHECK(error_of([&] { make_plan(inputs(parse_hosts_flag("n1:2,n2:2")), o); })
            .find("HOROVOD_RANK is set by ringrun for each rank") != std::string::npos);
}

TEST_CASE("plan: the engine's knobs reach every rank only when given") {
  LaunchOptions o = options(2);
  Plan plain = make_plan(inputs(parse_hosts_flag("n1:2")), o);
  CHECK(plain.ranks[0].env.count("RINGRUN_CACHE_CAPACITY") == 0);
  CHECK(plain.ranks[0].env.count("RINGRUN_TIMELINE_MARK_CYCLES") == 0);
  o.cache_capacity = 0;
  o.timeline_mark_cycles = true;
  o.cycle_time_ms = 2.5;
  Plan p = make_plan(inputs(parse_hosts_flag("n1:2")), o);
  for (const auto& rank : p.ranks) {
    CHECK(rank.env.at("RINGRUN_CACHE_CAPACITY") == "0");
    CHECK(rank.env.at("RINGRUN_TIMELINE_MARK_CYCLES") == "1");
    CHECK(rank.env.at("RINGRUN_CYCLE_TIME_MS") == "2.5");
  }
}

TEST_CASE("plan: more ranks than explicit slots is an error unless --oversubscribe") {
  CHECK(error_of([] { make_plan(inputs(parse_hosts_flag("n1:2,n2:2")), options(5)); }) ==
        "-np 5 : more ranks than the 4 slots of -H; lower -np, add slots or pass --oversubscribe");
  LaunchOptions o = options(6);
  o.oversubscribe = true;
  Plan p = make_plan(inputs(parse_hosts_flag("n1:2,n2:2")), o);
  CHECK(p.ranks[2].host == "n1");  // n1 holds 3, n2 holds 3, still in block order
  CHECK(p.ranks[3].host == "n2");
  CHECK(p.ranks[3].local_rank == 0);
}

TEST_CASE("plan: -x sets, copies and refuses identity variables") {
  LaunchOptions o = options(1);
  o.env_args = {"A=1", "B", "C=x=y", "OMP_NUM_THREADS=7"};
  PlanInputs in = inputs(parse_hosts_flag("n1:1"));
  in.launcher_env = {{"B", "from-ringrun"}};
  Plan p = make_plan(in, o);
  CHECK(p.ranks[0].env.at("A") == "1");
  CHECK(p.ranks[0].env.at("B") == "from-ringrun");
  CHECK(p.ranks[0].env.at("C") == "x=y");
  CHECK(p.ranks[0].env.at("OMP_NUM_THREADS") == "7");
  o.env_args = {"MISSING"};
  CHECK(error_of([&] { make_plan(in, o); }).find("MISSING is not set in ringrun's environment") != std::string::npos);
  o.env_args = {"RANK=3"};
  CHECK(error_of([&] { make_plan(in, o); }).find("cannot be overridden") != std::string::npos);
  o.env_args = {"1BAD=3"};
  CHECK(error_of([&] { make_plan(in, o); }).find("not a variable name") != std::string::npos);
}

TEST_CASE("plan: the Python package folder goes on every rank's PYTHONPATH") {
  PlanInputs in = inputs(parse_hosts_flag("n1:2"));
  // Without a package folder (a build without the binding) PYTHONPATH is not the plan's.
  CHECK(make_plan(in, options(2)).ranks[0].env.count("PYTHONPATH") == 0);

  in.python_package_dir = "/opt/rr/lib/python3/dist-packages";
  Plan alone = make_plan(in, options(2));
  for (const RankSlot& r : alone.ranks) CHECK(r.env.at("PYTHONPATH") == "/opt/rr/lib/python3/dist-packages");

  // Before ringrun's own PYTHONPATH: the binding that matches this launcher wins.
  in.launcher_env["PYTHONPATH"] = "/home/u/lib:/site";
  CHECK(make_plan(in, options(2)).ranks[1].env.at("PYTHONPATH") == "/opt/rr/lib/python3/dist-packages:/home/u/lib:/site");
  // Empty: no ':' (an empty entry means the current directory).
  in.launcher_env["PYTHONPATH"] = "";
  CHECK(make_plan(in, options(2)).ranks[0].env.at("PYTHONPATH") == "/opt/rr/lib/python3/dist-packages");
  // Already listed (a nested ringrun, the task shim planning again): not added twice.
  in.launcher_env["PYTHONPATH"] = "/a:/opt/rr/lib/python3/dist-packages";
  CHECK(make_plan(in, options(2)).ranks[0].env.at("PYTHONPATH") == "/a:/opt/rr/lib/python3/dist-packages");

  // -x PYTHONPATH=...: the user's order comes first, the folder after it.
  LaunchOptions o = options(2);
  o.env_args = {"PYTHONPATH=/mine"};
  CHECK(make_plan(in, o).ranks[0].env.at("PYTHONPATH") == "/mine:/opt/rr/lib/python3/dist-packages");
  // -x PYTHONPATH copies ringrun's value, which holds the folder already.
  o.env_args = {"PYTHONPATH"};
  CHECK(make_plan(in, o).ranks[1].env.at("PYTHONPATH") == "/a:/opt/rr/lib/python3/dist-packages");
  o.env_args = {"PYTHONPATH="};
  CHECK(make_plan(in, o).ranks[1].env.at("PYTHONPATH") == "/opt/rr/lib/python3/dist-packages");
}

TEST_CASE("plan: a ringrun pip installed in a virtualenv puts its bin/ first on every rank's PATH") {
  PlanInputs in = inputs(parse_hosts_flag("n1:2"));
  in.launcher_env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  CHECK(make_plan(in, options(2)).ranks[0].env.count("PATH") == 0);  // no virtualenv: the launcher's PATH

  in.virtualenv = "/home/u/venv";
  Plan p = make_plan(in, options(2));
  for (const RankSlot& r : p.ranks) {
    CHECK(r.env.at("PATH") == "/home/u/venv/bin:/usr/local/bin:/usr/bin:/bin");
    CHECK(r.env.at("VIRTUAL_ENV") == "/home/u/venv");
  }
  // An activated environment: its bin/ leads PATH already, nothing to add.
  in.launcher_env["PATH"] = "/home/u/venv/bin:/usr/bin:/bin";
  CHECK(make_plan(in, options(2)).ranks[1].env.count("PATH") == 0);
  // -x PATH=...: the environment's bin/ before the user's choice; no PATH at all: the default.
  LaunchOptions o = options(2);
  o.env_args = {"PATH=/opt/tools"};
  CHECK(make_plan(in, o).ranks[0].env.at("PATH") == "/home/u/venv/bin:/opt/tools");
  in.launcher_env.erase("PATH");
  CHECK(make_plan(in, options(2)).ranks[0].env.at("PATH") == "/home/u/venv/bin:/usr/bin:/bin");
}

TEST_CASE("plan: the node layout gives GPU, cpus, NIC and NCCL variables; the user's NCCL_* wins") {
  PlanInputs in = inputs(parse_hosts_flag("n1:2"));
  in.launcher_env = {{"NCCL_IB_HCA", "=mlx5_9:1"}};
  in.node_layout = [](std::size_t, int local_size) {
    std::vector<topology::LocalSlot> slots(static_cast<std::size_t>(local_size));
    for (int i = 0; i < local_size; ++i) {
      auto& s = slots[static_cast<std::size_t>(i)];
      s.gpu = std::to_string(4 + i);
      s.cpus = {static_cast<unsigned>(8 * i), static_cast<unsigned>(8 * i + 1)};
      s.nic = "mlx5_" + std::to_string(i);
      s.env = {{"NCCL_IB_HCA", "=mlx5_" + std::to_string(i) + ":1"}, {"NCCL_OTHER", "1"}};
    }
    return slots;
  };
  Plan p = make_plan(in, options(2));
  CHECK(p.ranks[1].gpu == "5");
  CHECK(p.ranks[1].env.at("CUDA_VISIBLE_DEVICES") == "5");
  CHECK(p.ranks[1].env.at("OMP_NUM_THREADS") == "2");
  CHECK(p.ranks[1].env.count("NCCL_IB_HCA") == 0);  // the inherited value reaches the rank unchanged
  CHECK(p.ranks[1].env.at("NCCL_OTHER") == "1");
  std::string json = plan_to_json(p);
  CHECK(json.find("\"gpu\": \"5\", \"cpus\": \"8-9\", \"nic\": \"mlx5_1\"") != std::string::npos);
  CHECK(json.find("<redacted>") != std::string::npos);
  CHECK(json.find(std::string(64, 'a')) == std::string::npos);
}

TEST_CASE("plan: the allocation's GPU list is indexed by local rank, never a raw local rank") {
  Allocation a = parse_hosts_flag("n1:2");
  a.hosts[0].gpus = {"2", "3"};
  Plan p = make_plan(inputs(a), options(2));
  CHECK(p.ranks[0].env.at("CUDA_VISIBLE_DEVICES") == "2");
  CHECK(p.ranks[1].env.at("CUDA_VISIBLE_DEVICES") == "3");
  a.hosts[0].slots = 3;
  CHECK(error_of([&] { make_plan(inputs(a), options(3)); }).find("3 ranks but 2 GPUs (2,3)") != std::string::npos);
}

TEST_CASE("default -np: allocation tasks, else GPUs, else hosts; locally GPUs else 1") {
  Allocation local;
  local.hosts = {{"h", 0, {}}};
  CHECK(default_num_proc(local, 0) == 1);
  CHECK(default_num_proc(local, 4) == 4);
  Allocation slurm;
  slurm.source = AllocationSource::slurm_env;
  slurm.explicit_slots = true;
  slurm.hosts = {{"n1", 4, {"0", "1"}}, {"n2", 4, {"0", "1"}}};
  CHECK(default_num_proc(slurm, 0) == 4);
  slurm.ntasks = 8;
  CHECK(default_num_proc(slurm, 0) == 8);
  CHECK(default_num_proc(parse_hosts_flag("a:2,b:3"), 0) == 5);
}

TEST_CASE("command line: horovodrun spellings, program argv untouched") {
  Invocation inv = parse_command_line({"ringrun", "-np", "4", "-H", "a:2,b:2", "-x", "A=1", "--env", "B",
                                       "python", "train.py", "-np", "9", "--lr=3", "a b"});
  CHECK(inv.launch.num_proc == 4);
  CHECK(inv.hosts == "a:2,b:2");
  CHECK(inv.launch.env_args == std::vector<std::string>{"A=1", "B"});
  CHECK(inv.launch.program == std::vector<std::string>{"python", "train.py", "-np", "9", "--lr=3", "a b"});

  inv = parse_command_line({"ringrun", "--dry-run", "--json", "--", "-weird", "$(x);"});
  CHECK(inv.dry_run);
  CHECK(inv.json);
  CHECK(inv.launch.program == std::vector<std::string>{"-weird", "$(x);"});

  // Flags take no value, so the -np after them is still ringrun's.
  inv = parse_command_line({"ringrun", "--dry-run", "--verbose", "-np", "5", "--", "prog", "-np", "2"});
  CHECK(inv.launch.num_proc == 5);
  CHECK(inv.launch.program == std::vector<std::string>{"prog", "-np", "2"});
  inv = parse_command_line({"ringrun", "topo", "--topology", "x.xml", "-np", "4", "--json"});
  CHECK(inv.command == Command::topo);
  CHECK(inv.launch.num_proc == 4);
  CHECK(inv.json);

  inv = parse_command_line({"ringrun", "-hostfile", "hf", "--launcher", "mpirun", "--bind", "none", "true"});
  CHECK(inv.hostfile == "hf");
  CHECK(inv.launch.launcher == LauncherKind::mpirun);
  CHECK_FALSE(inv.launch.node.bind);
}

TEST_CASE("command line: horovodrun's own options map onto ringrun's, change nothing, or are refused") {
  Invocation inv = parse_command_line({"ringrun", "-np", "2", "--disable-cache", "--no-stall-check",
                                       "--gloo-timeout-seconds", "45", "--network-interfaces", "ib0", "--mpi",
                                       "--no-timeline-mark-cycles", "python", "train.py", "--disable-cache"});
  CHECK(inv.launch.cache_capacity == 0);
  CHECK(inv.launch.stall_check_warning_s == 0.0);
  CHECK(inv.launch.start_timeout_s == 45.0);
  CHECK(inv.launch.network_interface == "ib0");
  CHECK(inv.launch.launcher == LauncherKind::mpirun);
  CHECK_FALSE(inv.launch.timeline_mark_cycles);
  CHECK(inv.launch.program == std::vector<std::string>{"python", "train.py", "--disable-cache"});
  CHECK(inv.notes.empty());

  // -p/-i: the ssh mpirun reaches -H hosts with (OMPI_MCA_plm_rsh_args, set by the mpirun backend).
  inv = parse_command_line({"ringrun", "-p", "2222", "--ssh-identity-file", RINGRUN_SOURCE_DIR "/README.md", "true"});
  CHECK(inv.launch.ssh_args == std::vector<std::string>{"-p", "2222", "-i", RINGRUN_SOURCE_DIR "/README.md"});
  CHECK_FALSE(inv.supervisor.timestamp_output);
  CHECK(parse_command_line({"ringrun", "-prefix-timestamp", "true"}).supervisor.timestamp_output);

  // --mpi-args: split as sh splits a word, for every mpirun command line; its --oversubscribe is
  // ringrun's own (the plan needs it too).
  inv = parse_command_line({"ringrun", "--mpi-args=-x 'A=a b' --mca btl_tcp_if_include \"eth0\" --oversubscribe",
                            "true"});
  CHECK(inv.launch.mpirun_args == std::vector<std::string>{"-x", "A=a b", "--mca", "btl_tcp_if_include", "eth0"});
  CHECK(inv.launch.oversubscribe);
  inv = parse_command_line({"ringrun", "--mpi-args", "--mca btl self", "--mpi", "true"});
  CHECK(inv.launch.mpirun_args == std::vector<std::string>{"--mca", "btl", "self"});
  CHECK(inv.launch.launcher == LauncherKind::mpirun);

  // Taken as they are, each with a note for --verbose saying why nothing changes.
  inv = parse_command_line({"ringrun", "--gloo", "--hierarchical-allreduce", "--log-level", "DEBUG",
                            "--num-nccl-streams", "2", "--thread-affinity", "3", "--no-autotune", "true"});
  CHECK(inv.launch.launcher == LauncherKind::automatic);
  REQUIRE(inv.notes.size() == 6);
  CHECK(inv.notes[0].find("--gloo (horovodrun's) changes nothing here") != std::string::npos);
  CHECK(inv.launch.program == std::vector<std::string>{"true"});

  // Refused in one line with what to do instead; two spellings of one setting likewise.
  auto usage = [](std::vector<std::string> args) {
    return error_of([&args] { parse_command_line(args); });
  };
  CHECK(usage({"ringrun", "--autotune", "true"}) ==
        "--autotune : ringrun does not autotune; set --fusion-threshold-mb and --cycle-time-ms, or drop it");
  CHECK(usage({"ringrun", "--mpi-args", "--map-by=node", "true"}) ==
        "--mpi-args '--map-by=node' : ringrun sets --map-by=node on mpirun's command line itself; ringrun binds each "
        "rank to its GPU's cores: use --bind, --cpus-per-rank, --mem-bind");
  CHECK(usage({"ringrun", "--mpi-args", "-np 4", "true"}).ends_with("give -np to ringrun"));
  CHECK(usage({"ringrun", "--mpi-args", "--mca x 'y", "true"}) ==
        "--mpi-args '--mca x 'y' : a single quote is not closed; quote it as you would for sh");
  CHECK(usage({"ringrun", "--launcher", "srun", "--mpi-args", "-x A", "true"}).find("give --launcher mpirun") !=
        std::string::npos);
  CHECK(usage({"ringrun", "-p", "70000", "true"}) ==
        "-p/--ssh-port 70000 : the ssh port must be from 1 to 65535 (e.g. -p/--ssh-port 2222)");
  CHECK(usage({"ringrun", "-i", "/no/such/key", "true"}).starts_with("-i/--ssh-identity-file /no/such/key : no readable"));
  CHECK(usage({"ringrun", "-i", "/my keys/id", "true"}).find("white space") != std::string::npos);
  CHECK(usage({"ringrun", "--config-file", "c.yaml", "true"}).starts_with("--config-file c.yaml : "));
  CHECK(usage({"ringrun", "--disable-cache", "--cache-capacity", "8", "true"}) ==
        "--disable-cache and --cache-capacity set the same thing; give one of them");
  CHECK(usage({"ringrun", "--mpi", "--launcher", "local", "true"}) ==
        "--mpi and --launcher choose how the ranks start; give one of them");
  CHECK(usage({"ringrun", "--network-interfaces", "eth0,eth1", "true"}) ==
        "--network-interfaces eth0,eth1 : ringrun uses one interface; give one of them");
}

TEST_CASE("command line: bad usage is a UsageError naming the input") {
  CHECK_THROWS_AS(parse_command_line({"ringrun", "-np", "0", "true"}), UsageError);
  CHECK_THROWS_AS(parse_command_line({"ringrun", "-np", "x", "true"}), UsageError);
  CHECK_THROWS_AS(parse_command_line({"ringrun", "--launcher", "ssh", "true"}), UsageError);
  CHECK_THROWS_AS(parse_command_line({"ringrun", "-np", "2"}), UsageError);
  CHECK_THROWS_AS(parse_command_line({"ringrun", "-H", "a:1", "--hostfile", "f", "true"}), UsageError);
  CHECK(parse_command_line({"ringrun", "--help"}).command == Command::help);
}
