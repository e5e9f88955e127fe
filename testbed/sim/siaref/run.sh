#!/bin/bash
# run.sh: rerun Sia's own simulator (the public artifact) as ground truth.
#
#   testbed/sim/siaref/run.sh ARTIFACT DEPS OUT [JOBS...]
#
# ARTIFACT  a checkout of siasosp23/artifacts (or its sia-simulator folder)
# DEPS      a folder with pymoo-0.4.2.1/ and autograd-1.6.2/ (pure-Python
#           sources; README.md in this folder says how to get them)
# OUT       where the runs go: OUT/POLICY/SET/WORKLOAD.{log,out}
# JOBS      entries POLICY:SET/WORKLOAD, POLICY sia or pollux, SET/WORKLOAD a
#           workload of ../shared/sia-artifact/workloads without .csv
#           (philly/workload-1, saturn/workload-3, scale/rate_10/workload-1);
#           SET/WORKLOAD@N runs the workload's first N jobs (a copy of its
#           first N rows in OUT/prefix/); default: the set recorded in
#           testbed/sim/testdata/sia-artifact/ground-truth.json
#
# Environment: WORKLOADS (default ../shared/sia-artifact/workloads from the
# repository root), PARALLEL (runs at a time, default 2), SIAREF_SOLVER (cbc,
# the default, or highs), SEED (default 1). Every run is nice'd. A run whose
# OUT/.../WORKLOAD.log exists is skipped. Afterwards
#
#   /usr/bin/python3 testbed/sim/siaref/summarize.py OUT > ground-truth.json
#
# collects the figures. Needs /usr/bin/python3 with Debian's python3-numpy,
# python3-scipy, python3-pandas, python3-pulp, coinor-cbc, python3-rich,
# python3-psutil and python3-future. Not part of `make test`: one Sia run takes
# minutes, one Pollux run an hour or more.
set -euo pipefail

if [ $# -lt 3 ]; then
	sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
artifact=$(cd "$1" && pwd)
deps=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)
shift 3
workloads=${WORKLOADS:-$root/../shared/sia-artifact/workloads}
parallel=${PARALLEL:-2}
seed=${SEED:-1}

jobs=("$@")
if [ ${#jobs[@]} -eq 0 ]; then
	mapfile -t jobs < <(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
seen = set()
for r in d["runs"]:
    e = r["policy"] + ":" + r["workload"]
    if r["solver"] in ("cbc", None) and e not in seen:
        seen.add(e)
        print(e)
' "$root/testbed/sim/testdata/sia-artifact/ground-truth.json")
fi

run_one() {
	local entry=$1 policy wl dir base csv n
	policy=${entry%%:*}
	wl=${entry#*:}
	csv=$workloads/${wl%@*}.csv
	if [[ $wl == *@* ]]; then
		n=${wl##*@}
		mkdir -p "$out/prefix/$(dirname "$wl")"
		head -n $((n + 1)) "$csv" >"$out/prefix/$wl.csv"
		csv=$out/prefix/$wl.csv
	fi
	dir=$out/$policy/$(dirname "$wl")
	base=$dir/$(basename "$wl")
	mkdir -p "$dir"
	if [ -s "$base.log" ]; then
		echo "skip $entry ($base.log exists)"
		return 0
	fi
	echo "start $entry $(date -u +%FT%TZ)"
	COLUMNS=160 nice -n 10 /usr/bin/python3 "$here/run_sia_ref.py" \
		--artifact "$artifact" --deps "$deps" --policy "$policy" \
		--workload "$csv" --output "$base.log.tmp" \
		--seed "$seed" >"$base.out" 2>&1 &&
		mv "$base.log.tmp" "$base.log" &&
		gzip -f "$base.out"
	echo "done $entry $(date -u +%FT%TZ) rc=$?"
}
export -f run_one
export out artifact deps workloads here seed

printf '%s\n' "${jobs[@]}" | xargs -P "$parallel" -I{} bash -c 'run_one "$1"' _ {}
