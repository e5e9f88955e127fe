package job

import (
	"sync/atomic"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/testbed/builtin"
)

// TestReportCheckpointReachesTheBid: the checkpoint a worker report
// names reaches the job actor's bid in the measurement of its
// incarnation, the latest one when several are reported, and only
// once: a measurement made of reports repeating a checkpoint already
// bid carries none.
func TestReportCheckpointReachesTheBid(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: cat["cifar10"].Limits()}
	store := &fakeStore{job: &state.Job{ID: "j", Spec: spec, State: state.Running, Incarnation: 3}}
	var reports atomic.Int64
	f := startHost(t, HostConfig{Server: "s0", Store: store, BidEvery: 50 * time.Millisecond, Reports: &reports}, 100)
	sys, sink, owner := f.sys, f.sink, f.owner("j")
	f.hostJobs(t, 1, 1, &pb.HostedJob{Job: "j", Incarnation: 3, Session: 5, Nodes: 1, Replicas: 1})
	report := func(epoch uint32, at float64) {
		sys.Root.Send(owner, &pb.WorkerReports{Reports: []*pb.WorkerReport{{Job: "j", Incarnation: 3, Rank: 0, StepTime: 0.2, SyncTime: 0.05,
			Epoch: epoch, Progress: float64(epoch) * 100, LocalBsz: 64,
			CheckpointEpoch: epoch, CheckpointProgress: float64(epoch) * 100, CheckpointAt: at}}})
	}
	// measurements waits for a bid holding n measurements and returns them.
	measurements := func(n int) []*pb.Measurement {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case b := <-sink.got:
				if len(b.Unacked) >= n {
					return b.Unacked
				}
			case <-deadline:
				t.Fatalf("no bid with %d measurements", n)
			}
		}
	}
	report(11, 1_796_000_000)
	report(12, 1_796_000_030) // the latest of the same measurement wins
	ms := measurements(1)
	if m := ms[0]; m.Incarnation != 3 || m.CheckpointEpoch != 12 || m.CheckpointProgress != 1200 || m.CheckpointAt != 1_796_000_030 {
		t.Fatalf("first measurement %v", m)
	}
	// The same checkpoint reported again is not new: the next
	// measurement carries none.
	report(12, 1_796_000_030)
	ms = measurements(2)
	if m := ms[1]; m.Seq != ms[0].Seq+1 || m.CheckpointAt != 0 || m.CheckpointEpoch != 0 {
		t.Fatalf("second measurement %v", m)
	}
}
