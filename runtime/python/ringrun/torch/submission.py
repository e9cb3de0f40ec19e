"""How a torch tensor becomes an op of ringrun's engine: checks, names, scaling, outputs.

Every collective of ``ringrun.torch`` submits through ``submit`` and finishes through the pending
handles of ``basics``. Op names are Horovod's: the collective's name, a dot, then the user's name
(``allreduce.grad.fc1``), or ``<collective>.noname.<n>`` numbered in call order on each rank.
"""

import itertools

import torch

from ringrun import _ringrun
from ringrun.torch import basics
from ringrun.torch.basics import _check_tensor, _set_id

_KIND_NAMES = _ringrun.COLLECTIVE_NAMES  # from ringrun.h's one list of collectives
_counters = {}


def op_name(kind, name):
    """The engine's name of an async op: Horovod's ``<collective>.<name>`` or an automatic one."""
    prefix = _KIND_NAMES[kind]
    if name is not None:
        return f"{prefix}.{name}"
    with basics._lock:
        counter = _counters.setdefault(kind, itertools.count())
        return f"{prefix}.noname.{next(counter)}"


def reset_names():
    """Restarts the automatic names (after an elastic reset every member starts again at 0)."""
    with basics._lock:
        _counters.clear()


def host_contiguous(tensor):
    """The tensor as the runtime reads it: contiguous (a copy when it is not)."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def submit(kind, what, tensor, recv=None, name=None, op=0, root=0, process_set=None, splits=None,
           variable=False, automatic_name=False):
    """Queues one op on the engine; returns (C handle, Output or None).

    ``tensor`` must be contiguous already (its memory is read while the op runs); ``recv`` is the
    output tensor where the runtime writes in place. ``automatic_name``: let the runtime name the
    op from the rotation of the synchronous calls (for an op waited for at once)."""
    code = _check_tensor(tensor, what)
    set_id = _set_id(process_set, what)
    engine_name = None if automatic_name else op_name(kind, name)
    return submit_checked(kind, engine_name, tensor, recv, code, op, root, set_id, splits, variable)


def submit_checked(kind, engine_name, tensor, recv, code, op, root, set_id, splits=None, variable=False):
    """The runtime's submit of a tensor already checked: dtype code, set id and engine name given."""
    count = tensor.numel()
    send_ptr = tensor.data_ptr() if count else 0
    recv_ptr = recv.data_ptr() if recv is not None and recv.numel() else 0
    shape = list(tensor.shape) if tensor.dim() else [1]
    return _ringrun.submit(kind, engine_name, send_ptr, recv_ptr, count, code, op, root, shape,
                           splits, variable, set_id)


def output_tensor(output, dtype, row_shape, device):
    """The tensor the engine filled (a variable output), without a copy on the host."""
    rows = sum(output.rows)
    if output.nbytes == 0:
        return torch.empty((rows,) + tuple(row_shape), dtype=dtype, device=device)
    flat = torch.frombuffer(output, dtype=torch.uint8).view(dtype)
    result = flat.reshape((rows,) + tuple(row_shape))
    return result if device.type == "cpu" else result.to(device)


def scale(tensor, factor):
    """tensor *= factor, in place, as Horovod scales: integers in float64 and truncated back,
    float16/bfloat16 in float32."""
    if factor == 1.0:
        return tensor
    if tensor.dtype == torch.bool:
        raise ValueError(f"prescale/postscale factors cannot scale a bool tensor (factor {factor})")
    if not tensor.dtype.is_floating_point:
        tensor.copy_((tensor.double() * factor).to(tensor.dtype))
    elif tensor.dtype in (torch.float16, torch.bfloat16):
        tensor.copy_((tensor.float() * factor).to(tensor.dtype))
    else:
        tensor.mul_(factor)
    return tensor
