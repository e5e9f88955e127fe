package check

import (
	"fmt"
	"slices"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
)

// cancelStopWithin bounds how long after a cancel was acknowledged a
// worker of the cancelled incarnation, started by an assignment already
// on its way, may run: the next round (within a scheduling interval)
// stops it, with the workers' SIGTERM grace.
const cancelStopWithin = 15 * time.Second

// lateRankWithin bounds how long after a job was read completed a late
// rank of the completed incarnation (one queued on a busy node when rank
// 0 finished) may still run: it restores the finished checkpoint and
// ends at once, and the next round, which no longer assigns the job,
// drops it from its node's queue (within a scheduling interval and the
// workers' SIGTERM grace). Each rank starts at most once: a rank of that
// incarnation that had run before may not start again.
const lateRankWithin = 15 * time.Second

// Outcome is what became of a job the harness tried to submit.
type Outcome string

// The outcomes: every job the harness tried to submit has exactly one.
const (
	// Completed: acknowledged (or seen to exist), and the last
	// linearizable read showed it completed.
	Completed Outcome = "completed"
	// Failed: the last linearizable read showed it failed (Reason says
	// why).
	Failed Outcome = "failed"
	// Cancelled: the last linearizable read showed it cancelled.
	Cancelled Outcome = "cancelled"
	// Lost: acknowledged, but never seen finished: still pending or
	// running at the end, missing from the last read, or never read.
	Lost Outcome = "lost"
	// Unsubmitted: never acknowledged and never seen to exist.
	Unsubmitted Outcome = "unsubmitted"
)

// JobOutcome is one job's outcome.
type JobOutcome struct {
	Job     string
	Outcome Outcome
	// Reason: the failure reason, why it counts as lost, or the last
	// answer to its submission.
	Reason string
}

// Outcomes counts the jobs by outcome; Submitted is every job the harness
// tried to submit, the sum of the others.
type Outcomes struct {
	Submitted, Completed, Failed, Cancelled, Lost, Unsubmitted int
	Jobs                                                       []JobOutcome
}

func (o Outcomes) names(k Outcome) []string {
	var out []string
	for _, j := range o.Jobs {
		if j.Outcome == k {
			if j.Reason != "" {
				out = append(out, j.Job+": "+j.Reason)
			} else {
				out = append(out, j.Job)
			}
		}
	}
	return out
}

// submitted returns the jobs in order of their first submission.
func (r *run) submitted() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range r.ops {
		if p.inv.F == history.Submit && !seen[p.inv.Job] {
			seen[p.inv.Job] = true
			out = append(out, p.inv.Job)
		}
	}
	return out
}

// outcomes classifies every job the harness tried to submit.
func outcomes(r *run, _ []*life) Outcomes {
	acked := map[string]int64{} // job -> first acknowledgement
	lastErr := map[string]string{}
	for _, p := range r.ops {
		if p.inv.F != history.Submit {
			continue
		}
		if p.ok() {
			if _, ok := acked[p.inv.Job]; !ok {
				acked[p.inv.Job] = p.ret
			}
		} else {
			lastErr[p.inv.Job] = describeFailure(p)
		}
	}
	// The last linearizable read, and each job's last view in one.
	var last *op
	lastView := map[string]history.Job{}
	seenAt := map[string]int64{}
	for _, p := range r.ops {
		if !p.linearizableRead() {
			continue
		}
		if last == nil || p.ret > last.ret {
			last = p
		}
		for _, j := range p.done.Jobs {
			if t, ok := seenAt[j.ID]; !ok || p.ret >= t {
				lastView[j.ID], seenAt[j.ID] = j, p.ret
			}
		}
	}
	var o Outcomes
	for _, job := range r.submitted() {
		o.Submitted++
		v, seen := lastView[job]
		t, ok := acked[job]
		jo := JobOutcome{Job: job}
		switch {
		case !ok && !seen:
			jo.Outcome, jo.Reason = Unsubmitted, lastErr[job]
		case !seen || (ok && seenAt[job] < t):
			jo.Outcome, jo.Reason = Lost, "acknowledged at "+r.at(t)+" but never seen by a linearizable read afterwards"
		case seenAt[job] < last.ret:
			jo.Outcome, jo.Reason = Lost, fmt.Sprintf("missing from the last linearizable read (at %s); last seen %s at %s",
				r.at(last.ret), v.State, r.at(seenAt[job]))
		default:
			switch v.State {
			case "completed":
				jo.Outcome = Completed
			case "failed":
				jo.Outcome, jo.Reason = Failed, v.Reason
			case "cancelled":
				jo.Outcome = Cancelled
			default:
				jo.Outcome, jo.Reason = Lost, fmt.Sprintf("still %s (incarnation %d, epoch %d) at the last read, %s", v.State, v.Inc, v.Epoch, r.at(last.ret))
			}
		}
		switch jo.Outcome {
		case Completed:
			o.Completed++
		case Failed:
			o.Failed++
		case Cancelled:
			o.Cancelled++
		case Lost:
			o.Lost++
		case Unsubmitted:
			o.Unsubmitted++
		}
		o.Jobs = append(o.Jobs, jo)
	}
	return o
}

func describeFailure(p *op) string {
	if p.done.Code != 0 {
		return fmt.Sprintf("%s %d %s", p.done.Type, p.done.Code, p.done.Error)
	}
	return fmt.Sprintf("%s %s", p.done.Type, p.done.Error)
}

// checkCompletions checks the completions the API showed (in a
// linearizable read of the list or of the job) against the workers'
// records: a job first read completed, in incarnation I, must
// have a done record of incarnation I written before the read returned;
// and no worker of a newer incarnation than I may start after the job
// was read completed, nor any worker after its cancel was acknowledged.
// (Ranks of incarnation I itself may start late: emulated ranks do not
// wait for each other, so rank 0 can finish from a finished checkpoint
// while the others are still queued on a busy node; such a rank must
// not have run before, and must have ended within lateRankWithin of the
// read.)
func checkCompletions(r *run, ls []*life) []Violation {
	done := map[string][]record.Record{}
	for _, l := range ls {
		if d, ok := l.w.Find(record.Done); ok {
			done[d.Job] = append(done[d.Job], d)
		}
	}
	type finish struct {
		t      int64
		inc    uint64 // the incarnation read completed or cancelled (0: none may start)
		what   string
		cancel bool
	}
	finished := map[string]finish{}
	var out []Violation
	for _, p := range r.ops {
		switch {
		case p.linearizableView():
			for _, j := range p.done.Jobs {
				if j.State != "completed" {
					continue
				}
				if _, ok := finished[j.ID]; ok && finished[j.ID].t <= p.ret {
					continue
				}
				finished[j.ID] = finish{p.ret, j.Inc, fmt.Sprintf("read completed in incarnation %d", j.Inc), false}
				backed := false
				var others []string
				for _, d := range done[j.ID] {
					if d.Inc == j.Inc && d.T < p.ret {
						backed = true
					} else {
						others = append(others, fmt.Sprintf("incarnation %d at %s", d.Inc, r.at(d.T)))
					}
				}
				if !backed {
					out = append(out, Violation{CompletionBacked, p.ret, fmt.Sprintf(
						"job %s read completed in incarnation %d at %s (operation %d), but no worker of that incarnation recorded done before; done records: %v",
						j.ID, j.Inc, r.at(p.ret), p.inv.ID, others)})
				}
			}
		case p.inv.F == history.Cancel && p.ok():
			if f, ok := finished[p.inv.Job]; !ok || p.ret < f.t {
				f := finish{p.ret, 0, "cancel acknowledged", true}
				if p.done.Inc != nil {
					f.inc = *p.done.Inc
					f.what = fmt.Sprintf("cancel acknowledged in incarnation %d", f.inc)
				}
				finished[p.inv.Job] = f
			}
		}
	}
	type rankKey struct {
		job  string
		inc  uint64
		rank int
	}
	firstStart := map[rankKey]int64{}
	for _, l := range ls {
		k := rankKey{l.start.Job, l.start.Inc, l.start.Rank}
		if t, ok := firstStart[k]; !ok || l.start.T < t {
			firstStart[k] = l.start.T
		}
	}
	for _, l := range ls {
		f, ok := finished[l.start.Job]
		switch {
		case !ok || l.start.T <= f.t:
		case l.start.Inc > f.inc:
			out = append(out, Violation{RanAfterFinish, l.start.T, fmt.Sprintf(
				"%s started at %s, after the job was %s at %s", l, r.at(l.start.T), f.what, r.at(f.t))})
		case f.cancel && !(l.end != 0 && l.end-f.t <= int64(cancelStopWithin)):
			// A worker of the cancelled incarnation whose assignment was
			// on its way when the cancel was acknowledged: it must be
			// stopped soon.
			out = append(out, Violation{RanAfterFinish, l.start.T, fmt.Sprintf(
				"%s started at %s, after the job was %s at %s, and was not stopped within %v of it",
				l, r.at(l.start.T), f.what, r.at(f.t), cancelStopWithin)})
		case f.cancel:
		case firstStart[rankKey{l.start.Job, l.start.Inc, l.start.Rank}] < l.start.T:
			out = append(out, Violation{RanAfterFinish, l.start.T, fmt.Sprintf(
				"%s started at %s, after the job was %s at %s, and that rank had run before: a late rank starts at most once",
				l, r.at(l.start.T), f.what, r.at(f.t))})
		case !(l.end != 0 && l.end-f.t <= int64(lateRankWithin)):
			out = append(out, Violation{RanAfterFinish, l.start.T, fmt.Sprintf(
				"%s started at %s, after the job was %s at %s, and had not ended within %v of it (a late rank's bound)",
				l, r.at(l.start.T), f.what, r.at(f.t), lateRankWithin)})
		}
	}
	return out
}

// checkExists reports a submission answered "exists" although no other
// submission of that job had been sent before the answer came (the
// harness sends concurrent attempts: one may create the job while
// another, sent first, is answered 409).
func checkExists(r *run) []Violation {
	var out []Violation
	calls := map[string][]*op{}
	for _, p := range r.ops {
		if p.inv.F == history.Submit {
			calls[p.inv.Job] = append(calls[p.inv.Job], p)
		}
	}
	for _, p := range r.ops {
		if p.inv.F != history.Submit || !p.ok() || p.done.Code != 409 {
			continue
		}
		other := slices.ContainsFunc(calls[p.inv.Job], func(q *op) bool { return q != p && q.call < p.ret })
		if !other {
			out = append(out, Violation{ExistsBeforeSubmit, p.ret, fmt.Sprintf(
				"submission of job %s (operation %d, at %s) was answered 409 although no other submission of it had been sent: it existed before anyone submitted it",
				p.inv.Job, p.inv.ID, r.at(p.call))})
		}
	}
	return out
}
