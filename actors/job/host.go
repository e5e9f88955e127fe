package job

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus"
	"pollux/consensus/state"
)

// ErrConfig is returned for an unusable configuration.
var ErrConfig = errors.New("job: bad configuration")

// Store is what job actors read: their server's replicated state.
type Store interface {
	LocalJob(id string) (*state.Job, state.ClusterConfig)
}

var _ Store = (*consensus.Server)(nil)

// HostConfig configures one server's job host and its job actors.
type HostConfig struct {
	// Server is this server's id.
	Server string
	Store  Store
	// BidEvery is how often a job actor aggregates what its workers
	// reported into a measurement and bids if it has anything new
	// (default 1 s).
	BidEvery time.Duration
	// RefitEvery is the least time between two fits of a job's model
	// when no new configuration was profiled (default 30 s).
	RefitEvery time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// JobPropsOptions are added to every job actor's props (middleware).
	JobPropsOptions []actor.PropsOption
	Logger          *slog.Logger
	// Fits counts the model fits of this host's job actors, Reports the
	// worker reports they took in (either may be nil).
	Fits, Reports *atomic.Int64
}

// NewHost returns the props of a server's job host.
func NewHost(cfg HostConfig) (*actor.Props, error) {
	if cfg.Store == nil || cfg.Server == "" {
		return nil, fmt.Errorf("%w: a host needs a store and its server's id", ErrConfig)
	}
	if cfg.BidEvery <= 0 {
		cfg.BidEvery = time.Second
	}
	if cfg.RefitEvery <= 0 {
		cfg.RefitEvery = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Fits == nil {
		cfg.Fits = &atomic.Int64{}
	}
	if cfg.Reports == nil {
		cfg.Reports = &atomic.Int64{}
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &host{cfg: &cfg, jobs: map[string]*actor.PID{}}
	}), nil
}

// host runs the job actors the leader places on its server.
type host struct {
	cfg  *HostConfig
	jobs map[string]*actor.PID
	// term and generation of the newest HostJobs applied: an older
	// leader's is ignored.
	term, generation uint64
}

func (h *host) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.HostJobs:
		h.apply(ctx, m)
		ctx.Respond(&pb.HostAck{Server: h.cfg.Server, Jobs: uint32(len(h.jobs))})
	}
}

func (h *host) apply(ctx actor.Context, m *pb.HostJobs) {
	if m.Term < h.term || (m.Term == h.term && m.Generation < h.generation) || m.Allocator == nil {
		return
	}
	h.term, h.generation = m.Term, m.Generation
	alloc := actor.NewPID(m.Allocator.Address, m.Allocator.Id)
	want := make(map[string]*pb.HostedJob, len(m.Jobs))
	for _, hj := range m.Jobs {
		want[hj.Job] = hj
	}
	for id, pid := range h.jobs {
		if want[id] == nil {
			// Wait, so that an actor spawned again under the same name
			// soon after does not collide with this one.
			_ = ctx.StopFuture(pid).Wait()
			delete(h.jobs, id)
		}
	}
	for _, hj := range m.Jobs {
		pid := h.jobs[hj.Job]
		if pid == nil {
			ja := newJobActor(hj.Job, hj.Session, h.cfg)
			props := actor.PropsFromProducer(func() actor.Actor { return ja }, h.cfg.JobPropsOptions...)
			var err error
			if pid, err = ctx.SpawnNamed(props, "job-"+hj.Job); err != nil {
				h.cfg.Logger.Error("job: spawning job actor", "job", hj.Job, "err", err)
				continue
			}
			h.jobs[hj.Job] = pid
		}
		ctx.Send(pid, plan{incarnation: hj.Incarnation, nodes: int(hj.Nodes), reps: int(hj.Replicas), racks: planRacks(hj.Nodes, hj.Racks),
			gpuType: hj.GpuType, allocator: alloc})
	}
}

// planRacks is the racks a placement of nodes spans as profile entries
// count them: 0 for one rack, and for a count beyond the nodes (no
// placement's).
func planRacks(nodes, racks uint32) int {
	if racks < 2 || racks > nodes {
		return 0
	}
	return int(racks)
}
