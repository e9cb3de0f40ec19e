#!/usr/bin/env bash
# Two "hosts" as two network namespaces joined by a veth pair (10.201.0.1 and 10.201.0.2/24, only
# inside the namespaces this script makes; names rrt-*), 4 ranks started by hand with the
# environment ringrun would give them (RINGRUN_RANK/SIZE/LOCAL_*/CROSS_*, a distinct
# RINGRUN_HOSTNAME per namespace, RINGRUN_STORE_ADDR at a store served on 10.201.0.1 in the first,
# RINGRUN_JOB_SECRET, RINGRUN_NETWORK_INTERFACE = the veth end). The ranks run twohost_rank, which
# checks the collectives across the hosts against the serial reference. Jobs, one after another:
#   2+2 ranks: hierarchical ("shm+tcp": shared memory within a host, TCP between), also with
#     RINGRUN_TCP_STREAMS=3; 3+1 ranks: uneven hosts, flat TCP ("tcp");
#   2+2 ranks, rank 2 passes another count: every rank reports the mismatch;
#   2+2 ranks, rank 2 crashes mid-allreduce: every other rank fails within 5 s naming it.
# Exit 77 (ctest skip) when not root or `ip netns` is unavailable; the namespaces go on any exit.
# Time: about 20 s (80 s under TSan); a hung rank is killed after 90 s and fails the script at
# once, which stays inside ctest's 180 s (a kill by ctest would leave the namespaces behind).
#   twohost_test.sh RANK_PROGRAM STORE_PROGRAM
set -uo pipefail
rank_program=${1:?usage: twohost_test.sh RANK_PROGRAM STORE_PROGRAM}
store_program=${2:?usage: twohost_test.sh RANK_PROGRAM STORE_PROGRAM}

if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root to create network namespaces (running as uid $(id -u))"
  exit 77
fi
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: 'ip netns' is unavailable (iproute2 missing or no network namespace support)"
  exit 77
fi

tag=$$
ns_a=rrt-a-$tag ns_b=rrt-b-$tag
veth_a=rrt-va$tag veth_b=rrt-vb$tag  # at most 15 characters
work=$(mktemp -d /tmp/rrt-twohost.XXXXXX)
pids=()
store_pid=

cleanup() {
  local rc=$?
  for pid in "${pids[@]}" $store_pid; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null  # deleting a namespace removes its veth end, and so the pair
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setup() {
  ip netns add "$ns_a" && ip netns add "$ns_b" &&
    ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" &&
    ip -n "$ns_a" addr add 10.201.0.1/24 dev "$veth_a" &&
    ip -n "$ns_b" addr add 10.201.0.2/24 dev "$veth_b" &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up
}
if ! setup; then
  echo "FAILED: could not create the namespaces $ns_a/$ns_b and the veth pair $veth_a/$veth_b"
  exit 1
fi
# The link is up when the first namespace reaches the second.
for _ in $(seq 50); do
  ip netns exec "$ns_a" ping -c1 -W1 10.201.0.2 >/dev/null 2>&1 && break
  sleep 0.1
done

secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export RINGRUN_JOB_SECRET=$secret  # inherited by the store and the ranks, never on a command line

# run_job NAME HOSTS MODE TRANSPORT [VAR=VALUE...]: one job, its ranks in block order on HOSTS
# (one letter per rank, a or b), each running twohost_rank in MODE (collectives, mismatch,
# death) and expecting TRANSPORT; a fresh store per job. Fails the script unless every rank
# exits as MODE expects (the crashing rank with 9, all others 0).
run_job() {
  local name=$1 hosts=$2 mode=$3 transport=$4
  shift 4
  local size=${#hosts} rank job_pids=() port
  echo "== $name: hosts $hosts, mode $mode, expecting transport $transport $*"
  rm -f "$work/store-in" "$work/store.port"
  mkfifo "$work/store-in"
  # The store, served on 10.201.0.1 inside the first namespace; it prints its port.
  ip netns exec "$ns_a" "$store_program" 10.201.0.1 <"$work/store-in" >"$work/store.port" 2>"$work/store.err" &
  store_pid=$!
  exec 3>"$work/store-in"  # the store serves until this closes
  for _ in $(seq 100); do [[ -s $work/store.port ]] && break; sleep 0.05; done
  port=$(head -1 "$work/store.port")
  if [[ -z $port ]]; then
    echo "FAILED: the store did not start: $(cat "$work/store.err")"
    exit 1
  fi
  for (( rank = 0; rank < size; ++rank )); do
    local host=${hosts:rank:1} ns dev local_rank=0 local_size=0 cross_rank=0 cross_size=0 i
    if [[ $host == a ]]; then ns=$ns_a dev=$veth_a; else ns=$ns_b dev=$veth_b; fi
    # Local rank = index among the ranks of the same host; cross = among those of the same local rank.
    local -A seen=()
    local local_of=()
    for (( i = 0; i < size; ++i )); do
      local h=${hosts:i:1}
      local_of[i]=${seen[$h]:-0}
      seen[$h]=$(( ${seen[$h]:-0} + 1 ))
    done
    local_rank=${local_of[rank]}
    local_size=${seen[$host]}
    for (( i = 0; i < size; ++i )); do
      if (( local_of[i] == local_rank )); then
        (( i < rank )) && cross_rank=$(( cross_rank + 1 ))
        cross_size=$(( cross_size + 1 ))
      fi
    done
    ip netns exec "$ns" env -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMIX_NAMESPACE \
      -u SLURM_PROCID -u PMI_RANK -u RINGRUN_DISABLE_SHM -u RINGRUN_TCP_STREAMS \
      RINGRUN_RANK=$rank RINGRUN_SIZE=$size RINGRUN_LOCAL_RANK=$local_rank RINGRUN_LOCAL_SIZE=$local_size \
      RINGRUN_CROSS_RANK=$cross_rank RINGRUN_CROSS_SIZE=$cross_size RINGRUN_HOSTNAME=rrt-host-$host \
      RINGRUN_STORE_ADDR=10.201.0.1:$port RINGRUN_NETWORK_INTERFACE=$dev RINGRUN_START_TIMEOUT=30 \
      TWOHOST_MODE=$mode TWOHOST_TRANSPORT=$transport "$@" \
      timeout 90 "$rank_program" >"$work/rank$rank.out" 2>&1 &
    job_pids+=($!)
    pids+=($!)
  done
  local failed=0 rc expected
  for (( rank = 0; rank < size; ++rank )); do
    wait "${job_pids[$rank]}"
    rc=$?
    sed "s/^/[$rank] /" "$work/rank$rank.out"
    expected=0
    [[ $mode == death && $rank == 2 ]] && expected=9
    if (( rc != expected )); then
      echo "rank $rank exited with $rc, expected $expected"
      failed=1
    fi
  done
  exec 3>&-
  wait "$store_pid" 2>/dev/null
  store_pid=
  pids=()
  if (( failed )); then
    echo "FAILED: $name"
    exit 1
  fi
  echo "ok: $name"
}

run_job "2 hosts x 2 ranks, hierarchical" aabb collectives shm+tcp
run_job "2 hosts x 2 ranks, hierarchical, 3 TCP streams per peer" aabb collectives shm+tcp RINGRUN_TCP_STREAMS=3
run_job "3 ranks + 1 rank: uneven hosts, flat TCP" aaab collectives tcp
run_job "2 hosts x 2 ranks, shared memory off: flat TCP" aabb collectives tcp RINGRUN_DISABLE_SHM=1
run_job "a count mismatch on one host is reported on both" aabb mismatch shm+tcp
run_job "a rank that crashes on one host fails every rank on both within 5 s" aabb death shm+tcp
echo "ok: every job across 2 hosts (network namespaces) agrees with the serial reference"
