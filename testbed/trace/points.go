package trace

import (
	"fmt"
	"path/filepath"

	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// Measured is one measured row of an application's throughput traces as a
// profile point, with the placement it was measured on.
type Measured struct {
	goodput.ProfilePoint
	// Placement names the placement the row was measured on: the
	// normalised per-node counts for placements.csv rows, and
	// "<N>x<K>" for scalability.csv rows (which give only N and K).
	Placement string
}

// LoadMeasured reads every row of dir/placements.csv and
// dir/scalability.csv as a profile point: accumulation time is step time
// minus sync time.
func LoadMeasured(dir string) ([]Measured, error) {
	var out []Measured
	path := filepath.Join(dir, "placements.csv")
	pt, err := readTable(path, []string{"placement", "local_bsz", "step_time", "sync_time"})
	if err != nil {
		return nil, err
	}
	for i, row := range pt.rows {
		counts, err := parsePlacement(row[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, pt.lines[i], err)
		}
		s, err := checkSample(row[1], row[2], row[3])
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, pt.lines[i], err)
		}
		norm := testbed.NormalizePlacement(counts)
		out = append(out, measured(len(norm), testbed.Replicas(norm), s, testbed.PlacementKey(norm)))
	}
	path = filepath.Join(dir, "scalability.csv")
	st, err := readTable(path, []string{"num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"})
	if err != nil {
		return nil, err
	}
	for i, row := range st.rows {
		n, k := int(row[0]), int(row[1])
		if float64(n) != row[0] || float64(k) != row[1] || n < 1 || k < n {
			return nil, fmt.Errorf("%w: %s:%d: %v replicas on %v nodes", ErrMalformed, path, st.lines[i], row[1], row[0])
		}
		s, err := checkSample(row[2], row[3], row[4])
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, st.lines[i], err)
		}
		out = append(out, measured(n, k, s, fmt.Sprintf("%dx%d", n, k)))
	}
	return out, nil
}

func measured(n, k int, s sample, placement string) Measured {
	return Measured{
		ProfilePoint: goodput.ProfilePoint{
			Nodes: n, Replicas: k, LocalBatch: int(s.m),
			AccumTime: s.step - s.sync, StepTime: s.step,
		},
		Placement: placement,
	}
}
