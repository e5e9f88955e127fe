package state

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// JobState is a job's lifecycle state.
type JobState uint8

// Lifecycle states. Zero is not a state (it never appears on the wire).
const (
	// Pending: submitted, holding no GPUs.
	Pending JobState = 1 + iota
	// Running: workers run on the committed placement.
	Running
	// Rescaling: the committed placement changed from one non-empty
	// placement to another; workers restart under a new incarnation. The
	// job actor moves it back to Running once they report.
	Rescaling
	// Completed: finished successfully (terminal).
	Completed
	// Failed: finished unsuccessfully (terminal).
	Failed
	// Cancelled: stopped by a user before it finished (terminal).
	Cancelled
)

var jobStateNames = [...]string{"", "pending", "running", "rescaling", "completed", "failed", "cancelled"}

func (s JobState) String() string {
	if int(s) < len(jobStateNames) && s != 0 {
		return jobStateNames[s]
	}
	return fmt.Sprintf("JobState(%d)", uint8(s))
}

// Terminal reports whether s is Completed, Failed or Cancelled.
func (s JobState) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

func (s JobState) valid() bool { return s >= Pending && s <= Cancelled }

// Health is a node's liveness as seen by cluster membership.
type Health uint8

// Node health values. Zero is not a value.
const (
	Alive Health = 1 + iota
	Suspect
	Dead
	Left
)

var healthNames = [...]string{"", "alive", "suspect", "dead", "left"}

func (h Health) String() string {
	if int(h) < len(healthNames) && h != 0 {
		return healthNames[h]
	}
	return fmt.Sprintf("Health(%d)", uint8(h))
}

func (h Health) valid() bool { return h >= Alive && h <= Left }

// JobSpec is what the user submitted.
type JobSpec struct {
	// Name is the human-readable name.
	Name string
	// Command is the worker's argv, or empty for an emulated job.
	Command []string
	// App names the emulated application when Command is empty.
	App string
	// MinReplicas and MaxReplicas bound the GPU count when the job runs.
	MinReplicas int
	MaxReplicas int
	// Limits are the batch-size constraints (InitBatch is M0).
	Limits goodput.Limits
	// CheckpointDir is where workers checkpoint and restore.
	CheckpointDir string
	// Topology constrains where the replicas run (required or preferred
	// level; the zero value: anywhere).
	Topology optimizer.TopologyConstraint
	// GPUType, if set, is the only GPU type the job runs on.
	GPUType string
	// Epochs, if set, is how many epochs the job trains for, as its
	// submitter declared it: the allocator reads the job's reported
	// epoch over it as how far the job is through its work (0: not
	// declared).
	Epochs int
	// ResumeFrom names the job whose checkpoint directory this job takes
	// over (a job of the same submitter that has finished and that no
	// other live job holds; "" for a job of its own directory). Then
	// CheckpointDir is that job's directory, resolved when the
	// submission applies.
	ResumeFrom string
}

// ProfileEntry is a profiled configuration (Nodes, Replicas, LocalBatch,
// Racks: 0 for one rack, else at least 2) on one GPU type with the running mean of its measured times, what the
// job's throughput model on that type is fitted on. Count is how many
// measurements the mean covers; when recording, it weighs the new entry
// against the stored mean.
type ProfileEntry struct {
	goodput.ProfilePoint
	Count uint64
	// GPUType is the GPU type of the nodes the configuration was measured
	// on: "" for untyped nodes, and for every entry measured before
	// measurements carried their type (Measurement.GPUType).
	GPUType string
}

// entryKey orders profile entries: by GPU type, then configuration.
type entryKey struct {
	typ string
	cfg [4]int
}

func (p ProfileEntry) key() entryKey {
	return entryKey{p.GPUType, [4]int{p.Nodes, p.Replicas, p.LocalBatch, p.Racks}}
}

// ProfiledTypes are the GPU types j has been measured on, sorted ("" for
// untyped nodes).
func (j *Job) ProfiledTypes() []string {
	var out []string
	for _, e := range j.Profile { // sorted by type first
		if len(out) == 0 || out[len(out)-1] != e.GPUType {
			out = append(out, e.GPUType)
		}
	}
	return out
}

// BatchChoice is the batch configuration a job's actor chose for one
// allocation shape: atomic batch m, accumulation steps s and the AdaScale
// gain of the total batch K*m*(s+1).
type BatchChoice struct {
	LocalBatch int
	AccumSteps int
	Gain       float64
}

// Bid is what a job's actor offers the allocator: its fitted throughput
// parameters and gradient statistics (its goodput model), the most
// replicas it has been profiled at (how far it may be scaled), and the
// batch configuration it runs on each allocation shape: Single[k-1] on k
// replicas on one node, Multi[k-1] on k replicas over several nodes.
// Version 0 means no bid yet. A job measured on named GPU types also bids
// per type (Types); docs/replicated-state.md ("Bids") says which model
// the top level holds.
type Bid struct {
	// Session is the job actor's session (see Job.MeasSession) and
	// Version counts its bids within it; (Session, Version) only grows.
	Session, Version uint64
	// HasModel is false until the actor has fitted its first model;
	// without one the allocator treats the job's speedup as linear.
	HasModel bool
	Params   goodput.Params
	HasGrad  bool
	Grad     goodput.GradStats
	// MostProfiled is the most replicas the job has been profiled at.
	MostProfiled int
	Single       []BatchChoice
	Multi        []BatchChoice
	// Types are the per-type parts, sorted by GPU type (named types
	// only; nil for a job measured on untyped nodes only, and in every
	// bid made before bids carried them).
	Types []TypeBid
	// RestartDelay is the job's measured restart delay, real seconds
	// from the last step of one incarnation to the first step of the
	// next (the mean over its restarts); 0 until it has restarted once.
	RestartDelay float64
}

// TypeBid is a bid's part for one GPU type the job has a model on: the
// parameters fitted on that type's measurements, the most replicas it
// has been profiled at there, and its batch configurations there (tables
// as long as the bid's top-level ones).
type TypeBid struct {
	GPUType      string
	Params       goodput.Params
	MostProfiled int
	Single       []BatchChoice
	Multi        []BatchChoice
}

// OnType returns the bid's part for GPU type t, or nil if it has none.
func (b *Bid) OnType(t string) *TypeBid {
	if t == "" {
		return nil
	}
	i, ok := slices.BinarySearchFunc(b.Types, t, func(x TypeBid, t string) int { return strings.Compare(x.GPUType, t) })
	if !ok {
		return nil
	}
	return &b.Types[i]
}

// ChoiceOn is Choice on nodes of GPU type t: the type's tables if the bid
// has a part for it, the top-level ones otherwise.
func (b *Bid) ChoiceOn(t string, nodes, k int) (BatchChoice, bool) {
	if tb := b.OnType(t); tb != nil {
		return (&Bid{Single: tb.Single, Multi: tb.Multi}).Choice(nodes, k)
	}
	return b.Choice(nodes, k)
}

// TypeModel returns the goodput model the bid fitted on GPU type t, or
// nil if it has none there.
func (b *Bid) TypeModel(t string, l goodput.Limits) *goodput.Model {
	tb := b.OnType(t)
	if b.Version == 0 || !b.HasModel || tb == nil {
		return nil
	}
	return (&Bid{Version: b.Version, HasModel: true, Params: tb.Params, HasGrad: b.HasGrad, Grad: b.Grad}).Model(l)
}

// Choice returns the bid's batch configuration for k replicas on nodes
// nodes, and whether the bid covers that shape.
func (b *Bid) Choice(nodes, k int) (BatchChoice, bool) {
	t := b.Single
	if nodes > 1 {
		t = b.Multi
	}
	if k < 1 || k > len(t) || nodes < 1 || nodes > k {
		return BatchChoice{}, false
	}
	return t[k-1], true
}

// Model returns the goodput model the bid describes, or nil if it has
// none.
func (b *Bid) Model(l goodput.Limits) *goodput.Model {
	if b.Version == 0 || !b.HasModel {
		return nil
	}
	m := &goodput.Model{Params: b.Params, Limits: l}
	if b.HasGrad {
		m.Grad = b.Grad
	}
	if m.Validate() != nil {
		return nil
	}
	return m
}

func (b Bid) clone() Bid {
	b.Single, b.Multi = slices.Clone(b.Single), slices.Clone(b.Multi)
	if b.Types != nil {
		b.Types = slices.Clone(b.Types)
		for i := range b.Types {
			t := &b.Types[i]
			t.Single, t.Multi = slices.Clone(t.Single), slices.Clone(t.Multi)
		}
	}
	return b
}

// Job is one job as the replicated state records it.
type Job struct {
	ID   string
	Spec JobSpec
	// State is the lifecycle state.
	State JobState
	// SubmitTime and FinishTime are in seconds on the proposer's clock
	// (Apply never reads a clock); FinishTime is 0 until the job finishes.
	SubmitTime float64
	FinishTime float64
	// Reason says why a job failed (empty otherwise).
	Reason string
	// Attained is the attained service, GPU-seconds.
	Attained float64
	// Restarts counts re-placements from one non-empty placement to
	// another.
	Restarts int
	// Epoch and Progress are as last reported by the job.
	Epoch    int
	Progress float64
	// Checkpoint is the last checkpoint its workers reported saving
	// (zero: none reported).
	Checkpoint Checkpoint
	// Profile holds the profiled configurations, sorted by (GPUType,
	// Nodes, Replicas, LocalBatch).
	Profile []ProfileEntry
	// Grad are the latest gradient statistics; HasGrad is false until the
	// first report.
	Grad    goodput.GradStats
	HasGrad bool
	// Incarnation numbers the job's current set of workers: it increases
	// every time a committed allocation changes the job's placement (or a
	// round restarts its failed workers), and reports from other
	// incarnations are rejected.
	Incarnation uint64
	// Bid is the job actor's latest bid (Version 0: none yet).
	Bid Bid
	// Crashes counts the job's failed incarnations in a row without an
	// epoch finished in between; CrashEpoch is its epoch at the last one.
	Crashes    int
	CrashEpoch int
	// MeasSession and MeasSeq acknowledge the measurements merged so far:
	// those of job actor session MeasSession up to sequence number
	// MeasSeq (see Measurement).
	MeasSession uint64
	MeasSeq     uint64
	// Submitter is the accessor of the API token that submitted the job
	// and SubmitterName that token's name (both empty: submitted without
	// a token, by a cluster running --insecure or before tokens existed).
	// Only the submitter or an admin token may cancel the job.
	Submitter     string
	SubmitterName string
	// SubmitKey and CancelKey are the idempotency keys of the requests
	// that submitted and cancelled the job ("": none), so that a retry of
	// either is recognised (SubmitJob, CancelJob).
	SubmitKey string
	CancelKey string

	// specBytes caches specSize(&Spec), what the job's spec counts
	// against its submitter's quota and the cluster's state budget.
	specBytes int64
}

// Clone returns a deep copy of the job.
func (j *Job) Clone() *Job {
	c := *j
	c.Spec.Command = slices.Clone(j.Spec.Command)
	c.Profile = slices.Clone(j.Profile)
	c.Bid = j.Bid.clone()
	return &c
}

// Node is one GPU machine.
type Node struct {
	ID string
	// Addresses are how to reach the node's agent (actor, report, ...),
	// in the order the agent gave them.
	Addresses []string
	// Rack is the node's rack ("" the default rack). A node registered
	// before topology levels existed may hold a free-form label here.
	Rack string
	// Topology is the node's domain at every level of the cluster's
	// topology (ClusterConfig.Levels), innermost first, so Topology[0]
	// is Rack; nil when the node declared no topology.
	Topology []string
	// GPUType is the node's GPU type ("" untyped).
	GPUType string
	GPUs    int
	Health  Health
}

// Host is the host of the node's first address (its agent's actor
// address), where a job whose first node it is hosts its rendezvous; ""
// when the node has no address with a host.
func (n *Node) Host() string {
	if n == nil || len(n.Addresses) == 0 {
		return ""
	}
	h, _, err := net.SplitHostPort(n.Addresses[0])
	if err != nil {
		return ""
	}
	return h
}

// Domains is where the node sits, as optimizer.Node.Topology holds it:
// its topology, or its rack alone for a node that declared only a rack.
func (n *Node) Domains() []string {
	if len(n.Topology) > 0 {
		return slices.Clone(n.Topology)
	}
	if n.Rack != "" {
		return []string{n.Rack}
	}
	return nil
}

// Slot is a count of one job's GPUs on one node.
type Slot struct {
	Node string
	GPUs int
}

// Allocation is the committed placement of every job.
type Allocation struct {
	// Generation increases with every committed allocation (0: none yet).
	Generation uint64
	// Term is the Raft term of the leader that committed it.
	Term uint64
	// Jobs maps a job id to its slots, sorted by node id; a job absent
	// from the map holds no GPUs.
	Jobs map[string][]Slot
}

// ClusterConfig is set once, when the cluster is bootstrapped.
type ClusterConfig struct {
	// ID identifies the cluster (random at bootstrap): agents fence
	// assignments by it, so a rebuilt cluster is recognised as one.
	ID string
	// CheckpointRoot is the checkpoint root of jobs that name no
	// checkpoint directory: ROOT/<job id>, the same on every server.
	// Empty: such jobs are refused at submission.
	CheckpointRoot string
	// Levels name the cluster's topology levels, innermost (the rack)
	// first; nil is the rack alone. Set at bootstrap, never changed.
	Levels []string
	// ReportKey (32 random bytes in hex) is the secret the leader
	// derives the workers' report tokens from (workerproto.ReportToken),
	// so that every leader hands out and checks the same tokens. Empty
	// in a state written before report tokens existed: the leader adds
	// one (InitCluster) before its first round.
	ReportKey string
}

// TopologyLevels are the cluster's levels, the rack alone by default.
func (c ClusterConfig) TopologyLevels() []string {
	if len(c.Levels) == 0 {
		return []string{topology.RackLevel}
	}
	return slices.Clone(c.Levels)
}

// ReportKeyLen is the length of a cluster's report key: 32 random bytes
// in hex.
const ReportKeyLen = 64

// State is the whole replicated state. Values handed out by Server are
// deep copies: callers may keep and modify them.
type State struct {
	Config     ClusterConfig
	Jobs       map[string]*Job
	Nodes      map[string]*Node
	Allocation Allocation
	// LastRound is the proposer's clock at the last committed round (0:
	// none): the next round accrues attained service from it.
	LastRound float64
	// ACL is the API token table.
	ACL ACL
	// Scale is the autoscaler's state (scale.go).
	Scale Scale
	// Fed is the lab's federation identity and lease ledger
	// (federation.go); nil until the cluster joins a federation.
	Fed *Federation
	// Quotas are the submitters' quotas and the cluster's state budget
	// (quota.go).
	Quotas Quotas
	// Events is the cluster's bounded history of events (events.go).
	Events Events
}

// CheckpointDir is where job j checkpoints: its spec's directory or,
// without one, the cluster's root joined with its id ("" if neither).
func (s *State) CheckpointDir(j *Job) string {
	if j.Spec.CheckpointDir != "" || s.Config.CheckpointRoot == "" {
		return j.Spec.CheckpointDir
	}
	return filepath.Join(s.Config.CheckpointRoot, j.ID)
}

// New returns the empty state.
func New() *State {
	return &State{Jobs: map[string]*Job{}, Nodes: map[string]*Node{}, Allocation: Allocation{Jobs: map[string][]Slot{}}}
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := New()
	c.Config, c.LastRound = s.Config, s.LastRound
	c.ACL = s.ACL.clone()
	c.Scale = s.Scale.clone()
	c.Fed = s.Fed.clone()
	c.Quotas = s.Quotas.clone()
	c.Events = s.Events.clone()
	c.Config.Levels = slices.Clone(s.Config.Levels)
	for id, j := range s.Jobs {
		c.Jobs[id] = j.Clone()
	}
	for id, n := range s.Nodes {
		cn := *n
		cn.Addresses = slices.Clone(n.Addresses)
		cn.Topology = slices.Clone(n.Topology)
		c.Nodes[id] = &cn
	}
	c.Allocation.Generation = s.Allocation.Generation
	c.Allocation.Term = s.Allocation.Term
	for id, slots := range s.Allocation.Jobs {
		c.Allocation.Jobs[id] = slices.Clone(slots)
	}
	return c
}

// JobIDs returns the job ids sorted.
func (s *State) JobIDs() []string { return slices.Sorted(maps.Keys(s.Jobs)) }

// NodeIDs returns the node ids sorted.
func (s *State) NodeIDs() []string { return slices.Sorted(maps.Keys(s.Nodes)) }

// UsedGPUs returns how many GPUs the committed allocation uses per node.
func (s *State) UsedGPUs() map[string]int {
	used := map[string]int{}
	for _, slots := range s.Allocation.Jobs {
		for _, sl := range slots {
			used[sl.Node] += sl.GPUs
		}
	}
	return used
}

// GPUCounts are the GPUs of the alive nodes and the GPUs the allocation
// gives out on the cluster's own nodes.
func (s *State) GPUCounts() (alive, used int) {
	for _, n := range s.Nodes {
		if n.Health == Alive {
			alive += n.GPUs
		}
	}
	for _, slots := range s.Allocation.Jobs {
		for _, sl := range slots {
			if s.Nodes[sl.Node] != nil {
				used += sl.GPUs
			}
		}
	}
	return alive, used
}

// BorrowedInUse is how many GPUs the allocation uses on nodes borrowed
// from other labs (<lender>/<node>), which GPUCounts leaves out.
func (s *State) BorrowedInUse() int {
	n := 0
	for _, slots := range s.Allocation.Jobs {
		for _, sl := range slots {
			if borrowedID(sl.Node) {
				n += sl.GPUs
			}
		}
	}
	return n
}

// SlotsFromPlacement converts an allocator placement, whose node indexes
// refer to nodes, into slots keyed by node id.
func SlotsFromPlacement(nodes []optimizer.Node, p optimizer.Placement) ([]Slot, error) {
	slots := make([]Slot, 0, len(p))
	for _, nc := range p {
		if nc.Node < 0 || nc.Node >= len(nodes) {
			return nil, fmt.Errorf("%w: placement names node index %d of %d", ErrInvalid, nc.Node, len(nodes))
		}
		slots = append(slots, Slot{Node: nodes[nc.Node].ID, GPUs: nc.Count})
	}
	sortSlots(slots)
	return slots, nil
}

// PlacementFromSlots converts slots back into an allocator placement over
// nodes. Slots on a node that is not in nodes are an error.
func PlacementFromSlots(nodes []optimizer.Node, slots []Slot) (optimizer.Placement, error) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	p := make(optimizer.Placement, 0, len(slots))
	for _, sl := range slots {
		i, ok := index[sl.Node]
		if !ok {
			return nil, fmt.Errorf("%w: node %q is not in the snapshot", ErrUnknownNode, sl.Node)
		}
		p = append(p, optimizer.NodeCount{Node: i, Count: sl.GPUs})
	}
	slices.SortFunc(p, func(a, b optimizer.NodeCount) int { return a.Node - b.Node })
	return p, nil
}

func sortSlots(slots []Slot) {
	slices.SortFunc(slots, func(a, b Slot) int { return strings.Compare(a.Node, b.Node) })
}
