"""A rank of ``ringrun.run``: ``python -m ringrun.runner.run_task PORT``, started by ringrun.

Fetches the function from the driver, calls it, and hands back its return value (or the error it
raised, which it then raises again so the rank exits non-zero and ringrun stops the job).
"""

import os
import pickle
import runpy
import socket
import sys
import types

from ringrun.runner import protocol


def _request(address, secret, message):
    with socket.create_connection(address, timeout=60) as conn:
        protocol.prove_driver(conn, secret)
        conn.settimeout(None)
        protocol.send_message(conn, message)
        return protocol.recv_message(conn)


def _load_main(main_path, main_name):
    """The driver's __main__ module where the function's pickle refers to it (the driver names it
    then), loaded as multiprocessing's spawn start method loads it: as __mp_main__, so its
    `if __name__ == "__main__":` block does not run."""
    if main_name and main_name != "__main__":
        content = runpy.run_module(main_name, run_name="__mp_main__", alter_sys=True)
    elif main_path and os.path.exists(main_path):
        content = runpy.run_path(main_path, run_name="__mp_main__")
    else:
        return
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(content)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def _load(main_path, main_name, data):
    _load_main(main_path, main_name)
    try:
        return pickle.loads(data)
    except AttributeError as e:
        if "__mp_main__" not in str(e):
            raise
        # A function of the script that exists only when it runs as __main__.
        raise AttributeError(f"{e}: a function defined under the script's `if __name__ == "
                             "'__main__':` is not there when a rank loads the script; define it at the top level, "
                             "or pip install cloudpickle") from None


def _rank_and_size():
    """The rank and world size when the function returned: the runtime's if it is still up (an
    elastic job may have re-formed the world since start), else those ringrun started it with."""
    runtime = sys.modules.get("ringrun._ringrun")
    if runtime is not None and runtime.is_initialized():
        return runtime.rank(), runtime.size()
    from ringrun._ringrun import variables
    return variables.read(variables.RANK), variables.read(variables.SIZE)


def _dumps(value):
    try:
        import cloudpickle
        return cloudpickle.dumps(value)
    except ImportError:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def main(argv):
    if len(argv) != 2 or not argv[1].isdigit() or protocol.SECRET_VARIABLE not in os.environ:
        sys.exit("ringrun.runner.run_task: run by ringrun.run() in each rank, not by hand")
    # The secret is this process's only: the function and what it starts do not inherit it.
    secret = bytes.fromhex(os.environ.pop(protocol.SECRET_VARIABLE))
    from ringrun._ringrun import variables
    store = variables.read(variables.STORE_ADDR)
    if not store:
        sys.exit(f"ringrun.runner.run_task: {variables.STORE_ADDR} is not set: the driver is on ringrun's host, "
                 "which ringrun names there; start the job with ringrun.run()")
    host = store.rsplit(":", 1)[0]
    address = (host, int(argv[1]))
    main_path, main_name, sys_path, data = _request(address, secret, ("fetch",))
    sys.path.extend(p for p in sys_path if p not in sys.path and os.path.isdir(p))
    try:
        func, args, kwargs = _load(main_path, main_name, data)
        value = func(*args, **kwargs)
        try:
            value = _dumps(value)
        except Exception as e:
            raise TypeError(f"ringrun.run: the function's return value cannot be pickled: {e}") from e
    except BaseException as e:
        rank, size = _rank_and_size()
        error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        try:
            _request(address, secret, ("outcome", rank, size, None, error))
        except OSError:
            pass  # the driver is gone; this rank's exit status still says it failed
        raise
    rank, size = _rank_and_size()
    _request(address, secret, ("outcome", rank, size, value, None))


if __name__ == "__main__":
    main(sys.argv)
