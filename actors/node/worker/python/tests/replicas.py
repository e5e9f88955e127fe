"""Runs ddp_worker.py as the replicas of one small job, and the reference
those runs are checked against, for the library's tests."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import ddp_worker  # noqa: E402
from pollux_worker import data  # noqa: E402


class Sink:
    """A report listener on 127.0.0.1 that reads and discards."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drain, args=(c,),
                             daemon=True).start()

    @staticmethod
    def _drain(c):
        with c:
            while c.recv(65536):
                pass

    def close(self):
        self.sock.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(replicas, m, s, m0, args=(), env=None, timeout=600):
    """Runs the replicas to completion (env: more variables). Returns
    (exit codes, outputs (parsed JSON or None per rank), stderr per
    rank)."""
    sink = Sink()
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="pw-replicas-")
    procs, outs = [], []
    try:
        for rank in range(replicas):
            out = os.path.join(tmp, "rank%d.json" % rank)
            penv = {k: v for k, v in os.environ.items()
                    if not k.startswith("POLLUX_")}
            penv.update(env or {})
            penv.update({
                "POLLUX_JOB_ID": "replicas", "POLLUX_INCARNATION": "1",
                "POLLUX_RANK": str(rank), "POLLUX_LOCAL_RANK": str(rank),
                "POLLUX_WORLD_SIZE": str(replicas), "POLLUX_NUM_NODES": "1",
                "POLLUX_MASTER_ADDR": "127.0.0.1",
                "POLLUX_MASTER_PORT": str(port),
                "POLLUX_INIT_BSZ": str(m0), "POLLUX_ATOMIC_BSZ": str(m),
                "POLLUX_ACCUM_STEPS": str(s), "POLLUX_GAIN": "1",
                "POLLUX_CHECKPOINT_DIR": os.path.join(tmp, "ck"),
                "POLLUX_REPORT_ADDR": sink.addr, "OMP_NUM_THREADS": "1",
                "PYTHONDONTWRITEBYTECODE": "1"})
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ddp_worker.py"),
                 "--out", out] + list(args),
                env=penv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            outs.append(out)
        errs = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            errs.append(err.decode(errors="replace"))
        results = []
        for out in outs:
            try:
                with open(out) as f:
                    results.append(json.load(f))
            except FileNotFoundError:
                results.append(None)
        return [p.returncode for p in procs], results, errs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sink.close()
        subprocess.run(["rm", "-rf", tmp], check=False)


def micro_batches(replicas, m, s, iteration, n=ddp_worker.SAMPLES):
    """The (x, y) micro-batches of every replica in one iteration of the
    job's first epoch: a list over micro-steps of lists over ranks."""
    ds = ddp_worker.tiny_data(n)
    order = data.epoch_order(len(ds), 0, 0)
    x, y = ds.tensors
    out = []
    for j in range(s + 1):
        step = []
        for r in range(replicas):
            local = data.local_indices(order, 0, r, replicas)
            k = iteration * (s + 1) + j
            idx = torch.tensor(local[k * m:(k + 1) * m])
            step.append((x[idx], y[idx]))
        out.append(step)
    return out


def grad_of(model, x, y):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors]).double()


def reference(replicas, m, s, m0, iterations, rule, noise):
    """What the job must compute, from every micro-batch gradient taken
    one by one: per step (local, total, count) and the learning rate, and
    the parameters at the end (flat). rule and noise (a fresh
    NoiseEstimator) give the learning-rate factor as the library does."""
    model = ddp_worker.tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=ddp_worker.LR, momentum=0.9)
    steps, progress = [], 0.0
    for it in range(iterations):
        grads = [grad_of(model, x, y)
                 for step in micro_batches(replicas, m, s, it)
                 for x, y in step]
        count = len(grads)
        flats = [flat(g) for g in grads]
        local = float(sum(float(f.dot(f)) for f in flats)) / count
        mean = sum(flats) / count
        total = float(mean.dot(mean))
        scale = count * m / m0
        if count > 1:
            noise.observe(local, total, count, m, m0)
        else:
            noise.observe_single(mean, m, m0)
        gain = noise.gain(scale)
        if gain is None:
            gain = min(1.0, max(scale, 1.0))
        factor = rule.factor(scale, gain, progress)
        progress += gain
        lr = ddp_worker.LR * factor
        for g in opt.param_groups:
            g["lr"] = lr
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / count
        opt.step()
        steps.append({"local": local, "total": total, "count": count,
                      "lr": lr})
    return steps, flat([p.detach() for p in model.parameters()])
