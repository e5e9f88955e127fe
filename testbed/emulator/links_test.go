package emulator

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/internal/poll"
	"pollux/testbed/fabric"
)

// named is toyApp under an application name the network knows the
// gradients of.
type named struct {
	toyApp
	name string
}

func (a named) Name() string { return a.name }

// Workers of a job on two racks wait for each other, then report step
// and sync times with what the shared uplinks add.
func TestLinksAddTheUplinksToSynchronisedSteps(t *testing.T) {
	net := fabric.Config{NodeBandwidth: 1e9, Oversubscription: 4}
	links, err := fabric.NewLinks(net, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	app := named{name: "cifar10"}
	bytes, _ := fabric.GradientBytes(app.name)
	// Alone across the racks, one node in each: an uplink carries half a
	// node's rate.
	want := bytes/(0.5e9) - bytes/1e9

	dir := t.TempDir()
	var mu sync.Mutex
	var got []workerproto.Report
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	start := func(rank, rack int) {
		e := env(dir, "in-process:0")
		e.Rank, e.NumNodes, e.WorldSize = rank, 2, 2
		cfg := Config{Env: e, App: app, TimeScale: 1, Tick: 5 * time.Millisecond, ReportEvery: 10 * time.Millisecond,
			Deliver: func(r workerproto.Report) { mu.Lock(); got = append(got, r); mu.Unlock() },
			Logger:  quiet(), Links: links, Rack: rack}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Run(ctx, cfg); err != nil {
				t.Errorf("rank %d: %v", rank, err)
			}
		}()
	}
	start(0, 0)
	key := "toy-1@2"
	poll.Until(t, 30*time.Second, "rank 0 joined", func() bool { return links.Nodes(key) == 1 })
	start(1, 1)
	poll.Until(t, 30*time.Second, "reports", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 3 })
	cancel()
	wg.Wait()
	if links.Nodes(key) != 0 {
		t.Errorf("%d nodes still joined after the workers ended", links.Nodes(key))
	}
	for _, r := range got {
		// (every report: rank 0 reports only once both nodes are there)
		if math.Abs(r.StepTime-(0.1+want)) > 1e-9 || math.Abs(r.SyncTime-(0.02+want)) > 1e-9 {
			t.Fatalf("report step %v sync %v, want %v and %v", r.StepTime, r.SyncTime, 0.1+want, 0.02+want)
		}
	}
}

func TestLinksNeedTheGradientSize(t *testing.T) {
	links, err := fabric.NewLinks(fabric.Config{Oversubscription: 2}, []int{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Env: env(t.TempDir(), "in-process:0"), App: toyApp{}, TimeScale: 1, Deliver: func(workerproto.Report) {},
		Logger: quiet(), Links: links}
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("an application of unknown gradients ran on links: %v", err)
	}
	cfg.App, cfg.Rack = named{name: "cifar10"}, 5
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("a worker joined a rack the network lacks: %v", err)
	}
}
