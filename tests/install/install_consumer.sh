#!/usr/bin/env bash
set -euo pipefail
build=$1
src=$2
python=${3:-/usr/bin/python3}  # the interpreter the build's binding is for
work=$(mktemp -d /tmp/ringrun-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL [install_consumer]: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for path in bin/ringrun lib/libringrun_runtime.so include/ringrun/ringrun.h include/ringrun/runtime.hpp \
            lib/cmake/ringrun/ringrunConfig.cmake lib/pkgconfig/ringrun.pc share/man/man1/ringrun.1 \
            share/man/man3/ringrun.3 share/bash-completion/completions/ringrun; do
  [ -e "$work/prefix/$path" ] || fail "$path is not installed"
done
mkdir "$work/consumer"
cp "$src/consumer.c" "$work/consumer/main.c"
cat >"$work/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(ringrun REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE ringrun::runtime)
CM
cmake -S "$work/consumer" -B "$work/consumer/b" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/cfg.log" 2>&1 ||
  { cat "$work/cfg.log"; fail "find_package(ringrun)"; }
cmake --build "$work/consumer/b" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build against ringrun::runtime"; }
out=$("$work/prefix/bin/ringrun" -np 3 --no-tag-output "$work/consumer/b/consumer" | sort)
[ "$out" = "$(printf 'rank 0 of 3: sum 6\nrank 1 of 3: sum 6\nrank 2 of 3: sum 6')" ] || fail "find_package consumer: $out"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs ringrun)
cc "$work/consumer/main.c" $flags -Wl,-rpath,"$work/prefix/lib" -o "$work/pc" || fail "pkg-config build: $flags"
out=$("$work/prefix/bin/ringrun" -np 2 --no-tag-output "$work/pc" | sort)
[ "$out" = "$(printf 'rank 0 of 2: sum 3\nrank 1 of 2: sum 3')" ] || fail "pkg-config consumer: $out"
# The Python package, where this build has it: installed beside the library, found by the
# installed ringrun on every rank's PYTHONPATH with nothing set.
if [ -f "$build/python/ringrun/__init__.py" ] && "$python" -c 'import torch' 2>/dev/null; then
  site=$work/prefix/lib/python3/dist-packages
  ls "$site"/ringrun/_ringrun*.so >/dev/null 2>&1 || fail "the Python module is not installed in $site/ringrun"
  out=$(cd "$work" && env -u PYTHONPATH "$work/prefix/bin/ringrun" -np 2 --no-tag-output "$python" -c \
    'import os, torch, ringrun.torch as hvd; hvd.init(); print(os.path.dirname(os.path.dirname(hvd.__file__)), float(hvd.allreduce(torch.ones(1), op=hvd.Sum)))' | sort -u)
  [ "$out" = "$site/ringrun 2.0" ] || fail "installed ringrun.torch: $out"
fi
echo "PASS [install_consumer]"
