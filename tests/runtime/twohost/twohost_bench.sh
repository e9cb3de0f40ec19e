#!/usr/bin/env bash
# Measures the collectives across two "hosts" (network namespaces joined by a veth pair, as in
# twohost_test.sh), 2 ranks on each, with ringrun-bench; not a ctest test (it only prints). One
# bench run per configuration given as environment assignments, e.g.
#   twohost_bench.sh BENCH STORE "RINGRUN_DISABLE_SHM=1" "RINGRUN_TCP_STREAMS=1" "RINGRUN_TCP_STREAMS=4"
# BENCH_ARGS (default "--peer none --min-bytes 1M --max-bytes 64M") is passed to every run.
# Root only; the namespaces and every process go on any exit.
set -uo pipefail
bench_program=${1:?usage: twohost_bench.sh BENCH_PROGRAM STORE_PROGRAM [CONFIG...]}
store_program=${2:?usage: twohost_bench.sh BENCH_PROGRAM STORE_PROGRAM [CONFIG...]}
shift 2
configs=("$@")
(( ${#configs[@]} )) || configs=("RINGRUN_TCP_STREAMS=1")
read -r -a bench_args <<<"${BENCH_ARGS:---peer none --min-bytes 1M --max-bytes 64M}"
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)"; exit 77; }

tag=$$
ns_a=rrb-a-$tag ns_b=rrb-b-$tag veth_a=rrb-va$tag veth_b=rrb-vb$tag
work=$(mktemp -d /tmp/rrb-twohost.XXXXXX)
pids=() store_pid=
cleanup() {
  local rc=$?
  for pid in "${pids[@]}" $store_pid; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns_a" && ip netns add "$ns_b" &&
  ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" &&
  ip -n "$ns_a" addr add 10.202.0.1/24 dev "$veth_a" && ip -n "$ns_b" addr add 10.202.0.2/24 dev "$veth_b" &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
  ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || { echo "namespace setup failed"; exit 1; }
for _ in $(seq 50); do ip netns exec "$ns_a" ping -c1 -W1 10.202.0.2 >/dev/null 2>&1 && break; sleep 0.1; done
export RINGRUN_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')

for config in "${configs[@]}"; do
  rm -f "$work/store-in" "$work/store.port"
  mkfifo "$work/store-in"
  ip netns exec "$ns_a" "$store_program" 10.202.0.1 <"$work/store-in" >"$work/store.port" 2>/dev/null &
  store_pid=$!
  exec 3>"$work/store-in"
  for _ in $(seq 100); do [[ -s $work/store.port ]] && break; sleep 0.05; done
  port=$(head -1 "$work/store.port")
  pids=()
  for rank in 0 1 2 3; do
    if (( rank < 2 )); then ns=$ns_a dev=$veth_a host=a; else ns=$ns_b dev=$veth_b host=b; fi
    # shellcheck disable=SC2086  # config is a list of assignments
    ip netns exec "$ns" env -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMIX_NAMESPACE \
      -u SLURM_PROCID -u PMI_RANK RINGRUN_RANK=$rank RINGRUN_SIZE=4 RINGRUN_HOSTNAME=rrb-host-$host \
      RINGRUN_STORE_ADDR=10.202.0.1:$port RINGRUN_NETWORK_INTERFACE=$dev RINGRUN_START_TIMEOUT=30 $config \
      timeout 600 "$bench_program" "${bench_args[@]}" >"$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  echo "== $config"
  cat "$work/rank0.out"
  exec 3>&-
  wait "$store_pid" 2>/dev/null
  store_pid=
done
