#!/usr/bin/env bash
# Every bad input answers in one line naming it and the fix, with exit status 2 (ringrun(1), EXIT
# STATUS), and nothing starts: not the program, not mpirun, srun or ssh (stand-ins first in PATH
# record any start). `bad_input_table.sh BUILD_DIR`. Each row: the exact message, then the
# environment (NAME=VALUE words) and ringrun's arguments.
set -uo pipefail
ringrun=$1/bin/ringrun
work=$(mktemp -d /tmp/ringrun-bad-input.XXXXXX)
trap 'rm -rf "$work"' EXIT
topo=$(cd "$(dirname "$0")/../data/topology/invalid" && pwd)
mkdir -p "$work/bin"
for tool in mpirun srun ssh; do printf '#!/bin/sh\ntouch %s/started.%s\n' "$work" "$tool" >"$work/bin/$tool"; done
printf '#!/bin/sh\ntouch %s/started.program\n' "$work" >"$work/bin/prog"
chmod +x "$work"/bin/*
printf 'localhost slots=two\n' >"$work/hf_bad"
printf 'nosuch-c.invalid slots=2\nnosuch-d.invalid\n' >"$work/hf_remote"
failures=0 rows=0

row() { # EXPECTED [NAME=VALUE...] -- ARGS...
  local expected=$1; shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  rows=$((rows + 1))
  rm -f "$work"/started.*
  timeout 20 env -u SLURM_JOB_ID -u SLURM_JOBID PATH="$work/bin:$PATH" "${vars[@]}" "$ringrun" "$@" \
    >"$work/out" 2>"$work/err"
  local rc=$?
  local got; got=$(cat "$work/err")
  if [ $rc -ne 2 ] || [ "$got" != "ringrun: $expected" ] || [ -s "$work/out" ] || ls "$work"/started.* >/dev/null 2>&1; then
    echo "FAIL: ringrun $*"
    echo "  exit $rc (want 2); started: $(ls "$work" | grep started | tr '\n' ' ')"
    echo "  got:  $got"
    echo "  want: ringrun: $expected"
    failures=$((failures + 1))
  fi
}
E='e.g.'
# Numbers: no machine limits, no "Could not convert".
row "-np 0 : the number of ranks must be at least 1 ($E -np 4)" -- -np 0 prog
row "-np 'x' : the number of ranks must be a whole number, at least 1 ($E -np 4)" -- -np x prog
row "-np 99999999999 : too large; the number of ranks must be at least 1 ($E -np 4)" -- -np 99999999999 prog
row "-np needs a value after it (see ringrun --help)" -- -np
row "--cpus-per-rank 0 : the cores per rank must be at least 1 ($E --cpus-per-rank 4)" -- --cpus-per-rank 0 prog
row "--cpus-per-rank '1.5' : the cores per rank must be a whole number, at least 1 ($E --cpus-per-rank 4)" -- --cpus-per-rank 1.5 prog
row "--gpus-per-rank 2 : the GPUs per rank (0: CPU-only ranks) must be from 0 to 1 ($E --gpus-per-rank 1)" -- --gpus-per-rank 2 prog
row "--grace-period -1 : the grace period in seconds must be at least 0 ($E --grace-period 10)" -- --grace-period -1 prog
row "--start-timeout 0 : the timeout must be above 0 and at most 86400 ($E --start-timeout 60)" -- --start-timeout 0 prog
row "--start-timeout 'x' : the timeout must be a number, above 0 and at most 86400 ($E --start-timeout 60)" -- --start-timeout x prog
row "--start-timeout 100000 : the timeout must be above 0 and at most 86400 ($E --start-timeout 60)" -- --start-timeout 100000 prog
row "--fusion-threshold-mb -1 : the fusion buffer size in MiB must be at least 0 and at most 1048576 ($E --fusion-threshold-mb 128)" -- --fusion-threshold-mb -1 prog
row "--cycle-time-ms 'nan' : the cycle time in ms must be a number, at least 0 and at most 60000 ($E --cycle-time-ms 1)" -- --cycle-time-ms nan prog
row "--cache-capacity 9999999 : the response-cache entries must be from 0 to 1048576 ($E --cache-capacity 1024)" -- --cache-capacity 9999999 prog
row "--stall-check-warning-time-seconds -1 : the stall warning time must be at least 0 and at most 16777216 ($E --stall-check-warning-time-seconds 60)" -- --stall-check-warning-time-seconds -1 prog
row "--stall-check-shutdown-time-seconds 'x' : the stall shutdown time must be a number, at least 0 and at most 16777216 ($E --stall-check-shutdown-time-seconds 600)" -- --stall-check-shutdown-time-seconds x prog
row "--nodes 0 : the nodes of the job must be at least 1 ($E --nodes 2)" -- template single-node --nodes 0
# Choices and options.
row "--launcher 'ssh' : not a choice; give auto, pod, srun, local or mpirun" -- --launcher ssh prog
row "--srun-mpi 'foo' : not a choice; give auto, pmix or none" -- --srun-mpi foo prog
row "--bind 'numa' : not a choice; give cores (the cores local to the rank's GPU) or none" -- --bind numa prog
row "--mem-bind 'far' : not a choice; give none or local (the NUMA nodes of the rank's cores)" -- --mem-bind far prog
row "unknown option '--bogus-flag' (see ringrun --help); a program whose name starts with '-' goes after --" -- --bogus-flag prog
row "--nccl-proto 'X' : 'X' is not a name NCCL accepts; use a comma list of LL, LL128, Simple (optionally after ^ to exclude)" -- --nccl-proto X prog
row "--nccl-ib-gid-index 'x' : give auto (the RoCE v2 IPv4 GID found in sysfs) or an index 0, 1, ..." -- --nccl-ib-gid-index x prog
# -x
row "-x '=foo' : '' is not a variable name (write -x NAME or -x NAME=VALUE)" -- -x =foo prog
row "-x '1A=2' : '1A' is not a variable name (write -x NAME or -x NAME=VALUE)" -- -x 1A=2 prog
row "-x RINGRUN_TEST_UNSET_VAR : RINGRUN_TEST_UNSET_VAR is not set in ringrun's environment; give a value with -x RINGRUN_TEST_UNSET_VAR=VALUE" -- -x RINGRUN_TEST_UNSET_VAR prog
row "-x needs a value after it (see ringrun --help)" -- -np 1 -x
# Hosts and hostfiles; names that do not resolve are all named before any start.
row "-H '' : no hosts given (write host:slots,..., $E -H n1:4,n2:4)" -- -H '' prog
row "-H 'a:0' : slots '0' of host 'a' at column 3 is not a positive number (write host:slots, $E n1:4)" -- -H a:0 prog
row "-H 'a:1,,b' : empty host entry at column 5 (write host:slots,..., $E -H n1:4,n2:4)" -- -H a:1,,b prog
row "-np 3 : more ranks than the 2 slots of -H; lower -np, add slots or pass --oversubscribe" -- -np 3 -H localhost:2 prog
row "-H, --hostfile and --jobid name the hosts each; give one of them" -- -H a:1 --hostfile "$work/hf_bad" prog
row "-H 'nosuch-a.invalid:1,nosuch-b.invalid' : hosts 'nosuch-a.invalid', 'nosuch-b.invalid' do not resolve; fix the names, or add them to /etc/hosts or ~/.ssh/config" -- -np 2 -H nosuch-a.invalid:1,nosuch-b.invalid -- prog
row "-H 'localhost:1,nosuch-e.invalid:1' : host 'nosuch-e.invalid' does not resolve; fix the name, or add it to /etc/hosts or ~/.ssh/config" -- -np 2 -H localhost:1,nosuch-e.invalid:1 prog
row "--hostfile '$work/hf_remote' : hosts 'nosuch-c.invalid', 'nosuch-d.invalid' do not resolve; fix the names, or add them to /etc/hosts or ~/.ssh/config" -- --hostfile "$work/hf_remote" prog
row "hostfile '$work/hf_bad' line 1: 'slots=two' is not a positive slot count (write 'host slots=N')" -- --hostfile "$work/hf_bad" prog
row "--hostfile '$work/none' : cannot read it: No such file or directory" -- --hostfile "$work/none" prog
row "--jobid 'abc' : expected a numeric job id like 1234" -- --jobid abc prog
# Elastic mode (ringrun(1), Elastic mode): horovodrun's options, checked together.
row "--min-np 0 : the fewest ranks must be at least 1 ($E --min-np 2)" -- --min-np 0 prog
row "--max-np 2 : below --min-np 3; give --max-np at least 3" -- --min-np 3 --max-np 2 prog
row "-np 5 : outside --min-np 2 to --max-np 4; give -np from 2 to 4" -- -np 5 --min-np 2 --max-np 4 prog
row "-np 1 : below --min-np 2; give -np at least 2 or lower --min-np" -- -np 1 --min-np 2 prog
row "-np 9 : above --max-np 8; give -np at most 8 or raise --max-np" -- -np 9 --max-np 8 prog
row "--blacklist-cooldown-range 5 2 : MIN must not be above MAX ($E --blacklist-cooldown-range 10 300)" -- --min-np 1 --blacklist-cooldown-range 5 2 prog
row "--blacklist-cooldown-range 'x' '5' : MIN and MAX must be whole seconds ($E --blacklist-cooldown-range 10 300)" -- --min-np 1 --blacklist-cooldown-range x 5 prog
row "--elastic-timeout 0 : the timeout must be above 0 and at most 604800 ($E --elastic-timeout 600)" -- --min-np 1 --elastic-timeout 0 prog
row "--reset-limit -1 : the number of resets must be at least 0 ($E --reset-limit 3)" -- --min-np 1 --reset-limit -1 prog
row "--reset-limit applies in elastic mode only; add --min-np N (or --max-np N) to make the job elastic, or drop --reset-limit" -- --reset-limit 2 prog
row "elastic mode (--min-np/--max-np) runs on this host, inside a SLURM allocation (sbatch/salloc) by srun, or on -H/--hostfile or an MPIJob's hosts by mpirun, but this job would start its ranks with mpirun; use --launcher local, srun inside an allocation, or mpirun with -H" -- --min-np 1 --launcher mpirun prog
row "elastic mode (--min-np/--max-np) runs on this host, inside a SLURM allocation (sbatch/salloc) by srun, or on -H/--hostfile or an MPIJob's hosts by mpirun, but this job would start its ranks with srun; use --launcher local, srun inside an allocation, or mpirun with -H" -- --min-np 1 --launcher srun prog
row "--host-discovery-script 'echo localhost:2' : with an allocation elastic mode follows the job's own nodes (squeue); leave the script out, or run with --launcher local (this host) or mpirun (the script's hosts)" SLURM_JOB_ID=5 SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=4 -- --min-np 1 --host-discovery-script 'echo localhost:2' prog
row "--host-discovery-script 'echo localhost:2' : with -H/--hostfile hosts elastic mode follows the hosts named at the start; leave the script or the hosts out" -- -H localhost:2 --min-np 1 --host-discovery-script 'echo localhost:2' prog
row "--slots-per-host 4 : applies to the hosts --host-discovery-script prints; give the script or drop --slots-per-host" -- --min-np 1 --slots-per-host 4 prog
row "--slots-per-host 0 : the slots per host must be at least 1 ($E --slots-per-host 4)" -- --host-discovery-script 'echo localhost' --slots-per-host 0 prog
row "--host-discovery-script '' : names no program; give a script that prints host[:slots] lines" -- --host-discovery-script '' prog
row "--host-discovery-script 'exit 3' : its first run exited with code 3; fix it to print host[:slots] lines and exit 0" -- --host-discovery-script 'exit 3' prog
row "--host-discovery-script 'echo n1.invalid:2' : host 'n1.invalid' does not resolve; fix the name, or add it to /etc/hosts or ~/.ssh/config" -- --host-discovery-script 'echo n1.invalid:2' prog
row "--host-discovery-script 'echo localhost' line 1 'localhost' : no slot count and no --slots-per-host (print localhost:SLOTS or pass --slots-per-host N)" -- --host-discovery-script 'echo localhost' prog
# SLURM variables.
slurm_fix="SLURM_* variables come from sbatch/salloc/srun: run there, or unset SLURM_JOB_ID to run without SLURM"
row "SLURM_JOB_NODELIST='n[1-' : '[' without ']' at column 2; $slurm_fix" SLURM_JOB_ID=5 'SLURM_JOB_NODELIST=n[1-' SLURM_TASKS_PER_NODE=4 -- prog
row "SLURM_TASKS_PER_NODE='x' : expected a count at column 1; $slurm_fix" SLURM_JOB_ID=5 'SLURM_JOB_NODELIST=n[1-2]' SLURM_TASKS_PER_NODE=x -- prog
row "SLURM_JOB_NODELIST='n[1-2]' names 2 hosts but SLURM_TASKS_PER_NODE='4(x3)' gives 3 counts; they must match; $slurm_fix" SLURM_JOB_ID=5 'SLURM_JOB_NODELIST=n[1-2]' 'SLURM_TASKS_PER_NODE=4(x3)' -- prog
row "SLURM_NTASKS='x' : expected a non-negative number; $slurm_fix" SLURM_JOB_ID=5 'SLURM_JOB_NODELIST=n[1-2]' 'SLURM_TASKS_PER_NODE=4(x2)' SLURM_NTASKS=x -- prog
row "SLURM_GPUS_PER_NODE='gpu:x' : expected a GPU count like 4 or gpu:4; $slurm_fix" SLURM_JOB_ID=5 SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=4 SLURM_GPUS_PER_NODE=gpu:x -- prog
row "SLURM_JOB_ID=5 is set but SLURM_JOB_NODELIST is not; run inside sbatch/salloc/srun or unset SLURM_JOB_ID" SLURM_JOB_ID=5 -- prog
# horovodrun's options ringrun refuses, and two spellings of one setting (ringrun(1), HOROVODRUN OPTIONS).
row "--autotune : ringrun does not autotune; set --fusion-threshold-mb and --cycle-time-ms, or drop it" -- -np 2 --autotune prog
row "-i/--ssh-identity-file /no/such/key : no readable file there; give the private key ssh uses for the -H hosts" -- -np 2 -H nosuch-a.invalid:1,nosuch-b.invalid:1 -i /no/such/key prog
# --mpi-args: what ringrun's own mpirun command line sets, a quote left open, no mpirun to take them.
row "--mpi-args '--bind-to core' : ringrun sets --bind-to on mpirun's command line itself; ringrun binds each rank to its GPU's cores: use --bind, --cpus-per-rank, --mem-bind" -- --mpi-args '--bind-to core' prog
row "--mpi-args '-H n1:2' : ringrun sets -H on mpirun's command line itself; give -H or --hostfile to ringrun" -- -np 2 --mpi-args '-H n1:2' prog
row "--mpi-args '-x \"A=1' : a double quote is not closed; quote it as you would for sh" -- --mpi-args '-x "A=1' prog
row "--mpi-args '-x A' : only mpirun takes them, and --launcher local starts the ranks without it; give --launcher mpirun or drop --mpi-args" -- --launcher local --mpi-args '-x A' prog
row "--mpi-args: this elastic job starts its processes without mpirun; give --launcher mpirun (one mpirun per process) or drop --mpi-args" -- -np 2 --min-np 1 --host-discovery-script 'echo localhost:2' --mpi-args '-x A' prog
row "--no-stall-check and --stall-check-warning-time-seconds set the same thing; give one of them" -- --no-stall-check --stall-check-warning-time-seconds 5 prog
row "--mpi and --gloo choose how the ranks start; give one of them" -- --mpi --gloo prog
# Topology files.
row "--topology '$work/none.xml': no such file; give an hwloc XML export (lstopo --of xml FILE)" -- --topology "$work/none.xml" prog
row "--topology '$topo/not-xml.xml': hwloc rejects it: no <topology> element, not an hwloc XML export; give 'lstopo --of xml' output" -- --topology "$topo/not-xml.xml" prog
row "--topology '$topo/nccl-topo-azure-ndv5.xml': hwloc rejects it: it is an NCCL topology file (NCCL_TOPO_FILE), not an hwloc export; give 'lstopo --of xml' output" -- --topology "$topo/nccl-topo-azure-ndv5.xml" prog
row "--topology '$topo/hwloc-3.0-version.xml': hwloc rejects it: hwloc XML version 3.0 is newer than this hwloc 2.x reads; export it with hwloc 2.x" -- --topology "$topo/hwloc-3.0-version.xml" prog

echo "$rows rows, $failures failed"
[ "$rows" -ge 30 ] || { echo "FAIL: fewer than 30 rows"; exit 1; }
[ $failures -eq 0 ]
