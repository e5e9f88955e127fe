"""One replica of a small job for test_parallel.py: trains a tiny model a
few iterations with pollux_worker from its POLLUX_* environment and
writes what it saw as JSON to --out:

    observed    the noise estimator's inputs of every step
                (local, total, count, m, m0)
    lrs         the learning rate the wrapped optimizer ran each step with
    sync_times  the sync_time of every step
    params      the parameters at the end (flat)
    accumulated the Accumulator's job-wide values after synchronized()
    affinity    the cores the worker runs on, threads torch's thread count

    ddp_worker.py --out FILE [--iterations N] [--lr-scaling NAME]
                  [--unwrapped] [--fake-scaler S] [--mixed-precision]
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pollux_worker as pw  # noqa: E402

LR = 0.1
# The dataset's size, and the warmup of the LEGW rule in epochs.
SAMPLES = 64
WARMUP_EPOCHS = 2


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def tiny_data(n=SAMPLES):
    g = torch.Generator()
    g.manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    return TensorDataset(x, y)


class FakeScaler:
    """GradScaler's interface at a fixed loss scale, on any device: lets
    the CPU test check that the statistics are taken unscaled."""

    def __init__(self, scale):
        self.scale_ = float(scale)

    def scale(self, loss):
        return loss * self.scale_

    def get_scale(self):
        return self.scale_

    def unscale_(self, optimizer):
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.div_(self.scale_)

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass

    def state_dict(self):
        return {"scale": self.scale_}

    def load_state_dict(self, sd):
        self.scale_ = float(sd["scale"])


class RecordingSGD(torch.optim.SGD):
    """SGD that records the learning rate of every step."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.lrs = []

    def step(self, closure=None):
        self.lrs.append(self.param_groups[0]["lr"])
        return super().step(closure)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--lr-scaling", default="adascale")
    p.add_argument("--unwrapped", action="store_true")
    p.add_argument("--fake-scaler", type=float, default=0)
    p.add_argument("--mixed-precision", action="store_true")
    args = p.parse_args()
    job = pw.init(checkpoint_interval=1e9, report_every=1e9, timeout=60)
    data = tiny_data()
    rule = pw.scaling.rule(args.lr_scaling, warmup_epochs=WARMUP_EPOCHS,
                           data_size=len(data), init_bsz=job.env.init_bsz)
    raw = tiny_model().to(job.device)
    model, opt = job.prepare(raw, RecordingSGD(raw.parameters(), lr=LR,
                                               momentum=0.9),
                             lr_scaling=rule,
                             mixed_precision=args.mixed_precision)
    if args.fake_scaler:
        opt.scaler = FakeScaler(args.fake_scaler)
    observed, sync_times = [], []
    real_observe, real_single = opt.noise.observe, opt.noise.observe_single
    real_end = job._end_iteration

    def observe(local, total, count, m, m0):
        observed.append([local, total, count, m, m0])
        return real_observe(local, total, count, m, m0)

    def observe_single(grad, m, m0):
        g = grad.double()
        observed.append([None, float(g.dot(g)), 1, m, m0])
        return real_single(grad, m, m0)

    def end_iteration(**kw):
        sync_times.append(kw["sync_time"])
        return real_end(**kw)

    opt.noise.observe, opt.noise.observe_single = observe, observe_single
    job._end_iteration = end_iteration
    forward = raw if args.unwrapped else model
    acc = job.accumulator()
    it = 0
    for _ in job.epochs(100):
        for x, y in job.loader(data):
            opt.zero_grad()
            with job.autocast():
                loss = F.cross_entropy(forward(x.to(job.device)),
                                       y.to(job.device))
            opt.backward(loss)
            opt.step()
            acc["samples"] += len(y)
            acc["rank%d" % job.rank] += 1
            if job.iterations > it:
                it = job.iterations
            if it >= args.iterations and job._micro_done and \
                    opt._micro == 0:
                break
        if it >= args.iterations:
            break
    with acc.synchronized():
        accumulated = {k: acc[k] for k in acc.keys()}
    out = {"rank": job.rank, "observed": observed, "lrs": opt.optimizer.lrs,
           "sync_times": sync_times, "accumulated": accumulated,
           "affinity": sorted(os.sched_getaffinity(0)),
           "threads": torch.get_num_threads(),
           "params": torch.cat([q.detach().reshape(-1).cpu()
                                for q in raw.parameters()]).tolist()}
    with open(args.out, "w") as f:
        json.dump(out, f)
    job.finish()


if __name__ == "__main__":
    main()
