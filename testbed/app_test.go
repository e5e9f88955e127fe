package testbed_test

import (
	"maps"
	"testing"

	"pollux/testbed"
)

// typedApp is an Application profiled on one GPU type over nodes nodes.
type typedApp struct {
	testbed.Application
	nodes int
}

func (a typedApp) Type() string              { return "t" }
func (a typedApp) ProfiledNodes() int        { return a.nodes }
func (a typedApp) OneGPUThroughput() float64 { return 1 }

func TestTypedCatalogProfiledNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cats testbed.TypedCatalog
		want map[string]int
	}{
		{"empty", testbed.TypedCatalog{}, map[string]int{}},
		{"untyped applications", testbed.TypedCatalog{"": {"a": nil}}, map[string]int{}},
		{"the most nodes per type", testbed.TypedCatalog{"aws": {"a": typedApp{nodes: 2}, "b": typedApp{nodes: 6}}, "rtx": {"a": typedApp{nodes: 3}}},
			map[string]int{"aws": 6, "rtx": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cats.ProfiledNodes(); !maps.Equal(got, tc.want) {
				t.Errorf("ProfiledNodes = %v, want %v", got, tc.want)
			}
		})
	}
}
