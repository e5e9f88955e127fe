package topology

import (
	"fmt"
	"slices"
	"strings"
)

// RackLevel is the innermost topology level, the one every cluster has.
const RackLevel = "rack"

// DefaultDomain is the name a node's domain takes at a level it did not
// declare (in reports; in a node's domains it is the empty string).
const DefaultDomain = "default"

// MaxLevels bounds the topology levels a cluster may define.
const MaxLevels = 8

// OrRack is levels, or the rack alone when levels is empty.
func OrRack(levels []string) []string {
	if len(levels) == 0 {
		return []string{RackLevel}
	}
	return levels
}

// ParseLevels reads a cluster's topology levels, innermost first, as a
// comma-separated list ("rack,zone"). The first must be the rack; names
// are lower-case letters, digits and '-', each at most once. The empty
// string is the rack alone.
func ParseLevels(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return []string{RackLevel}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if err := CheckName("level", f); err != nil {
			return nil, err
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("%w: level %q listed twice in %q", ErrBadTopology, f, s)
		}
		out = append(out, f)
	}
	if out[0] != RackLevel {
		return nil, fmt.Errorf("%w: levels %q: the first (innermost) level must be %q", ErrBadTopology, s, RackLevel)
	}
	if len(out) > MaxLevels {
		return nil, fmt.Errorf("%w: %d levels, at most %d", ErrBadTopology, len(out), MaxLevels)
	}
	return out, nil
}

// ParseTopology reads a node's declared place in the topology,
// "rack=r3,zone=z1", against the cluster's levels (nil: the rack alone):
// every level named once, innermost first, in the cluster's order, none
// missing. The empty string is the default domain at every level (a node
// that declares nothing is in the default rack). It returns the domain at
// every level, innermost first.
func ParseTopology(s string, levels []string) ([]string, error) {
	levels = OrRack(levels)
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	fields := strings.Split(s, ",")
	out := make([]string, 0, len(levels))
	for i, f := range fields {
		key, val, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q in %q is not level=domain", ErrBadTopology, f, s)
		}
		if err := CheckName("level", key); err != nil {
			return nil, err
		}
		if err := CheckName("domain", val); err != nil {
			return nil, err
		}
		switch at := slices.Index(levels, key); {
		case at < 0:
			return nil, fmt.Errorf("%w: level %q in %q is not one of the cluster's levels (%s)", ErrBadTopology, key, s, strings.Join(levels, ", "))
		case at < i:
			return nil, fmt.Errorf("%w: level %q in %q is out of order or repeated: give %s in this order", ErrBadTopology, key, s, strings.Join(levels, ", "))
		case at > i:
			return nil, fmt.Errorf("%w: level %q missing from %q: give %s in this order", ErrBadTopology, levels[i], s, strings.Join(levels, ", "))
		}
		out = append(out, val)
	}
	if len(out) < len(levels) {
		return nil, fmt.Errorf("%w: level %q missing from %q: give %s in this order", ErrBadTopology, levels[len(out)], s, strings.Join(levels, ", "))
	}
	return out, nil
}

// FormatTopology is the inverse of ParseTopology ("" for the default
// domain everywhere); undeclared levels show as DefaultDomain.
func FormatTopology(topology []string, levels []string) string {
	if len(topology) == 0 {
		return ""
	}
	levels = OrRack(levels)
	parts := make([]string, len(levels))
	for i, l := range levels {
		d := DefaultDomain
		if i < len(topology) && topology[i] != "" {
			d = topology[i]
		}
		parts[i] = l + "=" + d
	}
	return strings.Join(parts, ",")
}

// CheckName reports whether s is a valid name of a topology level, a
// domain or a GPU type (what = "level", "domain", "GPU type"): 1 to 63
// lower-case letters, digits, '-', '_' and '.', starting with a letter or
// digit. The error wraps ErrBadTopology.
func CheckName(what, s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("%w: %s name %q must have 1 to 63 characters", ErrBadTopology, what, s)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("%w: %s name %q: use lower-case letters, digits, '-', '_' and '.', starting with a letter or digit", ErrBadTopology, what, s)
		}
	}
	return nil
}
