package cpuset

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Sentinel errors.
var (
	// ErrSyntax: a list that is not in the cpu-list syntax.
	ErrSyntax = errors.New("cpuset: bad cpu list")
	// ErrNotAllowed: cores outside the process's affinity.
	ErrNotAllowed = errors.New("cpuset: cores not allowed")
)

// MaxCPU is the largest CPU id a list may name (the kernel's CPU sets
// hold 1024 CPUs).
const MaxCPU = 1023

// Parse reads a cpu-list ("0-3,6": ids and inclusive ranges separated by
// commas) into its sorted, distinct CPU ids. An empty list, an empty
// element, a range that runs backwards or an id above MaxCPU is an
// error wrapping ErrSyntax.
func Parse(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty", ErrSyntax)
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := id(lo, s)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = id(hi, s); err != nil {
				return nil, err
			}
			if last < first {
				return nil, fmt.Errorf("%w: %q: range %q runs backwards", ErrSyntax, s, part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// id reads one CPU id of list s.
func id(v, s string) (int, error) {
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("%w: %q: %q is not a CPU id", ErrSyntax, s, v)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > MaxCPU {
		return 0, fmt.Errorf("%w: %q: CPU %s above %d", ErrSyntax, s, v, MaxCPU)
	}
	return n, nil
}

// Format writes sorted, distinct CPU ids as a cpu-list, runs of three or
// more as ranges ("0-3,6").
func Format(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch {
		case j-i >= 2:
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		case j > i:
			fmt.Fprintf(&b, "%d,%d", cpus[i], cpus[j])
		default:
			b.WriteString(strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return b.String()
}

// Allowed lists the CPUs this process may run on (its affinity).
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpuset: reading the CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Within checks that every one of cpus is in allowed; the error, wrapping
// ErrNotAllowed, names those that are not.
func Within(cpus, allowed []int) error {
	var out []int
	for _, c := range cpus {
		if !slices.Contains(allowed, c) {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		return fmt.Errorf("%w: %s (this process may use %s)", ErrNotAllowed, Format(out), Format(allowed))
	}
	return nil
}

// Split shares cpus among n parts: contiguous runs as even as possible,
// or, with more parts than CPUs, one CPU per part round robin.
func Split(cpus []int, n int) [][]int {
	parts := make([][]int, n)
	for i := range parts {
		if n > len(cpus) {
			parts[i] = []int{cpus[i%len(cpus)]}
			continue
		}
		parts[i] = slices.Clone(cpus[i*len(cpus)/n : (i+1)*len(cpus)/n])
	}
	return parts
}
