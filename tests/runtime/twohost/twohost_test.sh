#!/usr/bin/env bash
# Two "hosts" as two network namespaces joined by a veth pair (10.201.0.1 and 10.201.0.2/24, only
# inside the namespaces this script makes; names rrt-*), 2 ranks on each, started by hand with the
# environment ringrun would give them (RINGRUN_RANK/SIZE/LOCAL_*/CROSS_*, a distinct
# RINGRUN_HOSTNAME per namespace, RINGRUN_STORE_ADDR at a store served on 10.201.0.1 in the first,
# RINGRUN_JOB_SECRET, RINGRUN_NETWORK_INTERFACE = the veth end). The ranks run twohost_rank, which
# checks the collectives across the hosts (TCP between them) against the serial reference.
# Exit 77 (ctest skip) when not root or `ip netns` is unavailable; the namespaces go on any exit.
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

# The store, served on 10.201.0.1 inside the first namespace; it prints its port.
mkfifo "$work/store-in"
ip netns exec "$ns_a" "$store_program" 10.201.0.1 <"$work/store-in" >"$work/store.port" 2>"$work/store.err" &
store_pid=$!
exec 3>"$work/store-in"  # the store serves until this closes
for _ in $(seq 100); do [[ -s $work/store.port ]] && break; sleep 0.05; done
port=$(head -1 "$work/store.port")
if [[ -z $port ]]; then
  echo "FAILED: the store did not start: $(cat "$work/store.err")"
  exit 1
fi
echo "store at 10.201.0.1:$port in $ns_a; hosts $ns_a ($veth_a 10.201.0.1) and $ns_b ($veth_b 10.201.0.2)"

# Ranks in block order: 0, 1 on host a; 2, 3 on host b.
size=4
for rank in 0 1 2 3; do
  if (( rank < 2 )); then ns=$ns_a dev=$veth_a host=rrt-host-a cross=0; else ns=$ns_b dev=$veth_b host=rrt-host-b cross=1; fi
  local_rank=$(( rank % 2 ))
  ip netns exec "$ns" env -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMIX_NAMESPACE \
    -u SLURM_PROCID -u PMI_RANK \
    RINGRUN_RANK=$rank RINGRUN_SIZE=$size RINGRUN_LOCAL_RANK=$local_rank RINGRUN_LOCAL_SIZE=2 \
    RINGRUN_CROSS_RANK=$cross RINGRUN_CROSS_SIZE=2 RINGRUN_HOSTNAME=$host \
    RINGRUN_STORE_ADDR=10.201.0.1:$port RINGRUN_NETWORK_INTERFACE=$dev RINGRUN_START_TIMEOUT=30 \
    timeout 120 "$rank_program" >"$work/rank$rank.out" 2>&1 &
  pids+=($!)
done

failed=0
for rank in 0 1 2 3; do
  wait "${pids[$rank]}"
  rc=$?
  sed "s/^/[$rank] /" "$work/rank$rank.out"
  if (( rc != 0 )); then
    echo "rank $rank exited with $rc"
    failed=1
  fi
done
exec 3>&-
if (( failed )); then
  echo "FAILED: collectives across two network namespaces"
  exit 1
fi
echo "ok: 4 ranks on 2 hosts (network namespaces) agree with the serial reference"
