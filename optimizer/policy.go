package optimizer

// Policy is one scheduling policy: it maps a snapshot (and the search
// state it left after the previous round) to an allocation. Policies are
// pure: no I/O, no clock and no global randomness, so the same snapshot
// (including its Seed) and the same prev give the same Result. A policy
// never modifies snap or prev.
type Policy interface {
	// Name is the policy's short name ("pollux", "tiresias", "optimus").
	Name() string
	// Allocate runs one round. prev may be nil (first round, or a policy
	// that keeps no state).
	Allocate(snap *Snapshot, prev *State) (Result, error)
}

// Budgeted is a policy whose search effort a caller scales to keep its
// rounds within a time budget (Pollux's genetic search).
type Budgeted interface {
	Policy
	// SetEffort scales the work of the following rounds' search by
	// effort in (0, 1]; 0 means the full work.
	SetEffort(effort float64)
}

// TypeAware is a policy that tells GPU types apart: it runs on a cluster
// of several types, each job on one type at a time (HetPollux, Sia,
// PolluxUnaware). A policy without it sees every GPU as the same.
type TypeAware interface {
	Policy
	// GPUTypeAware marks the policy; it does nothing.
	GPUTypeAware()
}

// Result is the outcome of one round.
type Result struct {
	// Placements holds one placement per snapshot job, same index as
	// Snapshot.Jobs. An empty placement means the job gets no GPUs.
	Placements []Placement `json:"placements"`
	// Layouts optionally gives, per job, the replica counts of its
	// placement in the order the policy took the nodes (the artifacts'
	// placement tuple, which decides which measured step time applies). A
	// nil slice or entry means node order.
	Layouts [][]int `json:"layouts,omitempty"`
	// Diagnostics describe the search.
	Diagnostics Diagnostics `json:"diagnostics"`
	// State is what the policy wants back as prev in the next round (nil
	// for stateless policies).
	State *State `json:"-"`
	// Scale is the cluster size an autoscaling policy wants after the
	// round (nil for policies that take the cluster as it is).
	Scale *ScaleDecision `json:"scale,omitempty"`
}

// Diagnostics describe how a round went. Wall-clock time is not here: the
// caller measures it (policies read no clock).
type Diagnostics struct {
	// Fitness is the Pollux objective of Placements (0 for policies that
	// do not evaluate it).
	Fitness float64 `json:"fitness"`
	// CurrentFitness is the Pollux objective of the current allocation.
	CurrentFitness float64 `json:"current_fitness"`
	// Generations is how many generations the search ran.
	Generations int `json:"generations"`
	// Evaluations counts individuals whose fitness was computed.
	Evaluations int `json:"evaluations"`
	// Objective is the value a policy solving an integer program reached
	// (Sia: the sum it minimises), Bound a lower bound on its optimum,
	// and Exact whether the two are equal (the round was solved exactly).
	Objective float64 `json:"objective,omitempty"`
	Bound     float64 `json:"bound,omitempty"`
	Exact     bool    `json:"exact,omitempty"`
}

// State is a search's population, kept between rounds so the next round
// starts warm. Individuals are indexed like JobIDs; node indexes refer to
// NodeIDs. The next round matches jobs and nodes by ID: new jobs start
// with no GPUs, vanished nodes lose their replicas.
type State struct {
	JobIDs     []string
	NodeIDs    []string
	Population [][]Placement
	// Virtual is, for a policy that schedules a virtual cluster (Pollux
	// blind to GPU types sees 8-GPU nodes as two 4-GPU ones), every job's
	// placement on it at the end of the round, by job ID.
	Virtual map[string]Placement
}
