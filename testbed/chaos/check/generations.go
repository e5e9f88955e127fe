package check

import (
	"cmp"
	"fmt"
	"slices"

	"pollux/testbed/chaos/history"
)

// checkGenerations checks the committed allocations. Every server records
// each one it applies, so one commit appears once per server (and again
// when a restarted server replays its log); the records must agree:
//   - a generation names one allocation, at one index, in one term;
//   - an index carries one generation;
//   - in log order, generations increase and terms do not decrease (a
//     lower term after a higher one is a deposed leader's allocation);
//   - each incarnation of each server applies generations in increasing
//     order as time goes on.
func checkGenerations(ev []history.Event) []Violation {
	var out []Violation
	byGen := map[uint64]history.Event{}
	byIndex := map[uint64]history.Event{}
	// Conflicts already reported: every server records the same commit.
	type conflict struct {
		gen, index, term uint64
		alloc            string
	}
	reported := map[conflict]bool{}
	for _, e := range ev {
		if e.Kind != history.Commit {
			continue
		}
		if g, ok := byGen[e.Gen]; !ok {
			byGen[e.Gen] = e
		} else if g.Alloc != e.Alloc || g.Index != e.Index || g.Term != e.Term {
			if c := (conflict{e.Gen, e.Index, e.Term, e.Alloc}); !reported[c] {
				reported[c] = true
				out = append(out, Violation{Generation, e.T,
					fmt.Sprintf("generation %d committed twice: allocation %s at index %d in term %d (%s, %s) and allocation %s at index %d in term %d (%s, %s)",
						e.Gen, g.Alloc, g.Index, g.Term, g.Src, fmtT(g.T), e.Alloc, e.Index, e.Term, e.Src, fmtT(e.T)),
					[]history.Event{g, e}})
			}
			continue
		}
		if i, ok := byIndex[e.Index]; !ok {
			byIndex[e.Index] = e
		} else if c := (conflict{gen: e.Gen, index: e.Index}); i.Gen != e.Gen && !reported[c] {
			reported[c] = true
			out = append(out, Violation{Generation, e.T,
				fmt.Sprintf("log index %d carries generation %d (%s) and generation %d (%s)", e.Index, i.Gen, i.Src, e.Gen, e.Src),
				[]history.Event{i, e}})
		}
	}

	// Log order: the first record of each generation, by index.
	commits := make([]history.Event, 0, len(byGen))
	for _, e := range byGen {
		commits = append(commits, e)
	}
	slices.SortFunc(commits, func(a, b history.Event) int { return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Gen, b.Gen)) })
	for i := 1; i < len(commits); i++ {
		p, c := commits[i-1], commits[i]
		if p.Index == c.Index {
			continue // reported above
		}
		if c.Gen <= p.Gen {
			out = append(out, Violation{Generation, max(p.T, c.T),
				fmt.Sprintf("generation went backwards in the log: %d at index %d, then %d at index %d", p.Gen, p.Index, c.Gen, c.Index),
				[]history.Event{p, c}})
		}
		if c.Term < p.Term {
			out = append(out, Violation{Generation, max(p.T, c.T),
				fmt.Sprintf("generation %d (index %d) committed in term %d after generation %d in term %d: a deposed leader's allocation",
					c.Gen, c.Index, c.Term, p.Gen, p.Term),
				[]history.Event{p, c}})
		}
	}

	// Per server incarnation, in time order.
	type proc struct {
		src string
		inc uint64
	}
	incOf := map[string]uint64{} // recorder -> its current incarnation
	last := map[proc]history.Event{}
	for _, e := range ev {
		switch e.Kind {
		case history.ProcStart:
			incOf[string(e.Role)+"/"+e.ID] = e.Inc
		case history.Commit:
			k := proc{e.Src, incOf[e.Src]}
			if p, ok := last[k]; ok && e.Gen <= p.Gen {
				out = append(out, Violation{Generation, e.T,
					fmt.Sprintf("%s (incarnation %d) applied generation %d at %s after generation %d at %s",
						e.Src, k.inc, e.Gen, fmtT(e.T), p.Gen, fmtT(p.T)),
					[]history.Event{p, e}})
			}
			last[k] = e
		}
	}
	return out
}
