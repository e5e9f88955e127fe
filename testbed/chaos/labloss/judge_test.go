package labloss

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed/chaos/record"
)

const sec = int64(time.Second)

// writeWorker writes one worker's record file under root/node.
func writeWorker(t *testing.T, root, node string, rs ...record.Record) {
	t.Helper()
	var b strings.Builder
	for i := range rs {
		r := rs[i]
		r.Job, r.Inc, r.Rank, r.PID = rs[0].Job, rs[0].Inc, rs[0].Rank, rs[0].PID
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	dir := filepath.Join(root, node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s.%d.%d.%d.jsonl", rs[0].Job, rs[0].Inc, rs[0].Rank, rs[0].PID)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func recStart(job string, inc uint64, pid int, t int64, gpus ...int) record.Record {
	return record.Record{T: t, Kind: record.Start, Job: job, Inc: inc, PID: pid, Boot: 1, GPUs: gpus}
}

func recExit(t int64) record.Record { return record.Record{T: t, Kind: record.Exit} }

func recCheckpoint(t int64, progress float64) record.Record {
	return record.Record{T: t, T0: t - 1, Kind: record.Checkpoint, Epoch: 1, Progress: progress}
}

func recRestore(t int64, from uint64, progress float64) record.Record {
	return record.Record{T: t, T0: t - 1, Kind: record.Restore, From: from, Fresh: from == 0, Progress: progress}
}

// The judge of a lab-loss run, on worker records and leases made up
// here (a worker off its lease breaks both the per-worker and the
// per-node check): lab-b is lost at 50 s and restarted at 70 s; lab-a lends node a0
// to lab-b, seen from 9 s to 60 s, expiring at 60 s; lab-b lends its
// node b0 to lab-c, seen from 9 s to 50 s, expiring at 59 s.
func TestJudgeLabLossRecords(t *testing.T) {
	names := []string{"lab-a", "lab-b", "lab-c"}
	lease := func(node string) map[string]*leaseSeen {
		return map[string]*leaseSeen{"l1": {lease: federation.Lease{ID: "l1", Lender: "lab-a", Borrower: "lab-b",
			Nodes: []federation.NodeGPUs{{Node: node, GPUs: 2}}}, first: 9 * sec, last: 60 * sec, exps: 60 * sec},
			"l2": {lease: federation.Lease{ID: "l2", Lender: "lab-b", Borrower: "lab-c",
				Nodes: []federation.NodeGPUs{{Node: "b0", GPUs: 2}}}, first: 9 * sec, last: 50 * sec, exps: 59 * sec}}
	}
	// own: lab-b's job b-x on its own node, checkpointed before the loss
	// and resumed after the restart.
	own := func(t *testing.T, roots map[string]string) {
		writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 1, 10, 1*sec, 0), recRestore(2*sec, 0, 0), recCheckpoint(30*sec, 10))
		writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 2, 11, 72*sec, 0), recRestore(73*sec, 1, 10), recCheckpoint(80*sec, 12), recExit(81*sec))
	}
	cases := []struct {
		name              string
		node              string // the node leased
		records           func(t *testing.T, roots map[string]string)
		violations, fails int
		resumed, toResume int
		// of lab-c's jobs that ran on lab-b's b0 at the loss
		peerResumed, peerToResume int
	}{
		{name: "borrowed worker within the lease", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0, 1), recExit(62*sec))
		}, resumed: 1, toResume: 1},
		{name: "borrowed worker on a node not leased", node: "a1", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0), recExit(20*sec))
		}, violations: 2, fails: 2, resumed: 1, toResume: 1},
		{name: "borrowed worker on more GPUs than leased", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0, 1, 2), recExit(20*sec))
		}, violations: 2, fails: 2, resumed: 1, toResume: 1},
		{name: "borrowed workers together beyond the lease", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0, 1), recExit(30*sec))
			writeWorker(t, roots["lab-a"], "a0", recStart("b-z", 1, 21, 20*sec, 2), recExit(30*sec))
		}, violations: 1, fails: 1, resumed: 1, toResume: 1},
		{name: "borrowed workers one after the other", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0, 1), recExit(20*sec))
			writeWorker(t, roots["lab-a"], "a0", recStart("b-z", 1, 21, 20*sec, 0, 1), recExit(30*sec))
		}, resumed: 1, toResume: 1},
		{name: "borrowed worker outliving the lease", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 10*sec, 0), recExit(75*sec))
		}, violations: 1, fails: 1, resumed: 1, toResume: 1},
		{name: "borrowed worker started before the lease", node: "a0", records: func(t *testing.T, roots map[string]string) {
			own(t, roots)
			writeWorker(t, roots["lab-a"], "a0", recStart("b-y", 1, 20, 2*sec, 0), recExit(20*sec))
		}, violations: 2, fails: 2, resumed: 1, toResume: 1},
		{name: "restore behind a checkpoint written", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 1, 10, 1*sec, 0), recRestore(2*sec, 0, 0), recCheckpoint(30*sec, 10))
			writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 2, 11, 72*sec, 0), recRestore(73*sec, 1, 8), recExit(81*sec))
		}, violations: 1, fails: 2, resumed: 0, toResume: 1},
		{name: "lost lab's job that finished training before the loss", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-a"], "a0", recStart("b-x", 1, 10, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(30*sec, 10),
				record.Record{T: 40 * sec, Kind: record.Done, Epoch: 2, Progress: 20},
				record.Record{T: 41 * sec, T0: 40 * sec, Kind: record.Checkpoint, Epoch: 2, Progress: 20, Finished: true}, recExit(42*sec))
		}},
		{name: "lost lab's job started afresh after the restart", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 1, 10, 1*sec, 0), recRestore(2*sec, 0, 0), recCheckpoint(30*sec, 10))
			writeWorker(t, roots["lab-b"], "a0", recStart("b-x", 2, 11, 72*sec, 0), recRestore(73*sec, 0, 0), recExit(81*sec))
		}, violations: 1, fails: 2, resumed: 0, toResume: 1},
		{name: "a peer's job on the lost lab resumed on its own node", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "b0", recStart("c-y", 1, 40, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(40*sec, 5))
			writeWorker(t, roots["lab-c"], "c0", recStart("c-y", 2, 41, 62*sec, 0), recRestore(63*sec, 1, 5), recExit(80*sec))
		}, peerResumed: 1, peerToResume: 1},
		{name: "a peer's job on the lost lab started afresh", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "b0", recStart("c-y", 1, 40, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(40*sec, 5))
			writeWorker(t, roots["lab-c"], "c0", recStart("c-y", 2, 41, 62*sec, 0), recRestore(63*sec, 0, 0), recExit(80*sec))
		}, violations: 1, fails: 2, peerToResume: 1},
		{name: "a peer's job on the lost lab run again only after its return", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "b0", recStart("c-y", 1, 40, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(40*sec, 5))
			writeWorker(t, roots["lab-c"], "c0", recStart("c-y", 2, 41, 72*sec, 0), recRestore(73*sec, 1, 5), recExit(80*sec))
		}, fails: 1, peerToResume: 1},
		{name: "a peer's job on the lost lab never run again", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "b0", recStart("c-y", 1, 40, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(40*sec, 5))
		}, fails: 1, peerToResume: 1},
		{name: "a peer's job that left the lost lab before the loss", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-b"], "b0", recStart("c-y", 1, 40, 10*sec, 0), recRestore(11*sec, 0, 0), recCheckpoint(40*sec, 5), recExit(45*sec))
		}},
		{name: "other labs' own workers", node: "a0", records: func(t *testing.T, roots map[string]string) {
			writeWorker(t, roots["lab-a"], "a1", recStart("a-x", 1, 30, 1*sec, 0, 1), recExit(90*sec))
			writeWorker(t, roots["lab-c"], "a0", recStart("c-x", 1, 31, 1*sec, 0, 1), recExit(90*sec))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			roots := map[string]string{}
			for _, n := range names {
				roots[n] = filepath.Join(dir, n)
				if err := os.MkdirAll(roots[n], 0o755); err != nil {
					t.Fatal(err)
				}
			}
			tc.records(t, roots)
			res := &Result{}
			judgeRecords(res, roots, lease(tc.node), 5*time.Second, names, "lab-b", map[string]string{"b-x": "running"}, 50*sec, 70*sec)
			if res.Violations != tc.violations || len(res.Failures) != tc.fails || res.LostLabResumed != tc.resumed || res.LostLabToResume != tc.toResume ||
				res.PeerJobsResumed != tc.peerResumed || res.PeerJobsToResume != tc.peerToResume {
				t.Errorf("violations %d, failures %d (%q), resumed %d of %d, peer jobs resumed %d of %d; want %d, %d, %d of %d, %d of %d", res.Violations,
					len(res.Failures), res.Failures, res.LostLabResumed, res.LostLabToResume, res.PeerJobsResumed, res.PeerJobsToResume,
					tc.violations, tc.fails, tc.resumed, tc.toResume, tc.peerResumed, tc.peerToResume)
			}
		})
	}
}

// The expiry of the lost lab's leases in a survivor's ledger, judged
// from what the poller saw: a 10 s lease with a 500 ms federation
// interval may be found up to 1.1 s after its expiry (two rounds and the
// expire's commit), and its expiry may be at most 10 s after the kill.
func TestJudgeLeaseExpiry(t *testing.T) {
	const s = int64(time.Second)
	killAt, killSent := 100*s, 100*s+s/1000
	for _, tc := range []struct {
		name  string
		sight ledgerSight
		fails int
	}{
		{"gone within a round of its expiry", ledgerSight{expires: 109*s + 8*s/10, present: 110*s + 2*s/10, gone: 110*s + 5*s/10}, 0},
		{"expiring exactly a TTL after the kill", ledgerSight{expires: killSent + 10*s, present: killSent + 10*s, gone: 111 * s}, 0},
		{"renewed after the loss", ledgerSight{expires: 110*s + 5*s/10, present: 110 * s, gone: 111 * s}, 1},
		{"found 1.0 s after its expiry", ledgerSight{expires: 109*s + 8*s/10, present: 110*s + 8*s/10, gone: 111*s + 1*s/10}, 0},
		{"found 1.2 s after its expiry", ledgerSight{expires: 109*s + 8*s/10, present: 111 * s, gone: 111*s + 3*s/10}, 1},
		{"never seen gone", ledgerSight{expires: 109 * s, present: 109 * s}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &Result{}
			judgeLeaseExpiry(res, []leaseTrack{{lab: "lab-a", lease: "l1", sight: tc.sight}}, 10*time.Second, 500*time.Millisecond, killAt, killSent)
			if len(res.Failures) != tc.fails {
				t.Errorf("failures %q, want %d", res.Failures, tc.fails)
			}
			if res.LeaseExpiryBoundS != 11.1 {
				t.Errorf("bound %v s, want 11.1", res.LeaseExpiryBoundS)
			}
			if tc.sight.gone > 0 && res.LeaseExpiryMaxS != float64(tc.sight.gone-killAt)/1e9 || res.LeaseHeldMaxS != float64(tc.sight.present-killAt)/1e9 {
				t.Errorf("lease_expiry_max_s %v, lease_held_max_s %v", res.LeaseExpiryMaxS, res.LeaseHeldMaxS)
			}
		})
	}
}
