package secure

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pollux/cluster/pki"
	"pollux/internal/poll"
)

// TestTrackMembers: addresses, host:port pairs and names of the sources
// become members, and a source that changes is read again.
func TestTrackMembers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sec Security
	gossip := make(chan []string, 1)
	gossip <- []string{"10.0.0.7:7946", "", "[2001:db8::5]:1"}
	last := []string{}
	sec.TrackMembers(ctx, 10*time.Millisecond, func() []string { return []string{"10.0.0.1:7000", "localhost"} }, func() []string {
		select {
		case last = <-gossip:
		default:
		}
		return last
	})
	for _, a := range []string{"10.0.0.1", "10.0.0.7", "2001:db8::5", "127.0.0.1"} {
		if !sec.Members.Contains(netip.MustParseAddr(a)) {
			t.Errorf("%s is not a member", a)
		}
	}
	if sec.Members.Contains(netip.MustParseAddr("127.0.0.2")) {
		t.Error("127.0.0.2 is a member")
	}
	gossip <- []string{"10.0.0.8:1"}
	poll.Until(t, 5*time.Second, "the members to follow the source", func() bool {
		return sec.Members.Contains(netip.MustParseAddr("10.0.0.8")) && !sec.Members.Contains(netip.MustParseAddr("10.0.0.7"))
	})
}

// TestCollectorCountsRefusals: a refusal of a gate shows in the
// process's metrics under its channel and reason.
func TestCollectorCountsRefusals(t *testing.T) {
	var sec Security
	g := sec.Gate(pki.ChannelAPI, slog.New(slog.DiscardHandler), nil)
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}
	for range 64 + 1 {
		if tk, err := g.Admit(peer); err == nil {
			tk.Done() // handshake over, connection held
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sec.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if got["pollux_preauth_refused_total,api,conns_per_source"] != 1 || got["pollux_preauth_refused_total,api,per_source"] != 0 ||
		got["pollux_tls_handshakes_in_progress,api,other"] != 0 {
		t.Errorf("metrics %v", got)
	}
}

// TestLocalGateAdmitsLocalPeersAsMembers: a local gate gives peers on
// this machine's loopback address the members' room, more handshakes
// at once than one other source's share, and still caps others.
func TestLocalGateAdmitsLocalPeersAsMembers(t *testing.T) {
	g := LocalGate(pki.ChannelActor, slog.New(slog.DiscardHandler))
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	for i := range pki.DefaultPerSource * 4 {
		tk, err := g.Admit(local)
		if err != nil {
			t.Fatalf("local handshake %d refused: %v", i+1, err)
		}
		if !tk.Member() {
			t.Fatalf("local peer %d is not a member", i+1)
		}
	}
	other := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}
	refused := 0
	for range pki.DefaultPerSource + 1 {
		if _, err := g.Admit(other); err != nil {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d of %d handshakes of another source refused, want 1", refused, pki.DefaultPerSource+1)
	}
}
