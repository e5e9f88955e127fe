"""The library's own collectives, which keep every tensor they pass to the
process group referenced from Python until the process ends.

Why: gloo runs a collective on a worker thread, which drops its reference
to the tensors when the collective is done, possibly after the caller has
returned. If Python has dropped its own reference by then, the worker
thread destroys the tensor and its Python object, which needs the GIL.
When the process group is destroyed meanwhile (DDP's reducer holds it, so
that happens when the model is freed as the script returns), the main
thread holds the GIL while it joins the worker threads: a deadlock, seen
as a replica that logged "training done" and never exited (torch 1.13,
ProcessGroupGloo::~ProcessGroupGloo joining a runLoop thread blocked in
PyEval_AcquireThread). Tensors kept here outlive the process group.
"""

import collections
import json

import torch
import torch.distributed as dist

# The tensors of the latest collectives (any of them may still be held by
# a worker thread; older ones are long released).
_KEPT = collections.deque(maxlen=64)


def _keep(*tensors):
    _KEPT.extend(tensors)


def all_reduce(t):
    """dist.all_reduce(t) (a sum, in place), t kept."""
    _keep(t)
    dist.all_reduce(t)


def broadcast(t, src=0):
    """dist.broadcast(t, src) in place, t kept."""
    _keep(t)
    dist.broadcast(t, src)


def all_gather_json(obj, world_size, device):
    """Every replica's obj (JSON-able), as a list by rank."""
    data = json.dumps(obj, sort_keys=True).encode()
    n = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    _keep(n, *sizes)
    dist.all_gather(sizes, n)
    width = max(int(s) for s in sizes)
    mine = torch.zeros(width, dtype=torch.uint8, device=device)
    if data:
        mine[:len(data)] = torch.frombuffer(bytearray(data),
                                            dtype=torch.uint8).to(device)
    every = [torch.zeros_like(mine) for _ in range(world_size)]
    _keep(mine, *every)
    dist.all_gather(every, mine)
    return [json.loads(bytes(e[:int(s)].cpu().tolist()).decode())
            for e, s in zip(every, sizes)]
