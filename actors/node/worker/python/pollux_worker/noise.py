"""The gradient-noise estimate: |G|^2 and the gradient variance at M0.

Each optimizer step averages `count` micro-batch gradients g_1..g_count of
b samples each (K replicas times s+1 accumulation micro-steps). With
local = mean_i |g_i|^2 and total = |mean_i g_i|^2,

    E[local] = |G|^2 + tr(Sigma) / b
    E[total] = |G|^2 + tr(Sigma) / (count * b)

where Sigma is the per-sample gradient covariance, so

    grad_sqr = (count * total - local) / (count - 1)        ~ |G|^2
    grad_var = (local - total) * count / (count - 1) * b / M0
                                                       ~ tr(Sigma) / M0,

the variance of a gradient over a batch of M0 samples, which is what
docs/worker-protocol.md calls grad_var and what optimizer/goodput's gain
formula expects. With a single micro-batch per step (one replica, no
accumulation) the previous step's gradient stands in for the second
sample (a slightly biased, differenced estimate, as in adaptdl).

Both are smoothed with an exponential moving average whose weight per step
is smoothing ** (count * b / M0), i.e. per M0 samples seen, with the usual
start-up bias correction; the average restarts when the estimator switches
from differenced to unbiased samples. Non-finite samples are refused
(returned False) and leave the averages untouched.
"""

import math

import torch


def _sample(local, total, count, b, m0):
    """One step's unsmoothed (|G|^2, tr(Sigma)/M0)."""
    sqr = (count * total - local) / (count - 1)
    var = (local - total) * count / (count - 1) * b / m0
    return sqr, var


def _finite_sample(local, total, count, b, m0):
    if not (math.isfinite(local) and math.isfinite(total)):
        return False
    return all(math.isfinite(v) for v in _sample(local, total, count, b, m0))


class NoiseEstimator:
    """Smoothed |G|^2 and tr(Sigma)/M0."""

    def __init__(self, smoothing=0.999):
        if not 0 < smoothing < 1:
            raise ValueError("smoothing %r outside (0, 1)" % smoothing)
        self.smoothing = smoothing
        self._avg = {}  # name -> [biased, unbias]
        self.biased = False  # the averages hold differenced samples
        self.samples = 0
        self._prev = None  # previous single gradient (not checkpointed)

    # -- estimates ---------------------------------------------------------

    def _value(self, name):
        a = self._avg.get(name)
        if a is None or a[1] == 0:
            return None
        return a[0] / a[1]

    @property
    def measured(self):
        return self._value("sqr") is not None

    @property
    def grad_sqr(self):
        """Smoothed |G|^2, clamped at 0; 0.0 before the first sample."""
        v = self._value("sqr")
        return 0.0 if v is None else max(v, 0.0)

    @property
    def grad_var(self):
        """Smoothed tr(Sigma)/M0, clamped at 0; 0.0 before the first."""
        v = self._value("var")
        return 0.0 if v is None else max(v, 0.0)

    def gain(self, scale):
        """AdaScale's gain r = (var + sqr) / (var / scale + sqr) for a batch
        of scale * M0 samples, in [1, scale]; None before any estimate."""
        if not self.measured:
            return None
        var, sqr = self.grad_var, self.grad_sqr
        denom = var / scale + sqr
        if not denom > 0:
            return scale if var > 0 else 1.0
        return min(max((var + sqr) / denom, 1.0), max(scale, 1.0))

    # -- samples -----------------------------------------------------------

    def observe(self, local_sqr, total_sqr, count, micro_bsz, init_bsz):
        """One step's statistics from count >= 2 micro-batch gradients:
        local_sqr the mean of their squared norms, total_sqr the squared
        norm of their mean. Returns False (and changes nothing) for a
        non-finite sample."""
        if count < 2:
            raise ValueError("observe needs count >= 2, got %d" % count)
        if not _finite_sample(local_sqr, total_sqr, count, micro_bsz,
                              init_bsz):
            return False
        if self.biased:
            self._avg.clear()
            self.biased = False
        self._prev = None
        self._update(local_sqr, total_sqr, count, micro_bsz, init_bsz)
        return True

    def observe_single(self, grad, micro_bsz, init_bsz):
        """One step's gradient (a flat tensor) when it is the only
        micro-batch: paired with the previous step's gradient. Returns
        False for a non-finite gradient."""
        g = grad.detach().to(torch.float64)
        sqr = float(g.dot(g))
        if not math.isfinite(sqr):
            self._prev = None
            return False
        if self._prev is not None:
            local = (sqr + float(self._prev.dot(self._prev))) / 2
            mean = (g + self._prev) / 2
            total = float(mean.dot(mean))
            if not _finite_sample(local, total, 2, micro_bsz, init_bsz):
                self._prev = None
                return False
        if not self.biased:
            self._avg.clear()
            self.biased = True
        prev, self._prev = self._prev, g.clone()
        if prev is None:
            return True
        self._update(local, total, 2, micro_bsz, init_bsz)
        return True

    def _update(self, local, total, count, b, m0):
        sqr, var = _sample(local, total, count, b, m0)
        theta = self.smoothing ** (count * b / m0)
        for name, v in (("sqr", sqr), ("var", var)):
            a = self._avg.setdefault(name, [0.0, 0.0])
            a[0] = theta * a[0] + (1 - theta) * v
            a[1] = theta * a[1] + (1 - theta)
        self.samples += 1

    # -- checkpoint --------------------------------------------------------

    def state_dict(self):
        return {"avg": {k: list(v) for k, v in self._avg.items()},
                "biased": self.biased, "samples": self.samples}

    def load_state_dict(self, sd):
        avg = sd["avg"]
        for k, v in avg.items():
            if k not in ("sqr", "var") or len(v) != 2 or \
                    not all(math.isfinite(float(x)) for x in v):
                raise ValueError("bad noise state %r" % (avg,))
        self._avg = {k: [float(v[0]), float(v[1])] for k, v in avg.items()}
        self.biased = bool(sd["biased"])
        self.samples = int(sd["samples"])
        self._prev = None
