"""Epochs and seconds to a target at several batch sizes: runs one of the
worker library's example scripts as a single replica (no scheduler; the
report address refuses, which the library tolerates) at each total batch,
pinned to one core, and prints for every target the first epoch whose
metric reaches it and the seconds from start to the end of that epoch.
Used to choose the comparison's targets (docs/benchmarks.md).

    /usr/bin/python3 epochs_to_target.py --script train_digits.py \
        --batches 32,128,512 --targets 0.97,0.98 --max-epochs 40 \
        -- --model cnn --augment 4 --lr 0.02

Everything after "--" goes to the script (its own --target and
--max-epochs are set here: the target out of reach, so that each run
trains --max-epochs epochs, unless --stop-at ends it earlier).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "..", "actors", "node", "worker",
                     "python")
EPOCH = re.compile(r"epoch (\d+): (test accuracy|validation loss) ([0-9.]+)")


def run(args, batch, rest):
    loss = args.script == "train_lm.py"
    out_of_reach = "0" if loss else "1.01"
    stop = args.stop_at if args.stop_at is not None else out_of_reach
    atomic = min(batch, args.max_local)
    if batch % atomic:
        sys.exit("batch %d is no multiple of --max-local %d" % (
            batch, args.max_local))
    with tempfile.TemporaryDirectory() as ck:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("POLLUX_") and k != "OMP_NUM_THREADS"}
        env.update(POLLUX_JOB_ID="ett", POLLUX_INCARNATION="0",
                   POLLUX_RANK="0", POLLUX_LOCAL_RANK="0",
                   POLLUX_WORLD_SIZE="1", POLLUX_NUM_NODES="1",
                   POLLUX_MASTER_ADDR="127.0.0.1", POLLUX_MASTER_PORT="1",
                   POLLUX_INIT_BSZ=str(args.init_batch),
                   POLLUX_ATOMIC_BSZ=str(atomic),
                   POLLUX_ACCUM_STEPS=str(batch // atomic - 1),
                   POLLUX_GAIN="1", POLLUX_CHECKPOINT_DIR=ck,
                   POLLUX_REPORT_ADDR="127.0.0.1:1", POLLUX_CPUS=args.cpu,
                   PYTHONPATH=PYDIR)
        cmd = [sys.executable, os.path.join(PYDIR, args.script)] + rest + [
            "--target", stop, "--max-epochs", str(args.max_epochs)]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        curve = []
        for line in p.stderr:
            m = EPOCH.search(line)
            if m:
                curve.append((float(m.group(3)), time.monotonic() - t0))
        if p.wait() != 0:
            sys.exit("%s at batch %d exited %d" % (args.script, batch,
                                                    p.returncode))
    return loss, curve


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", choices=["train_digits.py", "train_lm.py"])
    p.add_argument("--batches", default="32,128,512")
    p.add_argument("--targets", required=True)
    p.add_argument("--max-epochs", type=int, default=40)
    p.add_argument("--stop-at", help="the script's --target (default: out "
                   "of reach)")
    p.add_argument("--init-batch", type=int, default=32)
    p.add_argument("--cpu", default="0", help="the core to pin to")
    p.add_argument("--max-local", type=int, default=128,
                   help="the largest micro-batch: a larger batch is "
                   "accumulated over batch / max-local micro-batches, so "
                   "that the noise estimate is the unbiased one, as on "
                   "several replicas")
    argv = sys.argv[1:]
    rest = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    args = p.parse_args(argv)
    targets = [float(t) for t in args.targets.split(",")]
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    for b in [int(x) for x in args.batches.split(",")]:
        loss, curve = run(args, b, rest)
        cells = []
        for t in targets:
            hit = [(i + 1, s) for i, (v, s) in enumerate(curve)
                   if (v <= t if loss else v >= t)]
            cells.append("%g: %s" % (t, "%d ep %.0f s" % hit[0] if hit
                                     else "> %d ep" % len(curve)))
        per = (curve[-1][1] - curve[0][1]) / max(len(curve) - 1, 1)
        print("batch %d: %s | %.1f s an epoch, %.0f s in all | curve %s" % (
            b, "; ".join(cells), per, curve[-1][1], " ".join(
                "%.3f" % v for v, _ in curve)), flush=True)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
