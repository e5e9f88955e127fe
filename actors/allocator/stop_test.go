package allocator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/allocator"
	"pollux/consensus/state"
)

// quorumlessStore leads, but its reads wait, for a quorum that never
// answers, until their context ends; it says when a read began and why
// it ended. The allocator calls nothing else of it in these tests.
type quorumlessStore struct {
	allocator.Store
	began chan struct{}
	ended chan error
}

func (s *quorumlessStore) Leadership() (uint64, bool)   { return 1, true }
func (s *quorumlessStore) LeaderChanges() <-chan bool   { return nil }
func (s *quorumlessStore) JobsChanged() <-chan struct{} { return nil }
func (s *quorumlessStore) Read(ctx context.Context) (*state.State, error) {
	s.began <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, ctx.Err()
}

// TestStoppingAbortsRaftWaits: once the allocator's context ends (its
// server stops), the Raft read it waits for returns at once, cancelled,
// instead of running out its timeout, so stopping the actor does not
// wait for a quorum that is gone (a server cut off in `pollux chaos
// --scenario loss` needed SIGKILL 19 s after SIGTERM before).
func TestStoppingAbortsRaftWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &quorumlessStore{began: make(chan struct{}, 4), ended: make(chan error, 4)}
	props, err := allocator.NewAllocator(allocator.Config{Store: st, Server: "s0", Interval: time.Hour, Lease: 10 * time.Minute, Context: ctx}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(props)
	<-st.began // the first round reads the state
	cancel()
	if err := <-st.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the read ended with %v, want it cancelled by the server's stop", err)
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatalf("stopping the allocator: %v", err)
	}
}
