package job

import (
	"math"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
	"pollux/testbed/builtin"
)

// An actor told its incarnation spans two racks measures its points
// across them, fits the cross-rack term from them beside the job's
// points within one rack (the same configuration, 0.1 s slower), and
// bids it.
func TestJobActorFitsTheCrossRackTerm(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: cat["cifar10"].Limits()}
	in := state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: 2, Replicas: 2, LocalBatch: 64, AccumTime: 0.15, StepTime: 0.2}, Count: 20}
	one := state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: 1, Replicas: 1, LocalBatch: 128, AccumTime: 0.25, StepTime: 0.25}, Count: 20}
	store := &fakeStore{job: &state.Job{ID: "j", Spec: spec, State: state.Running, Incarnation: 3,
		Profile: []state.ProfileEntry{one, in}}}
	f := startHost(t, HostConfig{Server: "s0", Store: store, BidEvery: 50 * time.Millisecond}, 100)
	sink := f.sink
	f.hostJobs(t, 1, 1, &pb.HostedJob{Job: "j", Incarnation: 3, Session: 5, Nodes: 2, Replicas: 2, Racks: 2})
	f.sys.Root.Send(f.owner("j"), &pb.WorkerReports{Reports: []*pb.WorkerReport{{Job: "j", Incarnation: 3, StepTime: 0.3, SyncTime: 0.15,
		GradSqr: 1, GradVar: 10, LocalBsz: 64}}})
	deadline := time.After(10 * time.Second)
	for {
		var b *pb.Bid
		select {
		case b = <-sink.got:
		case <-deadline:
			t.Fatal("no bid with a cross-rack term")
		}
		if len(b.Unacked) == 0 || b.AlphaX == 0 {
			continue
		}
		p := b.Unacked[0].Profile
		if len(p) != 1 || p[0].Racks != 2 || p[0].Nodes != 2 || p[0].LocalBsz != 64 {
			t.Fatalf("measurement %v", p)
		}
		if math.Abs(b.AlphaX-0.1) > 0.01 {
			t.Fatalf("bid cross-rack term %v, want 0.1 (the step across two racks is 0.1 s longer)", b.AlphaX)
		}
		return
	}
}

// The host passes on the racks a placement spans as profile entries
// count them: 0 for one rack, and for a count no placement has.
func TestHostNormalisesRacks(t *testing.T) {
	for _, c := range []struct {
		nodes, racks uint32
		want         int
	}{{2, 2, 2}, {4, 3, 3}, {2, 1, 0}, {2, 0, 0}, {2, 3, 0}, {1, 2, 0}} {
		if got := planRacks(c.nodes, c.racks); got != c.want {
			t.Errorf("%d racks of %d nodes: %d, want %d", c.racks, c.nodes, got, c.want)
		}
	}
}
