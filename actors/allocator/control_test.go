package allocator_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/internal/poll"
)

// choiceIn reports whether bid b chose (m, s, gain) for k replicas over n
// nodes.
func choiceIn(b *pb.Bid, n, k, m, s int, gain float64) bool {
	t := b.Single
	if n > 1 {
		t = b.Multi
	}
	if k < 1 || k > len(t) {
		return false
	}
	c := t[k-1]
	return int(c.LocalBsz) == m && int(c.AccumSteps) == s && math.Abs(c.Gain-gain) < 1e-12
}

// TestThreeServersRunJobsOnTheirActorsBids runs three servers (job actors
// spread over all of them) and two nodes of 4 GPUs through a mixed
// workload, kills the leader on the way, and checks from outside the
// allocator that every worker ran the batch configuration its own job's
// actor bid for its shape.
func TestThreeServersRunJobsOnTheirActorsBids(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 3, nodes: 2, gpus: 4, maxFailures: 5, timeScale: 800})
	first := c.leader()
	jobs := map[string]string{"c1": "cifar10", "c2": "cifar10", "d1": "deepspeech2", "n1": "ncf", "b1": "bert"}
	ids := make([]string, 0, len(jobs))
	for id, app := range jobs {
		c.submit(id, app, 8)
		ids = append(ids, id)
	}
	// Kill the leader once the jobs run.
	poll.Until(t, 30*time.Second, "jobs running", func() bool {
		st := c.any().srv.LocalState()
		return len(st.Allocation.Jobs) >= 3
	})
	killedAt := time.Now()
	c.kill(first)
	next := c.leader()
	t.Logf("killed leader %s; %s leads", first.id, next.id)
	st := c.waitAll(120*time.Second, ids...)
	for _, id := range ids {
		if j := st.Jobs[id]; j.State != state.Completed {
			t.Errorf("job %s %v: %s", id, j.State, j.Reason)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// Every worker's configuration is in a bid of its own job's actor
	// (and, the jobs being of different applications, not in all of the
	// others').
	adapted := false
	for _, w := range c.told {
		e := w.Env
		found := false
		for _, b := range c.bids[e.JobID] {
			if choiceIn(b, e.NumNodes, e.WorldSize, e.AtomicBatch, e.AccumSteps, e.Gain) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("job %s incarnation %d ran m=%d s=%d gain=%v on %d nodes, %d replicas: no bid of its actor chose that",
				e.JobID, e.Incarnation, e.AtomicBatch, e.AccumSteps, e.Gain, e.NumNodes, e.WorldSize)
		}
		if e.WorldSize*e.AtomicBatch*(e.AccumSteps+1) != c.cat[jobs[e.JobID]].Limits().InitBatch {
			adapted = true
		}
	}
	if len(c.told) < len(jobs) {
		t.Errorf("%d workers started for %d jobs", len(c.told), len(jobs))
	}
	if !adapted {
		t.Error("no job ever ran at a batch other than its initial one: bids never used a model")
	}
	// Job actors ran on more than one server: their bids carry sessions
	// given by the leaders to different hosts; a job whose actor moved
	// kept its profile (its new actor's first bid already knows the
	// replicas it was profiled at).
	models := 0
	for _, id := range ids {
		for _, b := range c.bids[id] {
			if b.HasModel {
				models++
				break
			}
		}
		if j := st.Jobs[id]; len(j.Profile) == 0 || j.Attained <= 0 || j.Bid.Version == 0 {
			t.Errorf("job %s: %d profile entries, attained %v, bid %d", id, len(j.Profile), j.Attained, j.Bid.Version)
		}
	}
	if models < len(ids)-1 {
		t.Errorf("only %d of %d jobs bid a fitted model", models, len(ids))
	}
	// The new leader ran rounds of its own (how soon is a benchmark's
	// business: pollux bench controlplane).
	newTerm := false
	for _, r := range c.rounds {
		if r.FirstOfTerm && r.Elected.After(killedAt) && r.Committed {
			newTerm = true
			t.Logf("first round of the new leader done %v after its election", r.Began.Add(r.Duration).Sub(r.Elected))
		}
	}
	if !newTerm {
		t.Error("no committed round of a leader elected after the kill")
	}
}

// TestLostMessagesAreRecovered drops one message of each kind and checks
// that the job still completes, exactly once: the leader's every-round
// reconciliation from the nodes' acks recovers what the message carried.
func TestLostMessagesAreRecovered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	tests := []struct {
		kind  string
		app   string
		match func(any) bool
	}{
		// The crashed worker's exit: its job actor never hears of the
		// failure, the node's next ack tells the leader.
		{"exit", "crash-once:cifar10", func(m any) bool { return m.(*pb.WorkerExited).ExitCode != 0 }},
		// Rank 0's done report: the node's ack says rank 0 reported done.
		{"done", "cifar10", nil},
		// The first assignment that starts the job: the next round sends
		// the whole desired state again.
		{"assign", "cifar10", func(m any) bool { return len(m.(*pb.Assign).Runs) > 0 }},
		// The ack telling of the crashed worker (its exit message is
		// dropped too, so only acks can tell): of an assignment or of a
		// lease renewal, whichever comes first.
		{"ack", "crash-once:cifar10", func(m any) bool {
			ack, ok := m.(*pb.AssignAck)
			if l, lease := m.(*pb.LeaseAck); lease {
				ack, ok = l.Status, true
			}
			if !ok {
				return false
			}
			for _, r := range ack.Runs {
				if len(r.Exits) > 0 {
					return true
				}
			}
			return false
		}},
		// The job's first bid: it is not placed until the actor bids
		// again.
		{"bid", "cifar10", nil},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, maxFailures: 5})
			c.leader()
			c.drop(tc.kind, 1, tc.match)
			if tc.kind == "ack" {
				c.drop("exit", 100, func(m any) bool { return m.(*pb.WorkerExited).ExitCode != 0 })
			}
			c.submit("j", tc.app, 2)
			st := c.waitAll(60*time.Second, "j")
			j := st.Jobs["j"]
			if j.State != state.Completed {
				t.Fatalf("job %v: %s", j.State, j.Reason)
			}
			if c.dropped(tc.kind) != 1 {
				t.Fatalf("%d %s messages dropped, want 1", c.dropped(tc.kind), tc.kind)
			}
			if strings.HasPrefix(tc.app, "crash-once:") && j.Incarnation < 2 {
				t.Errorf("the crashed incarnation was not replaced: incarnation %d", j.Incarnation)
			}
			// No incarnation ever ran twice.
			c.mu.Lock()
			defer c.mu.Unlock()
			seen := map[string]bool{}
			for _, w := range c.told {
				k := fmt.Sprintf("%d/%d", w.Env.Incarnation, w.Env.Rank)
				if seen[k] {
					t.Errorf("incarnation/rank %s started twice", k)
				}
				seen[k] = true
			}
		})
	}
}

// TestCrashLoopingJobFails: a job whose workers always fail is marked
// Failed after MaxFailures incarnations, with the reason, and frees its
// GPUs; the counter lives in the replicated state.
func TestCrashLoopingJobFails(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, maxFailures: 3})
	c.leader()
	c.submitSpec("x", state.JobSpec{Name: "x", App: "crash", MinReplicas: 1, MaxReplicas: 1, Limits: c.cat["cifar10"].Limits()})
	st := c.waitAll(30*time.Second, "x")
	j := st.Jobs["x"]
	if j.State != state.Failed || !strings.Contains(j.Reason, "3 incarnations") || j.Crashes != 3 {
		t.Fatalf("job %v crashes %d: %q", j.State, j.Crashes, j.Reason)
	}
	if len(st.Allocation.Jobs["x"]) != 0 {
		t.Fatal("the failed job still holds GPUs")
	}
}

// TestCancelStopsWorkers: a cancelled job's workers stop and its GPUs go
// to the others.
func TestCancelStopsWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, timeScale: 10})
	c.leader()
	c.submit("long", "bert", 2)
	poll.Until(t, 20*time.Second, "the job to run", func() bool { return len(c.any().srv.LocalState().Allocation.Jobs["long"]) > 0 })
	ctx := ctxT(t)
	if err := c.any().srv.FinishJob(ctx, state.FinishJob{ID: "long", State: state.Cancelled, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "its workers to stop", func() bool {
		for _, r := range c.nodeStatus(0).Jobs {
			if r.Job == "long" {
				return false
			}
		}
		return true
	})
	st := c.any().srv.LocalState()
	if j := st.Jobs["long"]; j.State != state.Cancelled || len(st.Allocation.Jobs["long"]) != 0 {
		t.Fatalf("state %v, allocation %v", j.State, st.Allocation.Jobs["long"])
	}
	// Its GPUs go to the next job.
	c.submit("next", "cifar10", 2)
	poll.Until(t, 20*time.Second, "the next job to run", func() bool { return len(c.any().srv.LocalState().Allocation.Jobs["next"]) > 0 })
}

// TestKeylessClusterGetsAReportKey: a cluster configured before report
// keys existed gets one from a leader started without a checkpoint root
// of its own (the cluster keeps its id and root), and runs a job to
// completion with tokens derived from it.
func TestKeylessClusterGetsAReportKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, timeScale: 3000, keyless: true})
	poll.Until(t, 10*time.Second, "a report key", func() bool { return c.any().srv.LocalState().Config.ReportKey != "" })
	if cfg := c.any().srv.LocalState().Config; cfg.ID != "old" || cfg.CheckpointRoot != c.root || len(cfg.ReportKey) != state.ReportKeyLen {
		t.Fatalf("config %+v", cfg)
	}
	c.submit("j", "cifar10", 2)
	if j := c.waitAll(60*time.Second, "j").Jobs["j"]; j.State != state.Completed {
		t.Fatalf("job %v: %s", j.State, j.Reason)
	}
}

// TestCompletedJobKeepsItsLastEpoch: the job actor's done bid carries
// the measurements of the job's last epochs, which no round committed
// yet; the completion commits them, so the finished job shows every
// epoch its application trains for. The nodes' acks telling of the done
// report are dropped, so that the completion comes from the bid.
func TestCompletedJobKeepsItsLastEpoch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, timeScale: 3000})
	c.leader()
	c.drop("ack", 1<<20, func(m any) bool {
		ack, ok := m.(*pb.AssignAck)
		if l, lease := m.(*pb.LeaseAck); lease {
			ack, ok = l.Status, true
		}
		return ok && slices.ContainsFunc(ack.GetRuns(), func(r *pb.RunStatus) bool { return r.Done })
	})
	c.submit("j", "cifar10", 2)
	j := c.waitAll(60*time.Second, "j").Jobs["j"]
	if j.State != state.Completed {
		t.Fatalf("job %v: %s", j.State, j.Reason)
	}
	if want := c.cat["cifar10"].MaxEpochs(); j.Epoch != want {
		t.Errorf("the completed job shows epoch %d of %d", j.Epoch, want)
	}
}

// TestDoneNeedsRank0sToken: a done report that reaches the leader without
// rank 0's report token of the current incarnation (a forged ack or bid,
// an agent that does not run rank 0) does not complete the job; with the
// token it does.
func TestDoneNeedsRank0sToken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, timeScale: 10})
	lead := c.leader()
	// On one replica at most: the dones below name the incarnation read
	// once, which a resize would make stale (in-process workers restart
	// in a tenth of a second, a cheap restart the allocator takes).
	c.submit("long", "bert", 1)
	poll.Until(t, 20*time.Second, "the job to run", func() bool { return len(c.any().srv.LocalState().Allocation.Jobs["long"]) > 0 })
	st := c.any().srv.LocalState()
	j := st.Jobs["long"]
	key := []byte(st.Config.ReportKey)
	if len(key) == 0 {
		t.Fatal("the cluster has no report key")
	}
	ack := func(token string) *pb.AssignAck {
		return &pb.AssignAck{Ok: true, Node: "n0", ClusterId: st.Config.ID, Term: st.Allocation.Term, Generation: st.Allocation.Generation,
			Runs: []*pb.RunStatus{{Job: "long", Incarnation: j.Incarnation, Done: true, DoneToken: token, Alive: 1}}}
	}
	bid := func(token string) *pb.Bid {
		return &pb.Bid{Job: "long", Incarnation: j.Incarnation, Session: j.Bid.Session, Version: j.Bid.Version, Done: true, DoneToken: token}
	}
	for _, forged := range []any{
		ack(""), ack(workerproto.ReportToken(key, "long", j.Incarnation, 1)), ack(workerproto.ReportToken(key, "long", j.Incarnation-1, 0)),
		ack(workerproto.ReportToken([]byte("another key"), "long", j.Incarnation, 0)),
		bid(""), bid(workerproto.ReportToken(key, "long", j.Incarnation, 1)),
	} {
		c.sys.Root.Send(lead.alloc, forged)
	}
	// A completion would be committed within a few rounds.
	c.waitRounds("rounds after the forged dones", c.roundMark(), 5, nil)
	if j := c.any().srv.LocalState().Jobs["long"]; j.State.Terminal() {
		t.Fatalf("a done without rank 0's token finished the job: %v", j.State)
	}
	c.sys.Root.Send(lead.alloc, ack(workerproto.ReportToken(key, "long", j.Incarnation, 0)))
	if j := c.waitAll(10*time.Second, "long").Jobs["long"]; j.State != state.Completed {
		t.Fatalf("job %v after rank 0's done", j.State)
	}
}

// TestDeniedJobFailsWithTheReason: a job the nodes' policy forbids (here
// a command outside the default allow-list) fails at once, with the
// node's reason, instead of being restarted.
func TestDeniedJobFailsWithTheReason(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 2, maxFailures: 5})
	c.leader()
	c.submitSpec("sh", state.JobSpec{Name: "sh", Command: []string{"/bin/sh", "-c", "id"}, MinReplicas: 1, MaxReplicas: 1,
		Limits: c.cat["cifar10"].Limits()})
	j := c.waitAll(30*time.Second, "sh").Jobs["sh"]
	if j.State != state.Failed || !strings.Contains(j.Reason, "allow-list") || j.Crashes != 0 {
		t.Fatalf("job %v, crashes %d: %q", j.State, j.Crashes, j.Reason)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.told {
		if w.Env.JobID == "sh" {
			t.Errorf("a worker of the denied job started: %v", w.Argv)
		}
	}
}
