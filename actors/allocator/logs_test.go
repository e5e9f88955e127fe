package allocator

import (
	"slices"
	"testing"

	"pollux/actors/pb"
	"pollux/consensus/state"
)

// TestPrunedLogs: a node's next assignment names the jobs its last ack
// keeps logs of that the state no longer holds (pruned), and only those:
// a finished job still held keeps its logs.
func TestPrunedLogs(t *testing.T) {
	st := &state.State{Jobs: map[string]*state.Job{
		"running": {ID: "running", State: state.Running},
		"done":    {ID: "done", State: state.Completed},
	}}
	for _, tc := range []struct {
		name string
		ack  *pb.AssignAck
		want []string
	}{
		{"no ack yet", nil, nil},
		{"no logs", &pb.AssignAck{}, nil},
		{"held jobs", &pb.AssignAck{LogJobs: []string{"done", "running"}}, nil},
		{"pruned ones", &pb.AssignAck{LogJobs: []string{"a", "done", "z"}}, []string{"a", "z"}},
	} {
		if got := prunedLogs(st, tc.ack); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
