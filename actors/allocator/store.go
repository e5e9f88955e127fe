package allocator

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"

	"pollux/cluster"
	"pollux/consensus"
)

// Store is the part of consensus.Server the allocator uses.
type Store interface {
	Leadership() (term uint64, leader bool)
	// ConfirmLeadership confirms the leadership with a quorum and returns
	// its term.
	ConfirmLeadership(ctx context.Context) (uint64, error)
	Read(ctx context.Context) (*consensus.State, error)
	LocalState() *consensus.State
	LocalJob(id string) (*consensus.Job, consensus.ClusterConfig)
	CommitRound(ctx context.Context, r *consensus.Round) (consensus.Result, error)
	FinishJob(ctx context.Context, f consensus.FinishJob) error
	InitCluster(ctx context.Context, c consensus.InitCluster) error
	RegisterNode(ctx context.Context, n consensus.Node) error
	MarkNode(ctx context.Context, id string, h consensus.Health) error
	Prune(ctx context.Context, p consensus.Prune) ([]consensus.Drop, error)
	// ApplyCommand commits one command (the autoscaler's).
	ApplyCommand(ctx context.Context, c consensus.Command) error
	LeaderChanges() <-chan bool
	JobsChanged() <-chan struct{}
	Servers() ([]raft.Server, error)
}

var _ Store = (*consensus.Server)(nil)

// Members lists the cluster's current members (cluster.Membership.Members).
type Members func() []cluster.Member

// ErrConfig is returned for an unusable configuration.
var ErrConfig = errors.New("allocator: bad configuration")
