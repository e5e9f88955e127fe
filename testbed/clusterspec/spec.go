package clusterspec

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrBadSpec is returned for a cluster spec that cannot be used.
var ErrBadSpec = errors.New("clusterspec: bad cluster spec")

// Group is a set of identical nodes of one GPU type.
type Group struct {
	Type        string `json:"gpu_type"`
	Nodes       int    `json:"nodes"`
	GPUsPerNode int    `json:"gpus_per_node"`
}

// Spec is a cluster: its groups in the order given (the order is the
// cluster's type order, which policies use to break ties).
type Spec struct {
	Groups []Group `json:"groups"`
}

// DefaultGPUsPerNode are the GPUs per node of the machines the GPU types
// of Sia's artifact were profiled on.
var DefaultGPUsPerNode = map[string]int{
	"aws": 4, "azure": 8, "dgx": 8, "dgx-ext": 8, "quad": 4, "rtx": 8,
}

// Presets are named specs: Sia's heterogeneous cluster (6 T4 nodes, 2 A100
// nodes, 3 RTX nodes: 64 GPUs, in the order of Sia's simulator_config.py)
// and its homogeneous one (16 T4 nodes).
var Presets = map[string]string{
	"hetero":      "aws:6,dgx-ext:2,rtx:3",
	"homogeneous": "aws:16",
}

// maxNodes bounds a group (the simulator's limit is 4096 nodes in all).
const maxNodes = 1 << 16

var typeName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// TotalGPUs is the GPUs of every group.
func (s Spec) TotalGPUs() int {
	g := 0
	for _, gr := range s.Groups {
		g += gr.Nodes * gr.GPUsPerNode
	}
	return g
}

// Types lists the groups' GPU types in order.
func (s Spec) Types() []string {
	out := make([]string, len(s.Groups))
	for i, g := range s.Groups {
		out[i] = g.Type
	}
	return out
}

// String is the inline form of the spec.
func (s Spec) String() string {
	parts := make([]string, len(s.Groups))
	for i, g := range s.Groups {
		parts[i] = fmt.Sprintf("%s:%dx%d", g.Type, g.Nodes, g.GPUsPerNode)
	}
	return strings.Join(parts, ",")
}

// Resolve reads arg as a preset name, else as a file when one exists at
// that path, else as an inline spec.
func Resolve(arg string) (Spec, error) {
	if p, ok := Presets[arg]; ok {
		return Parse(p)
	}
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	return Parse(arg)
}

// Parse reads an inline spec: comma-separated TYPE:NODES or
// TYPE:NODESxGPUS entries.
func Parse(s string) (Spec, error) {
	var spec Spec
	if strings.TrimSpace(s) == "" {
		return spec, fmt.Errorf("%w: empty --cluster (want e.g. %q or a preset: %s)", ErrBadSpec, Presets["hetero"], presetNames())
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		typ, count, ok := strings.Cut(entry, ":")
		if !ok {
			return Spec{}, fmt.Errorf("%w: --cluster entry %d %q: want TYPE:NODES or TYPE:NODESxGPUS", ErrBadSpec, i+1, entry)
		}
		nodes, gpus := count, ""
		if n, g, ok := strings.Cut(count, "x"); ok {
			nodes, gpus = n, g
		}
		g, err := group(typ, nodes, gpus)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: --cluster entry %d %q: %v", ErrBadSpec, i+1, entry, err)
		}
		spec.Groups = append(spec.Groups, g)
	}
	if err := spec.check(); err != nil {
		return Spec{}, fmt.Errorf("%w: --cluster %q: %v", ErrBadSpec, s, err)
	}
	return spec, nil
}

// Header is the column list of a cluster file.
var Header = []string{"gpu_type", "nodes", "gpus_per_node"}

// Load reads a cluster file.
func Load(path string) (Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	defer f.Close()
	return Decode(f, path)
}

// Decode reads a cluster CSV: the header gpu_type,nodes,gpus_per_node
// then one group per line (an empty gpus_per_node takes the type's
// default). name is used in errors.
func Decode(r io.Reader, name string) (Spec, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Spec{}, fmt.Errorf("%w: %s:1: empty file, want header %q", ErrBadSpec, name, strings.Join(Header, ","))
		}
		return Spec{}, fmt.Errorf("%w: %s:1: %v", ErrBadSpec, name, err)
	}
	if len(header) != len(Header) {
		return Spec{}, fmt.Errorf("%w: %s:1: header %q, want %q", ErrBadSpec, name, strings.Join(header, ","), strings.Join(Header, ","))
	}
	for i, h := range header {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) != Header[i] {
			return Spec{}, fmt.Errorf("%w: %s:1: header %q, want %q", ErrBadSpec, name, strings.Join(header, ","), strings.Join(Header, ","))
		}
	}
	var spec Spec
	last := 1
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return Spec{}, fmt.Errorf("%w: %s:%d: %v", ErrBadSpec, name, line, err)
		}
		line, _ := cr.FieldPos(0)
		last = line
		if len(rec) != len(Header) {
			return Spec{}, fmt.Errorf("%w: %s:%d: %d fields, want %d", ErrBadSpec, name, line, len(rec), len(Header))
		}
		g, err := group(rec[0], rec[1], rec[2])
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %s:%d: %v", ErrBadSpec, name, line, err)
		}
		for _, prev := range spec.Groups {
			if prev.Type == g.Type {
				return Spec{}, fmt.Errorf("%w: %s:%d: GPU type %q listed twice", ErrBadSpec, name, line, g.Type)
			}
		}
		spec.Groups = append(spec.Groups, g)
	}
	if err := spec.check(); err != nil {
		return Spec{}, fmt.Errorf("%w: %s:%d: %v", ErrBadSpec, name, last, err)
	}
	return spec, nil
}

// group validates one group's fields.
func group(typ, nodes, gpus string) (Group, error) {
	typ, nodes, gpus = strings.TrimSpace(typ), strings.TrimSpace(nodes), strings.TrimSpace(gpus)
	if !typeName.MatchString(typ) {
		return Group{}, fmt.Errorf("GPU type %q: want letters, digits, '.', '_' or '-'", typ)
	}
	n, err := strconv.Atoi(nodes)
	if err != nil || n < 0 || n > maxNodes {
		return Group{}, fmt.Errorf("nodes %q: want an integer in [1, %d]", nodes, maxNodes)
	}
	if n == 0 {
		return Group{}, fmt.Errorf("GPU type %s has 0 nodes (a group must have at least one node with GPUs)", typ)
	}
	per := DefaultGPUsPerNode[typ]
	if gpus != "" {
		if per, err = strconv.Atoi(gpus); err != nil || per < 0 || per > 64 {
			return Group{}, fmt.Errorf("GPUs per node %q: want an integer in [1, 64]", gpus)
		}
		if per == 0 {
			return Group{}, fmt.Errorf("GPU type %s has 0 GPUs per node (a group must have GPUs)", typ)
		}
	}
	if per == 0 {
		return Group{}, fmt.Errorf("GPU type %q has no default GPUs per node (known: %s); give TYPE:NODESxGPUS", typ, knownTypes())
	}
	return Group{Type: typ, Nodes: n, GPUsPerNode: per}, nil
}

// check validates the whole spec.
func (s Spec) check() error {
	if len(s.Groups) == 0 || s.TotalGPUs() == 0 {
		return errors.New("the cluster has no GPUs")
	}
	seen := map[string]bool{}
	nodes := 0
	for _, g := range s.Groups {
		if seen[g.Type] {
			return fmt.Errorf("GPU type %q listed twice", g.Type)
		}
		seen[g.Type] = true
		nodes += g.Nodes
	}
	if nodes > maxNodes {
		return fmt.Errorf("%d nodes, at most %d", nodes, maxNodes)
	}
	return nil
}

func knownTypes() string {
	names := make([]string, 0, len(DefaultGPUsPerNode))
	for t := range DefaultGPUsPerNode {
		names = append(names, t)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func presetNames() string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
