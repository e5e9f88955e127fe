package builtin

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// ErrBadProfile is returned for a profile that cannot be simulated.
var ErrBadProfile = errors.New("builtin: bad profile")

// Profile is one parametric application.
type Profile struct {
	App    string         `json:"application"`
	Batch  goodput.Limits `json:"limits"`
	Epochs int            `json:"epochs"`
	// Params is the true throughput model.
	Params goodput.Params `json:"params"`
	// StepsPerEpoch is the progress (steps at M0, gain-scaled) of one epoch.
	StepsPerEpoch float64 `json:"steps_per_epoch"`
	// NoiseA and NoiseB give the pre-conditioned gradient noise scale
	// phi = exp(NoiseA + NoiseB*x) at training fraction x = epoch/Epochs.
	NoiseA float64 `json:"noise_a"`
	NoiseB float64 `json:"noise_b"`
}

// Validate reports whether the profile can be simulated.
func (p *Profile) Validate() error {
	if p.App == "" || p.Epochs < 1 || !(p.StepsPerEpoch > 0) || math.IsInf(p.StepsPerEpoch, 0) ||
		math.IsNaN(p.NoiseA) || math.IsInf(p.NoiseA, 0) || math.IsNaN(p.NoiseB) || math.IsInf(p.NoiseB, 0) {
		return fmt.Errorf("%w: %q: epochs %d, steps per epoch %v, noise (%v, %v)", ErrBadProfile, p.App, p.Epochs, p.StepsPerEpoch, p.NoiseA, p.NoiseB)
	}
	if err := p.Params.Validate(); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrBadProfile, p.App, err)
	}
	if err := p.Batch.Validate(); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrBadProfile, p.App, err)
	}
	return nil
}

var _ testbed.Application = (*Profile)(nil)

// Name implements testbed.Application.
func (p *Profile) Name() string { return p.App }

// Limits implements testbed.Application.
func (p *Profile) Limits() goodput.Limits { return p.Batch }

// MaxEpochs implements testbed.Application.
func (p *Profile) MaxEpochs() int { return p.Epochs }

// StepTimes implements testbed.Application from the throughput model.
func (p *Profile) StepTimes(placement []int, m float64) (step, sync float64) {
	n, k := 0, 0
	for _, c := range placement {
		if c > 0 {
			n++
			k += c
		}
	}
	if k == 0 {
		return 0, 0
	}
	step = p.Params.SyncTime(n, k, m)
	return step, math.Max(step-p.Params.AccumTime(m), 0)
}

// Noise is the pre-conditioned gradient noise scale during an epoch.
func (p *Profile) Noise(epoch int) float64 {
	x := float64(min(max(epoch, 0), p.Epochs-1)) / float64(p.Epochs)
	return math.Exp(p.NoiseA + p.NoiseB*x)
}

// GradStats implements testbed.Application: a unit gradient norm and the
// variance that gives the profile's noise scale at M0, at every batch.
func (p *Profile) GradStats(_ float64, epoch int) goodput.GradStats {
	return goodput.GradStats{GradSqr: 1, GradVar: p.Noise(epoch) / float64(p.Batch.InitBatch)}
}

// EpochEnd implements testbed.Application.
func (p *Profile) EpochEnd(e int) float64 {
	return float64(min(max(e, 0), p.Epochs)) * p.StepsPerEpoch
}

// Iterations implements testbed.Application: each epoch takes its progress
// divided by the gain of the batch in that epoch.
func (p *Profile) Iterations(batch float64, e int) float64 {
	it := 0.0
	for i := 0; i < min(e, p.Epochs); i++ {
		it += p.StepsPerEpoch / p.GradStats(batch, i).Gain(batch, float64(p.Batch.InitBatch))
	}
	return it
}

//go:embed profiles.json
var profilesJSON []byte

// Decode reads a JSON list of profiles.
func Decode(data []byte) (testbed.Catalog, error) {
	var ps []*Profile
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadProfile, err)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: no profiles", ErrBadProfile)
	}
	cat := testbed.Catalog{}
	for _, p := range ps {
		if p == nil {
			return nil, fmt.Errorf("%w: null profile", ErrBadProfile)
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := cat[p.App]; dup {
			return nil, fmt.Errorf("%w: %q listed twice", ErrBadProfile, p.App)
		}
		cat[p.App] = p
	}
	return cat, nil
}

// Catalog returns the built-in profiles.
func Catalog() (testbed.Catalog, error) { return Decode(profilesJSON) }

// Encode writes profiles as the JSON list Decode reads, sorted by name.
func Encode(ps []*Profile) ([]byte, error) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].App < ps[j].App })
	return json.MarshalIndent(ps, "", "  ")
}
