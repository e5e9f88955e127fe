package linear

import (
	"errors"
	"os"
	"strings"
	"testing"

	"pollux/testbed/chaos/history"
)

// builder writes a history: each call appends lines at increasing times.
type builder struct {
	t     int64
	id    uint64
	lines []history.Line
}

func (b *builder) line(o *history.Op) {
	b.t += 10
	b.lines = append(b.lines, history.Line{T: b.t, Op: o})
}

func (b *builder) invoke(client int, f history.F, job string) uint64 {
	b.id++
	b.line(&history.Op{Type: history.Invoke, ID: b.id, Client: client, F: f, Server: "s0", Job: job})
	return b.id
}

func (b *builder) done(id uint64, client int, f history.F, job string, typ history.Type, code int) {
	b.line(&history.Op{Type: typ, ID: id, Client: client, F: f, Job: job, Code: code})
}

// call is an invoke followed by its completion (no overlap).
func (b *builder) call(f history.F, job string, typ history.Type, code int) {
	b.done(b.invoke(0, f, job), 0, f, job, typ, code)
}

func (b *builder) read(stale bool, jobs ...history.Job) {
	id := b.invoke(1, history.Jobs, "")
	b.line(&history.Op{Type: history.OK, ID: id, Client: 1, F: history.Jobs, Code: 200, Stale: stale, Jobs: jobs})
}

// get is a single-job read: found (200) with j, or absent (404).
func (b *builder) get(stale bool, id string, j *history.Job) {
	op := b.invoke(3, history.GetJob, id)
	done := &history.Op{Type: history.OK, ID: op, Client: 3, F: history.GetJob, Job: id, Code: 404, Stale: stale}
	if j != nil {
		done.Code, done.Jobs = 200, []history.Job{*j}
	}
	b.line(done)
}

func ptr(j history.Job) *history.Job { return &j }

func (b *builder) status(stale bool, gen, term uint64) {
	id := b.invoke(2, history.Status, "")
	b.line(&history.Op{Type: history.OK, ID: id, Client: 2, F: history.Status, Code: 200, Stale: stale,
		Status: &history.StatusView{Serving: "s0", Leader: "s0", Generation: gen, Term: term}})
}

func job(id, state string, inc uint64, epoch int, progress float64) history.Job {
	return history.Job{ID: id, State: state, Inc: inc, Epoch: epoch, Progress: progress}
}

// good is a linearizable history: job a submitted (its first attempt timed
// out, the retry was told it exists), job b created, reads that watch them
// progress and complete, a stale read showing old values, generations that
// grow.
func good() *builder {
	b := &builder{}
	b.read(false)
	b.call(history.Submit, "a", history.Info, 0)
	b.call(history.Submit, "a", history.OK, 409)
	b.call(history.Submit, "b", history.OK, 201)
	b.call(history.Submit, "bad", history.Fail, 400)
	b.status(false, 3, 2)
	b.read(false, job("a", "pending", 0, 0, 0), job("b", "running", 1, 0, 5))
	b.read(false, job("a", "running", 1, 1, 50), job("b", "running", 2, 1, 60))
	b.status(true, 1, 1) // stale: no promise
	b.read(true, job("a", "pending", 0, 0, 0))
	b.status(false, 5, 3)
	b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60))
	b.call(history.Cancel, "a", history.OK, 409)
	b.call(history.Cancel, "zzz", history.Fail, 404)
	b.get(false, "zzz", nil)
	b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60))
	b.call(history.Submit, "d", history.OK, 201)
	b.get(false, "d", ptr(job("d", "running", 1, 0, 2)))
	b.call(history.Cancel, "d", history.OK, 200)
	b.get(true, "d", ptr(job("d", "running", 1, 0, 2))) // stale: no promise
	b.get(false, "d", ptr(job("d", "cancelled", 1, 0, 2)))
	b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60), job("d", "cancelled", 1, 0, 2))
	return b
}

// TestCancelRefusedAfterFinishingOnItsOwn: a job completes between a read
// and a cancel, which is refused as finished (409) before any read shows
// it completed: linearizable (pollux chaos seed 736 had it flagged).
func TestCancelRefusedAfterFinishingOnItsOwn(t *testing.T) {
	b := &builder{}
	b.call(history.Submit, "f", history.OK, 201)
	b.get(false, "f", ptr(job("f", "rescaling", 2, 1, 50)))
	b.call(history.Cancel, "f", history.Fail, 409)
	b.get(false, "f", ptr(job("f", "completed", 2, 1, 50)))
	res, err := Check(b.lines, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Linearizable() {
		t.Fatalf("%+v", res)
	}
}

func TestLinearizable(t *testing.T) {
	res, err := Check(good().lines, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Linearizable() || res.Partitions != 6 {
		t.Fatalf("%+v", res)
	}
}

func TestNotLinearizable(t *testing.T) {
	dC := job("d", "cancelled", 1, 0, 2) // as the good history leaves it
	cases := map[string]struct {
		edit func(b *builder)
		part string
	}{
		"created twice": {func(b *builder) { b.call(history.Submit, "b", history.OK, 201) }, "job b"},
		"exists before any submission": {func(b *builder) {
			b.call(history.Submit, "c", history.OK, 409)
		}, "job c"},
		"acknowledged job absent": {func(b *builder) { b.read(false, job("a", "completed", 2, 3, 300), dC) }, "job b"},
		"completed job running again": {func(b *builder) {
			b.read(false, job("a", "running", 3, 3, 300), job("b", "failed", 2, 1, 60), dC)
		}, "job a"},
		"progress backwards": {func(b *builder) {
			b.read(false, job("a", "completed", 2, 3, 299), job("b", "failed", 2, 1, 60), dC)
		}, "job a"},
		"incarnation backwards": {func(b *builder) {
			b.read(false, job("a", "completed", 1, 3, 300), job("b", "failed", 2, 1, 60), dC)
		}, "job a"},
		"cancelled without a cancel": {func(b *builder) {
			b.call(history.Submit, "c", history.OK, 201)
			b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60), job("c", "cancelled", 0, 0, 0), dC)
		}, "job c"},
		"completed after cancel": {func(b *builder) {
			b.call(history.Submit, "c", history.OK, 201)
			b.call(history.Cancel, "c", history.OK, 200)
			b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60), job("c", "completed", 1, 9, 900), dC)
		}, "job c"},
		"cancel of a missing job acknowledged": {func(b *builder) { b.call(history.Cancel, "zzz", history.OK, 200) }, "job zzz"},
		"read completed after cancel":          {func(b *builder) { b.get(false, "d", ptr(job("d", "completed", 1, 9, 900))) }, "job d"},
		"read running after cancel":            {func(b *builder) { b.get(false, "d", ptr(job("d", "running", 1, 0, 2))) }, "job d"},
		"read absent after creation":           {func(b *builder) { b.get(false, "d", nil) }, "job d"},
		"read before any submission": {func(b *builder) {
			b.get(false, "e", ptr(job("e", "pending", 0, 0, 0)))
			b.call(history.Submit, "e", history.OK, 201)
		}, "job e"},
		"cancel refused as finished, then running": {func(b *builder) {
			b.call(history.Submit, "c", history.OK, 201)
			b.call(history.Cancel, "c", history.Fail, 409)
			b.get(false, "c", ptr(job("c", "running", 1, 0, 2)))
		}, "job c"},
		"phantom job": {func(b *builder) {
			b.read(false, job("a", "completed", 2, 3, 300), job("b", "failed", 2, 1, 60), job("ghost", "running", 1, 0, 0), dC)
		}, "job ghost"},
		"generation backwards": {func(b *builder) { b.status(false, 4, 3) }, "generation"},
		"term backwards":       {func(b *builder) { b.status(false, 6, 2) }, "generation"},
	}
	for name, c := range cases {
		b := good()
		c.edit(b)
		dir := t.TempDir()
		res, err := Check(b.lines, Options{VisualizeDir: dir})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Linearizable() || len(res.Illegal) != 1 || res.Illegal[0].Partition != c.part {
			t.Errorf("%s: %+v, want %s illegal", name, res, c.part)
			continue
		}
		html, err := os.ReadFile(res.Illegal[0].Visualization)
		if err != nil || !strings.Contains(string(html), "<html") {
			t.Errorf("%s: visualisation %q: %v", name, res.Illegal[0].Visualization, err)
		}
	}
}

// Concurrent operations may take effect in either order; an operation
// whose outcome is unknown may take effect at any time after its invoke,
// or never.
func TestConcurrencyAndUnknowns(t *testing.T) {
	b := &builder{}
	// A read that overlaps the creation may see the job or not.
	sub := b.invoke(0, history.Submit, "a")
	r1 := b.invoke(1, history.Jobs, "")
	b.line(&history.Op{Type: history.OK, ID: r1, Client: 1, F: history.Jobs, Code: 200, Jobs: []history.Job{job("a", "pending", 0, 0, 0)}})
	b.done(sub, 0, history.Submit, "a", history.OK, 201)
	// A submission that timed out shows up much later.
	b.call(history.Submit, "c", history.Info, 0)
	b.read(false, job("a", "running", 1, 0, 1))
	b.read(false, job("a", "running", 1, 0, 1), job("c", "pending", 0, 0, 0))
	// A cancel still open when the history ends.
	b.invoke(3, history.Cancel, "a")
	b.read(false, job("a", "cancelled", 1, 0, 1), job("c", "pending", 0, 0, 0))
	res, err := Check(b.lines, Options{})
	if err != nil || !res.Linearizable() {
		t.Fatalf("%+v, %v", res, err)
	}
	// But a read that completes before the creation was invoked cannot see it.
	b2 := &builder{}
	b2.read(false, job("a", "pending", 0, 0, 0))
	b2.call(history.Submit, "a", history.OK, 201)
	if res, _ := Check(b2.lines, Options{}); res.Linearizable() {
		t.Error("a job seen before its creation began")
	}
}

func TestBadHistory(t *testing.T) {
	b := &builder{}
	b.done(7, 0, history.Jobs, "", history.Info, 0)
	if _, err := Check(b.lines, Options{}); !errors.Is(err, ErrHistory) {
		t.Errorf("completion without invoke: %v", err)
	}
	b = &builder{}
	id := b.invoke(0, history.Submit, "a")
	b.done(id, 0, history.Submit, "b", history.OK, 201)
	if _, err := Check(b.lines, Options{}); !errors.Is(err, ErrHistory) {
		t.Errorf("completion of another job: %v", err)
	}
}

// keyed is a submit of job with idempotency key key, answered code.
func (b *builder) keyed(job, key string, typ history.Type, code int) {
	b.id++
	id := b.id
	b.line(&history.Op{Type: history.Invoke, ID: id, Client: 0, F: history.Submit, Server: "s0", Job: job, Key: key})
	b.line(&history.Op{Type: typ, ID: id, Client: 0, F: history.Submit, Job: job, Code: code})
}

// TestKeyedSubmitRetries: a 201 for a job that exists is the answer to a
// retry with the key of the submission that made it, and nothing else;
// a keyed 409 (a refusal) says the job exists.
func TestKeyedSubmitRetries(t *testing.T) {
	tests := []struct {
		name string
		edit func(b *builder)
		ok   bool
	}{
		{"retry with the key after a lost answer", func(b *builder) {
			b.keyed("k", "key1", history.Info, 503)
			b.keyed("k", "key1", history.OK, 201)
		}, true},
		{"retry with the key after the answer", func(b *builder) {
			b.keyed("k", "key1", history.OK, 201)
			b.keyed("k", "key1", history.OK, 201)
		}, true},
		{"another key created it again", func(b *builder) {
			b.keyed("k", "key1", history.OK, 201)
			b.keyed("k", "key2", history.OK, 201)
		}, false},
		{"no key created it again", func(b *builder) {
			b.keyed("k", "", history.OK, 201)
			b.keyed("k", "", history.OK, 201)
		}, false},
		{"another key refused, the job existing", func(b *builder) {
			b.keyed("k", "key1", history.OK, 201)
			b.keyed("k", "key2", history.Fail, 409)
		}, true},
		{"refused as existing before any submission", func(b *builder) {
			b.keyed("k", "key2", history.Fail, 409)
		}, false},
		{"the key kept over a read", func(b *builder) {
			b.keyed("k", "key1", history.OK, 201)
			b.get(false, "k", ptr(job("k", "running", 1, 0, 0)))
			b.keyed("k", "key1", history.OK, 201)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &builder{}
			tt.edit(b)
			res, err := Check(b.lines, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Linearizable() != tt.ok {
				t.Errorf("linearizable %v, want %v: %+v", res.Linearizable(), tt.ok, res)
			}
		})
	}
}
