package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/pb"
)

func runStatus(ack *pb.AssignAck, job string, inc uint64) *pb.RunStatus {
	for _, r := range ack.Runs {
		if r.Job == job && r.Incarnation == inc {
			return r
		}
	}
	return nil
}

func TestTermAndGenerationFenceAssignments(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	if ack := f.assign(5); !ack.Ok {
		t.Fatal(ack.Error)
	}
	// A new leader (term 2) carries on from any generation ...
	f.term = 2
	if ack := f.assign(3, f.run("a", 1, 1, "serve")); !ack.Ok || ack.Term != 2 || ack.Generation != 3 {
		t.Fatalf("new term: %v", ack)
	}
	f.reports(1)
	// ... and the deposed leader of term 1 is refused, whatever its
	// generation: it cannot stop or start anything.
	f.term = 1
	if ack := f.assign(9); ack.Ok || !strings.Contains(ack.Error, "stale term 1") || runStatus(ack, "a", 1).GetAlive() != 1 {
		t.Fatalf("deposed leader: %v", ack)
	}
	f.quiet(200 * time.Millisecond)
}

func TestAckTellsWhatTheNodeRuns(t *testing.T) {
	f := newFixture(t, 3, time.Second)
	f.assign(1, f.run("done", 1, 1, "done"), f.run("fail", 1, 1, "fail"), f.run("up", 1, 1, "serve"))
	// Wait for: done's report and exit, fail's exit, up's report.
	var seen int
	for seen < 4 {
		f.next(5 * time.Second)
		seen++
	}
	ack := f.assign(2, f.run("done", 1, 1, "done"), f.run("fail", 1, 1, "fail"), f.run("up", 1, 1, "serve"))
	d, fl, up := runStatus(ack, "done", 1), runStatus(ack, "fail", 1), runStatus(ack, "up", 1)
	switch {
	case d == nil || !d.Done || d.Alive != 0 || len(d.Exits) != 1 || d.Exits[0].ExitCode != 0:
		t.Errorf("done run %v", d)
	case fl == nil || fl.Done || len(fl.Exits) != 1 || fl.Exits[0].ExitCode != 3 || fl.Exits[0].Requested:
		t.Errorf("failed run %v", fl)
	case up == nil || up.Alive != 1 || up.Pending || len(up.Gpus) != 1:
		t.Errorf("running run %v", up)
	}
	// Dropped from the assignment, finished runs are forgotten.
	ack = f.assign(3, f.run("up", 1, 1, "serve"))
	if len(ack.Runs) != 1 {
		t.Errorf("after dropping the finished runs: %v", ack.Runs)
	}
}

func TestRestartedAgentDoesNotRerunAnOldIncarnation(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureIn(t, 2, time.Second, dir)
	a := f.run("a", 3, 1, "serve")
	if ack := f.assign(7, a); !ack.Ok {
		t.Fatal(ack.Error)
	}
	f.reports(1)
	f.restart()
	for range 1 {
		if m, ok := f.next(5 * time.Second).(*pb.WorkerExited); !ok || !m.Requested {
			t.Fatalf("the stopped node's worker: %v", m)
		}
	}
	// The same leader re-sends its desired state: incarnation 3 already
	// ran here, so it is refused (the leader restarts the job under a new
	// incarnation) rather than run a second time.
	ack := f.assign(8, a)
	if rs := runStatus(ack, "a", 3); !ack.Ok || rs == nil || !strings.Contains(rs.Refused, "already ran") {
		t.Fatalf("re-sent after the restart: %v", ack)
	}
	f.quiet(300 * time.Millisecond)
	// A stale assignment is still refused after the restart.
	if ack := f.assign(6, a); ack.Ok || ack.Generation != 8 {
		t.Fatalf("stale after restart: %v", ack)
	}
	// The next incarnation runs.
	if ack := f.assign(9, f.run("a", 4, 1, "serve")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	if r := f.reports(1)[0]; r.Incarnation != 4 {
		t.Fatalf("report %v", r)
	}
}

func TestRebuiltClusterResetsFencing(t *testing.T) {
	f := newFixtureIn(t, 1, time.Second, t.TempDir())
	f.term = 40
	f.assign(100, f.run("a", 5, 1, "serve"))
	f.reports(1)
	// A rebuilt Raft cluster starts again at term 1, generation 1, with
	// incarnations from 1: a new cluster id resets the fencing instead of
	// wedging the node on "stale term".
	f.cluster, f.term = "c2", 1
	ack := f.assign(1, f.run("a", 1, 1, "serve"))
	if !ack.Ok || ack.ClusterId != "c2" || ack.Term != 1 {
		t.Fatalf("rebuilt cluster: %v", ack)
	}
	if !strings.Contains(f.log.String(), "ANOTHER CLUSTER") {
		t.Errorf("no loud log line:\n%s", f.log.String())
	}
	for {
		switch m := f.next(5 * time.Second).(type) {
		case *pb.WorkerExited:
			continue // the old cluster's worker
		case *pb.WorkerReport:
			if m.Incarnation != 1 {
				t.Fatalf("report %v", m)
			}
			return
		}
	}
}

func TestAssignmentWithoutClusterIsRefused(t *testing.T) {
	f := newFixture(t, 1, time.Second)
	if ack := f.send(&pb.Assign{Term: 1, Generation: 1}); ack.Ok || !strings.Contains(ack.Error, "no cluster") {
		t.Fatalf("ack %v", ack)
	}
}

func TestCorruptFencingStateStopsTheAgent(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fencingFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadFencing(dir)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("corrupt state: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, fencingFile), []byte(`{"latest":{"A B":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadFencing(dir); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad job name: %v", err)
	}
}

func TestFencingRemembersDroppedJobsBounded(t *testing.T) {
	f := fencing{Latest: map[string]uint64{}, Dropped: map[string]uint64{}}
	for i := range remembered + 10 {
		job := fmt.Sprintf("j%04d", i)
		f.Latest[job] = 1
		f.Dropped[job] = uint64(i)
	}
	f.Latest["live"] = 9
	f.prune()
	if len(f.Latest) != remembered || f.Latest["live"] != 9 || f.Latest["j0010"] != 0 || f.Latest["j0011"] != 1 {
		t.Fatalf("%d remembered, live %d, j0010 %d, j0011 %d", len(f.Latest), f.Latest["live"], f.Latest["j0010"], f.Latest["j0011"])
	}
	dir := t.TempDir()
	if err := f.save(dir); err != nil {
		t.Fatal(err)
	}
	g, err := loadFencing(dir)
	if err != nil || !g.equal(&f) {
		t.Fatalf("reloaded %v", err)
	}
}
