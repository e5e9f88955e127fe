package fedsim

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"pollux/cluster/federation"
)

// Bounds of a federation file.
const (
	// MaxFileBytes bounds a federation file.
	MaxFileBytes = 1 << 20
	// MaxLabs bounds the labs of a federation.
	MaxLabs = 64
	// maxLabNodes bounds one lab's nodes in the simulator.
	maxLabNodes = 4096
	// maxSeconds bounds times and durations in the file (about 4 months).
	maxSeconds = 1e7
)

// exampleJSON is the built-in example (`pollux sim --federation example`):
// three labs of 16, 32 and 16 GPUs whose busy periods follow each other.
//
//go:embed example.json
var exampleJSON []byte

// Example returns the built-in example file.
func Example() []byte { return bytes.Clone(exampleJSON) }

// File is a federation file as written.
type File struct {
	// Interval is the scheduling interval, Restart what a (re)allocation
	// costs a job, and Checkpoint how long a node's workers take to
	// checkpoint and leave when it changes hands, all in seconds.
	Interval   *float64 `json:"interval_s"`
	Restart    *float64 `json:"restart_s"`
	Checkpoint *float64 `json:"checkpoint_s"`
	// Terms are the lease terms (a term not given keeps its value in
	// federation.DefaultSettings).
	Terms *federation.Settings `json:"terms"`
	Labs  []LabSpec            `json:"labs"`
	// Leases are standing leases granted at time 0.
	Leases []LeaseSpec `json:"leases"`
	// Inject are lease commands and orders applied at their time, as if
	// a peer had sent them (to show what the ledgers refuse).
	Inject []Injection `json:"inject"`
	// Outages are losses of a whole lab (every process of it, its
	// machines included) and its return.
	Outages []Outage `json:"outages"`
}

// Outage is a lab lost at At for For seconds.
type Outage struct {
	Lab string  `json:"lab"`
	At  float64 `json:"at_s"`
	For float64 `json:"for_s"`
}

// LabSpec is one lab.
type LabSpec struct {
	Name string `json:"name"`
	// CA names the lab's CA (in the live system, the fingerprint of its
	// CA certificate).
	CA          string       `json:"ca"`
	Nodes       int          `json:"nodes"`
	GPUsPerNode int          `json:"gpus_per_node"`
	Policy      string       `json:"policy"`
	Quota       QuotaSpec    `json:"quota"`
	Peers       []PeerSpec   `json:"peers"`
	Workload    WorkloadSpec `json:"workload"`
}

// QuotaSpec is a lab's quota; absent fields take the defaults: nominal
// quota all its GPUs, lending limit its nominal quota, borrowing limit
// every other lab's GPUs.
type QuotaSpec struct {
	Nominal        *int `json:"nominal_quota"`
	BorrowingLimit *int `json:"borrowing_limit"`
	LendingLimit   *int `json:"lending_limit"`
}

// PeerSpec is a lab this one trusts and the CA it must present.
type PeerSpec struct {
	Name string `json:"name"`
	CA   string `json:"ca"`
}

// WorkloadSpec is where a lab's jobs come from: File (a workload CSV,
// under the directory given to `pollux sim --workload`, else next to the
// federation file), of which the jobs kept are every Every-th from the
// First (counting from 0), or Generate (the built-in generator, used
// without --workload); their times are scaled by TimeScale and shifted by
// Offset.
type WorkloadSpec struct {
	File      string   `json:"file"`
	Generate  *GenSpec `json:"generate"`
	Every     int      `json:"every"`
	First     int      `json:"first"`
	Offset    float64  `json:"offset_s"`
	TimeScale float64  `json:"time_scale"`
}

// GenSpec draws a workload with the artifact's job mix.
type GenSpec struct {
	Jobs   int     `json:"jobs"`
	Window float64 `json:"window_s"`
	Seed   uint64  `json:"seed"`
}

// LeaseSpec is a standing lease.
type LeaseSpec struct {
	ID       string                `json:"id"`
	Lender   string                `json:"lender"`
	Borrower string                `json:"borrower"`
	Nodes    []federation.NodeGPUs `json:"nodes"`
	TTL      float64               `json:"ttl_s"`
}

// Injection is one command or order from outside, at its own time.
type Injection struct {
	// Command is a lease command (decoded as a peer's would be), sent to
	// the labs To names (default: a grant's two parties; for other
	// commands, the labs whose ledgers hold the lease, or else every lab
	// but the sender). Every receiver checks it first; it is applied only
	// if all accept.
	Command json.RawMessage `json:"command,omitempty"`
	To      []string        `json:"to,omitempty"`
	// Order is a borrower's order to run on a lender's node.
	Order *InjectedOrder `json:"order,omitempty"`
}

// InjectedCommand is a decoded injected command and its receivers.
type InjectedCommand struct {
	federation.Command
	To []string
}

// InjectedOrder is an order sent to a lender.
type InjectedOrder struct {
	Lender string `json:"lender"`
	federation.Order
}

// Federation is a decoded, checked federation file.
type Federation struct {
	Interval, Restart, Checkpoint float64
	Terms                         federation.Settings
	Labs                          []Lab
	// Grants are the standing leases, as grant commands at time 0.
	Grants []federation.Command
	// Commands and Orders are the injections, in file order.
	Commands []InjectedCommand
	Orders   []InjectedOrder
	// Outages are the labs' losses, in file order.
	Outages []Outage
}

// Lab is one decoded lab.
type Lab struct {
	federation.Lab
	GPUsPerNode int
	Policy      string
	Workload    WorkloadSpec
}

// Decode reads and checks a federation file. name is used in errors.
func Decode(data []byte, name string) (*Federation, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, want at most %d", ErrBadFile, name, len(data), MaxFileBytes)
	}
	// Terms given in part keep the defaults of the others.
	terms := federation.DefaultSettings()
	f := File{Terms: &terms}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s%s: %v", ErrBadFile, name, where(data, err, dec), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s%s: trailing data after the federation", ErrBadFile, name, at(data, dec.InputOffset()))
	}
	fed, err := f.resolve()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return fed, nil
}

// where locates a decoding error in data as ":line:column".
func where(data []byte, err error, dec *json.Decoder) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return at(data, se.Offset)
	case errors.As(err, &te):
		return at(data, te.Offset)
	}
	return at(data, dec.InputOffset())
}

func at(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Sprintf(":%d:%d", line, col)
}

// seconds reads an optional duration with its default.
func seconds(p *float64, def float64, what string, lo float64) (float64, error) {
	if p == nil {
		return def, nil
	}
	if !(*p >= lo && *p <= maxSeconds) {
		return 0, fmt.Errorf("%w: %s %v s, want [%g, %g]", ErrBadFile, what, *p, lo, float64(maxSeconds))
	}
	return *p, nil
}

func (f *File) resolve() (*Federation, error) {
	fed := &Federation{Terms: federation.DefaultSettings()}
	var err error
	if fed.Interval, err = seconds(f.Interval, 60, "interval_s", 1); err != nil {
		return nil, err
	}
	if fed.Interval != math.Trunc(fed.Interval) || fed.Interval > 86400 {
		return nil, fmt.Errorf("%w: interval_s %v, want a whole number of seconds in [1, 86400]", ErrBadFile, fed.Interval)
	}
	if fed.Restart, err = seconds(f.Restart, 30, "restart_s", 0); err != nil {
		return nil, err
	}
	if fed.Checkpoint, err = seconds(f.Checkpoint, 15, "checkpoint_s", 0); err != nil {
		return nil, err
	}
	if f.Terms != nil {
		fed.Terms = *f.Terms
	}
	if err := fed.Terms.Validate(); err != nil {
		return nil, fmt.Errorf("terms: %w", err)
	}
	if len(f.Labs) < 2 || len(f.Labs) > MaxLabs {
		return nil, fmt.Errorf("%w: %d labs, want 2-%d", ErrBadFile, len(f.Labs), MaxLabs)
	}
	total := 0
	byName := map[string]*LabSpec{}
	for i := range f.Labs {
		l := &f.Labs[i]
		if !federation.ValidName(l.Name) {
			return nil, fmt.Errorf("%w: lab %d: name %q, want 1-63 characters of [A-Za-z0-9._-] starting and ending with a letter or digit", ErrBadFile, i+1, l.Name)
		}
		if byName[l.Name] != nil {
			return nil, fmt.Errorf("%w: lab %s listed twice", ErrBadFile, l.Name)
		}
		byName[l.Name] = l
		if l.Nodes < 1 || l.Nodes > maxLabNodes {
			return nil, fmt.Errorf("%w: lab %s: %d nodes, want 1-%d", ErrBadFile, l.Name, l.Nodes, maxLabNodes)
		}
		if l.GPUsPerNode < 1 || l.GPUsPerNode > 64 {
			return nil, fmt.Errorf("%w: lab %s: %d GPUs per node, want 1-64", ErrBadFile, l.Name, l.GPUsPerNode)
		}
		if g := f.Labs[0].GPUsPerNode; l.GPUsPerNode != g {
			return nil, fmt.Errorf("%w: lab %s has %d GPUs per node and lab %s %d: the simulator needs one node size across the federation", ErrBadFile, l.Name, l.GPUsPerNode, f.Labs[0].Name, g)
		}
		total += l.Nodes * l.GPUsPerNode
	}
	for i := range f.Labs {
		lab, err := f.Labs[i].resolve(byName, total)
		if err != nil {
			return nil, err
		}
		fed.Labs = append(fed.Labs, lab)
	}
	if err := fed.grants(f.Leases); err != nil {
		return nil, err
	}
	for i, inj := range f.Inject {
		switch {
		case len(inj.Command) > 0 && inj.Order == nil:
			c, err := federation.DecodeCommand(inj.Command)
			if err != nil {
				return nil, fmt.Errorf("inject %d: %w", i+1, err)
			}
			for _, to := range inj.To {
				if fed.lab(to) == nil {
					return nil, fmt.Errorf("%w: inject %d: to lab %q, which is not in the federation", ErrBadFile, i+1, to)
				}
			}
			fed.Commands = append(fed.Commands, InjectedCommand{Command: c, To: inj.To})
		case len(inj.Command) == 0 && inj.Order != nil:
			o := *inj.Order
			if fed.lab(o.Lender) == nil {
				return nil, fmt.Errorf("%w: inject %d: order to lab %q, which is not in the federation", ErrBadFile, i+1, o.Lender)
			}
			if !(o.At >= 0 && o.At <= maxSeconds) {
				return nil, fmt.Errorf("%w: inject %d: order at %v s", ErrBadFile, i+1, o.At)
			}
			fed.Orders = append(fed.Orders, o)
		default:
			return nil, fmt.Errorf("%w: inject %d: want exactly one of command and order", ErrBadFile, i+1)
		}
	}
	for i, o := range f.Outages {
		switch {
		case fed.lab(o.Lab) == nil:
			return nil, fmt.Errorf("%w: outage %d: lab %q is not in the federation", ErrBadFile, i+1, o.Lab)
		case !(o.At >= 0 && o.At <= maxSeconds) || !(o.For > 0 && o.For <= maxSeconds):
			return nil, fmt.Errorf("%w: outage %d of %s at %v s for %v s, want a time in [0, %g] and a duration in (0, %g]", ErrBadFile, i+1, o.Lab, o.At, o.For, float64(maxSeconds), float64(maxSeconds))
		}
		for j, p := range f.Outages[:i] {
			if p.Lab == o.Lab && o.At < p.At+p.For && p.At < o.At+o.For {
				return nil, fmt.Errorf("%w: outages %d and %d of %s overlap", ErrBadFile, j+1, i+1, o.Lab)
			}
		}
		fed.Outages = append(fed.Outages, o)
	}
	return fed, nil
}

// resolve checks one lab and fills its defaults; all are every lab by
// name, total the federation's GPUs.
func (l *LabSpec) resolve(all map[string]*LabSpec, total int) (Lab, error) {
	lab := Lab{Lab: federation.Lab{Name: l.Name, CA: l.CA}, GPUsPerNode: l.GPUsPerNode, Policy: l.Policy, Workload: l.Workload}
	if lab.Policy == "" {
		lab.Policy = "pollux"
	}
	for i := range l.Nodes {
		lab.Nodes = append(lab.Nodes, federation.Node{ID: fmt.Sprintf("node-%d", i), GPUs: l.GPUsPerNode})
	}
	owned := l.Nodes * l.GPUsPerNode
	q := federation.Quota{Nominal: owned, BorrowingLimit: total - owned}
	if l.Quota.Nominal != nil {
		q.Nominal = *l.Quota.Nominal
	}
	q.LendingLimit = q.Nominal
	if l.Quota.LendingLimit != nil {
		q.LendingLimit = *l.Quota.LendingLimit
	}
	if l.Quota.BorrowingLimit != nil {
		q.BorrowingLimit = *l.Quota.BorrowingLimit
	}
	lab.Quota = q
	for _, p := range l.Peers {
		lab.Peers = append(lab.Peers, federation.Peer{Name: p.Name, CAs: []string{p.CA}})
	}
	if err := lab.Validate(); err != nil {
		return Lab{}, err
	}
	// Every peer must be a lab of the federation that presents the CA
	// this lab trusts it with.
	for _, p := range l.Peers {
		other := all[p.Name]
		if other == nil {
			return Lab{}, fmt.Errorf("%w: lab %s lists peer %s, which is not a lab of the federation", federation.ErrUnknownPeer, l.Name, p.Name)
		}
		if err := lab.Trusts(p.Name, other.CA); err != nil {
			return Lab{}, fmt.Errorf("lab %s: %w", l.Name, err)
		}
	}
	w := &lab.Workload
	if w.Every == 0 {
		w.Every = 1
	}
	if w.TimeScale == 0 {
		w.TimeScale = 1
	}
	switch {
	case w.File == "" && w.Generate == nil:
		return Lab{}, fmt.Errorf("%w: lab %s: its workload needs a file or a generate section", ErrBadFile, l.Name)
	case w.Every < 1 || w.Every > 1<<20:
		return Lab{}, fmt.Errorf("%w: lab %s: workload every %d, want at least 1", ErrBadFile, l.Name, w.Every)
	case w.First < 0 || w.First >= w.Every:
		return Lab{}, fmt.Errorf("%w: lab %s: workload first %d, want 0-%d", ErrBadFile, l.Name, w.First, w.Every-1)
	case !(w.Offset >= 0 && w.Offset <= maxSeconds):
		return Lab{}, fmt.Errorf("%w: lab %s: workload offset_s %v, want [0, %g]", ErrBadFile, l.Name, w.Offset, float64(maxSeconds))
	case !(w.TimeScale > 0 && w.TimeScale <= 100):
		return Lab{}, fmt.Errorf("%w: lab %s: workload time_scale %v, want (0, 100]", ErrBadFile, l.Name, w.TimeScale)
	}
	if g := w.Generate; g != nil && (g.Jobs < 1 || g.Jobs > 100000 || !(g.Window >= 0 && g.Window <= maxSeconds)) {
		return Lab{}, fmt.Errorf("%w: lab %s: generate %d jobs over %v s, want 1-100000 jobs over [0, %g] s", ErrBadFile, l.Name, g.Jobs, g.Window, float64(maxSeconds))
	}
	return lab, nil
}

// lab finds a lab by name.
func (fed *Federation) lab(name string) *Lab {
	for i := range fed.Labs {
		if fed.Labs[i].Name == name {
			return &fed.Labs[i]
		}
	}
	return nil
}

// Ledgers returns a fresh ledger per lab (in lab order) holding the
// standing leases.
func (fed *Federation) Ledgers() ([]*federation.Ledger, error) {
	out := make([]*federation.Ledger, len(fed.Labs))
	byName := map[string]*federation.Ledger{}
	for i, l := range fed.Labs {
		lg, err := federation.NewLedger(l.Lab)
		if err != nil {
			return nil, err
		}
		out[i] = lg
		byName[l.Name] = lg
	}
	for _, c := range fed.Grants {
		for _, party := range []string{c.Lender, c.Borrower} {
			lg := byName[party]
			if lg == nil {
				return nil, fmt.Errorf("%w: lease %s between %s and %s: %s is not a lab of the federation", federation.ErrUnknownPeer, c.Lease, c.Lender, c.Borrower, party)
			}
			if _, err := lg.Apply(c); err != nil {
				return nil, fmt.Errorf("lease %s, at %s: %w", c.Lease, party, err)
			}
		}
	}
	return out, nil
}

// grants turns the standing leases into grant commands and checks them
// against both parties' ledgers.
func (fed *Federation) grants(leases []LeaseSpec) error {
	for i, l := range leases {
		ttl := l.TTL
		if ttl == 0 {
			ttl = fed.Terms.TTL
		}
		id := l.ID
		if id == "" {
			id = fmt.Sprintf("standing-%d", i+1)
		}
		c := federation.Command{Op: federation.OpGrant, From: l.Lender, Lease: id, Lender: l.Lender, Borrower: l.Borrower, Nodes: l.Nodes, TTL: ttl}
		if err := c.Validate(); err != nil {
			return fmt.Errorf("lease %d: %w", i+1, err)
		}
		fed.Grants = append(fed.Grants, c)
	}
	_, err := fed.Ledgers()
	return err
}
