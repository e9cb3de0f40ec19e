"""``ringrun.run``: start a ringrun job from Python, call a function on every rank, and get back
what each returned, as Horovod's ``horovod.run`` (``horovod.runner.run``) does.

    import ringrun

    def train(lr):
        import ringrun.torch as hvd
        hvd.init()
        ...
        return hvd.rank(), loss

    results = ringrun.run(train, args=(0.1,), num_proc=4)   # [(0, ...), (1, ...), ...]

The function goes to the ranks pickled: with cloudpickle where it is installed (as in Horovod:
nested functions and lambdas too), else with pickle, which takes functions defined at the top
level of a module or of the script that calls run().
"""

import json
import os
import pickle
import secrets
import signal
import shutil
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

from ringrun.runner import options, protocol
from ringrun.runner.service import FunctionService

_RANK_MODULE = "ringrun.runner.run_task"
# After Ctrl-C: how long ringrun gets to stop its ranks (its own --grace-period is 10 s by
# default) before it is killed, which still takes its ranks with it (ringrun(1)).
_STOP_SECONDS = 30


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs ``func(*args, **kwargs)`` in every rank of a ringrun job and returns the list of their
    return values, indexed by rank. Horovod's ``horovod.run`` with the same arguments.

    The job is ``ringrun -np num_proc ... executable -m ringrun.runner.run_task``: each argument is
    the horovodrun option of its name (``hosts`` is ``-H``, ``min_num_proc`` ``--min-np``,
    ``host_discovery_script`` makes it elastic, ``use_mpi`` is ``--mpi``, ``ssh_port`` is ``-p``,
    ``mpi_args`` is ``--mpi-args``, ...), and a value ringrun refuses (``mpi_args="--bind-to core"``:
    ringrun binds the ranks itself) raises ValueError with ringrun's line before anything starts.
    ``executable``: the ranks' Python (default: this one). Inside a SLURM allocation the ranks run
    on its nodes, as ``ringrun`` does there.

    ``func`` and its arguments are pickled (cloudpickle where installed, else pickle: a function of
    the calling script or of a module; the script is then loaded on each rank as multiprocessing's
    spawn does, without its ``if __name__ == "__main__":`` block), and so is each return value.
    Every rank's output goes to this process's stdout and stderr, tagged as ringrun tags it.

    Raises RuntimeError when a rank fails: the first rank that raised and its exception, else
    ringrun's exit status (the line ringrun printed above names the rank). Ctrl-C stops the job
    and raises KeyboardInterrupt. In elastic mode the list has one entry per rank of the last
    world (Horovod returns the first ``min_num_proc``); a rank that did not return is None.
    ``np``, ``min_np``, ``max_np`` and ``network_interface`` are Horovod's deprecated spellings.
    """
    num_proc = _deprecated("np", np, "num_proc", num_proc)
    min_num_proc = _deprecated("min_np", min_np, "min_num_proc", min_num_proc)
    max_num_proc = _deprecated("max_np", max_np, "max_num_proc", max_num_proc)
    if network_interface:
        warnings.warn("ringrun.run: network_interface is deprecated, use network_interfaces", DeprecationWarning)
        network_interfaces = network_interface.split(",")
    argv = options.command_line(
        num_proc=num_proc, min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
        reset_limit=reset_limit, cooldown_range=cooldown_range, hosts=hosts, hostfile=hostfile,
        host_discovery_script=host_discovery_script, start_timeout=start_timeout, ssh_port=ssh_port,
        ssh_identity_file=ssh_identity_file, disable_cache=disable_cache, output_filename=output_filename,
        verbose=verbose, use_gloo=use_gloo, use_mpi=use_mpi, mpi_args=mpi_args,
        network_interfaces=network_interfaces)
    payload = _payload(func, tuple(args), dict(kwargs or {}))
    ringrun = _ringrun_executable()
    command = [executable or sys.executable, "-m", _RANK_MODULE]
    secret = secrets.token_bytes(32)
    env = dict(os.environ, **{protocol.SECRET_VARIABLE: secret.hex()})
    argv += ["-x", protocol.SECRET_VARIABLE]
    plan = _plan(ringrun, argv, command, env)
    elastic = any(o in argv for o in ("--min-np", "--max-np", "--host-discovery-script"))
    # Ranks reach this process where they reach ringrun's store: on loopback when all are local.
    service = FunctionService(payload, secret, "127.0.0.1" if plan.get("launcher") == "local" else "0.0.0.0")
    try:
        status = _run_job([ringrun, *argv, *command, str(service.port)], env)
    finally:
        service.close()
    return _results(service.snapshot(), status, elastic)


def _deprecated(old, old_value, new, new_value):
    if old_value is None:
        return new_value
    warnings.warn(f"ringrun.run: {old} is deprecated, use {new}", DeprecationWarning)
    return old_value


def _payload(func, args, kwargs):
    """The fetch answer: (main_path, main_name, sys_path, pickled (func, args, kwargs)). The
    driver's __main__ is named only where pickle refers to it (cloudpickle sends its functions
    whole)."""
    try:
        import cloudpickle
        dumps = cloudpickle.dumps
    except ImportError:
        cloudpickle = None

        def dumps(obj):
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        data = dumps((func, args, kwargs))
    except Exception as e:
        raise ValueError(f"ringrun.run: cannot pickle the function {getattr(func, '__qualname__', func)!r} "
                         f"or its arguments for the ranks ({e}): define the function at the top level of a "
                         "module or script, or pip install cloudpickle") from e
    main = sys.modules.get("__main__")
    main_path = main_name = None
    if cloudpickle is None and b"__main__" in data:
        spec = getattr(main, "__spec__", None)
        main_name = spec.name if spec is not None else None
        main_path = os.path.abspath(main.__file__) if getattr(main, "__file__", None) else None
        if main_name is None and main_path is None:
            raise ValueError(f"ringrun.run: {getattr(func, '__qualname__', func)!r} is defined in an interactive "
                             "session, which pickle cannot send to the ranks: pip install cloudpickle, or define "
                             "it in a module")
    return main_path, main_name, list(sys.path), data


def _ringrun_executable():
    """The ringrun command of this package's install: the package's own bin/ (pip), bin/ beside the
    build tree's python/ folder, or the environment's (venv, --user, prefix) bin/ four folders above
    site-packages/ringrun."""
    package = Path(__file__).resolve().parents[1]
    candidates = [package / "bin" / "ringrun", package.parents[1] / "bin" / "ringrun",
                  package.parents[3] / "bin" / "ringrun", Path(sysconfig.get_path("scripts")) / "ringrun"]
    for candidate in candidates:
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    found = shutil.which("ringrun")
    if found is None:
        raise RuntimeError(f"ringrun.run: no ringrun command beside this package ({package}) nor in PATH: "
                           "pip install ringrun into this environment, or put ringrun's bin/ in PATH")
    return found


def _plan(ringrun, argv, command, env):
    """ringrun's plan for the job (its --dry-run --json), or ValueError with ringrun's own line
    where it refuses an option: nothing is started then."""
    done = subprocess.run([ringrun, *argv, "--dry-run", "--json", *command, "0"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(lines[-1] if lines else f"ringrun.run: ringrun {' '.join(argv)} exited with {done.returncode}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {}


def _run_job(cmd, env):
    """Runs ringrun to its end; its exit status. ringrun runs in a process group of its own, so a
    Ctrl-C (at a terminal, or a notebook's interrupt, which signals this process alone) reaches it
    once, from here: a second SIGINT would make it SIGKILL the ranks without their grace period."""
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    proc = subprocess.Popen(cmd, env=env, **group)
    try:
        return proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def _results(outcomes, status, elastic):
    failed = [o for o in outcomes if o.error is not None]
    if status != 0:
        if failed:
            first = failed[0]
            raise RuntimeError(f"ringrun.run: rank {first.rank} raised {first.error} (its traceback is in its "
                               f"output above); ringrun exited with {status}")
        raise RuntimeError(f"ringrun.run: the job failed: ringrun exited with {status} "
                           "(its last line above names the rank and why)")
    returned = [o for o in outcomes if o.error is None]
    size = returned[-1].size if returned else 0
    values = {o.rank: o.value for o in returned if o.rank < size}
    missing = [r for r in range(size) if r not in values]
    if not returned or (missing and not elastic):
        which = f"ranks {missing} did not" if returned else "no rank"
        why = f" (rank {failed[0].rank}: {failed[0].error})" if failed else ""
        raise RuntimeError(f"ringrun.run: ringrun exited 0, but {which} returned a value{why}")
    return [pickle.loads(values[r]) if r in values else None for r in range(size)]
