package optimizer

import (
	"fmt"
	"sort"
)

// GPU names one GPU: a node and the GPU's index on it (0 .. GPUs-1).
type GPU struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
}

// AssignGPUs turns per-node counts into GPU ids. prev maps job IDs to the
// GPUs they held; alloc holds one placement per job of jobs (same index).
// Where a job's count did not change it keeps exactly its GPUs (so an
// unchanged job is not restarted); where it grew it adds the lowest free
// ones, where it shrank it keeps its lowest. Jobs without GPUs are absent.
// It fails with ErrBadAssignment on a prev naming an unknown node or
// index or a GPU twice, or an alloc that does not fit the nodes.
func AssignGPUs(nodes []Node, jobs []Job, alloc []Placement, prev map[string][]GPU) (map[string][]GPU, error) {
	if len(alloc) != len(jobs) {
		return nil, fmt.Errorf("%w: %d placements for %d jobs", ErrBadAssignment, len(alloc), len(jobs))
	}
	nodeIdx := make(map[string]int, len(nodes))
	for n, node := range nodes {
		nodeIdx[node.ID] = n
	}
	// held[n][i] is the job index holding GPU i of node n in prev, or -1.
	held := make([][]int, len(nodes))
	for n, node := range nodes {
		held[n] = make([]int, node.GPUs)
		for i := range held[n] {
			held[n][i] = -1
		}
	}
	jobIdx := make(map[string]int, len(jobs))
	for j := range jobs {
		jobIdx[jobs[j].ID] = j
	}
	ids := make([]string, 0, len(prev))
	for id := range prev {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// old[j][n] lists job j's previous GPU indexes on node n, ascending.
	old := make([]map[int][]int, len(jobs))
	for _, id := range ids {
		for _, g := range prev[id] {
			n, ok := nodeIdx[g.Node]
			if !ok {
				return nil, fmt.Errorf("%w: job %q held a GPU on unknown node %q", ErrBadAssignment, id, g.Node)
			}
			if g.Index < 0 || g.Index >= len(held[n]) {
				return nil, fmt.Errorf("%w: job %q held GPU %d of node %q, which has %d", ErrBadAssignment, id, g.Index, g.Node, len(held[n]))
			}
			if held[n][g.Index] != -1 {
				return nil, fmt.Errorf("%w: GPU %d of node %q held twice", ErrBadAssignment, g.Index, g.Node)
			}
			j, active := jobIdx[id]
			if !active {
				continue // a finished job's GPUs are free
			}
			held[n][g.Index] = j
			if old[j] == nil {
				old[j] = map[int][]int{}
			}
			old[j][n] = append(old[j][n], g.Index)
		}
	}
	for j := range old {
		for n := range old[j] {
			sort.Ints(old[j][n])
		}
	}
	// taken[n][i] marks GPUs given out in this assignment.
	taken := make([][]bool, len(nodes))
	for n := range nodes {
		taken[n] = make([]bool, nodes[n].GPUs)
	}
	out := make(map[string][]GPU)
	// Pass 1: every job keeps min(old, new) of its old GPUs on each node.
	for j, pl := range alloc {
		for i, nc := range pl {
			if nc.Node < 0 || nc.Node >= len(nodes) || nc.Count <= 0 || i > 0 && nc.Node <= pl[i-1].Node {
				return nil, fmt.Errorf("%w: job %q placement %v", ErrBadAssignment, jobs[j].ID, pl)
			}
			for _, i := range old[j][nc.Node][:min(nc.Count, len(old[j][nc.Node]))] {
				taken[nc.Node][i] = true
				out[jobs[j].ID] = append(out[jobs[j].ID], GPU{Node: nodes[nc.Node].ID, Index: i})
			}
		}
	}
	// Pass 2: growth takes the lowest GPUs nobody kept.
	next := make([]int, len(nodes))
	for j, pl := range alloc {
		for _, nc := range pl {
			n := nc.Node
			for need := nc.Count - min(nc.Count, len(old[j][n])); need > 0; need-- {
				for next[n] < len(taken[n]) && taken[n][next[n]] {
					next[n]++
				}
				if next[n] >= len(taken[n]) {
					return nil, fmt.Errorf("%w: node %q over capacity", ErrBadAssignment, nodes[n].ID)
				}
				taken[n][next[n]] = true
				out[jobs[j].ID] = append(out[jobs[j].ID], GPU{Node: nodes[n].ID, Index: next[n]})
			}
		}
	}
	for id, gs := range out {
		sort.Slice(gs, func(a, b int) bool {
			if gs[a].Node != gs[b].Node {
				return nodeIdx[gs[a].Node] < nodeIdx[gs[b].Node]
			}
			return gs[a].Index < gs[b].Index
		})
		out[id] = gs
	}
	return out, nil
}
