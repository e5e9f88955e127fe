package sim

import (
	"math"
	"sort"
)

// Metrics summarise one run.
type Metrics struct {
	// AvgJCT and P99JCT are the mean and 99th percentile (linear
	// interpolation between order statistics) of job completion times, s.
	AvgJCT float64 `json:"avg_jct"`
	P99JCT float64 `json:"p99_jct"`
	// Makespan is from the first submission to the last completion, s.
	Makespan float64 `json:"makespan"`
	// RestartsPerJob is the mean number of reallocations after a job's
	// first start.
	RestartsPerJob float64 `json:"restarts_per_job"`
	// GPUHours is the GPU time allocated to jobs (restarts included).
	GPUHours float64 `json:"gpu_hours"`
	// WorstFTF is the largest finish-time fairness ratio over the jobs.
	WorstFTF float64 `json:"worst_ftf"`
	// UnfairFrac is the fraction of jobs whose finish-time fairness ratio
	// is above 1 (they finished later than alone on their share).
	UnfairFrac float64 `json:"unfair_frac"`
	// GPUHoursPerJob is the mean over jobs of the GPUs a job held times
	// the interval, summed over rounds (Sia's accounting: a job pays for
	// the whole interval it was allocated).
	GPUHoursPerJob float64 `json:"gpu_h_per_job"`
	// Contention is the mean over rounds of the jobs submitted and not
	// complete.
	Contention float64 `json:"contention"`
	// CrossRackGPUTimeFrac is the fraction of the allocated GPU time
	// (GPUs held x interval) spent on placements across racks.
	CrossRackGPUTimeFrac float64 `json:"cross_rack_gpu_time_frac"`
	// Jobs is how many jobs completed.
	Jobs int `json:"jobs"`
}

// Summarize computes the metrics of a set of job results.
func Summarize(jobs []JobResult) Metrics {
	var m Metrics
	if len(jobs) == 0 {
		return m
	}
	jcts := make([]float64, len(jobs))
	first, last := math.Inf(1), math.Inf(-1)
	allocated, cross := 0.0, 0.0
	for i, j := range jobs {
		allocated += j.AllocatedGPUSeconds
		cross += j.CrossRackGPUSeconds
		jcts[i] = j.JCT
		m.AvgJCT += j.JCT
		m.RestartsPerJob += float64(j.Restarts)
		m.GPUHours += j.GPUSeconds / 3600
		m.WorstFTF = math.Max(m.WorstFTF, j.FTF)
		if j.FTF > 1 {
			m.UnfairFrac++
		}
		m.GPUHoursPerJob += j.AllocatedGPUSeconds / 3600
		first = math.Min(first, j.Submit)
		last = math.Max(last, j.Completion)
	}
	n := float64(len(jobs))
	m.AvgJCT /= n
	m.RestartsPerJob /= n
	m.UnfairFrac /= n
	m.GPUHoursPerJob /= n
	m.Makespan = last - first
	m.P99JCT = Quantile(jcts, 0.99)
	m.Jobs = len(jobs)
	if allocated > 0 {
		m.CrossRackGPUTimeFrac = cross / allocated
	}
	return m
}

// meanActive is the mean over rounds of the active jobs.
func meanActive(timeline []Sample) float64 {
	if len(timeline) == 0 {
		return 0
	}
	sum := 0.0
	for _, sm := range timeline {
		sum += float64(sm.Active)
	}
	return sum / float64(len(timeline))
}

// Quantile is the q-quantile of xs with linear interpolation between the
// closest order statistics (xs is not modified).
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}
