package check

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
)

// Times are in milliseconds from 1 s (a CLOCK_MONOTONIC reading is never 0).
func ms(t int) int64 { return int64(time.Second) + int64(t)*int64(time.Millisecond) }

// hist builds a client-side history.
type hist struct {
	lines []history.Line
	id    uint64
}

func (h *hist) ev(t int, e history.Event) { h.lines = append(h.lines, history.Line{T: ms(t), Ev: &e}) }

// op appends an operation invoked at call and completed at ret.
func (h *hist) op(call, ret int, f history.F, job string, typ history.Type, code int, answer func(*history.Op)) {
	h.id++
	h.lines = append(h.lines, history.Line{T: ms(call), Op: &history.Op{Type: history.Invoke, ID: h.id, Client: int(h.id % 3), F: f, Server: "s1", Job: job}})
	done := &history.Op{Type: typ, ID: h.id, Client: int(h.id % 3), F: f, Job: job, Code: code}
	if answer != nil {
		answer(done)
	}
	h.lines = append(h.lines, history.Line{T: ms(ret), Op: done})
}

func (h *hist) submit(call, ret int, job string, typ history.Type, code int) {
	h.op(call, ret, history.Submit, job, typ, code, nil)
}

func (h *hist) read(call, ret int, jobs ...history.Job) {
	h.op(call, ret, history.Jobs, "", history.OK, 200, func(o *history.Op) { o.Jobs = jobs })
}

// dropFinalRead removes the reads (invoke and completion) that show three
// jobs: the fixture's final reads.
func (h *hist) dropFinalRead() {
	ids := map[uint64]bool{}
	for _, l := range h.lines {
		if l.Op != nil && len(l.Op.Jobs) == 3 {
			ids[l.Op.ID] = true
		}
	}
	h.lines = slices.DeleteFunc(h.lines, func(l history.Line) bool { return l.Op != nil && ids[l.Op.ID] })
}

func (h *hist) sorted() []history.Line {
	ls := slices.Clone(h.lines)
	slices.SortStableFunc(ls, func(a, b history.Line) int { return int(a.T - b.T) })
	return ls
}

func jv(id, state string, inc uint64, epoch int, progress float64) history.Job {
	return history.Job{ID: id, State: state, Inc: inc, Epoch: epoch, Progress: progress}
}

// worker builds one worker's records.
type worker struct{ w record.Worker }

func start(node string, t int, job string, inc uint64, pid int, gpus ...int) *worker {
	return &worker{record.Worker{Node: node, File: fmt.Sprintf("%s/%s.%d.0.%d.jsonl", node, job, inc, pid),
		Records: []record.Record{{T: ms(t), Kind: record.Start, Job: job, Inc: inc, PID: pid, Boot: uint64(pid), GPUs: gpus}}}}
}

func (w *worker) add(r record.Record) *worker {
	s := w.w.Records[0]
	r.Job, r.Inc, r.PID = s.Job, s.Inc, s.PID
	w.w.Records = append(w.w.Records, r)
	return w
}

func (w *worker) restore(t0, t int, from uint64, epoch int, progress float64) *worker {
	return w.add(record.Record{T0: ms(t0), T: ms(t), Kind: record.Restore, From: from, Epoch: epoch, Progress: progress, Fresh: from == 0})
}

func (w *worker) ckpt(t0, t int, epoch int, progress float64, finished bool) *worker {
	return w.add(record.Record{T0: ms(t0), T: ms(t), Kind: record.Checkpoint, Epoch: epoch, Progress: progress, Finished: finished})
}

func (w *worker) done(t int, epoch int, progress float64) *worker {
	return w.add(record.Record{T: ms(t), Kind: record.Done, Epoch: epoch, Progress: progress})
}

func (w *worker) exit(t int) *worker { return w.add(record.Record{T: ms(t), Kind: record.Exit}) }

// run is a correct run: jobs a (its first submission timed out, the retry
// was told it exists) and b, and a probe p after a leader kill; then agent
// n1 is killed with a's worker on it, which the harness sees gone, and a
// restarts on n2 in incarnation 2 from incarnation 1's checkpoint; all
// three complete.
type fixture struct {
	h       *hist
	workers map[string]*worker
}

func base() *fixture {
	h := &hist{}
	h.ev(0, history.Event{Kind: history.RunBegin, Scenario: "test", Seed: 7,
		Planned: []history.Planned{{Seq: 0, Fault: "leader-kill"}, {Seq: 1, Fault: "agent-kill"}}})
	h.ev(1, history.Event{Kind: history.ProcStart, Role: history.Server, ID: "s0", PID: 10, Inc: 1})
	h.submit(10, 60, "a", history.Info, 0)
	h.submit(70, 90, "a", history.OK, 409)
	h.submit(20, 40, "b", history.OK, 201)
	h.read(95, 98, jv("a", "pending", 0, 0, 0), jv("b", "pending", 0, 0, 0))
	h.read(250, 260, jv("a", "running", 1, 1, 100), jv("b", "running", 1, 0, 50))
	// Leader kill, then a probe whose acknowledgement ends the failover.
	h.ev(300, history.Event{Kind: history.FaultBegin, Fault: "leader-kill", Targets: []string{"s0"}, Leader: "s0", Deposes: true})
	h.ev(301, history.Event{Kind: history.Signal, Role: history.Server, ID: "s0", PID: 10, Inc: 1, Sig: "KILL", Fault: "leader-kill"})
	h.submit(310, 500, "p", history.Info, 0)
	h.submit(600, 700, "p", history.OK, 201)
	h.ev(900, history.Event{Kind: history.FaultEnd, Fault: "leader-kill"})
	// Agent kill: a's worker is seen gone.
	h.ev(1000, history.Event{Kind: history.FaultBegin, Fault: "agent-kill", Seq: 1, Targets: []string{"n1"}})
	h.ev(1015, history.Event{Kind: history.WorkerGone, Node: "n1", Job: "a", Inc: 1, PID: 101})
	h.ev(1900, history.Event{Kind: history.FaultEnd, Fault: "agent-kill", Seq: 1})
	h.read(2550, 2560, jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200), jv("p", "running", 1, 0, 10))
	h.read(2600, 2610, jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	h.ev(2700, history.Event{Kind: history.RunEnd})
	ws := map[string]*worker{
		"a1": start("n1", 100, "a", 1, 101, 0).restore(150, 151, 0, 0, 0).ckpt(200, 201, 1, 100, false),
		"b1": start("n2", 110, "b", 1, 201, 0).restore(160, 161, 0, 0, 0).ckpt(300, 301, 1, 100, false).
			done(2100, 2, 200).ckpt(2101, 2102, 2, 200, true).exit(2110),
		"a2": start("n2", 1500, "a", 2, 202, 1).restore(1590, 1600, 1, 1, 100).
			done(2000, 3, 300).ckpt(2001, 2002, 3, 300, true).exit(2010),
		"p1": start("n2", 2120, "p", 1, 203, 0).restore(2130, 2131, 0, 0, 0).done(2500, 2, 200).exit(2510),
	}
	return &fixture{h: h, workers: ws}
}

func (f *fixture) input() Input {
	var ws []record.Worker
	for _, w := range f.workers {
		ws = append(ws, w.w)
	}
	slices.SortFunc(ws, func(a, b record.Worker) int { return strings.Compare(a.File, b.File) })
	return Input{History: f.h.sorted(), Workers: ws}
}

func judge(t *testing.T, f *fixture) *Result {
	t.Helper()
	res, err := Check(f.input(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCorrectRun(t *testing.T) {
	res := judge(t, base())
	if fs := res.Failures(); len(fs) != 0 {
		t.Fatalf("a correct run fails: %q", fs)
	}
	o, m := res.Outcomes, res.Metrics
	if o.Submitted != 3 || o.Completed != 3 || o.Lost+o.Failed+o.Cancelled+o.Unsubmitted != 0 {
		t.Errorf("outcomes %+v", o)
	}
	if m.Planned != 2 || m.Faults != 2 || m.ByKind["leader-kill"] != 1 || m.ByKind["agent-kill"] != 1 || m.Network != 0 {
		t.Errorf("metrics %+v", m)
	}
	// The first write invoked after the kill was acknowledged 400 ms
	// after it; a's new incarnation started 500 ms after the agent kill.
	if !slices.Equal(m.Failovers, []time.Duration{400 * time.Millisecond}) || !slices.Equal(m.Replacements, []time.Duration{500 * time.Millisecond}) {
		t.Errorf("failovers %v, replacements %v", m.Failovers, m.Replacements)
	}
	if !res.Linear.Linearizable() || res.Scenario != "test" || res.Seed != 7 || res.Duration != 2700*time.Millisecond {
		t.Errorf("result %+v", res)
	}
}

func TestUnusableHistories(t *testing.T) {
	cut := func(f func(h *hist)) Input {
		fx := base()
		f(fx.h)
		return fx.input()
	}
	cases := map[string]Input{
		"empty":              {},
		"empty with workers": {Workers: base().input().Workers},
		"truncated": cut(func(h *hist) {
			h.lines = slices.DeleteFunc(h.lines, func(l history.Line) bool { return l.Ev != nil && l.Ev.Kind == history.RunEnd })
		}),
		"no run_begin": cut(func(h *hist) { h.lines = h.lines[1:] }),
		"open operation": cut(func(h *hist) {
			h.lines = append(h.lines, history.Line{T: ms(2650), Op: &history.Op{Type: history.Invoke, ID: 99, F: history.Jobs, Server: "s1"}})
		}),
		"no submission": {History: []history.Line{
			{T: ms(0), Ev: &history.Event{Kind: history.RunBegin, Scenario: "x"}}, {T: ms(1), Ev: &history.Event{Kind: history.RunEnd}}}},
		"gone without record": cut(func(h *hist) {
			h.ev(1016, history.Event{Kind: history.WorkerGone, Node: "n1", Job: "zz", Inc: 1, PID: 999})
		}),
	}
	for name, in := range cases {
		if _, err := Check(in, Options{}); !errors.Is(err, ErrHistory) {
			t.Errorf("%s: got %v, want ErrHistory", name, err)
		}
	}
}

// TestViolations breaks one invariant at a time, from the observers'
// records, and wants exactly that violation.
func TestViolations(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(f *fixture)
		want   Invariant
		detail string
	}{
		{"two workers on one GPU", func(f *fixture) {
			f.workers["c1"] = start("n2", 1800, "c", 1, 300, 1).exit(1900)
		}, GPUExclusive, "GPU 1 of node n2 used by two workers at once: job a incarnation 2 rank 0 (pid 202 on n2, GPUs [1]) from 1.500s, until 2.010s (exit)"},
		{"orphan seen gone only after its GPU was reused", func(f *fixture) {
			f.workers["a2"].w.Node = "n1"
			f.workers["a2"].w.Records[0].GPUs = []int{0}
			f.h.lines = slices.DeleteFunc(f.h.lines, func(l history.Line) bool { return l.Ev != nil && l.Ev.Kind == history.WorkerGone })
			f.h.ev(1700, history.Event{Kind: history.WorkerGone, Node: "n1", Job: "a", Inc: 1, PID: 101})
		}, GPUExclusive, "until 1.700s (gone)"},
		{"orphan seen alive after its GPU was reused", func(f *fixture) {
			f.workers["a2"].w.Node = "n1"
			f.workers["a2"].w.Records[0].GPUs = []int{0}
			f.h.lines = slices.DeleteFunc(f.h.lines, func(l history.Line) bool { return l.Ev != nil && l.Ev.Kind == history.WorkerGone })
			f.h.ev(1700, history.Event{Kind: history.WorkerGone, Node: "n1", Job: "a", Inc: 1, PID: 101, Alive: ms(1690)})
		}, GPUExclusive, "until 1.700s (gone)"},
		{"worker never seen ended", func(f *fixture) {
			f.workers["p1"].w.Records = f.workers["p1"].w.Records[:3]
		}, WorkerEnded, "job p incarnation 1 rank 0 (pid 203 on n2, GPUs [0]), started at 2.120s, wrote no exit and was never seen gone"},
		{"restore of a superseded incarnation's checkpoint", func(f *fixture) {
			// Incarnation 1 survives its agent (partitioned, not killed)
			// and checkpoints after incarnation 2 took over; incarnation 3
			// restores that checkpoint.
			f.h.lines = slices.DeleteFunc(f.h.lines, func(l history.Line) bool { return l.Ev != nil && l.Ev.Kind == history.WorkerGone })
			f.workers["a1"].ckpt(1700, 1701, 2, 250, false).exit(1750)
			f.workers["a2"].w.Records = f.workers["a2"].w.Records[:2]
			f.workers["a2"].exit(1760)
			f.workers["a3"] = start("n2", 1800, "a", 3, 204, 1).restore(1850, 1851, 1, 2, 250).
				done(2000, 3, 300).ckpt(2001, 2002, 3, 300, true).exit(2010)
			f.h.dropFinalRead()
			f.h.read(2600, 2610, jv("a", "completed", 3, 3, 300), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
		}, StaleCheckpoint, "job a: incarnation 3 (n2) restored at 1.851s the checkpoint incarnation 1 wrote at 1.701s (epoch 2, progress 250.0), after incarnation 2 had taken over (restored at 1.600s)"},
		{"restore that loses saved progress", func(f *fixture) {
			f.workers["a2"].w.Records[1] = record.Record{T0: ms(1590), T: ms(1600), Kind: record.Restore, Job: "a", Inc: 2, PID: 202, Fresh: true}
		}, LostProgress, "job a: incarnation 2 (n2) restored nothing (a fresh start) at 1.600s, but incarnation 1 had checkpointed progress 100.0 (epoch 1) at 0.201s"},
		{"completion without a done record", func(f *fixture) {
			rs := f.workers["b1"].w.Records
			f.workers["b1"].w.Records = slices.DeleteFunc(rs, func(r record.Record) bool { return r.Kind == record.Done })
		}, CompletionBacked, "job b read completed in incarnation 1 at 2.560s (operation"},
		{"completion backed by an older incarnation only", func(f *fixture) {
			rs := f.workers["a2"].w.Records
			f.workers["a2"].w.Records = slices.DeleteFunc(rs, func(r record.Record) bool { return r.Kind == record.Done })
			f.workers["a1"].done(900, 3, 300)
		}, CompletionBacked, "done records: [incarnation 1 at 0.900s]"},
		{"worker started after the job was read completed", func(f *fixture) {
			f.workers["b2"] = start("n1", 2580, "b", 2, 400, 2).exit(2590)
		}, RanAfterFinish, "job b incarnation 2 rank 0 (pid 400 on n1, GPUs [2]) started at 2.580s, after the job was read completed in incarnation 1 at 2.560s"},
		{"rank of the completed incarnation started again after the completion", func(f *fixture) {
			f.workers["b1again"] = start("n1", 2580, "b", 1, 402, 3).exit(2600)
		}, RanAfterFinish, "that rank had run before: a late rank starts at most once"},
		{"late rank of the completed incarnation that ran on", func(f *fixture) {
			w := start("n1", 2580, "b", 1, 403, 3).exit(17600)
			w.w.Records[0].Rank = 1
			f.workers["b1late"] = w
		}, RanAfterFinish, "had not ended within 15s of it (a late rank's bound)"},
		{"completion read alone, before its done record", func(f *fixture) {
			f.h.op(1000, 1010, history.GetJob, "b", history.OK, 200, func(o *history.Op) { o.Jobs = []history.Job{jv("b", "completed", 1, 2, 200)} })
		}, CompletionBacked, "job b read completed in incarnation 1 at 1.010s"},
		{"worker started after its cancel was acknowledged", func(f *fixture) {
			f.h.submit(1100, 1110, "c", history.OK, 201)
			f.h.op(1200, 1210, history.Cancel, "c", history.OK, 200, nil)
			f.workers["c1"] = start("n1", 1300, "c", 1, 500, 3).exit(1400)
		}, RanAfterFinish, "job c incarnation 1 rank 0 (pid 500 on n1, GPUs [3]) started at 1.300s, after the job was cancel acknowledged at 1.210s"},
		{"worker of a later incarnation started after its cancel", func(f *fixture) {
			f.h.submit(1100, 1110, "c", history.OK, 201)
			f.h.op(1200, 1210, history.Cancel, "c", history.OK, 200, func(o *history.Op) { o.Inc = ptr(uint64(1)) })
			f.workers["c2"] = start("n1", 1300, "c", 2, 500, 3).exit(1400)
		}, RanAfterFinish, "job c incarnation 2 rank 0 (pid 500 on n1, GPUs [3]) started at 1.300s, after the job was cancel acknowledged in incarnation 1 at 1.210s"},
		{"worker of the cancelled incarnation never stopped", func(f *fixture) {
			f.h.submit(1100, 1110, "c", history.OK, 201)
			f.h.op(1200, 1210, history.Cancel, "c", history.OK, 200, func(o *history.Op) { o.Inc = ptr(uint64(1)) })
			f.workers["c1"] = start("n1", 1300, "c", 1, 500, 3)
		}, RanAfterFinish, "after the job was cancel acknowledged in incarnation 1 at 1.210s, and was not stopped within 15s of it"},
		{"exists before any submission", func(f *fixture) {
			f.h.submit(800, 810, "q", history.OK, 409)
			f.h.read(820, 830, jv("a", "running", 1, 1, 100), jv("b", "running", 1, 1, 100), jv("p", "pending", 0, 0, 0), jv("q", "pending", 0, 0, 0))
		}, ExistsBeforeSubmit, "submission of job q (operation"},
		{"acknowledged job missing from a read", func(f *fixture) {
			f.h.read(2650, 2660, jv("a", "completed", 2, 3, 300), jv("p", "completed", 1, 2, 200))
		}, Linearizable, "job b"},
	}
	for _, c := range cases {
		f := base()
		c.edit(f)
		res, err := Check(f.input(), Options{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []Invariant
		for _, v := range res.Violations {
			got = append(got, v.Invariant)
		}
		if !slices.Contains(got, c.want) {
			t.Errorf("%s: violations %v, want %s", c.name, res.Violations, c.want)
			continue
		}
		for _, v := range res.Violations {
			if v.Invariant == c.want && !strings.Contains(v.Detail, c.detail) {
				t.Errorf("%s: %q does not say %q", c.name, v.Detail, c.detail)
			}
		}
		if len(res.Failures()) == 0 {
			t.Errorf("%s: the run passes", c.name)
		}
	}
}

// Near misses: histories that look alarming but break nothing.
func TestNearMisses(t *testing.T) {
	cases := map[string]func(f *fixture){
		"GPU handed over at the same instant": func(f *fixture) {
			f.workers["c1"] = start("n2", 2010, "c", 1, 300, 1).exit(2020)
			f.h.submit(1990, 1995, "c", history.OK, 201)
			f.h.dropFinalRead()
			f.workers["c1"].done(2015, 1, 1)
			f.h.read(2600, 2610, jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200), jv("c", "completed", 1, 1, 1), jv("p", "completed", 1, 2, 200))
		},
		"old incarnation checkpoints before the new one restores": func(f *fixture) {
			f.workers["a1"].ckpt(1400, 1401, 1, 150, false)
			f.workers["a2"].w.Records[1] = record.Record{T0: ms(1590), T: ms(1600), Kind: record.Restore, Job: "a", Inc: 2, PID: 202, From: 1, Epoch: 1, Progress: 150}
		},
		"old incarnation's checkpoint lands while the new one reads": func(f *fixture) {
			// Begun before the restore began, finished after: either
			// content may be read.
			f.workers["a1"].ckpt(1580, 1605, 1, 150, false)
		},
		"superseded checkpoint never read": func(f *fixture) {
			f.workers["a1"].ckpt(1700, 1701, 1, 999, false)
		},
		"two concurrent submissions, the first answered exists": func(f *fixture) {
			f.h.op(800, 850, history.Submit, "q", history.OK, 409, nil)
			f.h.op(810, 820, history.Submit, "q", history.OK, 201, nil)
			f.h.dropFinalRead()
			f.h.read(2600, 2610, jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200), jv("q", "completed", 1, 1, 1))
			f.workers["q1"] = start("n3", 900, "q", 1, 900, 0).done(950, 1, 1).exit(960)
		},
		"a rank of the completed incarnation starting late": func(f *fixture) {
			w := start("n1", 2580, "b", 1, 401, 2).exit(2590)
			w.w.Records[0].Rank = 1
			f.workers["b1r1"] = w
		},
		"stale read shows the past": func(f *fixture) {
			f.h.op(2650, 2660, history.Jobs, "", history.OK, 200, func(o *history.Op) {
				o.Stale, o.Jobs = true, []history.Job{jv("a", "pending", 0, 0, 0)}
			})
		},
	}
	for name, edit := range cases {
		f := base()
		edit(f)
		res, err := Check(f.input(), Options{})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fs := res.Failures(); len(fs) != 0 {
			t.Errorf("%s: %q", name, fs)
		}
	}
}

// TestAccounting: every job the harness tried to submit lands in exactly
// one outcome, and every outcome but completed fails the run.
func TestAccounting(t *testing.T) {
	f := base()
	f.h.submit(1100, 1200, "u", history.Info, 0)   // never acknowledged, never seen
	f.h.submit(1210, 1220, "u", history.Fail, 400) // then refused
	f.h.submit(1300, 1310, "x", history.OK, 201)   // acknowledged, still running at the end
	f.h.submit(1320, 1330, "y", history.OK, 201)   // failed
	f.h.submit(1340, 1350, "z", history.OK, 201)   // never read again
	f.h.submit(1360, 1370, "w", history.Info, 0)   // unknown, but it exists
	f.h.submit(1372, 1374, "v", history.OK, 201)   // cancelled
	f.h.op(1376, 1378, history.Cancel, "v", history.OK, 200, nil)
	f.h.dropFinalRead()
	all := []history.Job{jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200),
		jv("x", "running", 1, 0, 0), jv("y", "failed", 1, 0, 0), jv("w", "completed", 1, 0, 0), jv("v", "cancelled", 0, 0, 0)}
	all[4].Reason = "crash loop"
	f.h.read(1380, 1390, jv("a", "running", 1, 1, 100), jv("b", "running", 1, 1, 100), jv("p", "pending", 0, 0, 0),
		jv("x", "pending", 0, 0, 0), jv("y", "pending", 0, 0, 0), jv("z", "pending", 0, 0, 0), jv("w", "pending", 0, 0, 0),
		jv("v", "cancelled", 0, 0, 0))
	f.h.read(2600, 2610, all...)
	f.workers["w1"] = start("n3", 1400, "w", 1, 500, 0).done(1500, 0, 0).exit(1510)
	res := judge(t, f)
	o := res.Outcomes
	if o.Submitted != 9 || o.Completed != 4 || o.Failed != 1 || o.Lost != 2 || o.Unsubmitted != 1 || o.Cancelled != 1 {
		t.Fatalf("outcomes %+v", o)
	}
	got := map[string]JobOutcome{}
	for _, j := range o.Jobs {
		got[j.Job] = j
	}
	if got["y"].Reason != "crash loop" || !strings.Contains(got["x"].Reason, "still running") ||
		!strings.Contains(got["z"].Reason, "missing from the last linearizable read") || got["u"].Outcome != Unsubmitted || got["w"].Outcome != Completed ||
		got["v"].Outcome != Cancelled {
		t.Errorf("jobs %+v", o.Jobs)
	}
	fs := strings.Join(res.Failures(), "\n")
	for _, want := range []string{"2 lost jobs", "1 unsubmitted jobs (u: fail 400", "1 failed jobs (y: crash loop)"} {
		if !strings.Contains(fs, want) {
			t.Errorf("failures do not say %q:\n%s", want, fs)
		}
	}
}

func TestFaultAccounting(t *testing.T) {
	// A planned fault never injected, one begun and never ended.
	f := base()
	f.h.lines[0].Ev.Planned = append(f.h.lines[0].Ev.Planned, history.Planned{Seq: 2, Fault: "split-2-1"}, history.Planned{Seq: 3, Fault: "loss"})
	f.h.ev(2620, history.Event{Kind: history.FaultBegin, Fault: "loss", Seq: 3})
	res := judge(t, f)
	m := res.Metrics
	if m.Planned != 4 || m.Faults != 2 || len(m.NotInjected) != 2 || !strings.Contains(m.NotInjected[0], "#2 split-2-1 (never begun)") ||
		!strings.Contains(m.NotInjected[1], "#3 loss (begun at 2.620s, never ended)") {
		t.Errorf("metrics %+v", m)
	}
	// No acknowledged write after the leader kill: the failover is missing.
	f = base()
	f.h.lines = slices.DeleteFunc(f.h.lines, func(l history.Line) bool { return l.Op != nil && l.Op.Job == "p" })
	f.h.dropFinalRead()
	delete(f.workers, "p1")
	f.h.read(2600, 2610, jv("a", "completed", 2, 3, 300), jv("b", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.Failovers) != 0 || len(res.Metrics.FailoversMissing) != 1 || len(res.Failures()) != 1 {
		t.Errorf("failovers %v, missing %v, failures %q", res.Metrics.Failovers, res.Metrics.FailoversMissing, res.Failures())
	}
	// Job a never re-placed after its agent died (and so never completes).
	f = base()
	delete(f.workers, "a2")
	f.h.dropFinalRead()
	f.h.read(2600, 2610, jv("a", "running", 1, 1, 100), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.ReplacementsMissing) != 1 || !strings.Contains(res.Metrics.ReplacementsMissing[0], "job a (incarnation 1)") || res.Outcomes.Lost != 1 {
		t.Errorf("replacements %v missing %v, outcomes %+v", res.Metrics.Replacements, res.Metrics.ReplacementsMissing, res.Outcomes)
	}
	// ... unless it was cancelled before it could be (seed 736's
	// agent-kill: the cancel came 0.5 s after the kill).
	f = base()
	delete(f.workers, "a2")
	f.h.dropFinalRead()
	f.h.op(1100, 1110, history.Cancel, "a", history.OK, 200, nil)
	f.h.read(2600, 2610, jv("a", "cancelled", 1, 1, 100), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.ReplacementsMissing) != 0 || len(res.Failures()) != 0 {
		t.Errorf("replacements %v missing %v, failures %q", res.Metrics.Replacements, res.Metrics.ReplacementsMissing, res.Failures())
	}
	// Job a finished (its rank 0 elsewhere recorded done) just before its
	// agent died, its rank 1 there not yet gone: nothing to re-place (the
	// leader-kill of seed 7's mixed scenario, 47 ms before the kill).
	f = base()
	delete(f.workers, "a2")
	f.workers["a1"] = start("n1", 100, "a", 1, 101, 1)
	f.workers["a0"] = start("n2", 100, "a", 1, 102, 0).restore(150, 151, 0, 0, 0).done(990, 2, 200).ckpt(991, 992, 2, 200, true).exit(1020)
	f.h.dropFinalRead()
	f.h.read(2600, 2610, jv("a", "completed", 1, 2, 200), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.ReplacementsMissing) != 0 || len(res.Metrics.Replacements) != 0 {
		t.Errorf("job finished before the kill: replacements %v missing %v", res.Metrics.Replacements, res.Metrics.ReplacementsMissing)
	}
	// Job a cancelled just before its agent died: nothing to re-place.
	f = base()
	delete(f.workers, "a2")
	f.h.dropFinalRead()
	f.h.op(990, 995, history.Cancel, "a", history.OK, 200, nil)
	f.h.read(2600, 2610, jv("a", "cancelled", 1, 1, 100), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.ReplacementsMissing) != 0 || len(res.Metrics.Replacements) != 0 {
		t.Errorf("cancelled job: replacements %v missing %v", res.Metrics.Replacements, res.Metrics.ReplacementsMissing)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCancelledIncarnationStoppedSoon: a worker of the incarnation a
// cancel took effect in, started just after the cancel was acknowledged
// (its assignment was on its way) and stopped soon after, is not a
// ran-after-finish violation.
func TestCancelledIncarnationStoppedSoon(t *testing.T) {
	f := base()
	f.h.submit(1100, 1110, "c", history.OK, 201)
	f.h.op(1200, 1210, history.Cancel, "c", history.OK, 200, func(o *history.Op) { o.Inc = ptr(uint64(1)) })
	f.workers["c1"] = start("n1", 1300, "c", 1, 500, 3).exit(1400)
	res, err := Check(f.input(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		if v.Invariant == RanAfterFinish {
			t.Errorf("violation %v", v)
		}
	}
}

// A rack loss kills a server and agents at once: every job with a worker
// on any of them must be re-placed, and the time is until the last was.
func TestRackLossReplacement(t *testing.T) {
	rack := func() *fixture {
		f := base()
		f.h.lines[0].Ev.Planned[1].Fault = "rack-loss"
		for _, l := range f.h.lines {
			if l.Ev != nil && l.Ev.Fault == "agent-kill" {
				l.Ev.Fault = "rack-loss"
				if l.Ev.Kind == history.FaultBegin {
					l.Ev.Targets = []string{"s9", "n1", "n3"}
				}
			}
		}
		return f
	}
	res := judge(t, rack())
	if !slices.Equal(res.Metrics.Replacements, []time.Duration{500 * time.Millisecond}) || res.Metrics.ByKind["rack-loss"] != 1 {
		t.Errorf("rack loss: replacements %v missing %v, by kind %v", res.Metrics.Replacements, res.Metrics.ReplacementsMissing, res.Metrics.ByKind)
	}
	f := rack()
	delete(f.workers, "a2")
	f.h.dropFinalRead()
	f.h.read(2600, 2610, jv("a", "running", 1, 1, 100), jv("b", "completed", 1, 2, 200), jv("p", "completed", 1, 2, 200))
	res = judge(t, f)
	if len(res.Metrics.ReplacementsMissing) != 1 || !strings.Contains(res.Metrics.ReplacementsMissing[0], "rack-loss") {
		t.Errorf("rack loss, a never re-placed: missing %v", res.Metrics.ReplacementsMissing)
	}
}

// A worker seen gone ended between the last scan that saw it alive and
// the scan that saw it gone: a successor started on its GPU within that
// window may have started after it ended, and is not a violation; one
// started before the harness last saw it alive is.
func TestGoneWorkerEndsWithinTheScanWindow(t *testing.T) {
	for _, c := range []struct {
		alive     int
		violation bool
	}{{1490, false}, {1499, false}, {1500, false}, {1501, true}, {0, true}} {
		f := base()
		f.workers["a2"].w.Node = "n1"
		f.workers["a2"].w.Records[0].GPUs = []int{0}
		f.h.lines = slices.DeleteFunc(f.h.lines, func(l history.Line) bool { return l.Ev != nil && l.Ev.Kind == history.WorkerGone })
		ev := history.Event{Kind: history.WorkerGone, Node: "n1", Job: "a", Inc: 1, PID: 101}
		if c.alive != 0 {
			ev.Alive = ms(c.alive)
		}
		f.h.ev(1510, ev)
		res, err := Check(f.input(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(res.Violations, func(v Violation) bool { return v.Invariant == GPUExclusive })
		if got != c.violation {
			t.Errorf("a1 last seen alive at %d ms, gone at 1510 ms, a2 started at 1500 ms on its GPU: violation %v, want %v (%v)",
				c.alive, got, c.violation, res.Violations)
		}
	}
}
