package optimizer_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pollux/optimizer"
)

// TestLookup builds every registered policy, with and without autoscaling
// settings, and checks its name, its optional interfaces and the errors.
func TestLookup(t *testing.T) {
	flat := &optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 8}
	typed := &optimizer.Autoscale{Template: optimizer.Node{GPUs: 4, Type: "a100"}, MinNodes: 1, MaxNodes: 8}
	bad := &optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 9, MaxNodes: 8}
	for _, c := range []struct {
		name     string
		o        optimizer.Options
		want     string // the policy's Name, "" when Lookup fails
		err      error
		aware    bool
		budgeted bool
	}{
		{name: "pollux", want: "pollux", budgeted: true},
		{name: "pollux", o: optimizer.Options{Autoscale: flat}, want: "pollux-autoscale"},
		{name: "pollux", o: optimizer.Options{Autoscale: bad}, err: optimizer.ErrBadAutoscale},
		{name: "pollux-het", want: "pollux-het", aware: true},
		{name: "pollux-het", o: optimizer.Options{Autoscale: typed}, want: "pollux-het-autoscale"},
		{name: "pollux-het", o: optimizer.Options{Autoscale: flat}, err: optimizer.ErrBadAutoscale},
		{name: "pollux-unaware", want: "pollux-unaware", aware: true},
		{name: "pollux-unaware", o: optimizer.Options{Autoscale: flat}, err: optimizer.ErrBadAutoscale},
		{name: "sia", want: "sia", aware: true},
		{name: "sia", o: optimizer.Options{Autoscale: typed}, err: optimizer.ErrBadAutoscale},
		{name: "tiresias", want: "tiresias"},
		{name: "optimus", want: "optimus"},
		{name: "optimus", o: optimizer.Options{Autoscale: flat}, err: optimizer.ErrBadAutoscale},
		{name: "throughput-autoscale", err: optimizer.ErrBadAutoscale},
		{name: "throughput-autoscale", o: optimizer.Options{Autoscale: bad}, err: optimizer.ErrBadAutoscale},
		{name: "throughput-autoscale", o: optimizer.Options{Autoscale: flat}, want: "throughput-autoscale"},
		{name: "fifo", err: optimizer.ErrUnknownPolicy},
		{name: "", err: optimizer.ErrUnknownPolicy},
		{name: "Pollux", err: optimizer.ErrUnknownPolicy},
	} {
		t.Run(fmt.Sprintf("%s/%s", c.name, c.want), func(t *testing.T) {
			p, err := optimizer.Lookup(c.name, c.o)
			if c.err != nil {
				if !errors.Is(err, c.err) || p != nil {
					t.Fatalf("Lookup(%q) = %v, %v; want %v", c.name, p, err, c.err)
				}
				if !strings.HasPrefix(err.Error(), "optimizer: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%q): %v", c.name, err)
			}
			if p.Name() != c.want {
				t.Errorf("Lookup(%q).Name() = %q, want %q", c.name, p.Name(), c.want)
			}
			if _, ok := p.(optimizer.TypeAware); ok != c.aware {
				t.Errorf("%s is TypeAware: %v, want %v", c.want, ok, c.aware)
			}
			if _, ok := p.(optimizer.Budgeted); ok != c.budgeted {
				t.Errorf("%s is Budgeted: %v, want %v", c.want, ok, c.budgeted)
			}
		})
	}
}

// TestLookupOptions checks that every option reaches the policies that
// have the setting, and that without it each keeps its own default.
func TestLookupOptions(t *testing.T) {
	geo := 0.0
	profiled := map[string]int{"a100": 2}
	as := &optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MaxNodes: 4}
	o := optimizer.Options{PowerMean: &geo, Workers: 3, ProfiledNodes: profiled, Autoscale: nil, ScalingThreshold: 0.5}
	lookup := func(name string, o optimizer.Options) optimizer.Policy {
		t.Helper()
		p, err := optimizer.Lookup(name, o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := lookup("pollux", o).(*optimizer.Pollux); p.PowerMean != 0 || p.Workers != 3 || p.Cache == nil {
		t.Errorf("pollux: %+v", p)
	}
	if p := lookup("pollux", optimizer.Options{}).(*optimizer.Pollux); !reflect.DeepEqual(p, optimizer.NewPollux()) {
		t.Errorf("pollux without options: %+v, want NewPollux's %+v", p, optimizer.NewPollux())
	}
	if p := lookup("pollux-unaware", o).(*optimizer.PolluxUnaware); p.Inner.PowerMean != 0 || p.Inner.Workers != 3 {
		t.Errorf("pollux-unaware: %+v", p.Inner)
	}
	if p := lookup("pollux-het", o).(*optimizer.HetPollux); p.PowerMean != 0 {
		t.Errorf("pollux-het: exponent %v, want 0", p.PowerMean)
	}
	if p := lookup("pollux-het", optimizer.Options{}).(*optimizer.HetPollux); !reflect.DeepEqual(p, optimizer.NewHetPollux()) {
		t.Errorf("pollux-het without options: %+v, want NewHetPollux's", p)
	}
	if p := lookup("sia", o).(*optimizer.Sia); !reflect.DeepEqual(p.ProfiledNodes, profiled) || p.PowerMean != optimizer.SiaPowerMean {
		t.Errorf("sia: %+v", p)
	}
	o.Autoscale = as
	if p := lookup("throughput-autoscale", o).(*optimizer.ThroughputAutoscale); p.Threshold != 0.5 || !reflect.DeepEqual(p.Settings, *as) {
		t.Errorf("throughput-autoscale: %+v", p)
	}
	a := lookup("pollux", o).(*optimizer.Autoscaled)
	if px := a.Policy.(*optimizer.Pollux); px.PowerMean != 0 || px.Workers != 3 || !reflect.DeepEqual(a.Settings, *as) {
		t.Errorf("pollux-autoscale: %+v around %+v", a, px)
	}
}

// TestLookupUnknownNamesTheKnown: the error for an unknown name lists
// every name Lookup knows.
func TestLookupUnknownNamesTheKnown(t *testing.T) {
	_, err := optimizer.Lookup("fifo", optimizer.Options{})
	if err == nil {
		t.Fatal("Lookup(fifo) succeeded")
	}
	for _, name := range optimizer.Names() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%q does not name %s", err, name)
		}
	}
}

// TestNames: sorted, every name builds, and the caller owns the slice.
func TestNames(t *testing.T) {
	names := optimizer.Names()
	if len(names) < 7 || !slices.IsSorted(names) {
		t.Fatalf("Names() = %v, want at least 7 sorted", names)
	}
	for _, want := range []string{"optimus", "pollux", "pollux-het", "pollux-unaware", "sia", "throughput-autoscale", "tiresias"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() = %v lacks %s", names, want)
		}
	}
	as := &optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MaxNodes: 4}
	for _, name := range names {
		if _, err := optimizer.Lookup(name, optimizer.Options{}); err != nil {
			if _, err := optimizer.Lookup(name, optimizer.Options{Autoscale: as}); err != nil {
				t.Errorf("Lookup(%q): %v", name, err)
			}
		}
	}
	names[0] = "changed"
	if optimizer.Names()[0] == "changed" {
		t.Error("Names returns a slice shared between calls")
	}
}

// TestLookupAllocatesLikeTheConstructors: a policy from the registry
// allocates exactly as the one its constructor makes.
func TestLookupAllocatesLikeTheConstructors(t *testing.T) {
	snap, err := optimizer.Synthetic(32, 4, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	as := optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 12}
	for _, c := range []struct {
		name string
		o    optimizer.Options
		made optimizer.Policy
	}{
		{"pollux", optimizer.Options{}, optimizer.NewPollux()},
		{"pollux-het", optimizer.Options{}, optimizer.NewHetPollux()},
		{"pollux-unaware", optimizer.Options{}, optimizer.NewPolluxUnaware()},
		{"sia", optimizer.Options{}, optimizer.NewSia()},
		{"pollux", optimizer.Options{Autoscale: &as}, optimizer.NewAutoscaled(optimizer.NewPollux(), as)},
		{"throughput-autoscale", optimizer.Options{Autoscale: &as}, optimizer.NewThroughputAutoscale(as)},
	} {
		p, err := optimizer.Lookup(c.name, c.o)
		if err != nil {
			t.Fatal(err)
		}
		got, err1 := p.Allocate(snap, nil)
		want, err2 := c.made.Allocate(snap, nil)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v, %v", c.name, err1, err2)
		}
		got.State, want.State = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Lookup's policy allocated %+v, the constructor's %+v", p.Name(), got, want)
		}
	}
}
