package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"pollux/optimizer/goodput"
)

// randomCommand returns a command that is valid on its own; against the
// state it may well be refused (unknown ids, stale generations, ...).
func randomCommand(r *rand.Rand, gen *uint64) Command {
	job := fmt.Sprintf("j%d", r.IntN(6))
	node := fmt.Sprintf("n%d", r.IntN(4))
	switch r.IntN(12) {
	case 8:
		return &FinishJob{ID: job, Incarnation: uint64(r.IntN(3)), State: JobState(4 + r.IntN(3)), Time: float64(r.IntN(100))}
	case 9:
		return &Prune{Jobs: []string{job}, Nodes: []string{node}}
	case 10:
		return &InitCluster{ID: fmt.Sprintf("c%d", r.IntN(2)), CheckpointRoot: fmt.Sprintf("/r%d", r.IntN(2))}
	case 11:
		*gen += uint64(r.IntN(2))
		jobs := map[string][]Slot{}
		for j := range 1 + r.IntN(3) {
			jobs[fmt.Sprintf("j%d", (j+r.IntN(6))%6)] = []Slot{{Node: fmt.Sprintf("n%d", r.IntN(4)), GPUs: 1 + r.IntN(2)}}
		}
		u := RoundJob{ID: job, Incarnation: uint64(r.IntN(3)), Restart: r.IntN(2) == 0, Running: true}
		if r.IntN(2) == 0 {
			u.HasBid, u.Bid = true, testBid(uint64(1+r.IntN(3)), uint64(1+r.IntN(3)))
		}
		if r.IntN(2) == 0 {
			from := uint64(r.IntN(3))
			u.HasMeas, u.Meas = true, measurement(uint64(1+r.IntN(3)), from, from+1, r.IntN(10),
				entry(1, 1+r.IntN(4), 32<<r.IntN(3), 0.01+r.Float64(), 0.02+r.Float64(), uint64(1+r.IntN(5))))
		}
		return &Round{Generation: *gen, Term: 1, Time: float64(r.IntN(1000)), Accrue: r.Float64(), MaxFailures: r.IntN(4), Jobs: jobs, Updates: []RoundJob{u}}
	case 0:
		return &SubmitJob{ID: job, Spec: testSpec(), SubmitTime: float64(r.IntN(100))}
	case 1:
		return &UpdateJob{ID: job, Incarnation: uint64(r.IntN(3)), Set: UpdateAttained | UpdateEpoch | UpdateProgress,
			Attained: float64(r.IntN(1000)), Epoch: r.IntN(10), Progress: r.Float64()}
	case 2:
		return &UpdateJob{ID: job, Set: UpdateState, State: JobState(1 + r.IntN(3))}
	case 3:
		return &CompleteJob{ID: job, Failed: r.IntN(2) == 0, FinishTime: float64(r.IntN(100))}
	case 4:
		return &RecordProfile{ID: job, Incarnation: uint64(r.IntN(3)), Entries: []ProfileEntry{
			entry(1, 1+r.IntN(4), 32<<r.IntN(3), 0.01+r.Float64(), 0.02+r.Float64(), uint64(1+r.IntN(5)))},
			HasGrad: true, Grad: goodput.GradStats{GradSqr: r.Float64(), GradVar: r.Float64()}}
	case 5:
		*gen += uint64(r.IntN(2))
		jobs := map[string][]Slot{}
		for j := range 1 + r.IntN(3) {
			jobs[fmt.Sprintf("j%d", (j+r.IntN(6))%6)] = []Slot{{Node: fmt.Sprintf("n%d", r.IntN(4)), GPUs: 1 + r.IntN(2)}}
		}
		return &CommitAllocation{Generation: *gen, Term: 1, Jobs: jobs}
	case 6:
		return &RegisterNode{Node: Node{ID: node, Addresses: []string{"127.0.0.1:1"}, GPUs: 2 + r.IntN(6), Health: Alive}}
	}
	return &MarkNode{ID: node, Health: Health(1 + r.IntN(4))}
}

// TestApplyDeterministicAcrossSnapshots applies seeded random histories
// to two state machines, one of which is snapshotted and restored into a
// fresh machine every few commands: results and encodings must agree at
// every step.
func TestApplyDeterministicAcrossSnapshots(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		a, b := newApplier(), newApplier()
		gen := uint64(1)
		applied := 0
		for step := range 300 {
			c := randomCommand(r, &gen)
			ea, eb := a.apply(t, 1, c), b.apply(t, 1, c)
			if fmt.Sprint(ea) != fmt.Sprint(eb) {
				t.Fatalf("seed %d step %d: results differ: %v vs %v", seed, step, ea, eb)
			}
			if ea == nil {
				applied++
			}
			if step%25 == 0 {
				s, err := DecodeState(EncodeState(b.s))
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				b.s = s
			}
			if !bytes.Equal(EncodeState(a.state()), EncodeState(b.state())) {
				t.Fatalf("seed %d step %d: states differ", seed, step)
			}
		}
		if applied < 50 {
			t.Fatalf("seed %d: only %d of 300 commands applied: the generator is too weak", seed, applied)
		}
	}
}
