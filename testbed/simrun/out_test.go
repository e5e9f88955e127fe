package simrun

import (
	"math"
	"reflect"
	"testing"

	"pollux/testbed/sim"
)

// The per-application cross-rack terms average the jobs that fitted one,
// over every run, and leave out the jobs that never did.
func TestCrossRackFits(t *testing.T) {
	runs := []*sim.Result{
		{Jobs: []sim.JobResult{
			{App: "bert", FittedCrossRack: 0.4, TrueCrossRack: 0.5},
			{App: "bert", FittedCrossRack: 0, TrueCrossRack: 0.7},
			{App: "ncf", FittedCrossRack: 0.01, TrueCrossRack: 0.01},
		}},
		{Jobs: []sim.JobResult{{App: "bert", FittedCrossRack: 0.6, TrueCrossRack: 0.5}}},
	}
	got := crossRackFits(runs)
	want := map[string]crossRackFit{
		"bert": {Jobs: 2, FittedS: 0.5, TrueS: 0.5, MeanAbsErrS: 0.1},
		"ncf":  {Jobs: 1, FittedS: 0.01, TrueS: 0.01},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for app, w := range want {
		g := got[app]
		if g.Jobs != w.Jobs || math.Abs(g.FittedS-w.FittedS) > 1e-12 || math.Abs(g.TrueS-w.TrueS) > 1e-12 || math.Abs(g.MeanAbsErrS-w.MeanAbsErrS) > 1e-12 {
			t.Errorf("%s: %+v, want %+v", app, g, w)
		}
	}
	if got := crossRackFits(nil); !reflect.DeepEqual(got, map[string]crossRackFit{}) {
		t.Errorf("no runs: %+v", got)
	}
}
