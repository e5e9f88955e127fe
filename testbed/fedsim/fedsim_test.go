package fedsim

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"pollux/cluster/federation"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/workload"
)

func load(t *testing.T, name string) *Federation {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	fed, err := Decode(data, name)
	if err != nil {
		t.Fatal(err)
	}
	return fed
}

func builtinCatalog(t *testing.T) testbed.Catalog {
	t.Helper()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// small is the report of testdata/small.json, made once.
var small struct {
	once sync.Once
	rep  *Report
}

func smallReport(t *testing.T) *Report {
	t.Helper()
	small.once.Do(func() { small.rep = run(t, load(t, "small.json")) })
	if small.rep == nil {
		t.Fatal("the small federation did not run")
	}
	return small.rep
}

func run(t *testing.T, fed *Federation) *Report {
	t.Helper()
	cat := builtinCatalog(t)
	wls, err := fed.Workloads("", "testdata", nil)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Catalog: cat, Seed: 1, Parallel: 2, NewPolicy: func(name string) (optimizer.Policy, error) {
		if name != "pollux" {
			return nil, errors.New("unknown policy " + name)
		}
		return optimizer.NewPollux(), nil
	}}
	rep, err := Run(context.Background(), fed, wls, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Two labs of 8 GPUs whose bursts follow each other: the federation lends
// the idle lab's nodes to the busy one and gives them back when the
// owner's jobs arrive. Checked from the reports only: every job completes
// in every mode, GPU time lent is GPU time borrowed, borrowers ran only on
// what they borrowed, both labs gain from the federation, the owner got
// its GPUs back within one interval, and the same input gives the same
// report.
func TestSmallFederation(t *testing.T) {
	fed := load(t, "small.json")
	rep := smallReport(t)
	for name, m := range map[string]*ModeReport{"isolated": rep.Modes.Isolated, "merged": rep.Modes.Merged, "federated": rep.Modes.Federated} {
		for _, lab := range []string{"lab-a", "lab-b"} {
			if l := m.Labs[lab]; l == nil || l.Jobs != 5 || !(l.AvgJCT > 0) {
				t.Fatalf("%s %s: %+v, want 5 completed jobs", name, lab, l)
			}
		}
	}
	f := rep.Modes.Federated
	a, b := f.Labs["lab-a"], f.Labs["lab-b"]
	if math.Abs(a.GPUHoursLent+b.GPUHoursLent-a.GPUHoursBorrowed-b.GPUHoursBorrowed) > 1e-9 {
		t.Fatalf("lent %v + %v GPU-h, borrowed %v + %v", a.GPUHoursLent, b.GPUHoursLent, a.GPUHoursBorrowed, b.GPUHoursBorrowed)
	}
	for _, l := range []*LabReport{a, b} {
		if l.GPUHoursBorrowedUsed > l.GPUHoursBorrowed+1e-9 {
			t.Fatalf("used %v of %v borrowed GPU-h", l.GPUHoursBorrowedUsed, l.GPUHoursBorrowed)
		}
	}
	if !(a.GPUHoursBorrowed > 0) || !(b.GPUHoursLent > 0) || f.Leases.Grants == 0 {
		t.Fatalf("lab-a borrowed %v GPU-h, lab-b lent %v, %d grants: the idle lab lent nothing", a.GPUHoursBorrowed, b.GPUHoursLent, f.Leases.Grants)
	}
	for _, lab := range []string{"lab-a", "lab-b"} {
		if f.Labs[lab].AvgJCT > rep.Modes.Isolated.Labs[lab].AvgJCT {
			t.Errorf("%s: average JCT %v federated, %v isolated", lab, f.Labs[lab].AvgJCT, rep.Modes.Isolated.Labs[lab].AvgJCT)
		}
	}
	if b.Reclaims == 0 || b.ReclaimsUnused != 0 || b.ReclaimMax > fed.Interval || b.ReclaimMax < fed.Restart {
		t.Fatalf("lab-b reclaims %d (unused %d), max %v s: want reclaims, each within one interval and no faster than a restart", b.Reclaims, b.ReclaimsUnused, b.ReclaimMax)
	}
	if rep.Targets.Met != (rep.Targets.FederatedOverMerged <= 1.1 && len(rep.Targets.LabsWorseThanIsolated) == 0 && rep.Targets.ReclaimP95 <= fed.Interval) {
		t.Fatalf("targets %+v", rep.Targets)
	}
	if again := run(t, load(t, "small.json")); !reflect.DeepEqual(again, rep) {
		t.Fatal("the same federation gave another report")
	}
}

// Injected bad commands and orders are refused with their errors and
// change nothing: the run's per-lab outcome is that of the same
// federation without them. (The standing lease of inject.json expires
// before the first allocation, and so changes nothing either.)
func TestInjectedRefusals(t *testing.T) {
	plain := smallReport(t)
	rep := run(t, load(t, "inject.json"))
	want := []struct {
		lab string
		err error
	}{
		{"lab-b", federation.ErrExpired},
		{"lab-a,lab-b", federation.ErrLendingLimit},
		{"lab-a,lab-b", federation.ErrNotOwner},
		{"lab-a,lab-b", federation.ErrUnknownPeer},
		{"lab-a", federation.ErrNotLeased},
	}
	got := rep.Modes.Federated.Refused
	if len(got) != len(want) {
		t.Fatalf("refused %+v, want %d refusals", got, len(want))
	}
	for i, w := range want {
		// The report keeps the error's text: its sentinel's text prefixes
		// the wrapped message.
		if got[i].Lab != w.lab || !strings.Contains(got[i].Error, strings.TrimPrefix(w.err.Error(), "federation: ")) {
			t.Errorf("refusal %d: %+v, want %s refusing with %v", i, got[i], w.lab, w.err)
		}
	}
	for _, lab := range []string{"lab-a", "lab-b"} {
		if !reflect.DeepEqual(rep.Modes.Federated.Labs[lab], plain.Modes.Federated.Labs[lab]) {
			t.Errorf("%s: %+v with refused injections, %+v without", lab, *rep.Modes.Federated.Labs[lab], *plain.Modes.Federated.Labs[lab])
		}
	}
	if e := rep.Modes.Federated.Leases.Expiries; e != 1 {
		t.Errorf("%d expiries, want the standing lease's", e)
	}
}

func TestExampleWorkloads(t *testing.T) {
	fed, err := Decode(Example(), "example")
	if err != nil {
		t.Fatal(err)
	}
	if len(fed.Labs) != 3 || fed.Labs[0].GPUs() != 16 || fed.Labs[1].GPUs() != 32 || fed.Labs[2].GPUs() != 16 {
		t.Fatalf("labs %+v, want 16, 32 and 16 GPUs", fed.Labs)
	}
	cat := builtinCatalog(t)
	check := func(app string) error {
		if _, ok := cat[app]; !ok {
			return workload.ErrUnknownApp
		}
		return nil
	}
	wls, err := fed.Workloads("", "", check)
	if err != nil {
		t.Fatal(err)
	}
	// Each lab's jobs arrive after the previous lab's first ones: the
	// busy periods follow each other.
	for i, want := range []int{40, 80, 40} {
		if n := len(wls[i].Jobs); n != want {
			t.Fatalf("lab %d: %d jobs, want %d", i, n, want)
		}
		first := wls[i].Jobs[0].Time
		if i > 0 && first < wls[i-1].Jobs[len(wls[i-1].Jobs)-1].Time {
			t.Errorf("lab %d starts at %v s, before lab %d's last arrival", i, first, i-1)
		}
		if !strings.HasPrefix(wls[i].Jobs[0].Name, fed.Labs[i].Name+"/") {
			t.Errorf("job %q not named after its lab", wls[i].Jobs[0].Name)
		}
	}
	dir := filepath.Join("..", "..", "..", "shared", "pollux-artifact", "workloads")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no artifact workloads at %s (../shared absent): the built-in workloads were checked", dir)
	}
	wls, err = fed.Workloads(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{40, 80, 40} {
		if n := len(wls[i].Jobs); n != want {
			t.Fatalf("artifact lab %d: %d jobs, want %d", i, n, want)
		}
	}
}

func TestWorkloadErrors(t *testing.T) {
	fed := load(t, "small.json")
	if _, err := fed.Workloads("", "", nil); !errors.Is(err, ErrWorkload) || !strings.Contains(err.Error(), "--workload") {
		t.Errorf("file without a directory: %v", err)
	}
	if _, err := fed.Workloads(t.TempDir(), "", nil); !errors.Is(err, ErrWorkload) || !strings.Contains(err.Error(), "small-a.csv") {
		t.Errorf("missing file: %v", err)
	}
	unknown := func(app string) error {
		if app == "ncf" {
			return workload.ErrUnknownApp
		}
		return nil
	}
	if _, err := fed.Workloads("", "testdata", unknown); !errors.Is(err, workload.ErrUnknownApp) {
		t.Errorf("unknown application: %v", err)
	}
}

// A lab lost while it borrows: its peers' ledgers drop its leases within
// the time to live, the other lab finishes every job no later on average
// than alone, and the lost lab's jobs all complete after it returns.
func TestLabLoss(t *testing.T) {
	fed := load(t, "outage.json")
	rep := run(t, fed)
	out := rep.Modes.Federated.Outages
	if len(out) != 1 {
		t.Fatalf("outages %+v", out)
	}
	o := out[0]
	if o.Lab != "lab-a" || o.LostAt != 300 || o.BackAt != 900 || o.Leases == 0 || o.Outlived != 0 || o.LastExpiry > fed.Terms.TTL || !(o.LastExpiry > 0) {
		t.Fatalf("outage %+v: want lab-a lost at 300 s and back at 900 s with leases, all dropped within %v s", o, fed.Terms.TTL)
	}
	f, iso := rep.Modes.Federated.Labs, rep.Modes.Isolated.Labs
	for _, lab := range []string{"lab-a", "lab-b"} {
		if f[lab].Jobs != 5 {
			t.Fatalf("%s completed %d of 5 jobs", lab, f[lab].Jobs)
		}
	}
	if f["lab-b"].AvgJCT > iso["lab-b"].AvgJCT {
		t.Errorf("lab-b: %v s federated with its peer lost, %v s alone", f["lab-b"].AvgJCT, iso["lab-b"].AvgJCT)
	}
	plain := smallReport(t)
	if f["lab-a"].AvgJCT <= plain.Modes.Federated.Labs["lab-a"].AvgJCT {
		t.Errorf("lab-a: %v s with a 600 s loss, %v s without", f["lab-a"].AvgJCT, plain.Modes.Federated.Labs["lab-a"].AvgJCT)
	}
}
