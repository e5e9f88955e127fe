package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Config is one fixed configuration a job of an application may be given
// (the tuned replica count and batch size the baselines use), with its
// relative frequency.
type Config struct {
	Replicas int     `json:"num_replicas"`
	Batch    int     `json:"batch_size"`
	Weight   float64 `json:"weight"`
}

// AppMix is one application's share of the generated jobs.
type AppMix struct {
	App     string   `json:"application"`
	Weight  float64  `json:"weight"`
	Configs []Config `json:"configs"`
}

// GenConfig parameterises the generator.
type GenConfig struct {
	// Jobs is how many jobs to submit.
	Jobs int `json:"jobs"`
	// Window is the submission window in seconds: arrivals follow a
	// Poisson process of rate Jobs/Window conditioned on Jobs arrivals.
	Window float64 `json:"window"`
	// Mix is the job mix.
	Mix []AppMix `json:"mix"`
}

// DefaultMix is the job mix of the artifact's eight workloads, counted over
// their 1280 rows (application and tuned configuration frequencies only; no
// row is reproduced): mostly small NCF and CIFAR-10 jobs, a few large
// ImageNet ones.
func DefaultMix() []AppMix {
	return []AppMix{
		{App: "ncf", Weight: 503, Configs: []Config{{1, 32768, 503}}},
		{App: "cifar10", Weight: 495, Configs: []Config{{6, 2048, 134}, {12, 4096, 133}, {8, 2048, 119}, {16, 4096, 109}}},
		{App: "deepspeech2", Weight: 111, Configs: []Config{{12, 640, 43}, {6, 320, 34}, {8, 320, 34}}},
		{App: "bert", Weight: 86, Configs: []Config{{16, 384, 25}, {6, 384, 23}, {12, 384, 20}, {8, 384, 18}}},
		{App: "yolov3", Weight: 59, Configs: []Config{{4, 64, 59}}},
		{App: "imagenet", Weight: 26, Configs: []Config{{24, 3200, 9}, {32, 6400, 9}, {48, 6400, 8}}},
	}
}

// DefaultGenConfig is the artifact's workload shape: 160 jobs over 8 hours.
func DefaultGenConfig() GenConfig {
	return GenConfig{Jobs: 160, Window: 8 * 3600, Mix: DefaultMix()}
}

// Validate reports whether the configuration can generate a workload.
func (c GenConfig) Validate() error {
	if c.Jobs < 1 || !(c.Window >= 0) || math.IsInf(c.Window, 0) || len(c.Mix) == 0 {
		return fmt.Errorf("%w: %d jobs over %v s with %d applications", ErrBadMix, c.Jobs, c.Window, len(c.Mix))
	}
	for _, m := range c.Mix {
		if !(m.Weight > 0) || len(m.Configs) == 0 {
			return fmt.Errorf("%w: application %q has weight %v and %d configurations", ErrBadMix, m.App, m.Weight, len(m.Configs))
		}
		for _, cf := range m.Configs {
			if cf.Replicas < 1 || cf.Batch < 1 || !(cf.Weight > 0) {
				return fmt.Errorf("%w: application %q configuration %+v", ErrBadMix, m.App, cf)
			}
		}
	}
	return nil
}

// Generate draws a workload named name. The same configuration and seed
// always give the same workload.
func Generate(c GenConfig, seed uint64, name string) (Workload, error) {
	if err := c.Validate(); err != nil {
		return Workload{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	times := make([]float64, c.Jobs)
	for i := range times {
		times[i] = math.Round(rng.Float64() * c.Window)
	}
	sort.Float64s(times)
	appW := make([]float64, len(c.Mix))
	for i, m := range c.Mix {
		appW[i] = m.Weight
	}
	wl := Workload{Name: name, Jobs: make([]Job, c.Jobs)}
	for i := range wl.Jobs {
		m := c.Mix[pick(rng, appW)]
		cfW := make([]float64, len(m.Configs))
		for j, cf := range m.Configs {
			cfW[j] = cf.Weight
		}
		cf := m.Configs[pick(rng, cfW)]
		wl.Jobs[i] = Job{
			Name:     fmt.Sprintf("%s-%d", m.App, i),
			Time:     times[i],
			App:      m.App,
			Replicas: cf.Replicas,
			Batch:    cf.Batch,
		}
	}
	return wl, nil
}

// pick draws an index with probability proportional to its weight.
func pick(rng *rand.Rand, w []float64) int {
	total := 0.0
	for _, x := range w {
		total += x
	}
	u := rng.Float64() * total
	for i, x := range w {
		if u < x {
			return i
		}
		u -= x
	}
	return len(w) - 1
}
