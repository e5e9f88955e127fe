//go:build !judgebugs

package allocator

import (
	"pollux/actors/pb"
	"pollux/consensus/state"
)

// plant is empty: bugs are planted only in test binaries built with the
// judgebugs tag (planted_judgebugs.go).
type plant struct{}

// staleAllocation returns assign.
func (plant) staleAllocation(_ *allocator, _ *state.State, assign map[string]*pb.Assign) map[string]*pb.Assign {
	return assign
}

// dropCompletion is false: nothing is dropped.
func (plant) dropCompletion(*allocator, string, state.JobState) bool { return false }
