package fabric

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrConfig is returned for an unusable network.
var ErrConfig = errors.New("fabric: bad configuration")

// DefaultNodeBandwidth is the bytes per second of a node's link: about
// the rate of a ring all-reduce that the Pollux artifact's in-rack traces
// imply (docs/fidelity.md, Part 3: 2(K-1)/K gradient bytes over the
// fitted inter-node network time on 4 nodes of 4 GPUs gives 0.49 to
// 0.54 GB/s over its applications; this default is a little below). It
// is far below the testbed's nominal 50 Gb/s: what the traces measured is
// what counts.
const DefaultNodeBandwidth = 0.45e9

// Config is a network of racks.
type Config struct {
	// NodeBandwidth is every node's link, in bytes per second (0:
	// DefaultNodeBandwidth).
	NodeBandwidth float64 `json:"node_bandwidth"`
	// Oversubscription is how many times less a rack's uplink carries
	// than its nodes' links together (>= 1; 1 is a non-blocking fabric).
	Oversubscription float64 `json:"oversubscription"`
}

// Validate reports whether c describes a network.
func (c Config) Validate() error {
	switch {
	case c.NodeBandwidth != 0 && !(c.NodeBandwidth > 0) || math.IsInf(c.NodeBandwidth, 0):
		return fmt.Errorf("%w: node bandwidth %v bytes/s, want a finite positive rate", ErrConfig, c.NodeBandwidth)
	case !(c.Oversubscription >= 1) || math.IsInf(c.Oversubscription, 0):
		return fmt.Errorf("%w: oversubscription %v, want a finite ratio of at least 1", ErrConfig, c.Oversubscription)
	}
	return nil
}

// Fabric is a network of racks of known sizes.
type Fabric struct {
	node   float64
	uplink []float64 // bytes/s of every rack's uplink
}

// New returns the network of cfg over racks of rackNodes[i] nodes each.
func New(cfg Config, rackNodes []int) (*Fabric, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := cfg.NodeBandwidth
	if b == 0 {
		b = DefaultNodeBandwidth
	}
	f := &Fabric{node: b, uplink: make([]float64, len(rackNodes))}
	for i, n := range rackNodes {
		if n < 1 {
			return nil, fmt.Errorf("%w: rack %d has %d nodes", ErrConfig, i, n)
		}
		f.uplink[i] = float64(n) * b / cfg.Oversubscription
	}
	return f, nil
}

// Flow is one job's exchange across racks: its nodes in every rack it
// spans (rack index -> nodes).
type Flow map[int]int

// Racks is how many racks the flow spans.
func (fl Flow) Racks() int { return len(fl) }

// cap is the fastest the flow can go: its fewest nodes in one rack, each
// at the node rate.
func (f *Fabric) cap(fl Flow) float64 {
	least := math.MaxInt
	for _, n := range fl {
		least = min(least, n)
	}
	return float64(least) * f.node
}

// Rates are the max-min fair rates, in bytes per second, of flows
// sharing the uplinks of the racks they span: all flows grow together
// until an uplink is full or a flow reaches its own nodes' rate, which
// fixes the flows concerned, and so on. A flow spanning fewer than two
// racks uses no uplink and gets its own rate. It fails on a flow naming
// a rack the fabric does not have.
func (f *Fabric) Rates(flows []Flow) ([]float64, error) {
	rates := make([]float64, len(flows))
	caps := make([]float64, len(flows))
	var open []int
	for i, fl := range flows {
		for r, n := range fl {
			if r < 0 || r >= len(f.uplink) || n < 1 {
				return nil, fmt.Errorf("%w: flow %d has %d nodes in rack %d of %d", ErrConfig, i, n, r, len(f.uplink))
			}
		}
		caps[i] = f.cap(fl)
		if fl.Racks() < 2 {
			rates[i] = caps[i]
			continue
		}
		open = append(open, i)
	}
	left := slices.Clone(f.uplink)
	users := make([]int, len(f.uplink))
	for len(open) > 0 {
		clear(users)
		for _, i := range open {
			for r := range flows[i] {
				users[r]++
			}
		}
		// The smallest raise that fills an uplink or a flow.
		step := math.Inf(1)
		for r, u := range users {
			if u > 0 {
				step = min(step, left[r]/float64(u))
			}
		}
		for _, i := range open {
			step = min(step, caps[i]-rates[i])
		}
		step = max(step, 0)
		for _, i := range open {
			rates[i] += step
			for r := range flows[i] {
				left[r] -= step
			}
		}
		next := open[:0]
		for _, i := range open {
			done := rates[i] >= caps[i]*(1-1e-12)
			for r := range flows[i] {
				done = done || left[r] <= f.uplink[r]*1e-12
			}
			if !done {
				next = append(next, i)
			}
		}
		open = next
	}
	return rates, nil
}

// Extra is what one synchronisation of gradient bytes across racks
// takes, at rate, beyond the time at the flow's own node links: the
// ring among its racks moves 2(r-1)/r times the gradients through each
// uplink. It is 0 for a flow within one rack.
func (f *Fabric) Extra(fl Flow, bytes, rate float64) float64 {
	r := fl.Racks()
	if r < 2 || !(rate > 0) {
		return 0
	}
	moved := 2 * float64(r-1) / float64(r) * bytes
	return max(moved/rate-moved/f.cap(fl), 0)
}
