"""Offline gradient-noise estimate of a digits checkpoint, for the Go test
TestReportedNoiseScaleAgreesWithOffline: the true gradient G over the whole
training set, and tr(Sigma) from many small random batches:

    tr(Sigma) = b * (N - 1) / (N - b) * mean_j |g_j - G|^2

(b samples drawn without replacement from N per batch). Prints one JSON
object: grad_sqr = |G|^2, trace = tr(Sigma), noise_scale = trace /
grad_sqr (the per-sample noise scale, M0 * grad_var / grad_sqr in report
terms).

    offline_noise.py CHECKPOINT_DIR JOB_ID --model cnn [--batch 8]
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train_digits  # noqa: E402
from pollux_worker import checkpoint  # noqa: E402


def flat_grad(model, x, y):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("job")
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    payload = checkpoint.load(args.dir, args.job)
    if payload is None:
        sys.exit("no checkpoint in %s" % args.dir)
    model = train_digits.MODELS[args.model]()
    model.load_state_dict(payload["model"])
    (x, y), _ = train_digits.digits(args.seed)
    n, b = len(y), args.batch
    G = flat_grad(model, x, y)
    g = torch.Generator()
    g.manual_seed(12345)
    dev = 0.0
    for _ in range(args.batches):
        idx = torch.randperm(n, generator=g)[:b]
        d = flat_grad(model, x[idx], y[idx]) - G
        dev += float(d.dot(d))
    trace = b * (n - 1) / (n - b) * dev / args.batches
    sqr = float(G.dot(G))
    print(json.dumps({"grad_sqr": sqr, "trace": trace,
                      "noise_scale": trace / sqr, "samples": n,
                      "batch": b, "batches": args.batches}))


if __name__ == "__main__":
    main()
