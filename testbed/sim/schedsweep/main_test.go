package main

import (
	"testing"

	"pollux/optimizer"
)

func TestScheduleSize(t *testing.T) {
	s := schedule{nodes: []int{2, 8, 16}, hours: []float64{0, 1, 2.5}}
	for _, c := range []struct {
		now  float64
		want int
	}{{0, 2}, {3599, 2}, {3600, 8}, {8999, 8}, {9000, 16}, {1e6, 16}} {
		if got := s.size(c.now); got != c.want {
			t.Errorf("size(%v) = %d, want %d", c.now, got, c.want)
		}
	}
}

func TestScheduledAsksForTheSchedule(t *testing.T) {
	p := &scheduled{pollux: optimizer.NewPollux(), sched: schedule{nodes: []int{1, 4}, hours: []float64{0, 1}}, min: 1}
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{{ID: "n0", GPUs: 4}},
		Jobs:  []optimizer.Job{{ID: "j", MaxReplicas: 4}},
		Now:   7200,
	}
	res, err := p.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale == nil || res.Scale.Nodes != 4 || res.Scale.Current != 1 {
		t.Fatalf("scale %+v, want 4 nodes wanted with 1 present", res.Scale)
	}
	snap.Jobs = nil
	if res, err = p.Allocate(snap, nil); err != nil || res.Scale.Nodes != 1 {
		t.Fatalf("no job: scale %+v, err %v; want the minimum", res.Scale, err)
	}
}

func TestNeighbours(t *testing.T) {
	got := map[string]bool{}
	for _, s := range neighbours(schedule{nodes: []int{2, 16}, hours: []float64{0, 1}}, 16) {
		got[s.String()] = true
	}
	want := []string{
		"1 from 0 h, 16 from 1 h", // first size down
		"3 from 0 h, 16 from 1 h", // first size up
		"2 from 0 h, 14 from 1 h", // second size down (16 is the maximum)
		"2 from 0 h, 16 from 0.75 h",
		"2 from 0 h, 16 from 1.25 h",
		"2 from 0 h, 3 from 0.5 h, 16 from 1 h", // first phase split
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing neighbour %q", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("neighbours %v, want exactly %v", got, want)
	}
}

func TestScheduledVacatesNodesWhenShrinking(t *testing.T) {
	p := &scheduled{pollux: optimizer.NewPollux(), sched: schedule{nodes: []int{4, 1}, hours: []float64{0, 1}}, min: 1}
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{{ID: "n0", GPUs: 4}, {ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 4}, {ID: "n3", GPUs: 4}},
		Jobs: []optimizer.Job{
			{ID: "a", MaxReplicas: 16, Current: optimizer.Placement{{Node: 3, Count: 4}}},
			{ID: "b", MaxReplicas: 16, Current: optimizer.Placement{{Node: 2, Count: 4}}},
		},
		Now: 3600,
	}
	res, err := p.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale.Nodes != 1 {
		t.Fatalf("scale %+v, want 1 node", res.Scale)
	}
	for j, pl := range res.Placements {
		for _, nc := range pl {
			if nc.Node != 0 {
				t.Fatalf("job %d placed on node %d, want only node 0 while shrinking to 1", j, nc.Node)
			}
		}
	}
	if snap.Nodes[3].GPUs != 4 {
		t.Fatal("the caller's snapshot was modified")
	}
}
