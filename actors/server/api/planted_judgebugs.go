//go:build judgebugs

package api

import (
	"sync"

	"pollux/consensus/state"
	"pollux/internal/judgebugs"
)

// plant is a planted bug's state (package judgebugs).
type plant struct {
	once   sync.Once
	frozen *state.State
}

// staleRead plants judgebugs.StaleRead: a follower answers from the
// state it had at its first read, marked fresh. Without the bug it
// returns st, marked stale.
func (p *plant) staleRead(a *API, st *state.State) (*state.State, bool) {
	if !judgebugs.Planted(judgebugs.StaleRead) {
		return st, true
	}
	p.once.Do(func() {
		p.frozen = st
		a.cfg.Logger.Warn("api: PLANTED BUG: this follower answers reads from a frozen state, marked fresh", "bug", judgebugs.StaleRead)
	})
	return p.frozen, false
}
