"""Offline gradient-noise estimate of a language-model checkpoint, for the
Go test TestLMNoiseScaleAgreesWithOffline: the population is the training
windows of one epoch of train_lm.py (--epoch and --epoch-samples as the
run being compared used them), G their mean gradient, and tr(Sigma) from
many small random batches of them, as offline_noise.py does for digits:

    tr(Sigma) = b * (N - 1) / (N - b) * mean_j |g_j - G|^2

Prints one JSON object: grad_sqr = |G|^2, trace = tr(Sigma), noise_scale
= trace / grad_sqr (per window; M0 * grad_var / grad_sqr in report
terms).

    offline_noise_lm.py CHECKPOINT_DIR JOB_ID --epoch E --epoch-samples N
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train_lm  # noqa: E402
from pollux_worker import checkpoint  # noqa: E402


class AtEpoch:
    """What train_lm.Windows reads of a job: its epoch."""

    def __init__(self, epoch):
        self.epoch = epoch


def flat_grad(model, x, y, weight=1.0):
    model.zero_grad()
    (train_lm.lm_loss(model(x), y) * weight).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("job")
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--epoch-samples", type=int, required=True)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches", type=int, default=3000)
    args = p.parse_args()
    torch.set_num_threads(1)
    payload = checkpoint.load(args.dir, args.job)
    if payload is None:
        sys.exit("no checkpoint in %s" % args.dir)
    model = train_lm.Transformer(args.dim, args.heads, args.layers,
                                 args.context)
    model.load_state_dict(payload["model"])
    train, _ = train_lm.corpus()
    ds = train_lm.Windows(train, args.context, args.epoch_samples, args.seed,
                          AtEpoch(args.epoch))
    n, b = len(ds), args.batch
    pairs = [ds[i] for i in range(n)]
    x = torch.stack([a for a, _ in pairs])
    y = torch.stack([c for _, c in pairs])
    G = None
    for i in range(0, n, 64):
        g = flat_grad(model, x[i:i + 64], y[i:i + 64],
                      len(x[i:i + 64]) / n)
        G = g if G is None else G + g
    gen = torch.Generator()
    gen.manual_seed(12345)
    dev = 0.0
    for _ in range(args.batches):
        idx = torch.randperm(n, generator=gen)[:b]
        d = flat_grad(model, x[idx], y[idx]) - G
        dev += float(d.dot(d))
    trace = b * (n - 1) / (n - b) * dev / args.batches
    sqr = float(G.dot(G))
    print(json.dumps({"grad_sqr": sqr, "trace": trace,
                      "noise_scale": trace / sqr, "samples": n,
                      "batch": b, "batches": args.batches}))


if __name__ == "__main__":
    main()
