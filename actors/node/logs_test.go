package node

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
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
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err = store.Read(workerlog.Key{Job: "talk", Incarnation: tc.inc, Rank: tc.rank}, 0, 0, 0)
			if (err == nil && c.Closed) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
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
