package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// bigState is a cluster of nodes nodes of 8 GPUs in 16 racks and jobs
// jobs, half of them running on 2 GPUs each with a model like job a's.
func bigState(nodes, jobs int) *state.State {
	base := testState()
	st := &state.State{ACL: base.ACL, Config: base.Config, Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{},
		Allocation: state.Allocation{Generation: 1, Jobs: map[string][]state.Slot{}}}
	for i := range nodes {
		id := fmt.Sprintf("n%04d", i)
		st.Nodes[id] = &state.Node{ID: id, GPUs: 8, Health: state.Alive, Rack: fmt.Sprintf("r%02d", i%16)}
	}
	a := base.Jobs["a"]
	free := 0
	for i := range jobs {
		id := fmt.Sprintf("job-%05d", i)
		j := *a
		j.ID, j.Spec.Name = id, id
		j.State = state.Pending
		if i%2 == 0 && free/4 < nodes {
			j.State = state.Running
			st.Allocation.Jobs[id] = []state.Slot{{Node: fmt.Sprintf("n%04d", free/4), GPUs: 2}}
			free++
		}
		st.Jobs[id] = &j
	}
	return st
}

// BenchmarkOverview is what one poll of a page costs its server: the
// overview of a large cluster (1000 nodes, 2000 jobs) from the leader's
// state, and one sample of the ring.
func BenchmarkOverview(b *testing.B) {
	fb := &fakeBackend{st: bigState(1000, 2000), leader: "s1", servers: []raft.Server{{ID: "s1", Suffrage: raft.Voter}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(Config{ID: "s1", Backend: fb, API: api.New("s1", api.Config{Backend: fb, Logger: log}), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	v := Viewer{Name: "bench", Role: "read"}
	b.Run("overview", func(b *testing.B) {
		for b.Loop() {
			ov := d.overview(context.Background(), v, float64(time.Now().Unix()))
			if len(ov.Jobs) != 2000 {
				b.Fatal(len(ov.Jobs))
			}
		}
	})
	b.Run("sample", func(b *testing.B) {
		for b.Loop() {
			d.Sample()
		}
	})
}
