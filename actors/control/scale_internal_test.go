package control

import (
	"testing"

	"pollux/cluster"
	"pollux/consensus"
)

// A node that also runs a control-plane server, by name or by address
// off loopback, is never drained; nodes on loopback are told apart by
// name only (every process of a test cluster shares 127.0.0.1).
func TestRunsServer(t *testing.T) {
	members := []cluster.Member{
		{Name: "s0", Addr: "10.0.0.1:7946", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "s1", Addr: "127.0.0.1:7947", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "auto-9", Addr: "10.0.0.9:7946", Meta: cluster.Meta{Role: cluster.RoleAgent}},
	}
	a := &allocator{cfg: Config{Members: func() []cluster.Member { return members }}}
	for _, tc := range []struct {
		node consensus.Node
		want bool
	}{
		{consensus.Node{ID: "s0", Addresses: []string{"10.0.0.7:8090"}}, true},
		{consensus.Node{ID: "auto-1", Addresses: []string{"10.0.0.1:8090", "10.0.0.1:9000"}}, true},
		{consensus.Node{ID: "auto-2", Addresses: []string{"127.0.0.1:8090"}}, false},
		{consensus.Node{ID: "auto-9", Addresses: []string{"10.0.0.9:8090"}}, false},
		{consensus.Node{ID: "auto-3", Addresses: []string{"not an address"}}, false},
	} {
		if got := a.runsServer(&tc.node); got != tc.want {
			t.Errorf("%s at %v: runs a server %v, want %v", tc.node.ID, tc.node.Addresses, got, tc.want)
		}
	}
}
