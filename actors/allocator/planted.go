//go:build !judgebugs

package allocator

import (
	"pollux/actors/pb"
	"pollux/consensus/state"
)

// plant is empty: bugs are planted only in test binaries built with the
// judgebugs tag (planted_judgebugs.go).
type plant struct{}

// plantStaleAllocation returns assign.
func (a *allocator) plantStaleAllocation(_ *state.State, assign map[string]*pb.Assign) map[string]*pb.Assign {
	return assign
}

// plantDropCompletion is false: nothing is dropped.
func (a *allocator) plantDropCompletion(string, state.JobState) bool { return false }
