package secure

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pollux/cluster/pki"
)

// connsPerSource bounds the connections one source that is not a member
// holds open on the ports where anybody may finish a TLS handshake (a
// handshake proves nothing there; a worker reports from its agent's own
// machine, a member).
var connsPerSource = map[pki.Channel]int{pki.ChannelAPI: 64, pki.ChannelReport: 32}

// Gate makes the pre-authentication gate of the process's listener of
// ch: the defaults of pki.NewGate, the members Members holds (and, if
// extra is set, the addresses it tells: a federation's peer servers for
// the federation port), and on the API and report ports a cap on the
// connections per source. Collector exports its counters.
func (s *Security) Gate(ch pki.Channel, log *slog.Logger, extra func(netip.Addr) bool) *pki.Gate {
	member := s.Members.Contains
	if extra != nil {
		member = func(a netip.Addr) bool { return s.Members.Contains(a) || extra(a) }
	}
	g := pki.NewGate(pki.GateOptions{Channel: ch, Logger: log, Member: member, ConnsPerSource: connsPerSource[ch]})
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	return g
}

// LocalGate is the gate of a listener of ch in a process whose peers
// all run on this machine (a benchmark's servers and nodes): this
// machine's addresses are the members, as TrackMembers makes them for
// a server or agent, so that hundreds of peers on one loopback address
// get the members' room rather than one source's share of handshakes.
func LocalGate(ch pki.Channel, log *slog.Logger) *pki.Gate {
	s := &Security{}
	var addrs []netip.Addr
	for _, a := range LocalAddrs() {
		if ip, err := netip.ParseAddr(a); err == nil {
			addrs = append(addrs, ip)
		}
	}
	s.Members.Set(addrs)
	return s.Gate(ch, log, nil)
}

// Gates are the gates made so far.
func (s *Security) Gates() []*pki.Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*pki.Gate(nil), s.gates...)
}

// TrackMembers keeps Members the addresses sources name (host or
// host:port: the Raft configuration's servers, the gossip members) and
// those of this machine's interfaces, read now and every `every` until
// ctx ends.
func (s *Security) TrackMembers(ctx context.Context, every time.Duration, sources ...func() []string) {
	Track(ctx, &s.Members, every, append(sources, LocalAddrs)...)
}

// Track keeps set the addresses sources name (host or host:port; a host
// name is resolved, at most once a minute), read now and every `every`
// until ctx ends.
func Track(ctx context.Context, set *pki.AddrSet, every time.Duration, sources ...func() []string) {
	r := &resolver{cache: map[string]resolved{}}
	refresh := func() {
		var addrs []netip.Addr
		for _, src := range sources {
			for _, h := range src() {
				addrs = append(addrs, r.lookup(ctx, h)...)
			}
		}
		set.Set(addrs)
	}
	refresh()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				refresh()
			}
		}
	}()
}

// LocalAddrs are the addresses of this machine's interfaces (workers
// report to their agent from one of them).
func LocalAddrs() []string {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().String())
		}
	}
	return out
}

// resolver turns host or host:port into addresses, caching names.
type resolver struct {
	cache map[string]resolved
}

type resolved struct {
	addrs []netip.Addr
	at    time.Time
}

func (r *resolver) lookup(ctx context.Context, hostport string) []netip.Addr {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}
	}
	if c, ok := r.cache[host]; ok && time.Since(c.at) < time.Minute {
		return c.addrs
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	addrs, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	r.cache[host] = resolved{addrs: addrs, at: time.Now()}
	return addrs
}

// Collector exports the counters of the process's gates:
// pollux_preauth_refused_total{channel,reason}, the connections each
// listener closed before authenticating them (past a cap, or a failed
// handshake), and pollux_tls_handshakes_in_progress{channel,peer}
// (peer: member or other).
func (s *Security) Collector() prometheus.Collector { return gateCollector{s} }

type gateCollector struct{ s *Security }

var (
	descRefused = prometheus.NewDesc("pollux_preauth_refused_total",
		"Connections a TLS listener closed before authenticating them: past a cap (per_source, total, members, conns_per_source) or a failed handshake (handshake).",
		[]string{"channel", "reason"}, nil)
	descHandshakes = prometheus.NewDesc("pollux_tls_handshakes_in_progress",
		"TLS handshakes in progress, of the cluster's members and of everybody else.", []string{"channel", "peer"}, nil)
)

func (c gateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRefused
	ch <- descHandshakes
}

func (c gateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.s.Gates() {
		st := g.Stats()
		chn := string(st.Channel)
		for _, r := range pki.Reasons {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused[r]), chn, r)
		}
		ch <- prometheus.MustNewConstMetric(descHandshakes, prometheus.GaugeValue, float64(st.MemberHandshakes), chn, "member")
		ch <- prometheus.MustNewConstMetric(descHandshakes, prometheus.GaugeValue, float64(st.OtherHandshakes), chn, "other")
	}
}
