package optimizer

import "pollux/optimizer/goodput"

// Node is one machine of the cluster as the allocator sees it.
type Node struct {
	// ID names the node (stable across rounds).
	ID string `json:"id"`
	// GPUs is how many GPUs the node has.
	GPUs int `json:"gpus"`
	// Type is the node's GPU type ("" on a single-type cluster). A job runs
	// on one type at a time.
	Type string `json:"type,omitempty"`
	// Topology is where the node sits in the network: its domain at every
	// level of Snapshot.Levels, innermost (its rack) first. Nil, or an
	// empty entry, is the default domain: a node that declared nothing is
	// in the default rack.
	Topology []string `json:"topology,omitempty"`
}

// NodeCount is how many replicas (GPUs) of one job run on one node. Node
// indexes Snapshot.Nodes.
type NodeCount struct {
	Node  int `json:"node"`
	Count int `json:"count"`
}

// Placement is where one job's replicas run: per-node counts, sorted by
// node index, every count positive. The empty placement means "no GPUs".
type Placement []NodeCount

// Replicas is the total number of replicas, K.
func (p Placement) Replicas() int {
	k := 0
	for _, nc := range p {
		k += nc.Count
	}
	return k
}

// Nodes is the number of nodes used, N.
func (p Placement) Nodes() int { return len(p) }

// Equal reports whether p and q place the same counts on the same nodes.
func (p Placement) Equal(q Placement) bool {
	if len(p) != len(q) {
		return false
	}
	for i := range p {
		if p[i] != q[i] {
			return false
		}
	}
	return true
}

// MaxEpochs bounds the epochs a job may declare: its Progress is measured
// in epochs done over them.
const MaxEpochs = 1 << 20

// EpochProgress is the Progress of a job that has finished done of the
// epochs it declared: done / declared, at most 1; 0 when it declared
// none. The live planner and the simulator both fill Job.Progress with it.
func EpochProgress(done, declared int) float64 {
	if declared <= 0 || done <= 0 {
		return 0
	}
	return min(float64(done)/float64(declared), 1)
}

// Job is one active job as the allocator sees it.
type Job struct {
	// ID names the job (stable across rounds).
	ID string `json:"id"`
	// SubmitTime is when the job was submitted, in seconds on the caller's
	// clock (only its order matters).
	SubmitTime float64 `json:"submit_time"`
	// Age is the seconds since submission.
	Age float64 `json:"age"`
	// Attained is the attained service in GPU-seconds.
	Attained float64 `json:"attained"`
	// Restarts counts the job's reallocations so far.
	Restarts int `json:"restarts"`
	// Progress is the fraction of its work the job has done, in [0, 1]:
	// the whole epochs it has finished over the epochs it declared
	// (EpochProgress); 0 means not known. A live job whose spec declares
	// its epochs reports them, one that declares none (it trains to a
	// target only its workers know) leaves it 0; the simulator fills it
	// by the same rule from the workload's epochs, never from the exact
	// work left.
	Progress float64 `json:"progress,omitempty"`
	// MinReplicas and MaxReplicas bound the job's GPU count when it runs.
	MinReplicas int `json:"min_replicas"`
	MaxReplicas int `json:"max_replicas"`
	// Current is the job's allocation going into this round.
	Current Placement `json:"current"`
	// Model is the job's fitted goodput model; nil means no model yet (its
	// speedup is then linear in the fair share). On a cluster of several
	// GPU types, policies blind to types read this model, fitted on every
	// measurement whatever the type.
	Model *goodput.Model `json:"model,omitempty"`

	// The fields below describe the job to type-aware policies.

	// App names the job's application (policies that key constants by
	// application read it).
	App string `json:"app,omitempty"`
	// Batch is the total batch size the user asked for (Sia's scheduler
	// bounds the batch of its goodput model with it).
	Batch int `json:"batch,omitempty"`
	// TypeModels are the job's goodput models per GPU type, each fitted on
	// the measurements taken on that type; a type the job has not run on
	// is absent.
	TypeModels map[string]*goodput.Model `json:"type_models,omitempty"`
	// TypeReplicas is, per GPU type, the most replicas the job has been
	// measured on there (where its model stops being an interpolation).
	TypeReplicas map[string]int `json:"type_replicas,omitempty"`
	// TypeThroughput is the job's one-GPU throughput per GPU type (samples
	// per second), from a short profile on each type; it scales a model to
	// a type without one.
	TypeThroughput map[string]float64 `json:"type_throughput,omitempty"`
	// MaxProfiled is the most replicas the job's measurements (whatever
	// the GPU type) cover; 0 means not known. The throughput-based
	// autoscaler tries sizes beyond it rather than trusting the model's
	// extrapolation there.
	MaxProfiled int `json:"max_profiled,omitempty"`
	// RestartDelay is the seconds a restart (checkpoint and restore) costs
	// the job, as measured; 0 means not measured yet.
	RestartDelay float64 `json:"restart_delay,omitempty"`
	// Restarting reports that the job is checkpointing or restoring now.
	Restarting bool `json:"restarting,omitempty"`
	// Topology constrains where the job's replicas may run (the zero
	// value: anywhere its model says pays).
	Topology TopologyConstraint `json:"topology,omitzero"`
	// GPUType, if set, is the only GPU type the job may run on (the job
	// spec's gpu_type). Type-aware policies choose among that type's
	// options alone; others leave a job they place elsewhere waiting
	// (see HoldConstraints).
	GPUType string `json:"gpu_type,omitempty"`

	// The fields below are read only by the baseline policies.

	// Replicas is the fixed GPU count Tiresias gives the job when it runs
	// (the tuned num_replicas of the workload file).
	Replicas int `json:"replicas,omitempty"`
	// Executed is how many seconds the job has run with GPUs (Tiresias
	// demotes a job once Executed*Replicas reaches 16 GPU-hours).
	Executed float64 `json:"executed,omitempty"`
	// Oracle tells Optimus the job's step time on k GPUs and its remaining
	// iterations (the trace in the testbed, the fitted model live). Nil
	// for the other policies.
	Oracle Oracle `json:"-"`
}

// Oracle is what Optimus knows about a job: its true step time (seconds per
// iteration at the job's fixed total batch) on k GPUs, and how many
// iterations remain until it completes.
type Oracle interface {
	StepTime(k int) float64
	RemainingIters() float64
}

// Snapshot is the immutable input of one allocation round.
type Snapshot struct {
	Jobs  []Job  `json:"jobs"`
	Nodes []Node `json:"nodes"`
	// Levels name the cluster's topology levels, innermost first (see
	// topology.ParseLevels); nil is the rack alone.
	Levels []string `json:"levels,omitempty"`
	// Seed drives every random choice of the round.
	Seed uint64 `json:"seed"`
	// Now is the current time, in seconds on the caller's clock.
	Now float64 `json:"now"`
}

// TypeOf is the GPU type of a placement's nodes (the first node's; "" for
// the empty placement).
func (s *Snapshot) TypeOf(p Placement) string {
	if len(p) == 0 || p[0].Node < 0 || p[0].Node >= len(s.Nodes) {
		return ""
	}
	return s.Nodes[p[0].Node].Type
}

// TotalGPUs is the number of GPUs over all nodes.
func (s *Snapshot) TotalGPUs() int {
	g := 0
	for _, n := range s.Nodes {
		g += n.GPUs
	}
	return g
}
