package attack

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/cluster/pki"
	"pollux/testbed/launch"
)

// Flood sizes and bounds.
const (
	// floodConns is how many silent connections a flood opens to a port.
	floodConns = 600
	// floodSource is the flooder's address: a loopback address that is
	// none of the cluster's members (they run on 127.0.0.1).
	floodSource = "127.0.0.2"
	// memberWithin bounds how long a member's handshake (or, on the API,
	// a status request) may take while the flood holds its connections.
	memberWithin = time.Second
	// floodBound is the availability bound the flood cases state: a
	// leader change during one is allowed if the cluster serves again
	// within it.
	floodBound = 5 * time.Second
)

// floodPort names a port a flood aims at: the member that listens, its
// address, its channel and what a member (or a client, on the API) does
// there meanwhile.
type floodPort struct {
	member func(*target) *launch.Member
	addr   func(*target) string
	ch     pki.Channel
	check  func(context.Context, *target, string) error
}

// floodAttacks flood every TLS port of the cluster: the leader's API,
// Raft and actor ports, an agent's actor and report ports.
var floodAttacks = []attack{
	{name: "flood-api", bound: floodBound, run: flood(floodPort{leader, apiAddr, pki.ChannelAPI, apiStatus})},
	{name: "flood-raft", bound: floodBound, run: flood(floodPort{leader, raftAddr, pki.ChannelRaft, serverHandshake()})},
	{name: "flood-server-actor", bound: floodBound, run: flood(floodPort{leader, serverActor, pki.ChannelActor, serverHandshake("h2")})},
	{name: "flood-agent-actor", bound: floodBound, run: flood(floodPort{agent, agentActor, pki.ChannelActor, serverHandshake("h2")})},
	{name: "flood-reports", bound: floodBound, run: flood(floodPort{agent, reportAddr, pki.ChannelReport, workerHandshake})},
}

// flood opens floodConns silent TCP connections (no TLS, no credentials)
// from floodSource to the port. Refused if, while they are held, a
// member's handshake (a status request on the API) succeeds within
// memberWithin, and the refusing process counted the connections past
// its caps: a WARN line naming the flooder on its channel and, on a
// server, pollux_preauth_refused_total of the channel on its /metrics.
func flood(p floodPort) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		m, addr := p.member(t), p.addr(t)
		var before float64
		if m.HTTP != "" {
			var err error
			if before, err = t.refusedMetric(ctx, m, p.ch); err != nil {
				return "cannot read /metrics before the flood: " + err.Error(), false
			}
		}
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(floodSource)}}
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		var dialErrs int
		for range floodConns {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				dialErrs++
				continue
			}
			conns = append(conns, c)
		}
		begin := time.Now()
		if err := p.check(ctx, t, addr); err != nil {
			return fmt.Sprintf("with %d silent connections from %s held: %v", len(conns), floodSource, err), false
		}
		took := time.Since(begin)
		if took > memberWithin {
			return fmt.Sprintf("with %d silent connections from %s held a member waited %v (bound %v)", len(conns), floodSource,
				took.Round(time.Millisecond), memberWithin), false
		}
		line, ok := t.logLine(m, "refused connection", "channel="+string(p.ch), "peer="+floodSource+":")
		if !ok {
			return fmt.Sprintf("%s/%s logged no refusal of %s on %s", m.Role, m.ID, floodSource, p.ch), false
		}
		how := fmt.Sprintf("%d silent connections from %s (%d not even accepted); a member got through in %v; %s/%s logged: %s",
			len(conns), floodSource, dialErrs, took.Round(time.Millisecond), m.Role, m.ID, logMsg(line))
		if m.HTTP != "" {
			after, err := t.refusedMetric(ctx, m, p.ch)
			if err != nil {
				return how + "; cannot read /metrics after the flood: " + err.Error(), false
			}
			if after <= before {
				return how + fmt.Sprintf("; pollux_preauth_refused_total{channel=%q} stayed %v", p.ch, before), false
			}
			how += fmt.Sprintf("; pollux_preauth_refused_total{channel=%q} %v -> %v", p.ch, before, after)
		}
		return how, true
	}
}

// apiStatus asks for /v1/status over a new connection from 127.0.0.1.
func apiStatus(ctx context.Context, t *target, addr string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: memberWithin}, "tcp", addr, t.tlsConfig(nil, "http/1.1"))
	if err != nil {
		return fmt.Errorf("a client's handshake: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(memberWithin))
	req := "GET " + api.PathStatus + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + t.c.AdminToken() +
		"\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return fmt.Errorf("a client's status request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("a client's status request: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("a client's status request: %s", resp.Status)
	}
	return nil
}

// serverHandshake completes a TLS handshake from 127.0.0.1 with a
// certificate of one of the cluster's servers (a member).
func serverHandshake(protos ...string) func(context.Context, *target, string) error {
	return func(ctx context.Context, t *target, addr string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: memberWithin}, "tcp", addr, t.tlsConfig(&t.certs.server, protos...))
		if err != nil {
			return fmt.Errorf("a server's handshake: %w", err)
		}
		return c.Close()
	}
}

// workerHandshake completes a worker's TLS handshake on a report port.
func workerHandshake(ctx context.Context, t *target, addr string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: memberWithin}, "tcp", addr, pki.ReportClient(t.pool))
	if err != nil {
		return fmt.Errorf("a worker's handshake: %w", err)
	}
	return c.Close()
}

// refusedMetric sums pollux_preauth_refused_total of channel ch on m's
// /metrics.
func (t *target) refusedMetric(ctx context.Context, m *launch.Member, ch pki.Channel) (float64, error) {
	return refusedMetric(ctx, t.http, m, ch)
}

// refusedMetric sums pollux_preauth_refused_total of channel ch on m's
// /metrics, read with hc.
func refusedMetric(ctx context.Context, hc *http.Client, m *launch.Member, ch pki.Channel) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+m.HTTP+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "pollux_preauth_refused_total{") || !strings.Contains(line, `channel="`+string(ch)+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no pollux_preauth_refused_total{channel=%q} on %s's /metrics", ch, m.ID)
	}
	return sum, sc.Err()
}
