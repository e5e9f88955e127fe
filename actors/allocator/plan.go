package allocator

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster/federation"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// maxAdaptiveReplicas caps an adaptive job's replicas (spec section 4).
const maxAdaptiveReplicas = 64

// activeNodes are the alive nodes with GPUs, sorted by id.
func activeNodes(st *state.State) []optimizer.Node {
	var nodes []optimizer.Node
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.Health == state.Alive && n.GPUs > 0 {
			nodes = append(nodes, optimizer.Node{ID: id, GPUs: n.GPUs, Type: n.GPUType, Topology: n.Domains()})
		}
	}
	return nodes
}

// placeableNodes are the active nodes the autoscaler is not draining,
// less the GPUs the lab lends to peer labs (docs/federation.md: lent
// GPUs are the borrower's until the lease ends): what a round places
// jobs on (a draining node still gets its assignments, which stop its
// workers, and its lease).
func placeableNodes(st *state.State) []optimizer.Node {
	return slices.DeleteFunc(activeNodes(st), func(n optimizer.Node) bool {
		m := st.Scale.Nodes[n.ID]
		return m != nil && m.Phase == state.ScaleDraining
	})
}

// ownNodes are the placeable nodes with the GPUs the lab lends taken
// out (a node lent whole left out).
func ownNodes(st *state.State) []optimizer.Node {
	nodes := placeableNodes(st)
	if st.Fed == nil {
		return nodes
	}
	for i := range nodes {
		nodes[i].GPUs -= st.Fed.Ledger.LentOn(nodes[i].ID)
	}
	return slices.DeleteFunc(nodes, func(n optimizer.Node) bool { return n.GPUs <= 0 })
}

// BuildSnapshot is the optimizer's input for one round: the alive nodes
// (with their GPU types and places in the cluster's topology levels,
// less the GPUs the lab lends to peer labs) and
// every unfinished job that has bid, with its constraints (required or
// preferred topology, GPU type), its current placement
// (slots on nodes that are no longer alive dropped; none at all if it
// now breaks the job's constraints or spans GPU types, as after an agent
// restarted with another rack or type: the job is placed afresh), its age at now
// (seconds on the state's clock, multiplied by timeScale so that an
// emulated cluster's restart penalty is weighed in emulated time), its
// attained service, the restart delay its actor measured (multiplied by
// timeScale too) and the goodput models built from its bid (typeModels).
// bids overrides a job's replicated bid with a newer one (received since
// the last round, committed by this round). A job without a bid is left
// out: it is placed once its actor has bid, so that its workers run the
// configuration it chose.
//
// The GPUs the lab borrows of peers' nodes are nodes too
// (borrowedNodes), here those of the leases in force at now; the
// allocator's rounds keep only leases in force an interval later.
func BuildSnapshot(st *state.State, bids map[string]*state.Bid, now, timeScale float64, seed uint64) (*optimizer.Snapshot, error) {
	return buildSnapshot(st, roundNodes(st, now), bids, now, timeScale, seed)
}

// roundNodes are the nodes a round places the lab's jobs on: its own
// (ownNodes) and the GPUs it borrows in leases in force after until.
func roundNodes(st *state.State, until float64) []optimizer.Node {
	return append(ownNodes(st), borrowedNodes(st, until)...)
}

// borrowedNodes are the GPUs the lab leases of peers' nodes in leases
// still in force after until, one node each, named
// federation.BorrowedID ("<lender>/<node>"), sorted by id. A federation
// has one GPU type (docs/federation.md): a borrowed node has the type
// of the lab's own nodes when they have one, and each lender is its own
// domain at every topology level (a job spanning labs crosses racks).
func borrowedNodes(st *state.State, until float64) []optimizer.Node {
	if st.Fed == nil {
		return nil
	}
	gpus := st.Fed.Ledger.BorrowedNodes(until)
	if len(gpus) == 0 {
		return nil
	}
	typ := ""
	if ts := gpuTypes(activeNodes(st)); len(ts) == 1 {
		typ = ts[0]
	}
	levels := max(len(st.Config.TopologyLevels()), 1)
	var out []optimizer.Node
	for _, id := range slices.Sorted(maps.Keys(gpus)) {
		lender, _, _ := federation.SplitBorrowed(id)
		topo := make([]string, levels)
		for i := range topo {
			topo[i] = "fed-" + strings.ToLower(lender) // a domain name is lower-case
		}
		out = append(out, optimizer.Node{ID: id, GPUs: gpus[id], Type: typ, Topology: topo})
	}
	return out
}

// buildSnapshot is BuildSnapshot on the given nodes.
func buildSnapshot(st *state.State, nodes []optimizer.Node, bids map[string]*state.Bid, now, timeScale float64, seed uint64) (*optimizer.Snapshot, error) {
	snap := &optimizer.Snapshot{Nodes: nodes, Levels: slices.Clone(st.Config.Levels), Seed: seed, Now: now}
	types := gpuTypes(snap.Nodes)
	var speeds map[string]float64
	if len(types) > 1 {
		speeds = typeSpeeds(st, bids, types)
	}
	alive := map[string]bool{}
	for _, n := range snap.Nodes {
		alive[n.ID] = true
	}
	// A node whose jobs hold more GPUs than are left to the lab (some
	// were lent since) keeps none of them: its jobs are placed afresh.
	for id, used := range st.UsedGPUs() {
		if i := slices.IndexFunc(snap.Nodes, func(n optimizer.Node) bool { return n.ID == id }); i >= 0 && used > snap.Nodes[i].GPUs {
			delete(alive, id)
		}
	}
	for _, id := range st.JobIDs() {
		j := st.Jobs[id]
		if j.State.Terminal() {
			continue
		}
		bid := roundBid(j, bids)
		if bid.Version == 0 {
			continue
		}
		var slots []state.Slot
		for _, sl := range st.Allocation.Jobs[id] {
			if alive[sl.Node] {
				slots = append(slots, sl)
			}
		}
		cur, err := state.PlacementFromSlots(snap.Nodes, slots)
		if err != nil {
			return nil, fmt.Errorf("allocator: job %s: %w", id, err)
		}
		job := optimizer.Job{
			ID: id, SubmitTime: j.SubmitTime, Age: math.Max(now-j.SubmitTime, 0) * timeScale, Attained: j.Attained,
			Restarts: j.Restarts, Progress: progress(j), MinReplicas: j.Spec.MinReplicas, MaxReplicas: maxReplicas(j.Spec, bid),
			Current: cur, Model: bid.Model(j.Spec.Limits), App: j.Spec.App, RestartDelay: bid.RestartDelay * timeScale,
			Topology: j.Spec.Topology, GPUType: j.Spec.GPUType,
			// Tiresias runs a job at the count its user asked for: a
			// user-sized spec fixes min_replicas = max_replicas; another
			// runs at its least.
			Replicas: j.Spec.MinReplicas, Executed: j.Attained / float64(max(j.Spec.MinReplicas, 1)),
		}
		switch {
		case len(types) == 1 && job.Model != nil:
			if md := bid.TypeModel(types[0], j.Spec.Limits); md != nil {
				job.Model = md
			}
		case len(types) > 1 && job.Model != nil:
			job.TypeModels, job.TypeReplicas = typeModels(bid, j.Spec.Limits, types)
			if len(speeds) > 1 {
				job.TypeThroughput = maps.Clone(speeds)
			}
		}
		snap.Jobs = append(snap.Jobs, job)
	}
	currents := make([]optimizer.Placement, len(snap.Jobs))
	for i := range snap.Jobs {
		currents[i] = snap.Jobs[i].Current
	}
	broken, err := optimizer.Violations(snap, currents)
	if err != nil {
		return nil, fmt.Errorf("allocator: %w", err)
	}
	for _, i := range broken {
		snap.Jobs[i].Current = nil
	}
	if len(types) > 1 {
		for i := range snap.Jobs {
			if cur := snap.Jobs[i].Current; len(gpuTypes(placementNodes(snap, cur))) > 1 {
				snap.Jobs[i].Current = nil
			}
		}
	}
	return snap, nil
}

// progress is how far the job is through the epochs it declared
// (optimizer.EpochProgress of its reported epoch).
func progress(j *state.Job) float64 {
	return optimizer.EpochProgress(j.Epoch, j.Spec.Epochs)
}

// placementType is the GPU type of a placement's nodes ("" untyped or
// none): a job runs on one type at a time.
func placementType(st *state.State, slots []state.Slot) string {
	for _, sl := range slots {
		if n := st.Nodes[sl.Node]; n != nil {
			return n.GPUType
		}
	}
	return ""
}

// placementRacks is how many racks a placement's nodes span, 0 for one
// (or none), as profile entries count them: a node's rack is its domain
// at the innermost level ("" for a node that declares none), and a
// borrowed node is in its lender's (borrowedNodes).
func placementRacks(st *state.State, slots []state.Slot) int {
	var racks []string
	for _, sl := range slots {
		rack := ""
		if n := st.Nodes[sl.Node]; n != nil {
			if d := n.Domains(); len(d) > 0 {
				rack = d[0]
			}
		} else if lender, _, ok := federation.SplitBorrowed(sl.Node); ok {
			rack = "fed-" + strings.ToLower(lender)
		}
		if !slices.Contains(racks, rack) {
			racks = append(racks, rack)
		}
	}
	if len(racks) < 2 {
		return 0
	}
	return len(racks)
}

// gpuTypes lists the GPU types of nodes, sorted ("" for untyped nodes).
func gpuTypes(nodes []optimizer.Node) []string {
	var out []string
	for _, n := range nodes {
		if !slices.Contains(out, n.Type) {
			out = append(out, n.Type)
		}
	}
	slices.Sort(out)
	return out
}

// placementNodes are the nodes of a placement.
func placementNodes(snap *optimizer.Snapshot, p optimizer.Placement) []optimizer.Node {
	out := make([]optimizer.Node, 0, len(p))
	for _, nc := range p {
		out = append(out, snap.Nodes[nc.Node])
	}
	return out
}

// maxReplicas is an adaptive job's replica bound: at most double the most
// replicas its bid says it was profiled at, within its spec, 64, what its
// batch limits allow and what its bid covers.
func maxReplicas(spec state.JobSpec, bid *state.Bid) int {
	l := spec.Limits
	limit := min(spec.MaxReplicas, max(2*bid.MostProfiled, 1), maxAdaptiveReplicas)
	if l.MinLocal > 0 {
		limit = min(limit, max(l.MaxBatch/l.MinLocal, 1))
	}
	return min(max(limit, spec.MinReplicas), len(bid.Single))
}

// Slots converts a round's result into the allocation to commit.
func Slots(snap *optimizer.Snapshot, placements []optimizer.Placement) (map[string][]state.Slot, error) {
	out := map[string][]state.Slot{}
	for i, p := range placements {
		if len(p) == 0 {
			continue
		}
		slots, err := state.SlotsFromPlacement(snap.Nodes, p)
		if err != nil {
			return nil, err
		}
		out[snap.Jobs[i].ID] = slots
	}
	return out, nil
}

// AssignOptions are what Assignments needs besides the state.
type AssignOptions struct {
	// Term is the sending leader's term.
	Term uint64
	// Owner returns the actor that receives a job's reports and exits.
	Owner func(job string) *pb.Ref
	// BorrowedHost returns the host of the agent of a node the lab
	// borrows (federation.BorrowedID), as its lender knows it ("" not
	// known): a job whose first node is borrowed has its rendezvous
	// there.
	BorrowedHost func(id string) string
}

// Assignments is every alive node's desired state under the committed
// allocation: each job's ranks in node-id order, the batch configuration
// its bid chose for its shape (one node or several, K replicas), its
// current incarnation and checkpoint directory, and the report tokens of
// the node's ranks, and the node's registered GPU type and topology (a
// node that no longer has them refuses). Nodes with nothing to run get an
// empty Assign, which stops whatever they still run; so do the nodes the
// lab borrows GPUs of (federation.BorrowedID), whose Assigns go to their
// lenders as orders. A placed job
// whose bid does not cover its shape is left out (and named in the second
// result): its configuration must come from its actor.
func Assignments(st *state.State, o AssignOptions) (map[string]*pb.Assign, []string) {
	out := map[string]*pb.Assign{}
	for _, n := range activeNodes(st) {
		out[n.ID] = &pb.Assign{Generation: st.Allocation.Generation, Term: o.Term, ClusterId: st.Config.ID,
			CheckpointRoot: st.Config.CheckpointRoot,
			Node:           &pb.NodeAttrs{GpuType: n.Type, Levels: st.Config.TopologyLevels(), Domains: n.Topology}}
	}
	// A node the lab borrows GPUs of gets its Assign too (no attributes:
	// the lender checks its own node), sent as an order to the lender
	// while the lab holds a lease there.
	for _, n := range borrowedNodes(st, 0) {
		out[n.ID] = &pb.Assign{Generation: st.Allocation.Generation, Term: o.Term, ClusterId: st.Config.ID,
			CheckpointRoot: st.Config.CheckpointRoot}
	}
	var uncovered []string
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
		choice, ok := j.Bid.ChoiceOn(placementType(st, slots), len(slots), k)
		if !ok {
			uncovered = append(uncovered, id)
			continue
		}
		var owner *pb.Ref
		if o.Owner != nil {
			owner = o.Owner(id)
		}
		master := ""
		for _, sl := range slots {
			if out[sl.Node] != nil {
				master = o.masterHost(st, sl.Node)
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
			rj := &pb.RunJob{
				Job: id, Incarnation: j.Incarnation, Application: j.Spec.App, Command: j.Spec.Command,
				Replicas: uint32(sl.GPUs), FirstRank: uint32(rank), WorldSize: uint32(k), NumNodes: uint32(len(slots)),
				MasterAddr: master, MasterPort: masterPort(id, j.Incarnation), InitBatch: uint32(j.Spec.Limits.InitBatch),
				AtomicBatch: uint32(choice.LocalBatch), AccumSteps: uint32(choice.AccumSteps), Gain: choice.Gain,
				CheckpointDir: st.CheckpointDir(j), Owner: owner, Submitter: j.Submitter,
			}
			if key := st.Config.ReportKey; key != "" {
				// Each node learns the tokens of its own ranks only.
				for r := rank; r < rank+sl.GPUs; r++ {
					rj.ReportTokens = append(rj.ReportTokens, workerproto.ReportToken([]byte(key), id, j.Incarnation, r))
				}
			}
			a.Runs = append(a.Runs, rj)
			rank += sl.GPUs
		}
	}
	return out, uncovered
}

// masterHost is where rank 0's rendezvous is when node id is the job's
// first alive node: the host of the node's first address (its actor
// address); for a node the lab borrows, the host its lender gave for
// its agent (o.BorrowedHost); 127.0.0.1 when neither is known.
func (o AssignOptions) masterHost(st *state.State, id string) string {
	h := st.Nodes[id].Host()
	if _, _, borrowed := federation.SplitBorrowed(id); h == "" && borrowed && st.Nodes[id] == nil && o.BorrowedHost != nil {
		h = o.BorrowedHost(id)
	}
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

// Rendezvous ports: below Linux's default ephemeral range (32768-60999),
// from which the kernel picks the local ports of outgoing connections
// (the workers' reports, the agents' gRPC), so that no connection of the
// machine's holds a port a job's rank 0 is told to listen on.
const (
	firstMasterPort = 29500
	masterPorts     = 32768 - firstMasterPort
)

// masterPort spreads jobs' rendezvous ports over the rendezvous range, a
// port per incarnation: an incarnation whose rank 0 could not listen (the
// port taken by another program, or still held by the last incarnation's
// connections) is restarted on another port, not the same one again.
func masterPort(job string, incarnation uint64) uint32 {
	h := fnv.New32a()
	h.Write([]byte(job))
	h.Write(binary.LittleEndian.AppendUint64(nil, incarnation))
	return firstMasterPort + h.Sum32()%masterPorts
}

// Place picks, by rendezvous hashing, the server that hosts job's actor:
// the one whose hash with the job is highest. Adding or removing a server
// moves only the jobs it gains or had.
func Place(job string, servers []string) string {
	best, bestH := "", uint64(0)
	for _, s := range servers {
		h := fnv.New64a()
		h.Write([]byte(job))
		h.Write([]byte{0})
		h.Write([]byte(s))
		if v := mix(h.Sum64()); best == "" || v > bestH || (v == bestH && s < best) {
			best, bestH = s, v
		}
	}
	return best
}

// mix is a 64-bit finaliser (MurmurHash3's): FNV alone barely spreads a
// difference in the last bytes.
func mix(v uint64) uint64 {
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	v *= 0xc4ceb9fe1a85ec53
	v ^= v >> 33
	return v
}
