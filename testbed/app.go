package testbed

import (
	"sort"
	"strconv"
	"strings"

	"pollux/optimizer/goodput"
)

// Application is the ground truth of one model that simulated jobs train.
// Implementations are immutable and safe for concurrent use.
type Application interface {
	// Name is the application name workloads refer to (e.g. "cifar10").
	Name() string
	// Limits are the batch-size limits of a job of this application: M0,
	// the largest total batch and the range of the atomic batch.
	Limits() goodput.Limits
	// MaxEpochs is how many epochs a job trains for.
	MaxEpochs() int
	// StepTimes is the true time of one synchronised step and the part of
	// it spent synchronising, for replicas placed as counts per node
	// (normalised, see NormalizePlacement) and atomic batch m.
	StepTimes(placement []int, m float64) (step, sync float64)
	// GradStats are the true gradient statistics during epoch epoch
	// (counting from 0) when training at total batch batch.
	GradStats(batch float64, epoch int) goodput.GradStats
	// EpochEnd is the progress (in steps at M0 scaled by gain) at which
	// epoch e (counting from 1) ends; EpochEnd(0) is 0.
	EpochEnd(e int) float64
	// Iterations is how many iterations a job training at the fixed total
	// batch batch has run once it has finished e epochs (counting from 1).
	// It is the oracle the Optimus baseline is given.
	Iterations(batch float64, e int) float64
}

// Catalog maps application names to applications.
type Catalog map[string]Application

// Names returns the catalog's application names, sorted.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TypedCatalog maps GPU types to the applications profiled on them. The
// type "" is the untyped (single-type) cluster of the Pollux artifact.
type TypedCatalog map[string]Catalog

// ProfiledNodes is, per GPU type, the most nodes its applications'
// traces span (those that are TypeProfiles).
func (c TypedCatalog) ProfiledNodes() map[string]int {
	out := map[string]int{}
	for t, cat := range c {
		for _, app := range cat {
			if tp, ok := app.(TypeProfile); ok {
				out[t] = max(out[t], tp.ProfiledNodes())
			}
		}
	}
	return out
}

// PlacementLimits is implemented by applications whose largest atomic batch
// depends on the placement (the traces of Sia's artifact): a job's atomic
// batch is then bounded by the placement's largest measured one and, when
// placements of K replicas were measured, by their largest.
type PlacementLimits interface {
	MaxLocalFor(placement []int) int
	MemoryCap(k int) (int, bool)
}

// TypeProfile is implemented by applications measured on one GPU type: the
// type, how many nodes it was profiled on, and the one-GPU throughput that
// lets a scheduler project a job's model to a type it has not run on.
type TypeProfile interface {
	Type() string
	ProfiledNodes() int
	OneGPUThroughput() float64
}

// NormalizePlacement drops zero counts and rotates the per-node counts to
// their lexicographically smallest rotation, so that placements that differ
// only in which nodes they use compare equal. It returns a new slice.
func NormalizePlacement(p []int) []int {
	nz := make([]int, 0, len(p))
	for _, c := range p {
		if c > 0 {
			nz = append(nz, c)
		}
	}
	n := len(nz)
	best := 0
	for r := 1; r < n; r++ {
		for i := 0; i < n; i++ {
			a, b := nz[(r+i)%n], nz[(best+i)%n]
			if a != b {
				if a < b {
					best = r
				}
				break
			}
		}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = nz[(best+i)%n]
	}
	return out
}

// PlacementKey is a compact, unambiguous string form of a normalised
// placement: the counts joined by '.', e.g. "1.3.3".
func PlacementKey(p []int) string {
	var b strings.Builder
	for i, c := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strconv.Itoa(c))
	}
	return b.String()
}

// Replicas is the total count of a placement.
func Replicas(p []int) int {
	k := 0
	for _, c := range p {
		k += c
	}
	return k
}
