package control

import (
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"path/filepath"
	"slices"

	"pollux/actors/pb"
	"pollux/consensus"
	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// maxAdaptiveReplicas caps an adaptive job's replicas (spec section 4).
const maxAdaptiveReplicas = 64

// Models caches fitted throughput models by job, refitting only when the
// job's profile changed.
type Models struct {
	byJob map[string]cachedModel
}

type cachedModel struct {
	key    uint64
	params goodput.Params
	ok     bool
}

// NewModels returns an empty cache.
func NewModels() *Models { return &Models{byJob: map[string]cachedModel{}} }

// Model is the job's goodput model, or nil while its profile cannot be
// fitted (no profile yet).
func (ms *Models) Model(j *consensus.Job) *goodput.Model {
	if len(j.Profile) == 0 {
		return nil
	}
	h := fnv.New64a()
	for _, e := range j.Profile {
		fmt.Fprintf(h, "%d/%d/%d/%d/%x/%x;", e.Nodes, e.Replicas, e.LocalBatch, e.Count,
			math.Float64bits(e.AccumTime), math.Float64bits(e.StepTime))
	}
	key := h.Sum64()
	c, hit := ms.byJob[j.ID]
	if !hit || c.key != key {
		p, err := goodput.Fit(j.ProfilePoints())
		c = cachedModel{key: key, params: p, ok: err == nil}
		ms.byJob[j.ID] = c
	}
	if !c.ok {
		return nil
	}
	m := &goodput.Model{Params: c.params, Limits: j.Spec.Limits}
	if j.HasGrad {
		m.Grad = j.Grad
	}
	if m.Validate() != nil {
		return nil
	}
	return m
}

// Forget drops the cached models of jobs not in keep.
func (ms *Models) Forget(keep map[string]*consensus.Job) {
	for id := range ms.byJob {
		if _, ok := keep[id]; !ok {
			delete(ms.byJob, id)
		}
	}
}

// activeNodes are the alive nodes with GPUs, sorted by id.
func activeNodes(st *consensus.State) []optimizer.Node {
	var nodes []optimizer.Node
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.Health == consensus.Alive && n.GPUs > 0 {
			nodes = append(nodes, optimizer.Node{ID: id, GPUs: n.GPUs})
		}
	}
	return nodes
}

// BuildSnapshot is the optimizer's input for one round: the alive nodes
// and every unfinished job not in exclude, with its current placement
// (slots on nodes that are no longer alive dropped), its age at now
// (seconds on the state's clock, multiplied by timeScale so that an
// emulated cluster's restart penalty is weighed in emulated time), its
// attained service, and its fitted model.
func BuildSnapshot(st *consensus.State, models *Models, now, timeScale float64, seed uint64, exclude map[string]bool) (*optimizer.Snapshot, error) {
	snap := &optimizer.Snapshot{Nodes: activeNodes(st), Seed: seed, Now: now}
	alive := map[string]bool{}
	for _, n := range snap.Nodes {
		alive[n.ID] = true
	}
	for _, id := range st.JobIDs() {
		j := st.Jobs[id]
		if j.State.Terminal() || exclude[id] {
			continue
		}
		var slots []consensus.Slot
		for _, sl := range st.Allocation.Jobs[id] {
			if alive[sl.Node] {
				slots = append(slots, sl)
			}
		}
		cur, err := consensus.PlacementFromSlots(snap.Nodes, slots)
		if err != nil {
			return nil, fmt.Errorf("control: job %s: %w", id, err)
		}
		snap.Jobs = append(snap.Jobs, optimizer.Job{
			ID: id, SubmitTime: j.SubmitTime, Age: math.Max(now-j.SubmitTime, 0) * timeScale, Attained: j.Attained,
			Restarts: j.Restarts, MinReplicas: j.Spec.MinReplicas, MaxReplicas: maxReplicas(j),
			Current: cur, Model: models.Model(j),
		})
	}
	return snap, nil
}

// maxReplicas is an adaptive job's replica bound: at most double the most
// replicas it has been profiled at, within its spec, 64 and what its batch
// limits allow.
func maxReplicas(j *consensus.Job) int {
	most := 0
	for _, e := range j.Profile {
		most = max(most, e.Replicas)
	}
	l := j.Spec.Limits
	limit := min(j.Spec.MaxReplicas, max(2*most, 1), maxAdaptiveReplicas)
	if l.MinLocal > 0 {
		limit = min(limit, max(l.MaxBatch/l.MinLocal, 1))
	}
	return max(limit, j.Spec.MinReplicas)
}

// Slots converts a round's result into the allocation to commit.
func Slots(snap *optimizer.Snapshot, placements []optimizer.Placement) (map[string][]consensus.Slot, error) {
	out := map[string][]consensus.Slot{}
	for i, p := range placements {
		if len(p) == 0 {
			continue
		}
		slots, err := consensus.SlotsFromPlacement(snap.Nodes, p)
		if err != nil {
			return nil, err
		}
		out[snap.Jobs[i].ID] = slots
	}
	return out, nil
}

// BatchConfig is how a job should train on N nodes and K replicas: its
// fitted model's best configuration, or before the first fit the
// scheduler's default split of max(M0, m_min*K).
func BatchConfig(j *consensus.Job, model *goodput.Model, n, k int) (m, s int, gain float64) {
	if model != nil {
		if cfg, err := model.Optimize(n, k); err == nil {
			return cfg.LocalBatch, cfg.AccumSteps, cfg.Gain
		}
	}
	l := j.Spec.Limits
	total := math.Min(math.Max(float64(l.InitBatch), float64(l.MinLocal*k)), float64(max(l.MaxBatch, l.InitBatch)))
	m, s = l.Split(k, total)
	grad := goodput.GradStats{}
	if j.HasGrad {
		grad = j.Grad
	}
	return m, s, grad.Gain(float64(k*m*(s+1)), float64(l.InitBatch))
}

// AssignOptions are what Assignments needs besides the state.
type AssignOptions struct {
	// CheckpointRoot holds the checkpoint directory of jobs whose spec
	// names none: CheckpointRoot/<job id>.
	CheckpointRoot string
	// Owner returns the actor that receives a job's reports and exits.
	Owner func(job string) *pb.Ref
	// Models gives each job's fitted model (nil: default batch split).
	Models *Models
}

// Assignments is every alive node's desired state under the committed
// allocation: each job's ranks in node-id order, the batch configuration
// for its (N, K), its current incarnation. Nodes with nothing to run get
// an empty Assign, which stops whatever they still run.
func Assignments(st *consensus.State, o AssignOptions) map[string]*pb.Assign {
	out := map[string]*pb.Assign{}
	for _, n := range activeNodes(st) {
		out[n.ID] = &pb.Assign{Generation: st.Allocation.Generation, Term: st.Allocation.Term}
	}
	ids := make([]string, 0, len(st.Allocation.Jobs))
	for id := range st.Allocation.Jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := st.Jobs[id]
		slots := st.Allocation.Jobs[id]
		if j == nil || j.State.Terminal() || len(slots) == 0 {
			continue
		}
		k := 0
		for _, sl := range slots {
			k += sl.GPUs
		}
		var model *goodput.Model
		if o.Models != nil {
			model = o.Models.Model(j)
		}
		m, s, gain := BatchConfig(j, model, len(slots), k)
		dir := j.Spec.CheckpointDir
		if dir == "" {
			dir = filepath.Join(o.CheckpointRoot, id)
		}
		var owner *pb.Ref
		if o.Owner != nil {
			owner = o.Owner(id)
		}
		master := ""
		for _, sl := range slots {
			if out[sl.Node] != nil {
				master = masterHost(st.Nodes[sl.Node])
				break
			}
		}
		rank := 0
		for _, sl := range slots {
			a := out[sl.Node]
			if a == nil { // the node is not alive: its workers are gone
				rank += sl.GPUs
				continue
			}
			a.Runs = append(a.Runs, &pb.RunJob{
				Job: id, Incarnation: j.Incarnation, Application: j.Spec.App, Command: j.Spec.Command,
				Replicas: uint32(sl.GPUs), FirstRank: uint32(rank), WorldSize: uint32(k), NumNodes: uint32(len(slots)),
				MasterAddr: master, MasterPort: masterPort(id), InitBatch: uint32(j.Spec.Limits.InitBatch),
				AtomicBatch: uint32(m), AccumSteps: uint32(s), Gain: gain, CheckpointDir: dir, Owner: owner,
			})
			rank += sl.GPUs
		}
	}
	return out
}

// masterHost is the host of the node's first address (its actor address):
// the job's first alive node hosts rank 0's rendezvous.
func masterHost(n *consensus.Node) string {
	if n == nil || len(n.Addresses) == 0 {
		return "127.0.0.1"
	}
	if h, _, err := net.SplitHostPort(n.Addresses[0]); err == nil {
		return h
	}
	return "127.0.0.1"
}

// masterPort spreads jobs' rendezvous ports over 29500-39499.
func masterPort(job string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(job))
	return 29500 + h.Sum32()%10000
}
