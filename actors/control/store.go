package control

import (
	"context"
	"errors"

	"pollux/cluster"
	"pollux/consensus"
)

// Store is the part of consensus.Server the actors use.
type Store interface {
	Leadership() (term uint64, leader bool)
	VerifyLeader(ctx context.Context) (term uint64, err error)
	Read(ctx context.Context) (*consensus.State, error)
	CommitAllocation(ctx context.Context, generation, term uint64, jobs map[string][]consensus.Slot) error
	UpdateJob(ctx context.Context, u consensus.UpdateJob) error
	RecordProfile(ctx context.Context, p consensus.RecordProfile) error
	CompleteJob(ctx context.Context, id string, incarnation uint64, failed bool, reason string, finishTime float64) error
	RegisterNode(ctx context.Context, n consensus.Node) error
	MarkNode(ctx context.Context, id string, h consensus.Health) error
}

var _ Store = (*consensus.Server)(nil)

// Members lists the cluster's current members (cluster.Membership.Members).
type Members func() []cluster.Member

// ErrConfig is returned for an unusable configuration.
var ErrConfig = errors.New("control: bad configuration")
