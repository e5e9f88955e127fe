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
