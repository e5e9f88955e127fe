package cluster

import (
	"fmt"
	"strings"

	"pollux/optimizer/topology"
)

// ParseTopology reads a member's declared place in the network, as
// `--topology rack=r3,zone=z1` gives it: level=domain pairs, innermost
// (the rack) first, each level once, names as topology.CheckName
// accepts. It returns the levels and the domains, innermost first (both
// nil for the empty string: the default rack). Whether the levels are
// the cluster's is checked when the member joins (CheckTopology).
func ParseTopology(s string) (levels, domains []string, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		key, _, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return nil, nil, fmt.Errorf("%w: topology %q: %q is not level=domain (e.g. rack=r3,zone=z1)", ErrBadMeta, s, f)
		}
		levels = append(levels, key)
	}
	if levels, err = topology.ParseLevels(strings.Join(levels, ",")); err != nil {
		return nil, nil, fmt.Errorf("%w: topology %q: %w", ErrBadMeta, s, err)
	}
	if domains, err = topology.ParseTopology(s, levels); err != nil {
		return nil, nil, fmt.Errorf("%w: topology %q: %w", ErrBadMeta, s, err)
	}
	return levels, domains, nil
}

// CheckTopology checks a member's declared topology against the cluster's
// levels (nil: the rack alone) and returns its domain at every level,
// innermost first (nil when it declared nothing: the default domains).
// A level missing, unknown or out of order is an error naming the levels
// to give.
func CheckTopology(declared string, levels []string) ([]string, error) {
	if _, _, err := ParseTopology(declared); err != nil {
		return nil, err
	}
	d, err := topology.ParseTopology(declared, levels)
	if err != nil {
		return nil, fmt.Errorf("%w: topology %q: %w", ErrBadMeta, declared, err)
	}
	return d, nil
}

// FormatTopology writes levels and domains as ParseTopology reads them.
func FormatTopology(levels, domains []string) string {
	parts := make([]string, 0, len(domains))
	for i, d := range domains {
		if i < len(levels) {
			parts = append(parts, levels[i]+"="+d)
		}
	}
	return strings.Join(parts, ",")
}
