//go:build !judgebugs

package api

import "pollux/consensus/state"

// plant is empty: bugs are planted only in test binaries built with the
// judgebugs tag (planted_judgebugs.go).
type plant struct{}

// staleRead returns a follower's local state, marked stale.
func (plant) staleRead(_ *API, st *state.State) (*state.State, bool) { return st, true }
