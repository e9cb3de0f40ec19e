#!/bin/bash
# One line per rank with what ringrun gave it; the cluster tests parse these lines.
# FAIL_RANK=N: rank N exits 3 instead. SLEEP=S: sleep S seconds first (for scancel).
# SLEEP_OTHERS=S: every rank but FAIL_RANK sleeps S seconds first, so srun stops them itself.
if [[ -n ${SLEEP:-} ]]; then sleep "$SLEEP"; fi
if [[ -n ${SLEEP_OTHERS:-} && ${RINGRUN_RANK:-} != "${FAIL_RANK:-}" ]]; then sleep "$SLEEP_OTHERS"; fi
if [[ -n ${FAIL_RANK:-} && ${RINGRUN_RANK:-} == "$FAIL_RANK" ]]; then
  echo "rank $RINGRUN_RANK fails on purpose"
  exit 3
fi
echo "ENV host=$(hostname) rank=${RINGRUN_RANK-} size=${RINGRUN_SIZE-} local_rank=${RINGRUN_LOCAL_RANK-}" \
  "local_size=${RINGRUN_LOCAL_SIZE-} cross_rank=${RINGRUN_CROSS_RANK-} cross_size=${RINGRUN_CROSS_SIZE-}" \
  "hostname=${RINGRUN_HOSTNAME-} RANK=${RANK-} WORLD_SIZE=${WORLD_SIZE-} LOCAL_RANK=${LOCAL_RANK-}" \
  "LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE-} GROUP_RANK=${GROUP_RANK-} MASTER_ADDR=${MASTER_ADDR-}" \
  "MASTER_PORT=${MASTER_PORT-} cvd=${CUDA_VISIBLE_DEVICES-unset} step_gpus=${SLURM_STEP_GPUS-unset}" \
  "job_gpus=${SLURM_JOB_GPUS-unset} ifname=${RINGRUN_NETWORK_INTERFACE-unset} nccl_ifname=${NCCL_SOCKET_IFNAME-unset}" \
  "store=${RINGRUN_STORE_ADDR-} mpi_type=${SLURM_MPI_TYPE-unset} ompi_rank=${OMPI_COMM_WORLD_RANK-unset}" \
  "pmix_rank=${PMIX_RANK-unset}"
