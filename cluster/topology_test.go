package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseTopology(t *testing.T) {
	tests := []struct {
		in              string
		levels, domains []string
		err             string
	}{
		{in: "", levels: nil, domains: nil},
		{in: "rack=r3", levels: []string{"rack"}, domains: []string{"r3"}},
		{in: "rack=r3,zone=z1", levels: []string{"rack", "zone"}, domains: []string{"r3", "z1"}},
		{in: " rack=r3 , zone=z1 ", levels: []string{"rack", "zone"}, domains: []string{"r3", "z1"}},
		{in: "zone=z1,rack=r3", err: "must be \"rack\""},
		{in: "zone=z1", err: "must be \"rack\""},
		{in: "rack=r3,rack=r4", err: "listed twice"},
		{in: "rack", err: "not level=domain"},
		{in: "rack=", err: "domain name"},
		{in: "rack=R3", err: "lower-case"},
		{in: "rack=r3,,zone=z1", err: "not level=domain"},
	}
	for _, tt := range tests {
		levels, domains, err := ParseTopology(tt.in)
		if tt.err != "" {
			if !errors.Is(err, ErrBadMeta) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(levels, tt.levels) || !slices.Equal(domains, tt.domains) {
			t.Errorf("%q: %v %v %v", tt.in, levels, domains, err)
		}
		if tt.in != "" && FormatTopology(levels, domains) != strings.ReplaceAll(tt.in, " ", "") {
			t.Errorf("%q formats as %q", tt.in, FormatTopology(levels, domains))
		}
	}
}

func TestCheckTopology(t *testing.T) {
	zones := []string{"rack", "zone"}
	tests := []struct {
		in     string
		levels []string
		want   []string
		err    string
	}{
		{in: "", levels: zones, want: nil},
		{in: "rack=r1,zone=z1", levels: zones, want: []string{"r1", "z1"}},
		{in: "rack=r1", levels: nil, want: []string{"r1"}},
		{in: "rack=r1", levels: zones, err: `level "zone" missing`},
		{in: "rack=r1,zone=z1", levels: nil, err: `"zone" in "rack=r1,zone=z1" is not one of the cluster's levels (rack)`},
		{in: "rack=r1,block=b1", levels: zones, err: `not one of the cluster's levels (rack, zone)`},
	}
	for _, tt := range tests {
		got, err := CheckTopology(tt.in, tt.levels)
		if tt.err != "" {
			if !errors.Is(err, ErrBadMeta) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q on %v: error %v, want one containing %q", tt.in, tt.levels, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q on %v: %v %v", tt.in, tt.levels, got, err)
		}
	}
}
