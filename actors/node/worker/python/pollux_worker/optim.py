"""The optimizer wrapper and the data-parallel model: accumulation,
gradient synchronisation, the gradient-noise estimate, the learning-rate
rule, mixed precision and progress.

Gradients are synchronised by torch's DistributedDataParallel (DDP):
bucketed all-reduces started during backward as buckets fill, overlapped
with the rest of backward. While accumulating, the model's forward clears
DDP's require_backward_grad_sync (what DDP's no_sync() does), so the
micro-batches' gradients add up locally in .grad and only the iteration's
last backward all-reduces them; zero_grad() acts only at an iteration
boundary. With one replica there is no DDP and no process group.

The noise estimate needs every micro-batch gradient's squared norm before
any averaging. A hook on every parameter sees its gradient as backward
produces it, before it is accumulated into .grad and before DDP's hooks
copy it into a bucket; the hooks sum the squared norms of one backward,
so the sum over an iteration is the sum of its micro-batch gradients'
squared norms. After the last backward, .grad holds the sum over
micro-steps of the replicas' average, so .grad / micro-steps is the mean
of all K (s + 1) micro-batch gradients. The summed squared norms and this
replica's stop flag go in one small all-reduce. The statistics are those
of the one-buffer implementation this replaced, exactly.

With mixed precision (CUDA only: torch.autocast and a GradScaler) the loss
is scaled before backward, so the hooks see gradients times the loss scale
s_amp: their squared norms are divided by s_amp^2, and the gradients are
unscaled (GradScaler.unscale_) before the mean is taken. A step whose
gradients overflow is skipped, and the scaler lowers its scale.

Timing: step_time is the wall time of the iteration's last micro-step,
from fetching its batch to the end of step(). sync_time is the part of it
spent waiting for the synchronisation after this replica's last local
gradient was produced (DDP's last buckets, the statistics all-reduce):
the part of communication that backward did not hide.

The step itself multiplies every parameter group's learning rate by the
rule's factor (scaling.py; AdaScale's gain r by default), calls the
wrapped optimizer, restores the learning rates and adds r to the job's
progress, counted in steps at M0. A step whose gradient is not finite is
skipped and logged as divergence; too many in a row end the worker with an
error.
"""

import logging
import math
import time

import torch
from torch.nn.parallel import DistributedDataParallel

from . import comm, scaling
from .noise import NoiseEstimator

LOG = logging.getLogger("pollux_worker")

# The checkpoint's "extra" entry holding the GradScaler's state.
SCALER_KEY = "pollux_worker.grad_scaler"


class ParallelModel(DistributedDataParallel):
    """DDP for one job's replicas: training forwards synchronise only at
    the iteration's last micro-batch of the job's loader."""

    def __init__(self, job, module, bucket_cap_mb=None):
        kw = {}
        if bucket_cap_mb is not None:
            kw["bucket_cap_mb"] = bucket_cap_mb
        if job.device.type == "cuda":
            kw["device_ids"] = [job.device.index]
        super().__init__(module, **kw)
        self._pw_job = job

    def forward(self, *args, **kwargs):
        job = self._pw_job
        if torch.is_grad_enabled() and self.training:
            # DDP reads the flag at the end of forward: no_sync's effect.
            self.require_backward_grad_sync = job._sync or job._micro_done
            job._opt._forwarded = True
        return super().forward(*args, **kwargs)


class AdaptiveOptimizer:
    """Wraps a torch.optim.Optimizer for one job (see the module doc).

    Use it as the optimizer: zero_grad(), then backward (or
    backward(loss) with mixed precision), then step() once per batch of
    the job's loader.
    """

    def __init__(self, job, model, optimizer, lr_scaling=None,
                 mixed_precision=False, max_bad_steps=20):
        self.job = job
        self.model = model
        self.optimizer = optimizer
        self.noise = NoiseEstimator()
        self.max_bad_steps = max_bad_steps
        if lr_scaling is None:
            lr_scaling = scaling.AdaScale()
        elif isinstance(lr_scaling, str):
            lr_scaling = scaling.rule(lr_scaling)
        if not isinstance(lr_scaling, scaling.ScalingRule):
            raise TypeError("pollux_worker: lr_scaling %r is not a rule" %
                            (lr_scaling,))
        self.rule = lr_scaling
        self._params = [p for g in optimizer.param_groups
                        for p in g["params"] if p.requires_grad]
        if not self._params:
            raise ValueError("pollux_worker: the optimizer has no trainable"
                             " parameters")
        dev = self._params[0].device
        self.scaler = None
        # Whether the loss is computed under autocast (job.autocast()).
        self.mixed_precision = False
        if mixed_precision:
            if dev.type == "cuda":
                self.scaler = torch.cuda.amp.GradScaler()
                self.mixed_precision = True
            else:
                LOG.warning("pollux_worker: mixed precision needs a CUDA "
                            "device; training on %s in float32", dev.type)
        # Sum of squared micro-batch gradient norms since the last step
        # (float64, on the device: no synchronisation per hook).
        self._sqr = torch.zeros((), dtype=torch.float64, device=dev)
        self._grad_t = None  # when the last local gradient was produced
        self._forwarded = False
        self._micro = 0
        self._bad = 0
        for p in self._params:
            p.register_hook(self._grad_hook)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        """Clears the gradients at an iteration boundary; a no-op while
        the iteration accumulates."""
        if self._micro == 0:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def backward(self, loss):
        """loss.backward(), with the loss scaled under mixed precision."""
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, sd):
        self.optimizer.load_state_dict(sd)

    def _grad_hook(self, grad):
        g = grad.detach().reshape(-1)
        self._sqr += torch.dot(g, g).double()
        self._grad_t = time.perf_counter()

    def _grads(self):
        return [p.grad for p in self._params if p.grad is not None]

    def _flat_grad(self):
        return torch.cat([
            (p.grad if p.grad is not None else torch.zeros_like(p))
            .detach().reshape(-1) for p in self._params])

    def step(self, closure=None):
        """One micro-step: accumulates, and at the end of an iteration
        takes the synchronised gradient's statistics and updates the
        parameters."""
        if closure is not None:
            raise ValueError("pollux_worker: step(closure) is not supported")
        job = self.job
        job._check_micro()
        k = job.env.world_size
        if k > 1 and not self._forwarded:
            job._fatal("the batch did not go through the model that "
                       "job.prepare() returned: the replicas' gradients "
                       "would not be synchronised")
        self._forwarded = False
        self._micro += 1
        if not job._sync:
            job._end_micro()
            return
        job._sync_clock()
        t0 = time.perf_counter()
        sync_time = 0.0
        stats = torch.stack([self._sqr,
                             torch.tensor(1.0 if job._stop_requested else 0.0,
                                          dtype=torch.float64,
                                          device=self._sqr.device)])
        if k > 1:
            comm.all_reduce(stats)
            job._sync_clock()
            # DDP's wait for its last buckets happened in backward, after
            # the last local gradient.
            t1 = time.perf_counter()
            sync_time = t1 - (self._grad_t if self._grad_t is not None
                              else t0)
        micro = self._micro
        count = k * micro
        m, m0 = job.env.atomic_bsz, job.env.init_bsz
        amp_scale = self.scaler.get_scale() if self.scaler else 1.0
        local = float(stats[0]) / count / (amp_scale * amp_scale)
        stop = float(stats[1]) > 0
        self._sqr.zero_()
        self._micro = 0
        self._grad_t = None
        grads = self._grads()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        total = 0.0
        for g in grads:
            if micro > 1:
                g.div_(micro)
            f = g.reshape(-1)
            total += float(torch.dot(f, f))
        scale = count * m / m0
        gain = None
        if not (math.isfinite(total) and math.isfinite(local)):
            self._bad += 1
            if self.scaler is not None:
                self.scaler.update()  # lowers the loss scale
                LOG.warning("pollux_worker: mixed precision: non-finite "
                            "gradient at loss scale %g: step skipped (%d in"
                            " a row)", amp_scale, self._bad)
            else:
                LOG.error("pollux_worker: training diverges: non-finite "
                          "gradient at epoch %d, progress %.1f: step "
                          "skipped, gradient statistics not updated (%d in "
                          "a row)", job.epoch, job.progress, self._bad)
            if self._bad >= self.max_bad_steps:
                job._fatal("training diverged: %d steps in a row had a "
                           "non-finite gradient" % self._bad)
        else:
            self._bad = 0
            if count > 1:
                self.noise.observe(local, total, count, m, m0)
            else:
                self.noise.observe_single(self._flat_grad(), m, m0)
            gain = self.noise.gain(scale)
            if gain is None:
                gain = min(job.env.gain, max(scale, 1.0))
            factor = self.rule.factor(scale, gain, job.progress)
            lrs = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * factor
            try:
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
            finally:
                for g, lr in zip(self.optimizer.param_groups, lrs):
                    g["lr"] = lr
        for p in self._params:
            p.grad = None
        job._end_iteration(micro=micro, gain=gain or 0.0, sync_time=sync_time,
                           stop=stop)
