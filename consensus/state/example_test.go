package state_test

import (
	"errors"
	"fmt"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// ExampleApplyTo applies a node, a job and a round to a State of its own,
// as the replicated state machine would, and shows a refused command
// leaving the state as it was.
func ExampleApplyTo() {
	s := state.New()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 4,
		Limits: goodput.Limits{InitBatch: 128, MaxBatch: 1024, MinLocal: 32, MaxLocal: 256}}
	for _, c := range []state.Command{
		&state.InitCluster{ID: "lab", CheckpointRoot: "/ckpt"},
		&state.RegisterNode{Node: state.Node{ID: "n1", Addresses: []string{"127.0.0.1:7000"}, GPUs: 4, Health: state.Alive}},
		&state.SubmitJob{ID: "j1", Spec: spec, SubmitTime: 1},
		&state.Round{Generation: 1, Term: 1, Time: 2, Jobs: map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 2}}}},
	} {
		if _, err := state.ApplyTo(s, c, 1); err != nil {
			fmt.Println("error:", err)
		}
	}
	fmt.Println(s.Jobs["j1"].State, s.Allocation.Generation, s.UsedGPUs()["n1"], s.CheckpointDir(s.Jobs["j1"]))

	// A round of a generation already committed is refused; s is
	// unchanged.
	_, err := state.ApplyTo(s, &state.Round{Generation: 1, Term: 1, Time: 3}, 1)
	fmt.Println(errors.Is(err, state.ErrStaleGeneration), s.Allocation.Generation)
	// Output:
	// running 1 2 /ckpt/j1
	// true 1
}
