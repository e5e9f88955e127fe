"""Learning-rate scaling rules: how the learning rate tuned for the initial
batch M0 grows with a step's batch M = S * M0.

Each rule gives the factor that multiplies every parameter group's
learning rate for one optimizer step, from S, the AdaScale gain r of the
step (noise.py; r in [1, S]) and the job's progress in steps at M0
before the step:

    adascale   r                       (the default; Pollux's rule)
    linear     S
    sqrt       sqrt(S)
    legw       sqrt(S) * min(1, (progress + r) / (warmup_epochs * S * N / M0))

LEGW (linear-epoch gradual warmup) warms up over warmup_epochs epochs of
N samples, stretched by S, then keeps sqrt(S). Whatever the rule, the
job's progress grows by r per step: it measures statistical progress, not
the learning rate (as in adaptdl).
"""

import math


class ScalingRule:
    """A learning-rate scaling rule (see the module doc)."""

    name = None

    def factor(self, scale, gain, progress):
        """The learning-rate factor of a step of scale * M0 samples with
        AdaScale gain `gain`, taken at `progress` steps at M0."""
        raise NotImplementedError

    def __repr__(self):
        return "%s()" % type(self).__name__


class AdaScale(ScalingRule):
    name = "adascale"

    def factor(self, scale, gain, progress):
        return gain


class LinearScale(ScalingRule):
    name = "linear"

    def factor(self, scale, gain, progress):
        return scale


class SqrtScale(ScalingRule):
    name = "sqrt"

    def factor(self, scale, gain, progress):
        return math.sqrt(scale)


class LEGWScale(ScalingRule):
    """LEGW: warmup_epochs epochs of data_size samples at M0, init_bsz the
    job's M0 (POLLUX_INIT_BSZ)."""

    name = "legw"

    def __init__(self, warmup_epochs, data_size, init_bsz):
        if not warmup_epochs > 0 or math.isinf(warmup_epochs):
            raise ValueError("pollux_worker: LEGW warmup_epochs %r, want > 0"
                             % (warmup_epochs,))
        if data_size < 1 or init_bsz < 1:
            raise ValueError("pollux_worker: LEGW data_size %r, init_bsz %r:"
                             " want >= 1" % (data_size, init_bsz))
        self.warmup_epochs = float(warmup_epochs)
        self.data_size = int(data_size)
        self.init_bsz = int(init_bsz)

    def factor(self, scale, gain, progress):
        warmup = self.warmup_epochs * scale * self.data_size / self.init_bsz
        return math.sqrt(scale) * min(1.0, (progress + gain) / warmup)

    def __repr__(self):
        return "LEGWScale(warmup_epochs=%g, data_size=%d, init_bsz=%d)" % (
            self.warmup_epochs, self.data_size, self.init_bsz)


RULES = {r.name: r for r in (AdaScale, LinearScale, SqrtScale, LEGWScale)}


def rule(name, warmup_epochs=None, data_size=None, init_bsz=None):
    """The rule called name ("adascale", "linear", "sqrt" or "legw"; LEGW
    needs warmup_epochs, data_size and init_bsz)."""
    cls = RULES.get(name)
    if cls is None:
        raise ValueError("pollux_worker: unknown learning-rate scaling %r "
                         "(want one of %s)" % (name, ", ".join(sorted(RULES))))
    if cls is LEGWScale:
        if warmup_epochs is None or data_size is None or init_bsz is None:
            raise ValueError("pollux_worker: legw needs warmup_epochs, "
                             "data_size and init_bsz")
        return LEGWScale(warmup_epochs, data_size, init_bsz)
    return cls()
