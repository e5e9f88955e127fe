#!/usr/bin/python3
"""Collect the figures of run.sh's runs of Sia's simulator into one JSON.

    /usr/bin/python3 summarize.py OUT [OUT2...] [--artifact-commit C] > ground-truth.json

OUT is run.sh's output folder (OUT/POLICY/SET/WORKLOAD.log, the artifact's
per-round log, and WORKLOAD.out.gz, its stdout). Per run, all computed from
the artifact's own log as its utils/print_run_stats.py does:

- avg_jct_h: mean JCT (completion - submission) over the workload's jobs;
- p99_jct_h: the JCT at index int(0.99 n) of the sorted JCTs (the artifact's
  get_p99_jct, here per workload);
- makespan_h: last completion - first submission;
- restarts, restarts_per_job: the jobs' num_restarts at the end (the first
  start is not a restart);
- gpu_h_per_job (and by GPU type): every round, each unfinished job's
  allocated GPUs x the 60 s interval, over the number of jobs;
- contention: mean number of unfinished submitted jobs per round;
- migrations_per_job: changes of GPU type between a job's allocations;
- first_types: how many jobs got which GPU type in their first allocation;
- first_alloc: per job [seconds from submission to the round of its first
  allocation, GPU type, GPUs];
- jct_s: per job JCT in seconds;
  (a workload named SET/WORKLOAD@N is the first N jobs of SET/WORKLOAD;)
- by_app: mean JCT (h) and restarts per job per application.

Numbers only: nothing of the artifact's code or data.
"""

import gzip
import json
import os
import sys
from collections import Counter, defaultdict

INTERVAL = 60


def read_out(path):
    info = {}
    for p in (path, path + ".gz"):
        if not os.path.exists(p):
            continue
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt", errors="replace") as f:
            for line in f:
                if line.startswith("SIAREF-DONE "):
                    info.update(json.loads(line[len("SIAREF-DONE "):]))
                elif line.startswith("SIAREF-COMMAND "):
                    info["artifact_argv"] = json.loads(line[len("SIAREF-COMMAND "):])
        break
    return info


def summarize_log(path):
    rounds = 0
    contention = []
    gpu_s = defaultdict(float)
    first = {}
    last_type = {}
    migrations = Counter()
    last = None
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            rounds += 1
            t = e["timestamp"]
            active = 0
            for j in e["submitted_jobs"]:
                if j["completion_time"] is not None:
                    continue
                active += 1
                alloc = j["allocation"]
                if not alloc:
                    continue
                gtype, gpus = alloc[0], alloc[1]
                if gtype is None or not gpus:
                    continue
                gpu_s[gtype] += len(gpus) * INTERVAL
                name = j["name"]
                if name not in first:
                    first[name] = [t - j["submission_time"], gtype, len(gpus)]
                if name in last_type and last_type[name] != gtype:
                    migrations[name] += 1
                last_type[name] = gtype
            contention.append(active)
            last = e
    jobs = last["submitted_jobs"]
    jct = {j["name"]: j["completion_time"] - j["submission_time"] for j in jobs}
    n = len(jct)
    vals = sorted(jct.values())
    restarts = {j["name"]: j["num_restarts"] or 0 for j in jobs}
    subs = [j["submission_time"] for j in jobs]
    comps = [j["completion_time"] for j in jobs]
    by_app = defaultdict(lambda: [0, 0.0, 0])
    for name, v in jct.items():
        a = by_app[name.split("-")[0]]
        a[0] += 1
        a[1] += v
        a[2] += restarts[name]
    total_gpu_h = sum(gpu_s.values()) / 3600.0
    return {
        "jobs": n,
        "rounds": rounds,
        "avg_jct_h": sum(vals) / n / 3600.0,
        "p99_jct_h": vals[int(0.99 * n)] / 3600.0,
        "makespan_h": (max(comps) - min(subs)) / 3600.0,
        "restarts": sum(restarts.values()),
        "restarts_per_job": sum(restarts.values()) / n,
        "migrations_per_job": sum(migrations.values()) / n,
        "gpu_h_per_job": total_gpu_h / n,
        "gpu_h_per_job_by_type": {k: v / 3600.0 / n for k, v in sorted(gpu_s.items())},
        "contention": sum(contention) / len(contention),
        "first_types": dict(sorted(Counter(v[1] for v in first.values()).items())),
        "by_app": {k: {"jobs": v[0], "avg_jct_h": v[1] / v[0] / 3600.0,
                       "restarts_per_job": v[2] / v[0]} for k, v in sorted(by_app.items())},
        "first_alloc": first,
        "jct_s": jct,
    }


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    args = sys.argv[1:]
    commit = None
    if "--artifact-commit" in args:
        i = args.index("--artifact-commit")
        commit = args[i + 1]
        del args[i:i + 2]
    runs = []
    for out, policy in [(o, p) for o in args for p in ("sia", "pollux")]:
        pdir = os.path.join(out, policy)
        if not os.path.isdir(pdir):
            continue
        for dirpath, _, files in sorted(os.walk(pdir)):
            for fn in sorted(files):
                if not fn.endswith(".log"):
                    continue
                path = os.path.join(dirpath, fn)
                wl = os.path.relpath(path, pdir)[:-len(".log")]
                info = read_out(path[:-len(".log")] + ".out")
                r = {"policy": policy, "workload": wl,
                     # the solver of Sia's MILP (Pollux has none)
                     "solver": info.get("solver") if policy == "sia" else None,
                     # runs before the seed was printed used seed 1
                     "seed": info.get("seed", 1),
                     "wall_s": info.get("wall_s"),
                     "solver_stats": info.get("solver_stats"),
                     "artifact_argv": info.get("artifact_argv")}
                r.update(summarize_log(path))
                runs.append(r)
    order = {"philly": 0, "saturn": 1, "scale": 2}

    def key(r):
        parts = r["workload"].split("/")
        name, _, prefix = parts[-1].partition("@")
        num = int(name.split("-")[-1])
        return (r["policy"] != "sia", order.get(parts[0], 9), parts[:-1], num,
                int(prefix or 0), r["solver"] not in ("cbc", None), r["seed"])

    runs.sort(key=key)
    doc = {"artifact": "siasosp23/artifacts sia-simulator",
           "artifact_commit": commit,
           "runs": runs}
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
