#!/usr/bin/env python3
"""The house rules of the source tree, checked so that they stay true.

1. The launcher's folders form one order, lowest first (README, Architecture). Every
   `#include "..."` and `#include <ringrun/...>` in launcher/ names a header of the same folder,
   of a lower folder, of the ground, or of a component below the launcher (environment/, allocation/,
   topology/, runtime/store/, runtime/gpu/). Nothing includes a higher folder, so no arrow runs back up and no two folders
   form a circle.
2. The runtime's folders read one way: api -> engine -> comm -> transport | bootstrap -> core
   (README, Architecture). Every `#include "..."` under runtime/src names a header of a folder its
   own may use (RUNTIME_USES): core/ uses nothing above it, transport/ and bootstrap/ only core/.
3. No folder of product code holds more than MAX_SOURCE_FILES source files: a folder that grows
   past it splits by concern into sub-folders (as launcher/src and topology/src/native did).
4. Inside a launcher or runtime folder the rooms read one way too: a room is the files of one name
   (plan.hpp with plan.cpp, device_env.hpp with device_env.cpp; a public header belongs to the
   room of its name in the folder it faces), and no two rooms include each other, directly or
   round a circle. A public header that a lower room needs is split off as a room of its own
   (ringrun/invocation.hpp below ringrun/cli.hpp, ringrun/nccl_options.hpp below ringrun/plan.hpp).

Usage: layering.py SOURCE_DIR. Prints every breach, one line each, and exits 1 if there is any.
"""
import pathlib
import re
import sys

# The launcher's folders under launcher/src, lowest first. A folder may include its own headers
# and those of every folder before it in this list.
LAUNCHER_ORDER = [
    "common",      # the ground: running other programs (with <ringrun/process.hpp>)
    "plan",        # make_plan and the rank environment: pure, no I/O
    "facts",       # what the launch reads from the host and the cluster: probes and their caches
    "supervisor",  # starting processes, their output, signals and exit status
    "backend",     # a plan into processes: local, srun, mpirun
    "elastic",     # elastic mode: hosts, the coordinator's decisions, the job that carries them out
    "task",        # the task shim on each node under srun and mpirun
    "doctor",      # check-build and doctor
    "cli",         # the command line
    "launch",      # the hub: gathers the inputs, plans, hands the plan to a backend
]

# The launcher's public headers (launcher/include/ringrun), each the face of one folder.
LAUNCHER_FACES = {
    "process.hpp": "common",
    "plan.hpp": "plan",
    "nccl_options.hpp": "plan",
    "rank_environment.hpp": "plan",
    "supervisor.hpp": "supervisor",
    "task.hpp": "task",
    "cli.hpp": "cli",
    "invocation.hpp": "cli",
    "launch.hpp": "launch",
}

# The runtime's folders under runtime/src (a file's folder is its first path part) and the folders
# each may include from, its own among them.
RUNTIME_USES = {
    "core": {"core"},
    "bootstrap": {"core", "bootstrap"},
    "transport": {"core", "transport"},
    "comm": {"core", "bootstrap", "transport", "comm"},
    "engine": {"core", "comm", "engine"},
    "api": {"core", "bootstrap", "transport", "comm", "engine", "api"},
}

# The components below the launcher, whose public headers any launcher file may include.
COMPONENTS_BELOW = ["environment/include/ringrun", "allocation/include/ringrun", "topology/include/ringrun",
                    "runtime/store/ringrun", "runtime/gpu/ringrun"]

# Product code: the folders whose size is checked.
PRODUCT_ROOTS = ["environment", "launcher", "allocation", "topology", "runtime/src", "runtime/store", "runtime/gpu"]
MAX_SOURCE_FILES = 15
SOURCE_SUFFIXES = {".c", ".cpp", ".h", ".hpp"}
# Folders allowed more, at most the count given, each with the reason. Lower a count when a
# folder shrinks; never raise one.
LARGER_FOLDERS = {
    # The engine keeps one file per seam, as Horovod's common/ does (negotiation, response cache,
    # stall inspector, timeline, join, ...).
    "runtime/src/engine": 17,
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def folder_rank(folder):
    return LAUNCHER_ORDER.index(folder)


def launcher_folder_of(path, src):
    """The launcher folder a file under launcher/src or launcher/include/ringrun belongs to."""
    if path.parent.name == "ringrun" and path.parent.parent.name == "include":
        return LAUNCHER_FACES.get(path.name)
    relative = path.relative_to(src)
    return relative.parts[0] if len(relative.parts) > 1 else None


def check_includes(root):
    src = root / "launcher" / "src"
    public = root / "launcher" / "include" / "ringrun"
    below = {p.name for d in COMPONENTS_BELOW for p in (root / d).glob("*.hpp")}
    errors = []
    files = sorted(p for p in list(src.rglob("*")) + list(public.glob("*")) if p.suffix in SOURCE_SUFFIXES)
    for path in files:
        name = path.relative_to(root)
        folder = launcher_folder_of(path, src)
        if folder not in LAUNCHER_ORDER:
            errors.append(f"{name}: not in a folder of the launcher's order (layering.py LAUNCHER_ORDER, "
                          f"LAUNCHER_FACES): place it")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            bracket, target = match.groups()
            if bracket == "<" and not target.startswith("ringrun/"):
                continue  # the system's and the libraries' headers
            where = f"{name}:{number}: {line.strip()}"
            if bracket == "<":
                header = target.removeprefix("ringrun/")
                if (public / header).exists():
                    to = LAUNCHER_FACES.get(header)
                elif header in below:
                    continue
                else:
                    errors.append(f"{where}: not a header of the launcher or of a component below it "
                                  f"({', '.join(COMPONENTS_BELOW)})")
                    continue
            else:
                resolved = next((c for c in (path.parent / target, src / target) if c.exists()), None)
                if resolved is None or src not in resolved.resolve().parents:
                    errors.append(f"{where}: no such header in launcher/src")
                    continue
                to = launcher_folder_of(resolved.resolve(), src.resolve())
            if to not in LAUNCHER_ORDER:
                errors.append(f"{where}: the header is in no folder of the launcher's order")
            elif folder_rank(to) > folder_rank(folder):
                errors.append(f"{where}: {folder}/ includes {to}/, a higher folder (order, lowest first: "
                              f"{' < '.join(LAUNCHER_ORDER)})")
    return errors


def check_runtime_includes(root):
    src = root / "runtime" / "src"
    errors = []
    for path in sorted(p for p in src.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        relative = path.relative_to(src)
        folder = relative.parts[0] if len(relative.parts) > 1 else None
        name = path.relative_to(root)
        if folder not in RUNTIME_USES:
            errors.append(f"{name}: not in a folder of the runtime's layers (layering.py RUNTIME_USES): place it")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if not match or match.group(1) != '"':
                continue
            target = match.group(2)
            to = target.split("/")[0] if "/" in target else folder
            if not (src / target).exists() and not (path.parent / target).exists():
                continue  # a header of another component (the store's, the public ones)
            if to not in RUNTIME_USES[folder]:
                errors.append(f"{name}:{number}: {line.strip()}: {folder}/ may include only "
                              f"{', '.join(sorted(RUNTIME_USES[folder]))} (api -> engine -> comm -> transport | "
                              "bootstrap -> core)")
    return errors


def room_edges(root):
    """{folder: {room: {rooms it includes}}} for the launcher's and the runtime's folders."""
    launcher_src = root / "launcher" / "src"
    public = root / "launcher" / "include" / "ringrun"
    runtime_src = root / "runtime" / "src"
    edges = {}

    def place(path):
        """(folder key, room) of a file, or None when it is in no folder of either."""
        if path.parent == public:
            folder = LAUNCHER_FACES.get(path.name)
            return (f"launcher/src/{folder}", path.stem) if folder else None
        for src, prefix in ((launcher_src, "launcher/src"), (runtime_src, "runtime/src")):
            if src in path.parents:
                parts = path.relative_to(src).parts
                if len(parts) > 1:
                    return (f"{prefix}/{'/'.join(parts[:-1])}", path.stem)
        return None

    files = [p for d in (launcher_src, runtime_src) for p in d.rglob("*") if p.suffix in SOURCE_SUFFIXES]
    files += [p for p in public.glob("*") if p.suffix in SOURCE_SUFFIXES]
    for path in sorted(files):
        here = place(path)
        if here is None:
            continue
        for line in path.read_text().splitlines():
            match = INCLUDE.match(line)
            if not match:
                continue
            bracket, target = match.groups()
            candidates = [public / target.removeprefix("ringrun/")] if bracket == "<" else \
                [path.parent / target, launcher_src / target, runtime_src / target]
            resolved = next((c for c in candidates if c.exists()), None)
            there = place(resolved.resolve()) if resolved else None
            if there and there[0] == here[0] and there[1] != here[1]:
                edges.setdefault(here[0], {}).setdefault(here[1], set()).add(there[1])
    return edges


def check_room_circles(root):
    errors = []
    for folder, graph in sorted(room_edges(root).items()):
        state, stack = {}, []

        def visit(room):
            state[room] = "open"
            stack.append(room)
            for nxt in sorted(graph.get(room, ())):
                if state.get(nxt) == "open":
                    circle = stack[stack.index(nxt):] + [nxt]
                    errors.append(f"{folder}/: the rooms {' -> '.join(circle)} include each other: split the "
                                  "part the lower one needs into a room of its own")
                elif nxt not in state:
                    visit(nxt)
            stack.pop()
            state[room] = "done"

        for room in sorted(graph):
            if room not in state:
                visit(room)
    return errors


def check_folder_sizes(root):
    errors = []
    for product in PRODUCT_ROOTS:
        for folder in sorted([root / product] + [p for p in (root / product).rglob("*") if p.is_dir()]):
            count = sum(1 for p in folder.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES)
            name = folder.relative_to(root).as_posix()
            limit = LARGER_FOLDERS.get(name, MAX_SOURCE_FILES)
            if count > limit:
                errors.append(f"{name}: {count} source files, more than {limit}: split it by concern into folders")
    return errors


def main():
    if len(sys.argv) != 2:
        print("usage: layering.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    errors = check_includes(root) + check_runtime_includes(root) + check_room_circles(root) + check_folder_sizes(root)
    for error in errors:
        print(error)
    if not errors:
        print(f"layering: the launcher's {len(LAUNCHER_ORDER)} folders and the runtime's {len(RUNTIME_USES)} include "
              "only downwards, and so do the rooms inside each folder; "
              f"no product folder holds more than {MAX_SOURCE_FILES} source files")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
