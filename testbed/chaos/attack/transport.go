package attack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"pollux/testbed/launch"
)

// Payloads a prober sends once connected.
var (
	h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	httpGet   = []byte("GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	raftRPC   = append([]byte{1}, make([]byte, 64)...) // type byte 1: Raft RPC
	forward   = []byte{2, 0, 0, 0, 5, 1, 1, 4, 1, 7}   // type byte 2: one forwarded write
	report    = []byte(`{"job":"attack-victim","incarnation":1,"rank":0,"step_time":1,"local_bsz":1,"done":true}` + "\n")
)

// probe connects to addr (plaintext, or TLS showing cert: nil for none),
// writes payload and reads. It returns the local address (what the
// refusing process logs as the peer), whether the peer accepted (an
// answer, or a wait for more, over TLS) and what the client saw.
func (t *target) probe(addr string, cert *tls.Certificate, plain bool, payload []byte) (local string, accepted bool, saw string) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", false, "cannot connect: " + err.Error()
	}
	defer c.Close()
	local = c.LocalAddr().String()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var conn net.Conn = c
	if !plain {
		tc := tls.Client(c, t.tlsConfig(cert, "h2", "http/1.1"))
		if err := tc.Handshake(); err != nil {
			return local, false, "TLS handshake: " + err.Error()
		}
		conn = tc
	}
	if _, err := conn.Write(payload); err != nil {
		return local, false, "write: " + err.Error()
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	switch {
	case n > 0 && plain:
		// A plaintext answer: an HTTP 400 saying to use TLS, or a TLS
		// alert to a client that did not speak TLS.
		return local, false, fmt.Sprintf("answered %q", firstLine(buf[:n]))
	case n > 0:
		return local, true, fmt.Sprintf("answered %q", firstLine(buf[:n]))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return local, !plain, "waited for more"
	case errors.Is(err, io.EOF):
		return local, false, "connection closed by the peer"
	default:
		return local, false, "read: " + err.Error()
	}
}

func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return strings.ToValidUTF8(s, "?")
}

// refusedConn is an attack on one port: refused if the peer did not
// accept and logged a refusal naming the attacker's address.
func refusedConn(member func(*target) *launch.Member, addr func(*target) string, cert func(*target) *tls.Certificate,
	plain bool, payload []byte) func(context.Context, *target) (string, bool) {
	return func(_ context.Context, t *target) (string, bool) {
		var c *tls.Certificate
		if cert != nil {
			c = cert(t)
		}
		m := member(t)
		local, accepted, saw := t.probe(addr(t), c, plain, payload)
		if accepted {
			return "accepted: " + saw, false
		}
		if local == "" {
			return saw, false
		}
		line, ok := t.logLine(m, "peer="+local, "refused")
		if !ok {
			return fmt.Sprintf("client: %s; no log line of %s/%s names the peer %s", saw, m.Role, m.ID, local), false
		}
		return fmt.Sprintf("client: %s; %s/%s logged: %s", saw, m.Role, m.ID, logMsg(line)), true
	}
}

// logMsg is the interesting part of a log line: from msg= on, without
// the time and level.
func logMsg(line string) string {
	if i := strings.Index(line, "msg="); i >= 0 {
		line = line[i:]
	}
	if len(line) > 400 {
		line = line[:400] + "..."
	}
	return line
}

// Accessors of the attacked ports and the credentials shown.
func leader(t *target) *launch.Member { return t.leader }
func agent(t *target) *launch.Member  { return t.agent }
func raftAddr(t *target) string       { return t.leader.Raft }
func serverActor(t *target) string    { return t.leader.Actor }
func apiAddr(t *target) string        { return t.leader.HTTP }
func agentActor(t *target) string     { return t.agent.Actor }
func reportAddr(t *target) string     { return t.agent.Reports() }

func agentCert(t *target) *tls.Certificate      { return &t.certs.agent }
func otherAgentCert(t *target) *tls.Certificate { return &t.certs.otherAgent }
func clientCert(t *target) *tls.Certificate     { return &t.certs.client }
func selfSigned(t *target) *tls.Certificate     { return &t.certs.selfSigned }
func expired(t *target) *tls.Certificate        { return &t.certs.expired }
func otherCA(t *target) *tls.Certificate        { return &t.certs.otherCA }
func noCert(*target) *tls.Certificate           { return nil }
