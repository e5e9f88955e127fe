"""Metrics summed over a job's replicas, as adaptdl's Accumulator.

Each replica adds its share (say the summed loss and the sample count of
the part of a validation set it evaluated); synchronized() sums every
replica's additions in one all-reduce, and inside it every replica reads
the same job-wide values:

    acc = job.accumulator()
    acc["loss"] += loss_sum
    acc["n"] += n
    with acc.synchronized():
        val_loss = acc["loss"] / acc["n"]   # the same on every replica
        acc["loss"] = acc["n"] = 0          # every replica alike

Outside synchronized(), acc[key] is this replica's pending addition to
key (0 when none), so acc[key] += x adds x; inside, acc[key] is the
job-wide value (KeyError if there is none) and assignments and deletions
change the job-wide values, which every replica must then do alike.
synchronized() is a collective: every replica enters it, the same number
of times. state_dict() holds the job-wide values (the pending additions
of a replica are not in a checkpoint): job.track() an accumulator to keep
them across restarts.
"""

import contextlib
import math

import torch

from . import comm


class Accumulator:
    """Numbers summed over replicas (see the module doc)."""

    def __init__(self, world_size=1, device=None):
        self.world_size = world_size
        self.device = device or torch.device("cpu")
        self._values = {}
        self._pending = {}
        self._inside = False

    @staticmethod
    def _number(key, value):
        if not isinstance(key, str):
            raise TypeError("pollux_worker: accumulator keys are strings, "
                            "not %r" % (key,))
        v = float(value)
        if not math.isfinite(v):
            raise ValueError("pollux_worker: accumulator %s = %r, want a "
                             "finite number" % (key, v))
        return v

    def __getitem__(self, key):
        if self._inside:
            return self._values[key]
        return self._pending.get(key, 0.0)

    def __setitem__(self, key, value):
        v = self._number(key, value)
        (self._values if self._inside else self._pending)[key] = v

    def __delitem__(self, key):
        del (self._values if self._inside else self._pending)[key]

    def __contains__(self, key):
        return key in (self._values if self._inside else self._pending)

    def keys(self):
        return sorted(self._values if self._inside else self._pending)

    @contextlib.contextmanager
    def synchronized(self):
        """Sums every replica's pending additions into the job-wide
        values; inside, reads and writes see those."""
        if self._inside:
            raise RuntimeError("pollux_worker: synchronized() inside "
                               "synchronized()")
        keys = sorted(self._pending)
        if self.world_size > 1:
            every = comm.all_gather_json(keys, self.world_size, self.device)
            keys = sorted(set().union(*every))
            sums = torch.tensor([self._pending.get(k, 0.0) for k in keys],
                                dtype=torch.float64, device=self.device)
            if keys:
                comm.all_reduce(sums)
            added = sums.tolist()
        else:
            added = [self._pending[k] for k in keys]
        for k, v in zip(keys, added):
            self._values[k] = self._values.get(k, 0.0) + v
        self._pending = {}
        self._inside = True
        try:
            yield self
        finally:
            self._inside = False

    def state_dict(self):
        return {"values": dict(self._values)}

    def load_state_dict(self, sd):
        values = sd["values"]
        self._values = {k: self._number(k, v) for k, v in values.items()}
        self._pending = {}
