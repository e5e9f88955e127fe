package fedlink

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"pollux/actors/pb"
	"pollux/cluster/federation"
)

func run(job string, replicas uint32, owner *pb.Ref) *pb.RunJob {
	rj := &pb.RunJob{Job: job, Incarnation: 1, Application: "emul", Replicas: replicas, WorldSize: replicas, Owner: owner}
	for range replicas {
		rj.ReportTokens = append(rj.ReportTokens, "tok")
	}
	return rj
}

type delivered struct {
	to  *pb.Ref
	msg proto.Message
}

// A borrower's order runs on the lender only within what the lender's
// ledger lends it (fenced like an Assign); the lender's node's acks and
// the workers' reports go back to the borrower's allocator and job
// actor; a reclaim drops the order from the lender's next Assign.
func TestOrdersAndRelays(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	at := seconds(clk.Now())
	relay := &pb.Ref{Address: "lab-a-s0", Id: "fedrelay"}
	a.link.cfg.RelayOwner = func() *pb.Ref { return relay }
	acks, got := make(chan *pb.AssignAck, 4), make(chan delivered, 4)
	var changes atomic.Int32
	a.link.cfg.OnOrder = func() { changes.Add(1) }
	b.link.cfg.OnAck = func(ack *pb.AssignAck) { acks <- ack }
	b.link.cfg.Deliver = func(to *pb.Ref, msg proto.Message) { got <- delivered{to, msg} }
	if err := a.link.Commit(ctx, federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "l1", Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "n0", GPUs: 4}}, At: at, TTL: 60}); err != nil {
		t.Fatal(err)
	}
	owner := &pb.Ref{Address: "lab-b-s0", Id: "jobhost/job-j1"}
	order := func(node string, gen uint64, runs ...*pb.RunJob) error {
		return b.link.SendOrder(ctx, federation.BorrowedID("lab-a", node), &pb.Assign{ClusterId: "cluster-b", Term: 2, Generation: gen, Runs: runs})
	}
	sneaky := run("j1", 2, owner)
	sneaky.CheckpointRoot = "/" // a borrower does not choose where its workers may write
	if err := order("n0", 5, sneaky); err != nil {
		t.Fatal(err)
	}
	if m := a.link.Borrowed("n0"); len(m) != 1 || m[0].CheckpointRoot != "" {
		t.Fatalf("merged %v: the borrower set its checkpoint root", m)
	}
	if err := order("n0", 5, run("j1", 2, owner)); err != nil {
		t.Fatal(err)
	}
	// The same runs again (a later round) change nothing to wake for.
	if err := order("n0", 5, run("j1", 2, owner)); err != nil {
		t.Fatal(err)
	}
	if n := changes.Load(); n != 2 {
		t.Errorf("the lender's allocator was woken %d times for one change of orders", n)
	}
	// lab-a's federation file declares where lab-b's jobs checkpoint.
	a.link.cfg.Federation.Peers[0].CheckpointRoot = "/shared/lab-b"
	merged := a.link.Borrowed("n0")
	if len(merged) != 1 || merged[0].Job != "j1" || !proto.Equal(merged[0].Owner, relay) || merged[0].CheckpointRoot != "/shared/lab-b" {
		t.Fatalf("merged into n0's Assign: %v", merged)
	}
	// Refused, logged, and nothing changes: a node not leased, more GPUs
	// than leased, an order older than the newest.
	refused := []struct {
		name string
		err  error
		want string
	}{
		{"a node not leased", order("n1", 6, run("j2", 1, owner)), "not leased"},
		{"beyond the lease", order("n0", 6, run("j1", 5, owner)), "not leased"},
		{"stale", order("n0", 4, run("j3", 1, owner)), "stale order"},
	}
	for _, tc := range refused {
		if !errors.Is(tc.err, ErrRefused) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	if n := strings.Count(a.logs.String(), "federation: refused"); n != 3 {
		t.Errorf("%d refusals logged, want 3:\n%s", n, a.logs)
	}
	if m := a.link.Borrowed("n0"); len(m) != 1 || m[0].Replicas != 2 {
		t.Fatalf("after refused orders n0 gets %v", m)
	}
	if m := a.link.Borrowed("n1"); len(m) != 0 {
		t.Fatalf("n1 gets %v", m)
	}
	// The node's ack: the lab's own runs stay, the borrower's go back
	// fenced with its order.
	own := a.link.SplitAck(&pb.AssignAck{Ok: true, Node: "n0", ClusterId: "cluster-a", Term: 9, Generation: 100,
		Runs: []*pb.RunStatus{{Job: "j1", Incarnation: 1, Alive: 2}, {Job: "mine", Incarnation: 3, Alive: 1}}})
	if len(own.Runs) != 1 || own.Runs[0].Job != "mine" {
		t.Fatalf("own ack %v", own)
	}
	select {
	case ack := <-acks:
		if ack.Node != "lab-a/n0" || ack.ClusterId != "cluster-b" || ack.Term != 2 || ack.Generation != 5 || len(ack.Runs) != 1 || ack.Runs[0].Job != "j1" {
			t.Fatalf("borrower got ack %v", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ack relayed to the borrower")
	}
	a.link.Relay(&pb.WorkerReports{Reports: []*pb.WorkerReport{{Node: "n0", Job: "j1", Incarnation: 1, Rank: 1, Progress: 0.5}, {Node: "n0", Job: "mine"}}})
	select {
	case d := <-got:
		reps, ok := d.msg.(*pb.WorkerReports)
		if !ok || !proto.Equal(d.to, owner) || len(reps.Reports) != 1 || reps.Reports[0].Node != "lab-a/n0" || reps.Reports[0].Progress != 0.5 {
			t.Fatalf("borrower's job actor got %v: %v", d.to, d.msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report relayed to the borrower")
	}
	// The lender reclaims: its next Assign of n0 has no borrowed run.
	if err := a.link.Commit(ctx, federation.Command{Op: federation.OpReclaim, From: "lab-a", Lease: "l1", At: at + 1}); err != nil {
		t.Fatal(err)
	}
	if m := a.link.Borrowed("n0"); len(m) != 0 {
		t.Fatalf("after the reclaim n0 still gets %v", m)
	}
	if !strings.Contains(a.logs.String(), "borrowed workers stopped") {
		t.Errorf("the end of the borrowed run is not logged:\n%s", a.logs)
	}
}

// DecodeOrder and DecodeRelay never panic, and what they accept is what
// the lender's node would accept (every run checked) and encodes back.
func FuzzDecodeOrder(f *testing.F) {
	enc, _ := proto.Marshal(&pb.Assign{ClusterId: "c", Term: 1, Generation: 2, Runs: []*pb.RunJob{run("j1", 2, nil)}})
	body, _ := json.Marshal(OrderMessage{From: "lab-b", Node: "n0", Assign: enc})
	f.Add(body)
	f.Add([]byte(`{"from":"lab-b","node":"n0","assign":""}`))
	f.Add([]byte(`{"from":"lab-b","node":"n0","assign":"AA=="} x`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOrder(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if o.Assign.ClusterId == "" || o.GPUs() > federation.MaxNodeGPUs {
			t.Fatalf("accepted %v", o.Assign)
		}
		for _, rj := range o.Assign.Runs {
			if err := checkRun(rj); err != nil {
				t.Fatalf("accepted run %v: %v", rj, err)
			}
		}
	})
}

func FuzzDecodeRelay(f *testing.F) {
	ack, _ := proto.Marshal(&pb.AssignAck{Ok: true, Node: "n0", Runs: []*pb.RunStatus{{Job: "j1"}}})
	reps, _ := proto.Marshal(&pb.WorkerReports{Reports: []*pb.WorkerReport{{Node: "n0", Job: "j1"}}})
	ex, _ := proto.Marshal(&pb.WorkerExited{Node: "n0", Job: "j1"})
	body, _ := json.Marshal(RelayMessage{From: "lab-a", Ack: ack, Reports: reps, Exited: [][]byte{ex}})
	f.Add(body)
	f.Add([]byte(`{"from":"lab-a"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRelay(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if r.Ack == nil && r.Reports == nil && len(r.Exited) == 0 {
			t.Fatal("accepted an empty relay")
		}
		if r.Ack != nil && !federation.ValidName(r.Ack.Node) {
			t.Fatalf("accepted an ack of node %q", r.Ack.Node)
		}
	})
}
