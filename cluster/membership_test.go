package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"pollux/internal/poll"
	"slices"
	"strconv"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, name string, meta Meta) *Membership {
	t.Helper()
	m, err := Start(Config{Name: name, Meta: meta, Fast: true, Logger: quiet()})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// waitEvent returns the next event of m matching kind and peer, failing
// after the deadline.
func waitEvent(t *testing.T, m *Membership, kind EventKind, peer string, within time.Duration) Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("%s: events closed while waiting for %s of %s", m.name, kind, peer)
			}
			if ev.Kind == kind && ev.Member.Name == peer {
				return ev
			}
		case <-deadline:
			t.Fatalf("%s: no %s event of %s within %v", m.name, kind, peer, within)
		}
	}
}

func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

func TestJoinCarriesMeta(t *testing.T) {
	srv := start(t, "s1", Meta{Role: RoleServer, ActorAddr: "127.0.0.1:9001", RaftAddr: "127.0.0.1:9002", HTTPAddr: "127.0.0.1:9003"})
	a1 := start(t, "a1", Meta{Role: RoleAgent, Rack: "r1", GPUs: 4, ActorAddr: "127.0.0.1:9101"})
	a2 := start(t, "a2", Meta{Role: RoleAgent, Rack: "r2", GPUs: 8, ActorAddr: "127.0.0.1:9201"})
	for _, a := range []*Membership{a1, a2} {
		if n, err := a.Join([]string{srv.Addr()}); err != nil || n != 1 {
			t.Fatalf("Join = %d, %v", n, err)
		}
	}
	ev := waitEvent(t, srv, EventJoin, "a2", 2*time.Second)
	if ev.Member.Meta.GPUs != 8 || ev.Member.Meta.Rack != "r2" || ev.Member.Meta.Role != RoleAgent {
		t.Errorf("join event carries %+v", ev.Member.Meta)
	}
	// a1 learns of a2 through gossip, not directly.
	waitEvent(t, a1, EventJoin, "a2", 2*time.Second)
	if got := names(a1.Members()); !slices.Equal(got, []string{"a1", "a2", "s1"}) {
		t.Errorf("a1 sees members %v", got)
	}
	if l := srv.Local(); l.Meta.RaftAddr != "127.0.0.1:9002" || l.Name != "s1" {
		t.Errorf("Local = %+v", l)
	}

	if err := a1.UpdateMeta(Meta{Role: RoleAgent, Rack: "r1", GPUs: 3, ActorAddr: "127.0.0.1:9101"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, srv, EventUpdate, "a1", 2*time.Second); ev.Member.Meta.GPUs != 3 {
		t.Errorf("update event carries %+v", ev.Member.Meta)
	}
}

func TestLeaveAndCrashAreNoticed(t *testing.T) {
	srv := start(t, "s1", Meta{Role: RoleServer})
	leaver := start(t, "leaver", Meta{Role: RoleAgent, GPUs: 1})
	crasher := start(t, "crasher", Meta{Role: RoleAgent, GPUs: 1})
	for _, m := range []*Membership{leaver, crasher} {
		if _, err := m.Join([]string{srv.Addr()}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, srv, EventJoin, m.name, 2*time.Second)
	}

	begin := time.Now()
	if err := leaver.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	leaver.Shutdown()
	waitEvent(t, srv, EventLeave, "leaver", time.Second)
	t.Logf("graceful leave noticed after %v", time.Since(begin))

	begin = time.Now()
	crasher.Shutdown() // no goodbye: must be detected by probing
	waitEvent(t, srv, EventLeave, "crasher", 3*time.Second)
	t.Logf("crash noticed after %v", time.Since(begin))
	if got := names(srv.Members()); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("members after departures: %v", got)
	}
}

func TestEventsNeverBlockGossip(t *testing.T) {
	// Nobody reads srv's events while many members join: gossip must go
	// on, and every event must still be there afterwards.
	srv := start(t, "s1", Meta{Role: RoleServer})
	const n = 6
	for i := range n {
		m := start(t, fmt.Sprintf("a%d", i), Meta{Role: RoleAgent, GPUs: 1})
		if _, err := m.Join([]string{srv.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Wait(3*time.Second, func() bool { return len(srv.Members()) >= n+1 })
	if got := len(srv.Members()); got != n+1 {
		t.Fatalf("srv sees %d members, want %d", got, n+1)
	}
	// The join events come in any order: collect them all.
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("a%d", i)] = true
	}
	deadline := time.After(2 * time.Second)
	for len(want) > 0 {
		select {
		case ev, ok := <-srv.Events():
			if !ok {
				t.Fatal("events closed while join events were missing")
			}
			if ev.Kind == EventJoin {
				delete(want, ev.Member.Name)
			}
		case <-deadline:
			t.Fatalf("no join event of %v within 2s", slices.Sorted(maps.Keys(want)))
		}
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	if _, err := Start(Config{Meta: Meta{Role: RoleServer}}); err == nil {
		t.Error("Start without a name succeeded")
	}
	if _, err := Start(Config{Name: "x", Meta: Meta{Role: "boss"}}); err == nil {
		t.Error("Start with a bad role succeeded")
	}
}

func TestShutdownClosesEvents(t *testing.T) {
	m := start(t, "solo", Meta{Role: RoleServer})
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-m.Events(); ok {
		t.Error("events still open after Shutdown")
	}
	m.Shutdown() // idempotent
}

// A member declared dead that comes back without joining anyone is found
// again by a member that keeps its seeds joined (as after a partition
// heals: each side has declared the other dead and gossip alone never
// looks again).
func TestKeepJoinedHealsAfterDeath(t *testing.T) {
	srv := start(t, "s1", Meta{Role: RoleServer})
	agent := start(t, "a1", Meta{Role: RoleAgent, GPUs: 1})
	if _, err := agent.Join([]string{srv.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, srv, EventJoin, "a1", 15*time.Second)
	addr := agent.Addr()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	agent.Shutdown() // a crash (or a partition), seen as a death
	waitEvent(t, srv, EventLeave, "a1", 15*time.Second)

	back, err := Start(Config{Name: "a1", BindPort: port, Meta: Meta{Role: RoleAgent, GPUs: 1}, Fast: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Shutdown() })
	// The window is the test (five probe intervals): nothing may bring
	// the dead member back unasked, and nothing reports that it did not.
	time.Sleep(time.Second)
	if got := names(srv.Members()); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("without a re-join the dead member should stay unseen: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.KeepJoined(ctx, []string{addr}, 100*time.Millisecond)
	waitEvent(t, srv, EventJoin, "a1", 15*time.Second)
	// The join's push-pull reaches the two members in either order.
	if !poll.Wait(15*time.Second, func() bool { return slices.Equal(names(back.Members()), []string{"a1", "s1"}) }) {
		t.Fatalf("the member that came back sees %v", names(back.Members()))
	}
}

// A metadata update reaches the other members, and reading the members
// while it is gossiped does not race with memberlist updating its nodes
// (go test -race).
func TestUpdateMetaWhileReading(t *testing.T) {
	srv := start(t, "s1", Meta{Role: RoleServer, ActorAddr: "127.0.0.1:9001"})
	a1 := start(t, "a1", Meta{Role: RoleAgent, GPUs: 4, ActorAddr: "127.0.0.1:9101"})
	if _, err := a1.Join([]string{srv.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, srv, EventJoin, "a1", 5*time.Second)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range append(srv.Members(), a1.Members()...) {
				_ = m.Meta.Levels + m.Addr
			}
		}
	}()
	if err := srv.UpdateMeta(Meta{Role: RoleServer, ActorAddr: "127.0.0.1:9001", Levels: "rack,zone"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !poll.Wait(5*time.Second, func() bool {
		i := slices.IndexFunc(a1.Members(), func(m Member) bool { return m.Name == "s1" })
		return i >= 0 && a1.Members()[i].Meta.Levels == "rack,zone"
	}) {
		t.Fatalf("a1 sees %+v", a1.Members())
	}
	if l := srv.Local(); l.Meta.Levels != "rack,zone" || l.Addr != srv.Addr() {
		t.Errorf("local %+v", l)
	}
	close(stop)
	<-done
	if got := names(srv.Members()); !slices.Equal(got, []string{"a1", "s1"}) {
		t.Errorf("members %v", got)
	}
}

// The federation's pool: WAN members with their own label and key see
// each other and notice one that dies (no leave); a member of a lab's
// own pool cannot join it.
func TestWANPool(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseKeys([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	wan := func(name string) *Membership {
		m, err := Start(Config{Name: name, Meta: Meta{Role: RoleServer, FederationAddr: "127.0.0.1:7400"}, WAN: true, Label: WANLabel, Keys: keys, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		return m
	}
	a, b := wan("lab-a/s0"), wan("lab-b/s0")
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, a, EventJoin, "lab-b/s0", 5*time.Second)
	if ev.Member.Meta.FederationAddr != "127.0.0.1:7400" {
		t.Errorf("join carries %+v", ev.Member.Meta)
	}
	lan := start(t, "s9", Meta{Role: RoleServer})
	if _, err := lan.Join([]string{a.Addr()}); err == nil {
		t.Error("a lab's own gossip member joined the federation's pool")
	}
	b.Shutdown()
	waitEvent(t, a, EventLeave, "lab-b/s0", 30*time.Second)
}

func TestProfiles(t *testing.T) {
	for _, tc := range []struct {
		name                string
		cfg                 Config
		probe, probeTimeout time.Duration
		compress            bool
		reclaim             time.Duration
	}{
		{"lan", Config{}, time.Second, 500 * time.Millisecond, true, 30 * time.Second},
		{"fast", Config{Fast: true}, 200 * time.Millisecond, 100 * time.Millisecond, true, time.Second},
		{"crowded", Config{Crowded: true}, 5 * time.Second, 3 * time.Second, false, 30 * time.Second},
		{"wan", Config{WAN: true}, 500 * time.Millisecond, 400 * time.Millisecond, true, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc := memberlistConfig(tc.cfg)
			if mc.ProbeInterval != tc.probe || mc.ProbeTimeout != tc.probeTimeout || mc.EnableCompression != tc.compress || mc.DeadNodeReclaimTime != tc.reclaim {
				t.Errorf("probe %v timeout %v compression %v reclaim %v, want %v %v %v %v", mc.ProbeInterval, mc.ProbeTimeout, mc.EnableCompression,
					mc.DeadNodeReclaimTime, tc.probe, tc.probeTimeout, tc.compress, tc.reclaim)
			}
			// Indirect probes need time left in the interval.
			if mc.ProbeTimeout >= mc.ProbeInterval {
				t.Errorf("probe timeout %v leaves no time in the interval %v", mc.ProbeTimeout, mc.ProbeInterval)
			}
		})
	}
}

// A crowded member (uncompressed packets) and a LAN one (compressed)
// share one encrypted pool.
func TestCrowdedJoinsLAN(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseKeys([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	member := func(name string, crowded bool) *Membership {
		m, err := Start(Config{Name: name, Meta: Meta{Role: RoleAgent, GPUs: 4}, Crowded: crowded, Keys: keys, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		return m
	}
	lan, crowded := member("s0", false), member("n0", true)
	if _, err := crowded.Join([]string{lan.Addr()}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, lan, EventJoin, "n0", 10*time.Second)
	if ev.Member.Meta.GPUs != 4 {
		t.Errorf("join carries %+v", ev.Member.Meta)
	}
	third := member("n1", true)
	if _, err := third.Join([]string{crowded.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, lan, EventJoin, "n1", 10*time.Second)
	if err := third.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, lan, EventLeave, "n1", 10*time.Second)
}
