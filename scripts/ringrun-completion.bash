# Bash completion for ringrun(1): options, subcommands, and the values some options take.
# Installed as share/bash-completion/completions/ringrun; source it to try it by hand.

_ringrun() {
  local cur prev
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}

  local options="-h --help --version -np --num-proc -H --hosts --hostfile -hostfile --jobid --launcher -x --env
    --srun-mpi --output-filename --no-tag-output --network-interface --start-timeout --grace-period --oversubscribe
    --dry-run --json --topology -v --verbose --gpus-per-rank --bind --cpus-per-rank --fusion-threshold-mb
    --cycle-time-ms --timeline-filename --timeline-mark-cycles --cache-capacity --stall-check-warning-time-seconds
    --stall-check-shutdown-time-seconds --mem-bind --nccl-algo --nccl-proto --nccl-ib-gid-index --tcp
    --check-build -cb --min-np --max-np --host-discovery-script --slots-per-host --reset-limit
    --blacklist-cooldown-range --elastic-timeout --discovery-interval --min-num-proc --max-num-proc
    --disable-cache --no-stall-check --stall-check --no-timeline-mark-cycles --mpi --gloo --network-interfaces
    --gloo-timeout-seconds --log-level --hierarchical-allreduce --no-hierarchical-allreduce
    --hierarchical-allgather --no-hierarchical-allgather --torus-allreduce --no-torus-allreduce
    --mpi-threads-disable --no-mpi-threads-disable --no-autotune --log-with-timestamp --log-without-timestamp
    --log-hide-timestamp --no-log-hide-timestamp --num-nccl-streams --thread-affinity --autotune
    --autotune-log-file --autotune-warmup-samples --autotune-steps-per-sample --autotune-bayes-opt-max-samples
    --autotune-gaussian-process-noise --jsrun --config-file -p --ssh-port -i --ssh-identity-file --mpi-args
    --binding-args --prefix-output-with-timestamp -prefix-timestamp"
  local subcommands="check-build doctor topo template"

  # Once the program has started (a word that is neither an option nor an option's value), complete
  # its arguments as files and commands.
  local i word subcommand=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      check-build | doctor | topo | template) subcommand=$word; break ;;
      --) COMPREPLY=($(compgen -c -f -- "$cur")); return ;;
    esac
  done

  case $prev in
    # auto: srun in an allocation, mpirun for remote hosts and for MPI programs here, else local.
    --launcher) COMPREPLY=($(compgen -W "auto pod srun local mpirun" -- "$cur")); return ;;
    --srun-mpi) COMPREPLY=($(compgen -W "auto pmix none" -- "$cur")); return ;;
    --bind) COMPREPLY=($(compgen -W "cores none" -- "$cur")); return ;;
    --mem-bind) COMPREPLY=($(compgen -W "none local" -- "$cur")); return ;;
    --nccl-algo) COMPREPLY=($(compgen -W "Ring Tree CollnetDirect CollnetChain NVLS NVLSTree PAT" -- "$cur")); return ;;
    --nccl-proto) COMPREPLY=($(compgen -W "LL LL128 Simple" -- "$cur")); return ;;
    --nccl-ib-gid-index) COMPREPLY=($(compgen -W "auto" -- "$cur")); return ;;
    --gpus-per-rank) COMPREPLY=($(compgen -W "0 1" -- "$cur")); return ;;
    --network-interface | --network-interfaces)
      COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")); return ;;
    # horovodrun's log levels (ringrun takes the option as it is).
    --log-level) COMPREPLY=($(compgen -W "TRACE DEBUG INFO WARNING ERROR FATAL" -- "$cur")); return ;;
    --hostfile | -hostfile | --topology | --timeline-filename | --host-discovery-script | -i | --ssh-identity-file)
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --output-filename) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    # Numbers are checked by ringrun itself, which names the option and a good value when one is wrong.
    -np | --num-proc | -H | --hosts | --jobid | -x | --env | --start-timeout | --grace-period | --cpus-per-rank | \
      --fusion-threshold-mb | --cycle-time-ms | --cache-capacity | --stall-check-warning-time-seconds | \
      --stall-check-shutdown-time-seconds | --nodes | --gpus-per-node | --time | --min-np | --max-np | \
      --slots-per-host | --reset-limit | --blacklist-cooldown-range | --elastic-timeout | --discovery-interval | \
      --min-num-proc | --max-num-proc | \
      --gloo-timeout-seconds | --num-nccl-streams | --thread-affinity | --autotune-log-file | \
      --autotune-warmup-samples | --autotune-steps-per-sample | --autotune-bayes-opt-max-samples | \
      --autotune-gaussian-process-noise | --config-file | -p | --ssh-port | \
      --mpi-args | --binding-args)
      return ;;
  esac
  # --blacklist-cooldown-range takes two numbers: its MAX too.
  if ((COMP_CWORD >= 2)) && [[ ${COMP_WORDS[COMP_CWORD-2]} == --blacklist-cooldown-range ]]; then return; fi

  case $subcommand in
    doctor)
      COMPREPLY=($(compgen -W "--json --all-nodes --report --network-interface -h --help" -- "$cur")); return ;;
    template)
      COMPREPLY=($(compgen -W "single-node multi-node-srun multi-node-mpirun preemptible elastic --nodes --gpus-per-node
        --time" -- "$cur")); return ;;
    topo)
      COMPREPLY=($(compgen -W "--topology --json -np --num-proc --gpus-per-rank --bind --cpus-per-rank" -- "$cur"))
      return ;;
    check-build) return ;;
  esac

  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
  elif ((COMP_CWORD == 1)); then
    COMPREPLY=($(compgen -W "$subcommands" -c -- "$cur"))
  else
    COMPREPLY=($(compgen -c -f -- "$cur"))
  fi
}
complete -F _ringrun ringrun
