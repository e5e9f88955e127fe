package netns

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// chain is the iptables chain of a member's namespace that holds the
// faults, jumped to from INPUT.
const chain = "POLLUX"

// memberRules are the faults on the packets one member receives.
type memberRules struct {
	// from lists the members whose packets are dropped.
	from map[string]bool
	// loss is the fraction dropped of the others' packets, delay how long
	// the rest are held.
	loss  float64
	delay time.Duration
}

// script is the iptables-restore input that makes rs the member's rules.
func (n *Net) script(rs *memberRules) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", chain)
	// The member's own traffic and the harness's are never touched.
	fmt.Fprintf(&b, "-A %s -i lo -j RETURN\n-A %s -s %s/32 -j RETURN\n", chain, chain, n.gateway)
	for _, name := range slices.Sorted(maps.Keys(rs.from)) {
		fmt.Fprintf(&b, "-A %s -s %s/32 -j DROP\n", chain, n.byName[name].IP)
	}
	if rs.loss > 0 {
		fmt.Fprintf(&b, "-A %s -s %s -m statistic --mode random --probability %s -j DROP\n", chain, subnet,
			strconv.FormatFloat(rs.loss, 'f', 4, 64))
	}
	if rs.delay > 0 {
		fmt.Fprintf(&b, "-A %s -s %s -j NFQUEUE --queue-num %d --queue-bypass\n", chain, subnet, queueNum)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// apply makes next the rules of every member whose rules change, starting
// delayers before their rules need them and stopping them after.
func (n *Net) apply(ctx context.Context, next map[string]*memberRules) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return fmt.Errorf("%w: the network is closed", ErrConfig)
	}
	for _, m := range n.members {
		cur, nx := n.rules[m.Name], next[m.Name]
		if cur.equal(nx) {
			continue
		}
		if nx.delay > 0 && (n.delays[m.Name] == nil || n.delays[m.Name].delay != nx.delay) {
			if old := n.delays[m.Name]; old != nil {
				// Rules first: nothing new reaches the old delayer.
				if err := runInput(ctx, n.script(&memberRules{from: nx.from, loss: nx.loss}), "ip", "netns", "exec", m.NS, "iptables-restore", "--noflush"); err != nil {
					return err
				}
				if err := old.close(); err != nil {
					return err
				}
				delete(n.delays, m.Name)
			}
			d, err := newDelayer(m.NS, nx.delay)
			if err != nil {
				return err
			}
			n.delays[m.Name] = d
		}
		if err := runInput(ctx, n.script(nx), "ip", "netns", "exec", m.NS, "iptables-restore", "--noflush"); err != nil {
			return err
		}
		if nx.delay == 0 && n.delays[m.Name] != nil {
			if err := n.delays[m.Name].close(); err != nil {
				return err
			}
			delete(n.delays, m.Name)
		}
		n.rules[m.Name] = nx
	}
	return nil
}

func (r *memberRules) equal(o *memberRules) bool {
	return r.loss == o.loss && r.delay == o.delay && maps.Equal(r.from, o.from)
}

// current returns a copy of the rules in force.
func (n *Net) current() map[string]*memberRules {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]*memberRules{}
	for name, r := range n.rules {
		out[name] = &memberRules{from: maps.Clone(r.from), loss: r.loss, delay: r.delay}
	}
	return out
}

// Block replaces the cut links by pairs: for each {from, to}, packets
// from member from to member to are dropped (one direction; list both for
// a symmetric cut). Loss and delay stay as they are.
func (n *Net) Block(ctx context.Context, pairs [][2]string) error {
	next := n.current()
	for _, r := range next {
		r.from = nil
	}
	for _, p := range pairs {
		if n.byName[p[0]] == nil || n.byName[p[1]] == nil || p[0] == p[1] {
			return fmt.Errorf("%w: link %v", ErrConfig, p)
		}
		r := next[p[1]]
		if r.from == nil {
			r.from = map[string]bool{}
		}
		r.from[p[0]] = true
	}
	return n.apply(ctx, next)
}

// Partition cuts every pair of members in different groups, both ways.
// Every member must be in exactly one group.
func (n *Net) Partition(ctx context.Context, groups [][]string) error {
	side := map[string]int{}
	for i, g := range groups {
		for _, name := range g {
			if n.byName[name] == nil {
				return fmt.Errorf("%w: no member %q", ErrConfig, name)
			}
			if _, dup := side[name]; dup {
				return fmt.Errorf("%w: member %q in two groups", ErrConfig, name)
			}
			side[name] = i
		}
	}
	if len(side) != len(n.members) {
		return fmt.Errorf("%w: the groups hold %d of %d members", ErrConfig, len(side), len(n.members))
	}
	var pairs [][2]string
	for _, a := range n.members {
		for _, b := range n.members {
			if side[a.Name] != side[b.Name] {
				pairs = append(pairs, [2]string{a.Name, b.Name})
			}
		}
	}
	return n.Block(ctx, pairs)
}

// GroupsBy groups the members by the value of a label (members without it
// form a group of their own), groups in order of first appearance.
func (n *Net) GroupsBy(label string) [][]string {
	var order []string
	groups := map[string][]string{}
	for _, m := range n.members {
		v, ok := m.Labels[label]
		if !ok {
			v = "\x00"
		}
		if _, seen := groups[v]; !seen {
			order = append(order, v)
		}
		groups[v] = append(groups[v], m.Name)
	}
	out := make([][]string, 0, len(order))
	for _, v := range order {
		out = append(out, groups[v])
	}
	return out
}

// Degrade drops the fraction loss (in [0, 1)) of the packets each of the
// members receives from the others, and holds the rest for delay.
// Cut links stay cut.
func (n *Net) Degrade(ctx context.Context, members []string, loss float64, delay time.Duration) error {
	if !(loss >= 0 && loss < 1) || delay < 0 || delay > time.Minute {
		return fmt.Errorf("%w: loss %v, delay %v", ErrConfig, loss, delay)
	}
	next := n.current()
	for _, name := range members {
		r := next[name]
		if r == nil {
			return fmt.Errorf("%w: no member %q", ErrConfig, name)
		}
		r.loss, r.delay = loss, delay
	}
	return n.apply(ctx, next)
}

// Heal removes every fault.
func (n *Net) Heal(ctx context.Context) error {
	next := map[string]*memberRules{}
	for _, m := range n.members {
		next[m.Name] = &memberRules{}
	}
	return n.apply(ctx, next)
}

// Describe says which faults are in force, for logs and the history.
func (n *Net) Describe() string {
	var parts []string
	for name, r := range n.current() {
		var f []string
		if len(r.from) > 0 {
			f = append(f, "drops from "+strings.Join(slices.Sorted(maps.Keys(r.from)), ","))
		}
		if r.loss > 0 {
			f = append(f, fmt.Sprintf("loses %.0f%%", 100*r.loss))
		}
		if r.delay > 0 {
			f = append(f, "delays "+r.delay.String())
		}
		if len(f) > 0 {
			parts = append(parts, name+" "+strings.Join(f, ", "))
		}
	}
	if len(parts) == 0 {
		return "healed"
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
