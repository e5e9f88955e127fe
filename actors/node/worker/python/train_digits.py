"""Digits: scikit-learn's bundled 8x8 handwritten digits (no download),
learned by an MLP or a small CNN with pollux_worker until a target test
accuracy, as one worker of a Pollux job (see docs/worker-library.md).

    /usr/bin/python3 train_digits.py --model mlp --target 0.95

The job's environment (docs/worker-protocol.md) says how many replicas,
which batch configuration and where to checkpoint and report.
"""

import argparse
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import pollux_worker as pw

LOG = logging.getLogger("pollux_worker")

# Tuned for the initial batch M0 = 32 (init_batch_size of the job spec).
DEFAULT_LR = {"mlp": 0.05, "cnn": 0.05}


def digits(seed=0, test_fraction=0.2):
    """(train, test) tensors of scikit-learn's digits, scaled to [0, 1],
    split the same way on every run and every replica."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator()
    g.manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def augment(x, y, copies, seed=0):
    """x and y with copies - 1 more copies of every image, each shifted by
    at most one pixel in each direction (a random shift per image)."""
    if copies <= 1:
        return x, y
    g = torch.Generator()
    g.manual_seed(seed + 1)
    imgs = F.pad(x.view(-1, 8, 8), (1, 1, 1, 1))
    xs, ys = [x], [y]
    for _ in range(copies - 1):
        shift = torch.randint(0, 9, (len(y),), generator=g)
        out = torch.empty_like(x.view(-1, 8, 8))
        for s in range(9):
            sel = shift == s
            dy, dx = divmod(s, 3)
            out[sel] = imgs[sel, dy:dy + 8, dx:dx + 8]
        xs.append(out.view(-1, 64))
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.view(-1, 64))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


MODELS = {"mlp": MLP, "cnn": CNN}


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--target", type=float, default=0.95,
                   help="test accuracy at which training is complete")
    p.add_argument("--min-epochs", type=int, default=0,
                   help="epochs to train even once the target is reached")
    p.add_argument("--max-epochs", type=int, default=60,
                   help="epochs after which training ends, target or not")
    p.add_argument("--augment", type=int, default=1,
                   help="training copies of every image (shifted by up to "
                   "a pixel): a longer epoch")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate at the initial batch size")
    p.add_argument("--lr-scaling", choices=sorted(pw.scaling.RULES),
                   default="adascale",
                   help="how the learning rate grows with the batch size")
    p.add_argument("--warmup-epochs", type=float, default=5.0,
                   help="LEGW's warmup, in epochs at the initial batch size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-interval", type=float, default=30.0,
                   help="seconds between periodic checkpoints")
    p.add_argument("--report-every", type=float, default=1.0,
                   help="seconds between reports")
    args = p.parse_args()
    lr = DEFAULT_LR[args.model] if args.lr is None else args.lr

    job = pw.init(checkpoint_interval=args.checkpoint_interval,
                  report_every=args.report_every)
    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = digits(args.seed)
    x_train, y_train = augment(x_train, y_train, args.augment, args.seed)
    rule = pw.scaling.rule(args.lr_scaling, warmup_epochs=args.warmup_epochs,
                           data_size=len(y_train), init_bsz=job.env.init_bsz)
    net = MODELS[args.model]().to(job.device)
    # model trains (DDP with several replicas); net evaluates.
    model, optimizer = job.prepare(net, torch.optim.SGD(
        net.parameters(), lr=lr, momentum=0.9), lr_scaling=rule)
    for group in optimizer.param_groups:
        group["lr"] = lr  # the command line wins over the checkpoint
    loader = job.loader(TensorDataset(x_train, y_train), seed=args.seed)
    x_test, y_test = x_test.to(job.device), y_test.to(job.device)

    for epoch in job.epochs(args.max_epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(job.device)), y.to(job.device))
            loss.backward()
            optimizer.step()
        acc = accuracy(net, x_test, y_test)
        job.metrics.update(accuracy=acc, target=args.target)
        LOG.info("epoch %d: test accuracy %.4f (target %g), progress %.1f",
                 epoch, acc, args.target, job.progress)
        if acc >= args.target and epoch + 1 >= args.min_epochs:
            break
    job.finish()


if __name__ == "__main__":
    main()
