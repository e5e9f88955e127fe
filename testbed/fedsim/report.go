package fedsim

import (
	"math"
	"sort"

	"pollux/testbed/sim"
)

// Report is the outcome of the three modes on the same workloads.
type Report struct {
	Modes   Modes   `json:"modes"`
	Targets Targets `json:"targets"`
	// Interval is the scheduling interval, in seconds.
	Interval float64 `json:"interval_s"`
}

// Modes holds one report per mode.
type Modes struct {
	Isolated  *ModeReport `json:"isolated"`
	Merged    *ModeReport `json:"merged"`
	Federated *ModeReport `json:"federated"`
}

// ModeReport is one mode's outcome, per lab.
type ModeReport struct {
	Labs map[string]*LabReport `json:"labs"`
	// MeanAvgJCT is the mean over labs of their average JCT, and AvgJCT
	// the average over every job, in seconds.
	MeanAvgJCT float64 `json:"mean_avg_jct"`
	AvgJCT     float64 `json:"avg_jct"`
	// Rounds counts scheduling rounds (summed over clusters).
	Rounds int `json:"rounds"`
	// Leases counts the lease commands the federation applied
	// (federated mode only).
	Leases *LeaseStats `json:"leases,omitempty"`
	// Refused lists the injected commands and orders the ledgers refused.
	Refused []Refusal `json:"refused,omitempty"`
	// Outages are the labs lost during the run (federated mode only).
	Outages []OutageReport `json:"outages,omitempty"`
}

// OutageReport is what a lab's loss did to the federation.
type OutageReport struct {
	Lab string `json:"lab"`
	// LostAt and BackAt are the rounds the lab was lost and returned at.
	LostAt float64 `json:"lost_at"`
	BackAt float64 `json:"back_at"`
	// Leases counts the leases between the lab and its peers at its loss;
	// LastExpiry is how long after the loss the last of them left the
	// peers' ledgers (the peers' lenders stopped the lost lab's workers,
	// its borrowers lost its machines at once), and Outlived counts those
	// peers held longer than the time to live.
	Leases     int     `json:"leases"`
	LastExpiry float64 `json:"last_expiry_s"`
	Outlived   int     `json:"outlived"`
}

// LabReport is one lab's outcome in one mode.
type LabReport struct {
	GPUs int `json:"gpus"`
	Jobs int `json:"jobs"`
	// AvgJCT and P99JCT are over the lab's jobs, in seconds.
	AvgJCT float64 `json:"avg_jct"`
	P99JCT float64 `json:"p99_jct"`
	// WorstFTF is the largest finish-time fairness ratio of the lab's
	// jobs: JCT over the time alone on the job's share of the cluster it
	// ran in (the lab's own GPUs when isolated or federated, every GPU
	// when merged).
	WorstFTF       float64 `json:"worst_ftf"`
	RestartsPerJob float64 `json:"restarts_per_job"`
	// GPUHoursLent and GPUHoursBorrowed are leased GPUs times the time
	// they were leased; GPUHoursBorrowedUsed the part the borrower's jobs
	// held.
	GPUHoursLent         float64 `json:"gpu_hours_lent"`
	GPUHoursBorrowed     float64 `json:"gpu_hours_borrowed"`
	GPUHoursBorrowedUsed float64 `json:"gpu_hours_borrowed_used"`
	// Reclaims counts the nodes the lab took back from borrowers;
	// ReclaimP95 and ReclaimMax are the 95th percentile and largest time
	// from the reclaim decision until one of its own jobs ran (restart
	// done) on the node, in seconds; ReclaimsUnused counts reclaimed
	// nodes none of its jobs ran on before the node was lent again or the
	// run ended (not counted in the latencies).
	Reclaims       int     `json:"reclaims"`
	ReclaimP95     float64 `json:"reclaim_p95_s"`
	ReclaimMax     float64 `json:"reclaim_max_s"`
	ReclaimsUnused int     `json:"reclaims_unused"`
}

// LeaseStats count lease commands applied in both parties' ledgers:
// Reclaims are for the lender's own jobs, Rebalances move a lease to a
// borrower that gains more.
type LeaseStats struct {
	Grants     int `json:"grants"`
	Renewals   int `json:"renewals"`
	Reclaims   int `json:"reclaims"`
	Rebalances int `json:"rebalances"`
	Releases   int `json:"releases"`
	Expiries   int `json:"expiries"`
}

// Refusal is an injected command or order a ledger refused.
type Refusal struct {
	At    float64 `json:"at"`
	Lab   string  `json:"lab"`
	What  string  `json:"what"`
	Error string  `json:"error"`
}

// Targets compare the modes against the federation's goals.
type Targets struct {
	// FederatedOverMerged is the federated mean average JCT over the
	// merged one (goal: at most 1.10).
	FederatedOverMerged float64 `json:"federated_over_merged"`
	// LabsWorseThanIsolated are the labs whose average JCT is larger
	// federated than isolated (goal: none).
	LabsWorseThanIsolated []string `json:"labs_worse_than_isolated"`
	// ReclaimP95 is the largest per-lab reclaim p95, in seconds (goal: at
	// most one interval).
	ReclaimP95 float64 `json:"reclaim_p95_s"`
	// Met reports whether all three goals hold.
	Met bool `json:"met"`
}

// labReport summarises a lab's jobs.
func labReport(gpus int, jobs []sim.JobResult) *LabReport {
	m := sim.Summarize(jobs)
	return &LabReport{GPUs: gpus, Jobs: m.Jobs, AvgJCT: m.AvgJCT, P99JCT: m.P99JCT, WorstFTF: m.WorstFTF, RestartsPerJob: m.RestartsPerJob}
}

// finish fills a mode's means.
func (m *ModeReport) finish() {
	sum, jobs, jct := 0.0, 0, 0.0
	for _, l := range m.Labs {
		sum += l.AvgJCT
		jobs += l.Jobs
		jct += l.AvgJCT * float64(l.Jobs)
	}
	if n := len(m.Labs); n > 0 {
		m.MeanAvgJCT = sum / float64(n)
	}
	if jobs > 0 {
		m.AvgJCT = jct / float64(jobs)
	}
}

// targets compares the modes.
func (r *Report) targets() {
	t := Targets{LabsWorseThanIsolated: []string{}}
	iso, mer, fed := r.Modes.Isolated, r.Modes.Merged, r.Modes.Federated
	if mer.MeanAvgJCT > 0 {
		t.FederatedOverMerged = fed.MeanAvgJCT / mer.MeanAvgJCT
	}
	names := make([]string, 0, len(fed.Labs))
	for name := range fed.Labs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if fed.Labs[name].AvgJCT > iso.Labs[name].AvgJCT {
			t.LabsWorseThanIsolated = append(t.LabsWorseThanIsolated, name)
		}
		t.ReclaimP95 = math.Max(t.ReclaimP95, fed.Labs[name].ReclaimP95)
	}
	t.Met = t.FederatedOverMerged <= 1.10 && len(t.LabsWorseThanIsolated) == 0 && t.ReclaimP95 <= r.Interval
	r.Targets = t
}
