package optimizer_test

import (
	"fmt"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// Lookup builds a policy by the name a command line gives; its optional
// interfaces say what else it can do.
func ExampleLookup() {
	fmt.Println(optimizer.Names())

	p, err := optimizer.Lookup("pollux-het", optimizer.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, aware := p.(optimizer.TypeAware)
	fmt.Println(p.Name(), "tells GPU types apart:", aware)

	// With autoscaling settings it decides the cluster size as well.
	as := optimizer.Autoscale{Template: optimizer.Node{GPUs: 4, Type: "a100"}, MinNodes: 1, MaxNodes: 8}
	p, err = optimizer.Lookup("pollux-het", optimizer.Options{Autoscale: &as})
	fmt.Println(p.Name(), err)

	_, err = optimizer.Lookup("fifo", optimizer.Options{})
	fmt.Println(err)
	// Output:
	// [optimus pollux pollux-het pollux-unaware sia throughput-autoscale tiresias]
	// pollux-het tells GPU types apart: true
	// pollux-het-autoscale <nil>
	// optimizer: unknown policy "fifo": want optimus, pollux, pollux-het, pollux-unaware, sia, throughput-autoscale, tiresias
}

// One round of Pollux on two nodes of four GPUs: a job whose replicas
// synchronise cheaply gets most GPUs, one for which synchronising costs
// seconds keeps one. The same snapshot (with its seed) always gives the
// same allocation.
func ExamplePolicy() {
	scales := &goodput.Model{
		Params: goodput.Params{AlphaC: 0.05, BetaC: 0.001, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.02, BetaR: 0.002, Gamma: 1.5},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: 1000},
		Limits: goodput.Limits{InitBatch: 32, MaxBatch: 1024, MinLocal: 8, MaxLocal: 128, Accumulation: true},
	}
	flat := *scales
	flat.Params.AlphaR, flat.Params.AlphaN = 2, 4 // synchronising costs seconds
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{{ID: "n0", GPUs: 4}, {ID: "n1", GPUs: 4}},
		Jobs: []optimizer.Job{
			{ID: "scales", Age: 3600, MaxReplicas: 8, Model: scales},
			{ID: "flat", Age: 3600, MaxReplicas: 8, Model: &flat},
		},
		Seed: 1,
	}
	policy, err := optimizer.Lookup("pollux", optimizer.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := policy.Allocate(snap, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for j, pl := range res.Placements {
		fmt.Printf("%s:", snap.Jobs[j].ID)
		for _, nc := range pl {
			fmt.Printf(" %s x%d", snap.Nodes[nc.Node].ID, nc.Count)
		}
		fmt.Println()
	}
	fmt.Printf("fitness %.2f\n", res.Diagnostics.Fitness)
	// Output:
	// scales: n0 x3 n1 x4
	// flat: n0 x1
	// fitness 0.34
}
