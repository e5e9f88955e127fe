"""The optimizer wrapper: accumulation, gradient synchronisation, the
gradient-noise estimate, the AdaScale gain and progress.

Every micro-batch's gradient is moved out of the parameters' .grad into
one flat buffer (and its squared norm into the buffer's statistics slot),
so the user's zero_grad() is harmless and accumulation needs nothing from
the training loop. At the last micro-batch of an iteration the buffer,
with the summed squared norms and this replica's stop flag appended, is
averaged across replicas in ONE all-reduce; its wall time is the sync
time. Compute and communication are not overlapped (DDP would overlap
them bucket by bucket): the times measured are then exactly the compute
and synchronisation parts the throughput model fits.

The step itself multiplies every parameter group's learning rate by the
AdaScale gain r for the step's batch (the live estimate of noise.py once
there is one; POLLUX_GAIN before), calls the wrapped optimizer, restores
the learning rates and adds r to the job's progress, counted in steps at
M0. A step whose averaged gradient is not finite is skipped and logged as
divergence; too many in a row end the worker with an error.
"""

import logging
import math
import time

import torch
import torch.distributed as dist

from .noise import NoiseEstimator

LOG = logging.getLogger("pollux_worker")


class AdaptiveOptimizer:
    """Wraps a torch.optim.Optimizer for one job (see the module doc).

    Use it as the optimizer: zero_grad(), then backward, then step() once
    per batch of the job's loader.
    """

    def __init__(self, job, model, optimizer, max_bad_steps=20):
        self.job = job
        self.model = model
        self.optimizer = optimizer
        self.noise = NoiseEstimator()
        self.max_bad_steps = max_bad_steps
        self._params = [p for g in optimizer.param_groups
                        for p in g["params"] if p.requires_grad]
        if not self._params:
            raise ValueError("pollux_worker: the optimizer has no trainable"
                             " parameters")
        self._numel = sum(p.numel() for p in self._params)
        dev = self._params[0].device
        # [flat gradients..., sum of squared micro-batch norms, stop flag]
        self._buf = torch.zeros(self._numel + 2, dtype=torch.float32,
                                device=dev)
        self._micro = 0
        self._bad = 0

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, sd):
        self.optimizer.load_state_dict(sd)

    def _take_grad(self):
        """Adds this micro-batch's gradient to the buffer, clears .grad."""
        off = 0
        sqr = 0.0
        for p in self._params:
            n = p.numel()
            if p.grad is not None:
                g = p.grad.detach().reshape(-1)
                self._buf[off:off + n].add_(g)
                sqr += float(g.double().pow(2).sum())
                p.grad = None
            off += n
        self._buf[self._numel] += sqr
        self._micro += 1
        return sqr

    def _put_grad(self, flat):
        off = 0
        for p in self._params:
            n = p.numel()
            p.grad = flat[off:off + n].view_as(p).to(p.dtype).clone()
            off += n

    def step(self, closure=None):
        """One micro-step: accumulates, and at the end of an iteration
        synchronises and updates the parameters."""
        if closure is not None:
            raise ValueError("pollux_worker: step(closure) is not supported")
        job = self.job
        job._check_micro()
        self._take_grad()
        if not job._sync:
            job._end_micro()
            return
        k = job.env.world_size
        self._buf[self._numel + 1] = 1.0 if job._stop_requested else 0.0
        job._sync_clock()
        t0 = time.perf_counter()
        if k > 1:
            dist.all_reduce(self._buf)
            job._sync_clock()
        sync_time = time.perf_counter() - t0
        count = k * self._micro
        m, m0 = job.env.atomic_bsz, job.env.init_bsz
        flat = self._buf[:self._numel] / count
        local = float(self._buf[self._numel]) / count
        stop = float(self._buf[self._numel + 1]) > 0
        micro = self._micro
        self._buf.zero_()
        self._micro = 0
        flat64 = flat.double()
        total = float(flat64.dot(flat64))
        scale = count * m / m0
        gain = None
        if not (math.isfinite(total) and math.isfinite(local)):
            self._bad += 1
            LOG.error("pollux_worker: training diverges: non-finite gradient "
                      "at epoch %d, progress %.1f: step skipped, gradient "
                      "statistics not updated (%d in a row)",
                      job.epoch, job.progress, self._bad)
            if self._bad >= self.max_bad_steps:
                job._fatal("training diverged: %d steps in a row had a "
                           "non-finite gradient" % self._bad)
        else:
            self._bad = 0
            if count > 1:
                self.noise.observe(local, total, count, m, m0)
            else:
                self.noise.observe_single(flat, m, m0)
            gain = self.noise.gain(scale)
            if gain is None:
                gain = min(job.env.gain, max(scale, 1.0))
            self._put_grad(flat)
            lrs = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * gain
            try:
                self.optimizer.step()
            finally:
                for g, lr in zip(self.optimizer.param_groups, lrs):
                    g["lr"] = lr
            for p in self._params:
                p.grad = None
        job._end_iteration(micro=micro, gain=gain or 0.0, sync_time=sync_time,
                           stop=stop)
