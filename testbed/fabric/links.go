package fabric

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Links is a Fabric shared by the emulated workers of one process (a
// live cluster run in one process): every node of a job's incarnation
// joins it with its rack, and the workers read what the uplinks add to
// their synchronised steps at the moment, max-min fair among all the
// incarnations joined (so jobs crossing the same uplinks slow each other
// down, as in the simulator). It is safe for concurrent use.
type Links struct {
	net *Fabric
	mu  sync.Mutex
	// flows are the joined nodes of every incarnation, by key.
	flows map[string]Flow
}

// NewLinks returns the shared network of cfg over racks of rackNodes[i]
// nodes each.
func NewLinks(cfg Config, rackNodes []int) (*Links, error) {
	f, err := New(cfg, rackNodes)
	if err != nil {
		return nil, err
	}
	return &Links{net: f, flows: map[string]Flow{}}, nil
}

// Racks is how many racks the network has.
func (l *Links) Racks() int { return len(l.net.uplink) }

// Join adds one node in rack to the incarnation named key (a job and its
// incarnation); leave takes it out again (once; later calls do nothing).
func (l *Links) Join(key string, rack int) (leave func(), err error) {
	if rack < 0 || rack >= len(l.net.uplink) {
		return nil, fmt.Errorf("%w: rack %d of %d", ErrConfig, rack, len(l.net.uplink))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fl := l.flows[key]
	if fl == nil {
		fl = Flow{}
		l.flows[key] = fl
	}
	fl[rack]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			fl := l.flows[key]
			if fl[rack]--; fl[rack] == 0 {
				delete(fl, rack)
			}
			if len(fl) == 0 {
				delete(l.flows, key)
			}
		})
	}, nil
}

// Nodes is how many nodes of the incarnation key have joined.
func (l *Links) Nodes(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.flows[key] {
		n += c
	}
	return n
}

// Extra is what the uplinks add, at the moment, to one synchronised step
// of the incarnation key exchanging bytes of gradients (Fabric.Extra at
// its max-min fair rate among all the joined incarnations), and the
// racks it spans; 0 and its racks for one within one rack or unknown.
func (l *Links) Extra(key string, bytes float64) (extra float64, racks int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	own := l.flows[key]
	if own.Racks() < 2 {
		return 0, own.Racks()
	}
	keys := slices.Sorted(maps.Keys(l.flows))
	flows := make([]Flow, 0, len(keys))
	at := 0
	for _, k := range keys {
		if fl := l.flows[k]; fl.Racks() >= 2 {
			if k == key {
				at = len(flows)
			}
			flows = append(flows, fl)
		}
	}
	rates, err := l.net.Rates(flows)
	if err != nil { // (Join admits only the fabric's racks)
		return 0, own.Racks()
	}
	return l.net.Extra(own, bytes, rates[at]), own.Racks()
}
