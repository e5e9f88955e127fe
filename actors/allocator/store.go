package allocator

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"

	"pollux/cluster"
	"pollux/consensus"
	"pollux/consensus/state"
)

// Store is the part of consensus.Server the allocator uses.
type Store interface {
	Leadership() (term uint64, leader bool)
	// ConfirmLeadership confirms the leadership with a quorum and returns
	// its term.
	ConfirmLeadership(ctx context.Context) (uint64, error)
	Read(ctx context.Context) (*state.State, error)
	LocalState() *state.State
	LocalJob(id string) (*state.Job, state.ClusterConfig)
	CommitRound(ctx context.Context, r *state.Round) (consensus.Result, error)
	FinishJob(ctx context.Context, f state.FinishJob) error
	InitCluster(ctx context.Context, c state.InitCluster) error
	// RegisterNodes registers nodes in one batch and returns each one's
	// error.
	RegisterNodes(ctx context.Context, nodes []state.Node) ([]error, error)
	MarkNode(ctx context.Context, id string, h state.Health) error
	Prune(ctx context.Context, p state.Prune) ([]state.Drop, error)
	// ApplyCommand commits one command (the autoscaler's).
	ApplyCommand(ctx context.Context, c state.Command) error
	LeaderChanges() <-chan bool
	JobsChanged() <-chan struct{}
	Servers() ([]raft.Server, error)
}

var _ Store = (*consensus.Server)(nil)

// Members lists the cluster's current members (cluster.Membership.Members).
type Members func() []cluster.Member

// ErrConfig is returned for an unusable configuration.
var ErrConfig = errors.New("allocator: bad configuration")
