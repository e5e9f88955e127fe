package node

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/internal/poll"
)

// TestWorkerOutputInLogs: with a log store, each worker's stdout and
// stderr go to its own log (job, incarnation, rank), closed when it
// exits, and an earlier incarnation's log stays after a later one runs.
func TestWorkerOutputInLogs(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	store, err := workerlog.Open(workerlog.Config{Dir: filepath.Join(t.TempDir(), "logs")})
	if err != nil {
		t.Fatal(err)
	}
	f.allow = []string{"emulated:*"}
	f.restartWith(func(c *Config) { c.Logs = store })
	waitExits := func(n int) {
		t.Helper()
		for n > 0 {
			if _, ok := f.next(10 * time.Second).(*pb.WorkerExited); ok {
				n--
			}
		}
	}
	if ack := f.assign(1, f.run("talk", 1, 2, "say")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	waitExits(2)
	if ack := f.assign(2, f.run("talk", 2, 1, "say")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	waitExits(1)
	for _, tc := range []struct {
		inc  uint64
		rank int
		want []string
	}{
		{1, 0, []string{"err of rank 0", "out of rank 0"}},
		{1, 1, []string{"err of rank 1", "out of rank 1"}},
		{2, 0, []string{"err of rank 0", "out of rank 0"}},
	} {
		// The log is closed once the exit is seen; wait for it.
		var c workerlog.Chunk
		poll.Wait(10*time.Second, func() bool {
			c, err = store.Read(workerlog.Key{Job: "talk", Incarnation: tc.inc, Rank: tc.rank}, 0, 0, 0)
			return err == nil && c.Closed
		})
		if err != nil || !c.Closed {
			t.Fatalf("incarnation %d rank %d: %+v, %v", tc.inc, tc.rank, c, err)
		}
		var got []string
		for _, l := range c.Lines {
			got = append(got, l.Text)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("incarnation %d rank %d: %q, want %q", tc.inc, tc.rank, got, tc.want)
		}
	}
}

// TestPrunedJobsLogsAreDeleted: a node lists in its acks the jobs it
// keeps logs of but runs no more, and deletes the logs of those an
// accepted assignment's forget_logs names (the cluster pruned them):
// never from a refused (stale) assignment, never of a job it runs.
func TestPrunedJobsLogsAreDeleted(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	store, err := workerlog.Open(workerlog.Config{Dir: filepath.Join(t.TempDir(), "logs")})
	if err != nil {
		t.Fatal(err)
	}
	f.allow = []string{"emulated:*"}
	f.restartWith(func(c *Config) { c.Logs = store })
	has := func(job string) bool { return slices.Contains(store.Jobs(), job) }
	waitExit := func() {
		t.Helper()
		for {
			if _, ok := f.next(10 * time.Second).(*pb.WorkerExited); ok {
				return
			}
		}
	}
	assign := func(gen uint64, forget []string, runs ...*pb.RunJob) *pb.AssignAck {
		t.Helper()
		return f.send(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: gen, Runs: runs, ForgetLogs: forget})
	}
	if ack := assign(1, nil, f.run("talk", 1, 1, "say")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	waitExit()
	live := f.run("live", 1, 1, "run")
	steps := []struct {
		name    string
		gen     uint64
		forget  []string
		runs    []*pb.RunJob
		ok      bool
		logJobs []string // the ack's log_jobs
		kept    []string
		deleted []string
	}{
		{"a run starts; the finished job's logs are listed", 2, nil, []*pb.RunJob{live}, true, []string{"talk"}, []string{"talk", "live"}, nil},
		{"a stale assignment forgets nothing", 1, []string{"talk"}, nil, false, []string{"talk"}, []string{"talk", "live"}, nil},
		{"pruned: deleted, but not the running job's", 3, []string{"talk", "live"}, []*pb.RunJob{live}, true, nil, []string{"live"}, []string{"talk"}},
	}
	for _, st := range steps {
		ack := assign(st.gen, st.forget, st.runs...)
		if ack.Ok != st.ok || !slices.Equal(ack.LogJobs, st.logJobs) {
			t.Errorf("%s: ok %v (%s), log_jobs %q; want ok %v, log_jobs %q", st.name, ack.Ok, ack.Error, ack.LogJobs, st.ok, st.logJobs)
		}
		for _, job := range st.kept {
			if !has(job) {
				t.Errorf("%s: the logs of %s are gone", st.name, job)
			}
		}
		for _, job := range st.deleted {
			if has(job) {
				t.Errorf("%s: the logs of %s are kept", st.name, job)
			}
		}
	}
	// Once its run is stopped and its worker gone, the job's logs are
	// listed, and go when the cluster prunes it.
	if ack := assign(4, nil); !ack.Ok {
		t.Fatal(ack.Error)
	}
	waitExit()
	deadline := time.Now().Add(10 * time.Second)
	for gen := uint64(5); has("live"); gen++ {
		ack := assign(gen, []string{"live"})
		if time.Now().After(deadline) {
			t.Fatalf("the stopped job's logs are kept (ack %v)", ack)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
