#!/bin/sh
# Every --long option that `ringrun --help` prints is documented in man/ringrun.1 (in groff's
# escaped form, "\-\-name"), and groff reports no warnings for any page in man/.
# Usage: man_pages_test.sh RINGRUN_BINARY MAN_DIR
set -u
ringrun=$1
man_dir=$2
status=0

help_text=$("$ringrun" --help) || { echo "FAIL: '$ringrun --help' exited $?"; exit 1; }
options=$(printf '%s\n' "$help_text" | grep -oE -- '--[a-z][a-z-]*' | sort -u)
[ -n "$options" ] || { echo "FAIL: no --options found in '$ringrun --help'"; exit 1; }
for option in $options; do
  escaped=$(printf '%s' "$option" | sed 's/-/\\\\-/g')
  if ! grep -q -- "$escaped" "$man_dir/ringrun.1"; then
    echo "FAIL: option $option is printed by 'ringrun --help' but missing from $man_dir/ringrun.1; document it under OPTIONS"
    status=1
  fi
done

for page in "$man_dir"/*.1 "$man_dir"/*.3; do
  [ -e "$page" ] || continue
  warnings=$(groff -ww -man -z "$page" 2>&1)
  if [ -n "$warnings" ]; then
    echo "FAIL: groff -ww -man -z $page warns:"
    printf '%s\n' "$warnings"
    status=1
  fi
done

[ $status -eq 0 ] && echo "PASS: $(printf '%s\n' "$options" | wc -l) options documented; groff clean"
exit $status
