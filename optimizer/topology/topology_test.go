package topology_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pollux/optimizer/topology"
)

func TestParseLevels(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"", []string{"rack"}, false},
		{"rack", []string{"rack"}, false},
		{"rack,zone", []string{"rack", "zone"}, false},
		{" rack , block , zone ", []string{"rack", "block", "zone"}, false},
		{"zone,rack", nil, true},
		{"rack,rack", nil, true},
		{"rack,", nil, true},
		{"rack,Zone", nil, true},
		{"rack,a,b,c,d,e,f,g,h", nil, true},
	} {
		got, err := topology.ParseLevels(c.in)
		if (err != nil) != c.err || !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseLevels(%q) = %v, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, topology.ErrBadTopology) {
			t.Errorf("ParseLevels(%q): %v is not ErrBadTopology", c.in, err)
		}
	}
}

func TestParseTopology(t *testing.T) {
	two := []string{"rack", "zone"}
	for _, c := range []struct {
		in     string
		levels []string
		want   []string
		msg    string // part of the error, "" for none
	}{
		{"", two, nil, ""},
		{"rack=r3", nil, []string{"r3"}, ""},
		{"rack=r3,zone=z1", two, []string{"r3", "z1"}, ""},
		{" rack=r3 , zone=z1 ", two, []string{"r3", "z1"}, ""},
		{"rack=r3", two, nil, `level "zone" missing`},
		{"zone=z1", two, nil, `level "rack" missing`},
		{"zone=z1,rack=r3", two, nil, `level "rack" missing`},
		{"rack=r3,rack=r4", two, nil, "out of order or repeated"},
		{"rack=r3,zone=z1,zone=z2", two, nil, "out of order or repeated"},
		{"rack=r3,row=w", two, nil, `level "row" in "rack=r3,row=w" is not one of the cluster's levels`},
		{"rack", nil, nil, "is not level=domain"},
		{"rack=", nil, nil, "must have 1 to 63 characters"},
		{"rack=R3", nil, nil, "lower-case"},
		{"rack=r3,zone=z1", nil, nil, `level "zone"`},
	} {
		got, err := topology.ParseTopology(c.in, c.levels)
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("ParseTopology(%q, %v): %v", c.in, c.levels, err)
		case c.msg == "" && !reflect.DeepEqual(got, c.want):
			t.Errorf("ParseTopology(%q, %v) = %q, want %q", c.in, c.levels, got, c.want)
		case c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg) || !errors.Is(err, topology.ErrBadTopology)):
			t.Errorf("ParseTopology(%q, %v) = %q, %v; want an ErrBadTopology saying %q", c.in, c.levels, got, err, c.msg)
		}
		if err == nil && c.in != "" {
			if back := topology.FormatTopology(got, c.levels); back != strings.ReplaceAll(c.in, " ", "") {
				t.Errorf("FormatTopology(%q) = %q", got, back)
			}
		}
	}
}

func FuzzParseTopology(f *testing.F) {
	f.Add("rack=r3,zone=z1", "rack,zone")
	f.Add("zone=z1,rack=r3", "rack,zone")
	f.Add("rack=a=b", "rack")
	f.Add(",,,", "")
	f.Fuzz(func(t *testing.T, spec, levelSpec string) {
		levels, err := topology.ParseLevels(levelSpec)
		if err != nil {
			return
		}
		got, err := topology.ParseTopology(spec, levels)
		if err != nil {
			if !errors.Is(err, topology.ErrBadTopology) {
				t.Fatalf("error %v is not ErrBadTopology", err)
			}
			return
		}
		if got != nil && len(got) != len(levels) {
			t.Fatalf("%q on %v: %d domains", spec, levels, len(got))
		}
		again, err := topology.ParseTopology(topology.FormatTopology(got, levels), levels)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q: round trip gave %q, %v", spec, again, err)
		}
	})
}

func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"a100", true},
		{"rack-3.b_1", true},
		{"", false},
		{"A100", false},
		{"-rack", false},
		{"rack 3", false},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
	} {
		err := topology.CheckName("domain", c.in)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, topology.ErrBadTopology) {
			t.Errorf("CheckName(%q) = %v, want ok %v", c.in, err, c.ok)
		}
	}
}

func TestOrRack(t *testing.T) {
	if got := topology.OrRack(nil); !reflect.DeepEqual(got, []string{topology.RackLevel}) {
		t.Errorf("OrRack(nil) = %v", got)
	}
	if got := topology.OrRack([]string{"rack", "zone"}); len(got) != 2 {
		t.Errorf("OrRack(rack, zone) = %v", got)
	}
}

func ExampleParseTopology() {
	levels, _ := topology.ParseLevels("rack,zone")
	domains, err := topology.ParseTopology("rack=r3,zone=z1", levels)
	fmt.Println(domains, err)
	fmt.Println(topology.FormatTopology([]string{"r3"}, levels))
	_, err = topology.ParseTopology("zone=z1", levels)
	fmt.Println(err)
	// Output:
	// [r3 z1] <nil>
	// rack=r3,zone=default
	// optimizer: bad topology: level "rack" missing from "zone=z1": give rack, zone in this order
}
