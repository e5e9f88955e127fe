package api

import (
	"fmt"
	"slices"
	"strings"

	"pollux/actors/jobspec"
	"pollux/consensus/state"
	"pollux/optimizer"
	"pollux/optimizer/topology"
)

// Placeable refuses a job whose constraints the cluster's nodes can never
// meet, so that it is not left pending forever: a GPU type no node has, a
// required topology level the cluster does not define, or fewer GPUs
// in the largest domain of its required level than its min_replicas,
// counting the GPUs of one type at a time (a job runs on one type; of its
// gpu_type if it names one). Every registered node counts, dead ones too
// (they may come back), except those that left. A cluster without nodes
// yet accepts anything.
func Placeable(st *state.State, spec jobspec.Spec) error {
	var nodes []optimizer.Node
	var types []string
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.Health == state.Left || n.GPUs == 0 {
			continue
		}
		if !slices.Contains(types, n.GPUType) {
			types = append(types, n.GPUType)
		}
		if spec.GPUType == "" || n.GPUType == spec.GPUType {
			nodes = append(nodes, optimizer.Node{ID: id, GPUs: n.GPUs, Type: n.GPUType, Topology: n.Domains()})
		}
	}
	levels := st.Config.Levels
	if err := spec.Topology.Validate(levels); err != nil {
		return &jobspec.FieldError{Field: "topology", Value: fmt.Sprintf("%+v", spec.Topology), Reason: err.Error()}
	}
	if len(types) == 0 {
		return nil
	}
	if spec.GPUType != "" && len(nodes) == 0 {
		slices.Sort(types)
		return &jobspec.FieldError{Field: "gpu_type", Value: fmt.Sprintf("%q", spec.GPUType),
			Reason: fmt.Sprintf("no node of the cluster has GPUs of this type (types: %s)", strings.Join(typeNames(types), ", "))}
	}
	typed := 0
	for _, n := range nodes {
		typed += n.GPUs
	}
	if spec.GPUType != "" && typed < spec.MinReplicas {
		return &jobspec.FieldError{Field: "min_replicas", Value: fmt.Sprint(spec.MinReplicas),
			Reason: fmt.Sprintf("the cluster has %d GPUs of type %s", typed, spec.GPUType)}
	}
	if spec.Topology.Required == "" {
		return nil
	}
	// The largest domain of the required level, of one GPU type.
	all := (state.ClusterConfig{Levels: levels}).TopologyLevels()
	at := slices.Index(all, spec.Topology.Required)
	gpus := map[[2]string]int{}
	best, bestKey := 0, [2]string{}
	for _, n := range nodes {
		path := make([]string, len(all))
		for l := range all {
			path[l] = topology.DefaultDomain
			if l < len(n.Topology) && n.Topology[l] != "" {
				path[l] = n.Topology[l]
			}
		}
		key := [2]string{n.Type, strings.Join(path[at:], " in ")}
		if gpus[key] += n.GPUs; gpus[key] > best || gpus[key] == best && less(key, bestKey) {
			best, bestKey = gpus[key], key
		}
	}
	if best >= max(spec.MinReplicas, 1) {
		return nil
	}
	where, note := bestKey[1], ""
	if len(types) > 1 {
		where += ", " + typeNames([]string{bestKey[0]})[0] + " GPUs"
		note = " (a job runs on one GPU type at a time)"
	}
	return &jobspec.FieldError{Field: "topology", Value: fmt.Sprintf("{required: %s}", spec.Topology.Required),
		Reason: fmt.Sprintf("the job needs %d GPUs in one %s, but the largest %s (%s) has %d%s: it could never run",
			spec.MinReplicas, spec.Topology.Required, spec.Topology.Required, where, best, note)}
}

func less(a, b [2]string) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

// typeNames shows the untyped GPUs as "untyped".
func typeNames(types []string) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = t
		if t == "" {
			out[i] = "untyped"
		}
	}
	return out
}
