package check

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/testbed/chaos/history"
)

const ms = time.Millisecond

func pstart(t int, role history.Role, id string, pid int, inc uint64, fault string, fseq int) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.ProcStart, Src: "harness", Role: role, ID: id, PID: pid, Inc: inc, Fault: fault, FSeq: fseq}
}

func pexit(t int, role history.Role, id string, pid int, inc uint64) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.ProcExit, Src: "harness", Role: role, ID: id, PID: pid, Inc: inc, Exit: -1, Sig: "KILL"}
}

func kill(t int, role history.Role, id string, pid int, inc uint64, fault string, fseq int) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.Signal, Src: "harness", Role: role, ID: id, PID: pid, Inc: inc, Sig: "KILL", Fault: fault, FSeq: fseq}
}

func submit(t int, job string) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.Submit, Src: "harness", Job: job}
}

func complete(t int, src, job string, index uint64) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.Complete, Src: src, Job: job, Index: index}
}

func wstart(t int, node string, pid int, job string, inc uint64, gpus ...int) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.WorkerStart, Src: "agent/" + node, Node: node, PID: pid, Job: job, Inc: inc, GPUs: gpus}
}

func wstop(t int, src, node string, pid int, job string, inc uint64) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.WorkerStop, Src: src, Node: node, PID: pid, Job: job, Inc: inc}
}

func commit(t int, src string, gen, term, index uint64, alloc string) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.Commit, Src: src, Gen: gen, Term: term, Index: index, Alloc: alloc}
}

// commitAll is one commit applied by the three servers, 1 ms apart.
func commitAll(t int, gen, term, index uint64, alloc string) []history.Event {
	return []history.Event{
		commit(t, "server/s1", gen, term, index, alloc),
		commit(t+1, "server/s2", gen, term, index, alloc),
		commit(t+2, "server/s3", gen, term, index, alloc),
	}
}

func report(t int, job string, inc, into uint64) history.Event {
	return history.Event{T: time.Duration(t) * ms, Kind: history.Report, Src: "server/s2", Job: job, Inc: inc, Into: into}
}

// base is a correct run: 3 servers, 2 agents, jobs a and b; the leader s1
// is killed and restarted (and replays its log), agent n1 is killed with
// job a's workers on it, which the harness then sees gone, job a is
// re-placed on n2 in a new incarnation, n1 comes back, both jobs finish.
func base() []history.Event {
	var h []history.Event
	add := func(e ...history.Event) { h = append(h, e...) }
	add(pstart(0, history.Server, "s1", 101, 1, "", 0), pstart(0, history.Server, "s2", 102, 1, "", 0), pstart(0, history.Server, "s3", 103, 1, "", 0))
	add(pstart(1, history.Agent, "n1", 201, 1, "", 0), pstart(1, history.Agent, "n2", 202, 1, "", 0))
	add(submit(10, "a"), submit(11, "b"), submit(12, "a")) // a's ack retried: still one job
	add(commitAll(20, 1, 1, 5, "A1")...)
	add(wstart(30, "n1", 301, "a", 1, 0), wstart(30, "n1", 302, "a", 1, 1), wstart(31, "n2", 401, "b", 1, 0))
	add(report(40, "a", 1, 1), report(41, "b", 1, 1))
	add(kill(100, history.Server, "s1", 101, 1, "leader-kill", 0), pexit(101, history.Server, "s1", 101, 1))
	add(commit(400, "server/s2", 2, 2, 9, "A2"), commit(401, "server/s3", 2, 2, 9, "A2"))
	add(pstart(600, history.Server, "s1", 111, 2, "leader-kill", 0))
	add(commit(610, "server/s1", 1, 1, 5, "A1"), commit(611, "server/s1", 2, 2, 9, "A2")) // replay
	add(kill(1000, history.Agent, "n1", 201, 1, "agent-kill", 1), pexit(1001, history.Agent, "n1", 201, 1))
	add(wstop(1200, "harness", "n1", 301, "a", 1), wstop(1210, "harness", "n1", 302, "a", 1))
	add(commitAll(1500, 3, 2, 12, "A3")...)
	add(wstart(1600, "n2", 402, "a", 2, 1), wstart(1600, "n2", 403, "a", 2, 2))
	add(report(1700, "a", 2, 2))
	add(pstart(2000, history.Agent, "n1", 211, 2, "agent-kill", 1))
	add(complete(3000, "server/s2", "b", 20), complete(3001, "server/s3", "b", 20), complete(3002, "server/s1", "b", 20))
	add(wstop(3100, "agent/n2", "n2", 401, "b", 1))
	add(complete(4000, "server/s2", "a", 25), complete(4001, "server/s3", "a", 25), complete(4002, "server/s1", "a", 25))
	add(wstop(4100, "agent/n2", "n2", 402, "a", 2), wstop(4100, "agent/n2", "n2", 403, "a", 2))
	return h
}

// edit returns base with the events matching drop removed and more added.
func edit(drop func(history.Event) bool, more ...history.Event) []history.Event {
	h := base()
	if drop != nil {
		h = slices.DeleteFunc(h, drop)
	}
	return append(h, more...)
}

func is(kind history.Kind, job string, pid int) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == kind && e.Job == job && (pid == 0 || e.PID == pid) }
}

func TestCheck(t *testing.T) {
	cfg := Config{Converge: 5 * time.Second}
	cases := []struct {
		name   string
		events []history.Event
		cfg    Config
		want   []Invariant // sorted
		detail string      // a substring of the first violation
	}{
		{name: "correct run", events: base(), cfg: cfg},
		{name: "correct run, shuffled", events: shuffled(base()), cfg: cfg},
		{name: "stop observed twice", events: edit(nil, wstop(3200, "harness", "n2", 401, "b", 1)), cfg: cfg},
		{name: "empty history", cfg: cfg},

		// exactly once
		{name: "lost job", events: edit(is(history.Complete, "a", 0)), cfg: cfg,
			want: []Invariant{Convergence, ExactlyOnce}, detail: `job "a", acknowledged at 0.010s, never completed`},
		{name: "lost job, no bound", events: edit(is(history.Complete, "a", 0)),
			want: []Invariant{ExactlyOnce}},
		{name: "completed twice", events: edit(nil, complete(4200, "server/s2", "a", 30)), cfg: cfg,
			want: []Invariant{ExactlyOnce}, detail: `job "a" completed 2 times (index 25 at 4.000s, index 30 at 4.200s)`},
		{name: "unacknowledged job completes once", events: edit(nil, complete(4200, "server/s2", "c", 30)), cfg: cfg},

		// GPU exclusivity
		{name: "two jobs on one GPU", events: edit(nil, wstart(1600, "n2", 500, "a", 2, 0), wstop(4100, "agent/n2", "n2", 500, "a", 2)), cfg: cfg,
			want: []Invariant{GPUExclusive}, detail: `GPU 0 of node "n2" ran two jobs at once: job "b" incarnation 1 (pid 401, from 0.031s, until 3.100s) and job "a" incarnation 2 (pid 500, from 1.600s)`},
		{name: "orphan still holds its GPU when the restarted agent reuses it",
			events: edit(is(history.WorkerStop, "a", 301), wstop(2500, "harness", "n1", 301, "a", 1),
				wstart(2100, "n1", 600, "b", 2, 0), wstop(2900, "agent/n1", "n1", 600, "b", 2)), cfg: cfg,
			want: []Invariant{GPUExclusive}, detail: `GPU 0 of node "n1" ran two jobs at once: job "a" incarnation 1 (pid 301, from 0.030s, until 2.500s)`},
		{name: "orphan seen gone before the GPU is reused",
			events: edit(is(history.WorkerStop, "a", 301), wstop(2050, "agent/n1", "n1", 301, "a", 1),
				wstart(2100, "n1", 600, "b", 2, 0), wstop(2900, "agent/n1", "n1", 600, "b", 2)), cfg: cfg},
		{name: "stop and start at the same instant", events: edit(nil, wstart(3100, "n2", 700, "a", 2, 0), wstop(3150, "agent/n2", "n2", 700, "a", 2)), cfg: cfg},
		{name: "two incarnations of one job on one GPU", events: edit(nil, wstart(1100, "n2", 501, "a", 1, 1), wstop(1700, "agent/n2", "n2", 501, "a", 1)), cfg: cfg,
			want: []Invariant{GPUExclusive}, detail: "two incarnations of one job"},
		{name: "worker never seen gone", events: edit(is(history.WorkerStop, "a", 403)), cfg: cfg,
			want: []Invariant{GPUExclusive}, detail: `worker pid 403 on node "n2" (job "a" incarnation 2, GPUs [2]), started at 1.600s, still running when the history ends`},

		// incarnations
		{name: "old incarnation reported into the new one", events: edit(nil, report(1800, "a", 1, 2)), cfg: cfg,
			want: []Invariant{Incarnation}, detail: `server/s2 accepted a report of job "a" from an older incarnation 1 into incarnation 2`},
		{name: "stale owner accepted an old incarnation", events: edit(nil, report(1800, "a", 1, 1)), cfg: cfg,
			want: []Invariant{Incarnation}, detail: `into incarnation 1 after incarnation 2 started at 1.600s`},
		{name: "report from an incarnation that never ran", events: edit(nil, report(1800, "b", 5, 5)), cfg: cfg,
			want: []Invariant{Incarnation}, detail: "which never started a worker"},
		{name: "old incarnation reported before the new one started", events: edit(nil, report(1599, "a", 1, 1)), cfg: cfg},

		// generations
		{name: "one generation, two allocations", events: edit(func(e history.Event) bool { return e.Kind == history.Commit && e.Src == "server/s3" && e.Gen == 2 },
			commit(401, "server/s3", 2, 2, 9, "X2")), cfg: cfg,
			want: []Invariant{Generation}, detail: "generation 2 committed twice: allocation A2 at index 9 in term 2"},
		{name: "deposed leader's allocation committed", events: edit(nil, commitAll(1800, 4, 1, 14, "A4")...), cfg: cfg,
			want: []Invariant{Generation}, detail: "a deposed leader's allocation"},
		{name: "a server applies an old generation again", events: edit(nil, commit(700, "server/s2", 1, 1, 5, "A1")), cfg: cfg,
			want: []Invariant{Generation}, detail: "server/s2 (incarnation 1) applied generation 1 at 0.700s after generation 2 at 0.400s"},
		{name: "generation goes backwards in the log", events: edit(nil, commitAll(1400, 5, 2, 11, "A5")...), cfg: cfg,
			// the log order, and each server applying 3 after 5
			want: []Invariant{Generation, Generation, Generation, Generation}, detail: "generation went backwards in the log: 5 at index 11, then 3 at index 12"},
		{name: "one index, two generations", events: edit(nil, commitAll(1800, 4, 2, 9, "A4")...), cfg: cfg,
			want: []Invariant{Generation, Generation}, detail: "log index 9 carries generation 2"},

		// convergence
		{name: "not converged within the bound", events: base(), cfg: Config{Converge: time.Second},
			want: []Invariant{Convergence}, detail: `1 job(s) not completed within 1s of the last fault (agent-kill #1) at 2.000s: a (at 4.000s)`},
		{name: "bound counts from a late submission", events: edit(nil, submit(3500, "c"), complete(4050, "server/s1", "c", 26)), cfg: Config{Converge: 600 * ms},
			want: nil},

		// consistency
		{name: "stop of a worker never started", events: edit(nil, wstop(900, "harness", "n1", 999, "a", 1)), cfg: cfg,
			want: []Invariant{Consistent}, detail: "stopped but never started"},
		{name: "worker started twice", events: edit(nil, wstart(50, "n1", 301, "a", 1, 0)), cfg: cfg,
			want: []Invariant{Consistent}, detail: "started again"},
		{name: "stop names another job", events: edit(is(history.WorkerStop, "b", 401), wstop(3100, "agent/n2", "n2", 401, "a", 1)), cfg: cfg,
			want: []Invariant{Consistent}, detail: `started for job "b" incarnation 1, stopped as job "a" incarnation 1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, e := range c.events {
				if err := e.Validate(); err != nil {
					t.Fatalf("hand-built event %+v: %v", e, err)
				}
			}
			before := slices.Clone(c.events)
			got := Check(c.events, c.cfg)
			if !slices.EqualFunc(before, c.events, func(a, b history.Event) bool { return a.T == b.T && a.Kind == b.Kind }) {
				t.Error("Check modified its input")
			}
			var kinds []Invariant
			for _, v := range got {
				kinds = append(kinds, v.Invariant)
				if v.Detail == "" || len(v.Evidence) == 0 {
					t.Errorf("violation without detail or evidence: %+v", v)
				}
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, c.want) {
				t.Fatalf("violations %v, want %v:\n%s", kinds, c.want, list(got))
			}
			if c.detail != "" && !strings.Contains(got[0].String()+list(got), c.detail) {
				t.Errorf("no violation says %q:\n%s", c.detail, list(got))
			}
			for i := 1; i < len(got); i++ {
				if got[i].At < got[i-1].At {
					t.Errorf("violations out of order:\n%s", list(got))
				}
			}
		})
	}
}

func list(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String() + "\n")
	}
	return b.String()
}

func shuffled(ev []history.Event) []history.Event {
	rng := rand.New(rand.NewPCG(7, 7))
	// Shuffle whole groups of equal time only relative to others: the
	// checker sorts by time stably, so events sharing a timestamp keep
	// their relative order only if they came in order; give them distinct
	// times first.
	for i := range ev {
		ev[i].T += time.Duration(i) // ns: keeps the order among equal ms
	}
	rng.Shuffle(len(ev), func(i, j int) { ev[i], ev[j] = ev[j], ev[i] })
	return ev
}

func TestMeasure(t *testing.T) {
	m := Measure(base())
	if m.Faults != 2 || m.ByKind["leader-kill"] != 1 || m.ByKind["agent-kill"] != 1 {
		t.Errorf("faults %d %v", m.Faults, m.ByKind)
	}
	if m.JobsSubmitted != 2 || m.JobsCompleted != 2 || m.Lost != 0 {
		t.Errorf("jobs %d submitted, %d completed, %d lost", m.JobsSubmitted, m.JobsCompleted, m.Lost)
	}
	if !slices.Equal(m.Failovers, []time.Duration{300 * ms}) || m.FailoversMissing != 0 {
		t.Errorf("failovers %v, %d missing", m.Failovers, m.FailoversMissing)
	}
	if !slices.Equal(m.Replacements, []time.Duration{600 * ms}) || m.ReplacementsMissing != 0 {
		t.Errorf("replacements %v, %d missing", m.Replacements, m.ReplacementsMissing)
	}

	// No commit in a new term after the kill: the failover is missing.
	m = Measure(edit(func(e history.Event) bool { return e.Kind == history.Commit && e.Term == 2 }))
	if len(m.Failovers) != 0 || m.FailoversMissing != 1 {
		t.Errorf("failovers %v, %d missing", m.Failovers, m.FailoversMissing)
	}
	// Job a never re-placed and never completed: the replacement is missing.
	m = Measure(edit(func(e history.Event) bool { return e.Job == "a" && (e.Inc == 2 || e.Kind == history.Complete) }))
	if len(m.Replacements) != 0 || m.ReplacementsMissing != 1 || m.Lost != 1 {
		t.Errorf("replacements %v, %d missing, %d lost", m.Replacements, m.ReplacementsMissing, m.Lost)
	}
	// Job a completes instead of being re-placed: nothing to measure.
	m = Measure(edit(func(e history.Event) bool { return e.Job == "a" && e.Inc == 2 }))
	if len(m.Replacements) != 0 || m.ReplacementsMissing != 0 {
		t.Errorf("replacements %v, %d missing", m.Replacements, m.ReplacementsMissing)
	}
}

func BenchmarkCheck(b *testing.B) {
	// A long run: the base history repeated with shifted times and ids.
	var ev []history.Event
	for r := range 200 {
		for _, e := range base() {
			e.T += time.Duration(r) * 10 * time.Second
			if e.Job != "" {
				e.Job += "-" + string(rune('a'+r%26)) + strings.Repeat("x", r/26)
			}
			if e.Kind == history.Commit {
				e.Gen += uint64(r) * 3
				e.Index += uint64(r) * 30
				e.Term += uint64(r) * 2
			}
			if e.Kind == history.Complete {
				e.Index += uint64(r) * 30
			}
			ev = append(ev, e)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if v := Check(ev, Config{}); len(v) != 0 {
			b.Fatalf("%d violations in a correct history:\n%s", len(v), list(v))
		}
	}
}

func TestRunning(t *testing.T) {
	pids := func(at time.Duration) []int {
		var out []int
		for _, e := range Running(base(), at) {
			out = append(out, e.PID)
		}
		return out
	}
	for _, c := range []struct {
		at   time.Duration
		want []int
	}{
		{0, nil},
		{30 * ms, []int{301, 302}},
		{1000 * ms, []int{301, 302, 401}}, // the agent kill does not end its workers
		{1205 * ms, []int{302, 401}},
		{2000 * ms, []int{401, 402, 403}},
		{5000 * ms, nil},
	} {
		if got := pids(c.at); !slices.Equal(got, c.want) {
			t.Errorf("at %v: %v, want %v", c.at, got, c.want)
		}
	}
}
