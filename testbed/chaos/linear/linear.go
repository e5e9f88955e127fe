package linear

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"pollux/testbed/chaos/history"
)

// ErrHistory is a history the check cannot read: an operation completed
// twice or never invoked.
var ErrHistory = errors.New("linear: bad history")

// Options tune Check.
type Options struct {
	// Timeout bounds the search of one partition (default 2 minutes); a
	// partition not decided within it is reported Unknown.
	Timeout time.Duration
	// VisualizeDir, if set, receives one HTML file per partition that is
	// not linearizable.
	VisualizeDir string
}

// Failure is one partition that is not linearizable.
type Failure struct {
	// Partition names it: "job <id>" or "generation".
	Partition string
	// Ops is how many operations it holds.
	Ops int
	// Visualization is the path of porcupine's HTML rendering, if written.
	Visualization string
}

func (f Failure) String() string {
	s := fmt.Sprintf("%s (%d operations) is not linearizable", f.Partition, f.Ops)
	if f.Visualization != "" {
		s += "; see " + f.Visualization
	}
	return s
}

// Result is the outcome of a check.
type Result struct {
	// Partitions and Ops count what was checked.
	Partitions, Ops int
	// Illegal lists the partitions that are not linearizable; Unknown
	// those the search did not decide within the timeout.
	Illegal []Failure
	Unknown []string
}

// Linearizable reports whether every partition was shown linearizable.
func (r Result) Linearizable() bool { return len(r.Illegal) == 0 && len(r.Unknown) == 0 }

// Check checks the operations of the history. Operations still open
// when the history ends count as unknown.
func Check(lines []history.Line, o Options) (Result, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	parts, err := partitions(lines)
	if err != nil {
		return Result{}, err
	}
	var res Result
	names := make([]string, 0, len(parts))
	for name := range parts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ops := parts[name]
		res.Partitions++
		res.Ops += len(ops)
		model := jobModel
		if name == generationPartition {
			model = generationModel
		}
		out, info := porcupine.CheckOperationsVerbose(model, ops, o.Timeout)
		switch out {
		case porcupine.Ok:
		case porcupine.Unknown:
			res.Unknown = append(res.Unknown, name)
		default:
			f := Failure{Partition: name, Ops: len(ops)}
			if o.VisualizeDir != "" {
				path := filepath.Join(o.VisualizeDir, "linearizability-"+strings.ReplaceAll(name, " ", "-")+".html")
				if err := os.MkdirAll(o.VisualizeDir, 0o755); err != nil {
					return res, fmt.Errorf("linear: %w", err)
				}
				if err := porcupine.VisualizePath(model, info, path); err != nil {
					return res, fmt.Errorf("linear: visualising %s: %w", name, err)
				}
				f.Visualization = path
			}
			res.Illegal = append(res.Illegal, f)
		}
	}
	return res, nil
}

// generationPartition is the name of the allocation-generation partition.
const generationPartition = "generation"

// partitions builds porcupine operations from the history, one list per
// partition: "job <id>" for each job, and the generation.
func partitions(lines []history.Line) (map[string][]porcupine.Operation, error) {
	open := map[uint64]struct {
		t  int64
		op *history.Op
	}{}
	var end int64
	for _, l := range lines {
		end = max(end, l.T)
	}
	unknownEnd := end + 1
	parts := map[string][]porcupine.Operation{}
	add := func(name string, op porcupine.Operation) { parts[name] = append(parts[name], op) }
	emit := func(inv *history.Op, call int64, done *history.Op, ret int64) {
		kind := history.Info
		if done != nil {
			kind = done.Type
		}
		if kind == history.Info {
			ret = unknownEnd
		}
		meta := fmt.Sprintf("op %d to %s", inv.ID, inv.Server)
		switch inv.F {
		case history.Submit, history.Cancel:
			out := output{unknown: kind == history.Info}
			if done != nil {
				out.code = done.Code
			}
			if inv.F == history.Submit && kind == history.Fail && out.code != 409 {
				return // a refused spec (400, 413) or a full disk (507) says nothing about the state
			}
			add("job "+inv.Job, porcupine.Operation{ClientId: inv.Client, Input: input{f: inv.F, job: inv.Job, key: inv.Key},
				Call: call, Output: out, Return: ret, Metadata: meta})
		case history.Jobs:
			if kind != history.OK || done.Stale {
				return // no answer, or a follower's local copy: no promise
			}
			shown := map[string]history.Job{}
			for _, j := range done.Jobs {
				shown[j.ID] = j
			}
			// Every job the history mentions is read, present or absent.
			for name := range parts {
				if !strings.HasPrefix(name, "job ") {
					continue
				}
				id := strings.TrimPrefix(name, "job ")
				j, ok := shown[id]
				add(name, porcupine.Operation{ClientId: inv.Client, Input: input{f: history.Jobs, job: id},
					Call: call, Output: output{present: ok, job: j}, Return: ret, Metadata: meta})
				delete(shown, id)
			}
			for id, j := range shown { // a job no submit named: it must not exist
				add("job "+id, porcupine.Operation{ClientId: inv.Client, Input: input{f: history.Jobs, job: id},
					Call: call, Output: output{present: true, job: j}, Return: ret, Metadata: meta})
			}
		case history.GetJob:
			if kind != history.OK || done.Stale {
				return // no answer, or a follower's local copy: no promise
			}
			var out output
			if len(done.Jobs) == 1 {
				out = output{present: true, job: done.Jobs[0]}
			}
			add("job "+inv.Job, porcupine.Operation{ClientId: inv.Client, Input: input{f: history.Jobs, job: inv.Job},
				Call: call, Output: out, Return: ret, Metadata: meta})
		case history.Status:
			if kind != history.OK || done.Stale {
				return
			}
			add(generationPartition, porcupine.Operation{ClientId: inv.Client, Input: input{f: history.Status},
				Call: call, Output: output{status: *done.Status}, Return: ret, Metadata: meta})
		}
	}
	// Submissions, cancels and single-job reads first create the job
	// partitions, so that list reads before a job's submission record it
	// absent.
	for _, l := range lines {
		if l.Op != nil && l.Op.Type == history.Invoke && (l.Op.F == history.Submit || l.Op.F == history.Cancel || l.Op.F == history.GetJob) {
			if _, ok := parts["job "+l.Op.Job]; !ok {
				parts["job "+l.Op.Job] = nil
			}
		}
	}
	for _, l := range lines {
		o := l.Op
		if o == nil {
			continue
		}
		if o.Type == history.Invoke {
			if _, dup := open[o.ID]; dup {
				return nil, fmt.Errorf("%w: operation %d invoked twice", ErrHistory, o.ID)
			}
			open[o.ID] = struct {
				t  int64
				op *history.Op
			}{l.T, o}
			continue
		}
		inv, ok := open[o.ID]
		if !ok || inv.op == nil {
			return nil, fmt.Errorf("%w: operation %d completed without an open invoke", ErrHistory, o.ID)
		}
		if inv.op.F != o.F || inv.op.Job != o.Job || inv.op.Client != o.Client {
			return nil, fmt.Errorf("%w: operation %d invoked as %s %s by client %d, completed as %s %s by client %d",
				ErrHistory, o.ID, inv.op.F, inv.op.Job, inv.op.Client, o.F, o.Job, o.Client)
		}
		open[o.ID] = struct {
			t  int64
			op *history.Op
		}{}
		emit(inv.op, inv.t, o, l.T)
	}
	for _, inv := range open {
		if inv.op != nil {
			emit(inv.op, inv.t, nil, 0)
		}
	}
	for name, ops := range parts {
		if len(ops) == 0 {
			delete(parts, name)
		}
	}
	return parts, nil
}

// input is an operation as the model sees it.
type input struct {
	f   history.F
	job string
	// key is a submit's idempotency key ("": none).
	key string
}

// output is its answer.
type output struct {
	// code is a submit's or cancel's HTTP status; unknown says there was
	// no answer.
	code    int
	unknown bool
	// present and job are a read's view of one job.
	present bool
	job     history.Job
	// status is a status read's answer.
	status history.StatusView
}

// Job states of the model.
const (
	active    = "active"
	completed = "completed"
	failed    = "failed"
	cancelled = "cancelled"
)

// jobState is one job's state in the sequential specification.
type jobState struct {
	exists bool
	// key is the idempotency key of the submission that created it.
	key      string
	state    string
	inc      uint64
	epoch    int
	progress float64
}

func normState(s string) string {
	switch s {
	case "pending", "running", "rescaling":
		return active
	}
	return s
}

// stepJob returns every state a job can be in after the operation, from s.
func stepJob(s jobState, in input, out output) []jobState {
	switch in.f {
	case history.Submit:
		created := jobState{exists: true, state: active, key: in.key}
		switch {
		case out.unknown:
			if s.exists {
				return []jobState{s}
			}
			return []jobState{s, created}
		case out.code == 409:
			return when(s.exists, s)
		case out.code >= 200 && out.code < 300 && s.exists:
			return when(in.key != "" && in.key == s.key, s) // a retry of the submission that made it
		case out.code >= 200 && out.code < 300:
			return []jobState{created}
		}
		return nil
	case history.Cancel:
		after := s
		if s.state == active {
			after.state = cancelled
		}
		switch {
		case out.unknown:
			if s.exists {
				return []jobState{s, after}
			}
			return []jobState{s}
		case out.code >= 200 && out.code < 300:
			return when(s.exists, after)
		case out.code == 404:
			return when(!s.exists, s)
		case out.code == 409:
			if s.exists && s.state == active {
				// It finished on its own since the last read
				// (pollux chaos seed 736: a cancel 150 ms after a read
				// showed it rescaling); later reads say how.
				c, f := s, s
				c.state, f.state = completed, failed
				return []jobState{c, f}
			}
			return when(s.exists, s)
		}
		return []jobState{s} // another refusal says nothing
	case history.Jobs:
		if !out.present {
			return when(!s.exists, s)
		}
		v := out.job
		next := jobState{exists: true, key: s.key, state: normState(v.State), inc: v.Inc, epoch: v.Epoch, progress: v.Progress}
		reachable := next.state == s.state || (s.state == active && (next.state == completed || next.state == failed))
		forward := next.inc >= s.inc && next.epoch >= s.epoch && next.progress >= s.progress
		return when(s.exists && reachable && forward, next)
	}
	return nil
}

func when(ok bool, s jobState) []jobState {
	if ok {
		return []jobState{s}
	}
	return nil
}

var jobModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{jobState{}} },
	Step: func(state, in, out any) []any {
		var next []any
		for _, s := range stepJob(state.(jobState), in.(input), out.(output)) {
			next = append(next, s)
		}
		return next
	},
	DescribeOperation: describeOp,
	DescribeState: func(state any) string {
		s := state.(jobState)
		if !s.exists {
			return "absent"
		}
		return fmt.Sprintf("%s inc %d epoch %d progress %.1f", s.state, s.inc, s.epoch, s.progress)
	},
}).ToModel()

// genState is the newest allocation generation and term read.
type genState struct{ gen, term uint64 }

var generationModel = porcupine.Model{
	Init: func() any { return genState{} },
	Step: func(state, _, out any) (bool, any) {
		s, v := state.(genState), out.(output).status
		return v.Generation >= s.gen && v.Term >= s.term, genState{gen: v.Generation, term: v.Term}
	},
	DescribeOperation: describeOp,
	DescribeState: func(state any) string {
		s := state.(genState)
		return fmt.Sprintf("generation %d, term %d", s.gen, s.term)
	},
}

func describeOp(in, out any) string {
	i, o := in.(input), out.(output)
	switch i.f {
	case history.Status:
		return fmt.Sprintf("status -> generation %d term %d (leader %s)", o.status.Generation, o.status.Term, o.status.Serving)
	case history.Jobs:
		if !o.present {
			return fmt.Sprintf("get %s -> absent", i.job)
		}
		return fmt.Sprintf("get %s -> %s inc %d epoch %d progress %.1f", i.job, o.job.State, o.job.Inc, o.job.Epoch, o.job.Progress)
	}
	if o.unknown {
		return fmt.Sprintf("%s %s -> unknown", i.f, i.job)
	}
	return fmt.Sprintf("%s %s -> %d", i.f, i.job, o.code)
}
