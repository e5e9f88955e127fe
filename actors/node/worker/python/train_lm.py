"""A character-level language model of Python source: a small transformer
trained with pollux_worker on the Python standard library's own sources
(every machine with Python has them) until a target validation loss, as
one worker of a Pollux job (see docs/worker-library.md).

    /usr/bin/python3 train_lm.py --model transformer --target 1.8

The corpus is the interpreter's standard library (sysconfig's "stdlib"
directory): its .py files, without test suites and generated files, in
sorted order, split into training and validation BY FILE (a file is in
validation when the CRC-32 of its relative path is 0 modulo 10), so the
split is the same on every run and replica. Text is bytes (a vocabulary
of 256). A sample is a window of --context + 1 bytes; the training
windows are cut without overlap, shuffled once (by --seed), and an epoch
is the next --epoch-samples of them, so epochs see different text. The
validation loss (nats per byte) is the mean over --val-windows windows
spread evenly over the validation text, each replica evaluating its share
and the shares summed with the job's Accumulator.

The job's environment (docs/worker-protocol.md) says how many replicas,
which batch configuration and where to checkpoint and report.
"""

import argparse
import logging
import math
import os
import sysconfig
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import pollux_worker as pw

LOG = logging.getLogger("pollux_worker")

VOCAB = 256
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages",
             "__pycache__"}


def corpus_files(root=None):
    """The corpus's files: (relative path, is validation) of the standard
    library's .py files under root (default: this interpreter's), sorted,
    test suites and generated configuration left out."""
    root = root or sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in files:
            if not f.endswith(".py") or f.startswith("_sysconfigdata"):
                continue
            rel = os.path.relpath(os.path.join(d, f), root)
            out.append((rel, zlib.crc32(rel.encode()) % 10 == 0))
    return sorted(out)


def corpus(root=None):
    """(train, validation): uint8 tensors of the corpus's bytes, each file
    followed by a newline."""
    root = root or sysconfig.get_paths()["stdlib"]
    parts = {False: [], True: []}
    for rel, val in corpus_files(root):
        with open(os.path.join(root, rel), "rb") as f:
            parts[val].append(f.read() + b"\n")
    if not parts[False] or not parts[True]:
        raise SystemExit("train_lm: no Python sources under %s" % root)

    def tensor(chunks):
        return torch.frombuffer(bytearray(b"".join(chunks)),
                                dtype=torch.uint8)
    return tensor(parts[False]), tensor(parts[True])


class Windows(torch.utils.data.Dataset):
    """The training windows of the job's current epoch (see the module
    doc): item i is (x, y), context bytes and the same shifted by one."""

    def __init__(self, text, context, per_epoch, seed, job):
        self.text = text
        self.context = context
        total = (len(text) - 1) // context
        self.per_epoch = min(per_epoch, total)
        g = torch.Generator()
        g.manual_seed(seed)
        self.starts = torch.randperm(total, generator=g) * context
        self.job = job

    def __len__(self):
        return self.per_epoch

    def __getitem__(self, i):
        k = (self.job.epoch * self.per_epoch + i) % len(self.starts)
        s = int(self.starts[k])
        w = self.text[s:s + self.context + 1].long()
        return w[:-1], w[1:]


def validation_windows(text, context, count):
    """count windows of context + 1 bytes spread evenly over text: a
    (count, context + 1) int64 tensor."""
    last = len(text) - context - 1
    starts = torch.linspace(0, last, count).long()
    return torch.stack([text[s:s + context + 1].long() for s in starts])


class Block(nn.Module):
    """A pre-norm transformer block with causal self-attention. (It has
    no buffers: DDP would broadcast them before forwards.)"""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h) \
            .permute(2, 0, 3, 1, 4)
        mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(d // h) + mask
        y = (a.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Transformer(nn.Module):
    """A byte-level causal transformer language model."""

    def __init__(self, dim=128, heads=4, layers=2, context=64):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads)
                                      for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, x):
        h = self.emb(x) + self.pos[:x.shape[1]]
        return self.head(self.ln(self.blocks(h)))


MODELS = {"transformer": Transformer}


def lm_loss(logits, y, reduction="mean"):
    return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1),
                           reduction=reduction)


def validation_loss(model, windows, job, acc, batch=32):
    """The mean validation loss in nats per byte over windows, this
    replica evaluating windows[rank::K], summed over replicas with acc."""
    model.eval()
    mine = windows[job.rank::job.world_size].to(job.device)
    with torch.no_grad():
        for i in range(0, len(mine), batch):
            w = mine[i:i + batch]
            acc["loss"] += float(lm_loss(model(w[:, :-1]), w[:, 1:],
                                         reduction="sum"))
            acc["bytes"] += w[:, 1:].numel()
    model.train()
    with acc.synchronized():
        loss = acc["loss"] / acc["bytes"]
        acc["loss"] = acc["bytes"] = 0
    return loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--target", type=float, default=1.8,
                   help="validation loss (nats per byte) at which training "
                   "is complete")
    p.add_argument("--min-epochs", type=int, default=0,
                   help="epochs to train even once the target is reached")
    p.add_argument("--max-epochs", type=int, default=200,
                   help="epochs after which training ends, target or not")
    p.add_argument("--context", type=int, default=64,
                   help="bytes of context the model sees")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--epoch-samples", type=int, default=4096,
                   help="training windows per epoch")
    p.add_argument("--val-windows", type=int, default=256,
                   help="validation windows evaluated after every epoch")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate at the initial batch size")
    p.add_argument("--lr-scaling", choices=sorted(pw.scaling.RULES),
                   default="adascale",
                   help="how the learning rate grows with the batch size")
    p.add_argument("--warmup-epochs", type=float, default=5.0,
                   help="LEGW's warmup, in epochs at the initial batch size")
    p.add_argument("--mixed-precision", action="store_true",
                   help="autocast and a gradient scaler (CUDA only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-interval", type=float, default=30.0,
                   help="seconds between periodic checkpoints")
    p.add_argument("--report-every", type=float, default=1.0,
                   help="seconds between reports")
    args = p.parse_args()
    lr = DEFAULT_LR if args.lr is None else args.lr

    job = pw.init(checkpoint_interval=args.checkpoint_interval,
                  report_every=args.report_every)
    torch.manual_seed(args.seed)
    train, val = corpus()
    data = Windows(train, args.context, args.epoch_samples, args.seed, job)
    val_windows = validation_windows(val, args.context, args.val_windows)
    rule = pw.scaling.rule(args.lr_scaling, warmup_epochs=args.warmup_epochs,
                           data_size=len(data), init_bsz=job.env.init_bsz)
    net = MODELS[args.model](args.dim, args.heads, args.layers,
                             args.context).to(job.device)
    LOG.info("train_lm: %d parameters; corpus %d training bytes, %d "
             "validation bytes", sum(q.numel() for q in net.parameters()),
             len(train), len(val))
    # model trains (DDP with several replicas); net evaluates, without
    # DDP, since replicas evaluate different numbers of windows.
    model, optimizer = job.prepare(net, torch.optim.SGD(
        net.parameters(), lr=lr, momentum=0.9), lr_scaling=rule,
        mixed_precision=args.mixed_precision)
    for group in optimizer.param_groups:
        group["lr"] = lr  # the command line wins over the checkpoint
    loader = job.loader(data, seed=args.seed)
    acc = job.accumulator()

    for epoch in job.epochs(args.max_epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with job.autocast():
                loss = lm_loss(model(x.to(job.device)), y.to(job.device))
            optimizer.backward(loss)
            optimizer.step()
        val_loss = validation_loss(net, val_windows, job, acc)
        job.metrics.update(loss=val_loss, target=args.target)
        LOG.info("epoch %d: validation loss %.4f (target %g), progress "
                 "%.1f", epoch, val_loss, args.target, job.progress)
        if val_loss <= args.target and epoch + 1 >= args.min_epochs:
            break
    job.finish()


# Tuned for the initial batch M0 = 32 windows (init_batch_size of the job
# spec).
DEFAULT_LR = 0.1

if __name__ == "__main__":
    main()
