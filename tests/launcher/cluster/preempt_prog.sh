#!/bin/bash
# The preemptible template's program in the cluster test: runs until SIGUSR1, then writes a
# checkpoint and exits 0; started again (after the requeue) it finds the checkpoint and resumes.
ck=$CHECKPOINT_DIR/rank-$RINGRUN_RANK
if [[ -f $ck ]]; then
  echo "resumed rank $RINGRUN_RANK from $(cat "$ck") restart ${SLURM_RESTART_COUNT:-0}"
  exit 0
fi
trap 'echo "epoch 1" >"$ck"; echo "checkpointed rank $RINGRUN_RANK"; exit 0' USR1
: >"$CHECKPOINT_DIR/started-$RINGRUN_RANK"
while true; do sleep 0.1; done
