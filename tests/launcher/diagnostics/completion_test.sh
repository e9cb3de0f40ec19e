#!/bin/bash
# The bash completion offers every --option `ringrun --help` prints, the subcommands, and the
# values of --launcher and of doctor's options.
# Usage: completion_test.sh RINGRUN_BINARY COMPLETION_SCRIPT
set -u
ringrun=$1
source "$2"
status=0

complete_words() {  # complete_words WORD... : COMPREPLY for the last word
  COMP_WORDS=("$@")
  COMP_CWORD=$(($# - 1))
  COMPREPLY=()
  _ringrun
  printf '%s\n' "${COMPREPLY[@]}"
}
expect() {  # expect WANTED WORD...
  local wanted=$1
  shift
  if ! complete_words "$@" | grep -qx -- "$wanted"; then
    echo "FAIL: completing '$*' does not offer '$wanted' (got: $(complete_words "$@" | tr '\n' ' '))"
    status=1
  fi
}

for option in $("$ringrun" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
  expect "$option" ringrun "${option:0:4}"
done
expect doctor ringrun d
expect check-build ringrun ch
expect template ringrun t
expect srun ringrun --launcher s
expect --all-nodes ringrun doctor --a
expect --report ringrun doctor --r
expect multi-node-srun ringrun template multi

[ $status -eq 0 ] && echo "PASS: completion offers every option of ringrun --help and the subcommands"
exit $status
