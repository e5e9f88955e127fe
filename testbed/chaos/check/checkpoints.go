package check

import (
	"fmt"
	"maps"
	"slices"

	"pollux/testbed/chaos/record"
)

// ckpt is one checkpoint written or restored, by the worker of incarnation
// inc (rank 0 writes and reads them).
type ckpt struct {
	r   record.Record
	inc uint64
	l   *life
}

// checkCheckpoints checks, per job, the checkpoints its workers read
// against those they wrote, from the workers' own records: the
// stale-checkpoint and lost-progress invariants of docs/reliability.md
// (a restore reads no superseded write, and no less progress than an
// older incarnation had finished writing).
func checkCheckpoints(r *run, ls []*life) []Violation {
	writes := map[string][]ckpt{}
	restores := map[string][]ckpt{}
	for _, l := range ls {
		for _, rec := range l.w.Records {
			switch rec.Kind {
			case record.Checkpoint:
				writes[rec.Job] = append(writes[rec.Job], ckpt{rec, rec.Inc, l})
			case record.Restore:
				restores[rec.Job] = append(restores[rec.Job], ckpt{rec, rec.Inc, l})
			}
		}
	}
	var out []Violation
	for _, job := range slices.Sorted(maps.Keys(restores)) {
		rs := restores[job]
		ws := writes[job]
		// supersededBy returns a restore of a newer incarnation that
		// ended before w began, if any.
		supersededBy := func(w ckpt) (ckpt, bool) {
			for _, x := range rs {
				if x.inc > w.inc && x.r.T < w.r.T0 {
					return x, true
				}
			}
			return ckpt{}, false
		}
		for _, x := range rs {
			// Which write did it read?
			if !x.r.Fresh {
				var stale *ckpt
				var by ckpt
				legit := false
				for i := range ws {
					w := ws[i]
					if w.inc != x.r.From || w.r.Epoch != x.r.Epoch || w.r.Progress != x.r.Progress || w.r.T0 > x.r.T {
						continue
					}
					if s, ok := supersededBy(w); ok {
						if stale == nil {
							stale, by = &ws[i], s
						}
					} else {
						legit = true
					}
				}
				if stale != nil && !legit {
					out = append(out, Violation{StaleCheckpoint, x.r.T, fmt.Sprintf(
						"job %s: incarnation %d (%s) restored at %s the checkpoint incarnation %d wrote at %s (epoch %d, progress %.1f), after incarnation %d had taken over (restored at %s)",
						job, x.inc, x.l.w.Node, r.at(x.r.T), stale.inc, r.at(stale.r.T), stale.r.Epoch, stale.r.Progress, by.inc, r.at(by.r.T))})
				}
			}
			// Did it lose progress a predecessor had saved?
			var best *ckpt
			for i := range ws {
				w := ws[i]
				if w.inc >= x.inc || w.r.T >= x.r.T0 {
					continue
				}
				if _, ok := supersededBy(w); ok {
					continue
				}
				if best == nil || w.r.Progress > best.r.Progress {
					best = &ws[i]
				}
			}
			if best != nil && x.r.Progress < best.r.Progress {
				from := "nothing (a fresh start)"
				if !x.r.Fresh {
					from = fmt.Sprintf("progress %.1f written by incarnation %d", x.r.Progress, x.r.From)
				}
				out = append(out, Violation{LostProgress, x.r.T, fmt.Sprintf(
					"job %s: incarnation %d (%s) restored %s at %s, but incarnation %d had checkpointed progress %.1f (epoch %d) at %s",
					job, x.inc, x.l.w.Node, from, r.at(x.r.T), best.inc, best.r.Progress, best.r.Epoch, r.at(best.r.T))})
			}
		}
	}
	return out
}
