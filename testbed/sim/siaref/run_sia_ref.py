#!/usr/bin/python3
"""Run Sia's own simulator (the public artifact) on one workload.

Usage (see run.sh, which runs the whole set):

    /usr/bin/python3 run_sia_ref.py --artifact CHECKOUT/sia-simulator \
        --deps DEPS --policy sia|pollux --workload FILE.csv --output RUN.log \
        [--seed 1]

CHECKOUT is a checkout of siasosp23/artifacts; DEPS holds the pure-Python
sources of pymoo 0.4.2.1 (DEPS/pymoo-0.4.2.1/pymoo) and autograd 1.6.2
(DEPS/autograd-1.6.2/autograd), which the artifact imports and no reachable
registry serves (README.md says where they come from). Nothing of the
artifact is changed or copied: this script puts our cvxpy stand-in
(shims/cvxpy, CBC through PuLP) first on the import path, restores the
numpy aliases (np.int, np.float, ...) that numpy 1.24 removed and the
artifact and pymoo 0.4 still use, seeds numpy's and Python's random
generators (the artifact seeds nothing; its Pollux is a genetic search), and
runs the artifact's own command line:

- sia:    multi_simulator.py FILE --policy=sia --policy_p_val=-0.5
          --mip_lambda_a=0.01 --mip_lambda_n=1.1 --interval=60
          --project_throughput --share_max_replicas --output=RUN.log
- pollux: multi_simulator_unaware.py FILE --policy=pollux --interval=60
          --policy_p_val=-1 --output=RUN.log

(the commands of the artifact's run_experiment.sh, one workload file at a
time). The artifact writes RUN.log itself: one JSON line per scheduling round
with every submitted job's cluster, allocation, placement, batch size,
restarts and completion time. Its stdout (per-round tables) is the caller's
to keep. At the end this script prints one line "SIAREF-DONE {json}" with the
wall time and the solver statistics.
"""

import argparse
import json
import os
import random
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True,
                    help="the artifact's sia-simulator directory")
    ap.add_argument("--deps", required=True,
                    help="directory with pymoo-0.4.2.1/ and autograd-1.6.2/")
    ap.add_argument("--policy", required=True, choices=["sia", "pollux"])
    ap.add_argument("--workload", required=True)
    ap.add_argument("--output", required=True, help="the artifact's per-round log")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.workload = os.path.abspath(args.workload)

    art = os.path.abspath(args.artifact)
    if os.path.isdir(os.path.join(art, "sia-simulator")):
        art = os.path.join(art, "sia-simulator")
    for f in ("multi_simulator.py", "sia.py", "cluster.py"):
        if not os.path.exists(os.path.join(art, f)):
            sys.exit("run_sia_ref: %s is not the artifact's sia-simulator (no %s)" % (art, f))
    deps = os.path.abspath(args.deps)
    paths = [os.path.join(HERE, "shims"), os.path.join(deps, "pymoo-0.4.2.1"),
             os.path.join(deps, "autograd-1.6.2"), art]
    for p in paths[:-1]:
        if not os.path.isdir(p):
            sys.exit("run_sia_ref: missing %s" % p)
    sys.path[:0] = paths

    import numpy as np
    # Aliases removed in numpy 1.24, used by pollux_unaware.py and pymoo 0.4.
    for name, typ in (("int", int), ("float", float), ("bool", bool),
                      ("complex", complex), ("object", object), ("str", str)):
        if name not in np.__dict__:
            setattr(np, name, typ)
    np.random.seed(args.seed)
    random.seed(args.seed)

    import simulator_config as sim_config
    # One workload file per process; the pool settings only matter for
    # directories (num_parallel_jobs stays 1: jobs stepped in order).
    sim_config.num_parallel_traces = 1

    if args.policy == "sia":
        script = "multi_simulator.py"
        argv = [args.workload, "--policy=sia", "--policy_p_val=-0.5",
                "--mip_lambda_a=0.01", "--mip_lambda_n=1.1", "--interval=60",
                "--project_throughput", "--share_max_replicas",
                "--output=" + os.path.abspath(args.output)]
    else:
        script = "multi_simulator_unaware.py"
        argv = [args.workload, "--policy=pollux", "--interval=60",
                "--policy_p_val=-1", "--output=" + os.path.abspath(args.output)]
    print("SIAREF-COMMAND", json.dumps([script] + argv), flush=True)
    os.chdir(art)
    sys.argv = [os.path.join(art, script)] + argv
    t0 = time.time()
    runpy.run_path(os.path.join(art, script), run_name="__main__")
    wall = time.time() - t0
    import cvxpy
    print("SIAREF-DONE", json.dumps({"wall_s": round(wall, 1), "solver": os.environ.get("SIAREF_SOLVER", "cbc"),
                                     "seed": args.seed, "solver_stats": cvxpy.STATS}), flush=True)


if __name__ == "__main__":
    main()
