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

	"pollux/actors/node/workerproto"
	"pollux/cluster/pki"
	"pollux/testbed/launch"
)

// forgedReport sends one report line to an agent's report port over TLS
// (as any local process can: workers hold no certificate). build returns
// the report and the worker whose agent it goes to. Refused if the agent
// closes the connection and logs the refusal (naming the peer and
// mention); the observer checks the victim job did not change.
func forgedReport(build func(*target) (workerproto.Report, worker), mention string) func(context.Context, *target) (string, bool) {
	return func(_ context.Context, t *target) (string, bool) {
		r, via := build(t)
		line, err := workerproto.Encode(r)
		if err != nil {
			// Too long for the encoder: sent as is.
			b, jerr := rawReport(r)
			if jerr != nil {
				return "cannot encode the report: " + err.Error(), false
			}
			line = b
		}
		return t.sendReport(via.reportAddr, line, mention)
	}
}

// sendReport writes line to the report port addr and checks the agent
// closes the connection with a log line naming the peer and mention.
func (t *target) sendReport(addr string, line []byte, mention string) (string, bool) {
	m := t.agentAt(addr)
	if m == nil {
		return "no agent reports at " + addr, false
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, pki.ReportClient(t.pool))
	if err != nil {
		return "cannot connect over TLS: " + err.Error(), false
	}
	defer conn.Close()
	local := conn.LocalAddr().String()
	if _, err := conn.Write(line); err != nil {
		return "write: " + err.Error(), false
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "the agent kept the connection open", false
	}
	logged, ok := t.logLine(m, "peer="+local, mention)
	if !ok {
		return fmt.Sprintf("connection closed, but no log line of %s naming the peer %s and %q", m.ID, local, mention), false
	}
	return fmt.Sprintf("connection closed by the agent; %s/%s logged: %s", m.Role, m.ID, logMsg(logged)), true
}

// agentAt is the agent whose report listener is addr.
func (t *target) agentAt(addr string) *launch.Member {
	for _, a := range t.c.Agents {
		if a.Reports() == addr {
			return a
		}
	}
	return nil
}

// rawReport is r's JSON line without the encoder's checks.
func rawReport(r workerproto.Report) ([]byte, error) {
	return fmt.Appendf(nil, `{"job":%q,"incarnation":%d,"rank":%d,"step_time":1,"local_bsz":1,"token":%q}`+"\n",
		r.Job, r.Incarnation, r.Rank, r.Token), nil
}

// victimReport is a report of the victim's incarnation from rank, done
// or not, carrying token, sent to via's agent.
func victimReport(rank int, done bool, token func(*target) string, via int) func(*target) (workerproto.Report, worker) {
	return func(t *target) (workerproto.Report, worker) {
		w := t.victim[via]
		return workerproto.Report{Job: w.job, Incarnation: w.inc, Rank: rank, StepTime: 0.1, LocalBatch: 1, Done: done,
			Token: token(t)}, w
	}
}

func noToken(*target) string      { return "" }
func rank1Token(t *target) string { return t.victim[1].token }
func madeUpToken(*target) string  { return strings.Repeat("A", 43) }
func longToken(*target) string    { return strings.Repeat("x", 5000) }
func nextIncReport(t *target) (workerproto.Report, worker) {
	w := t.victim[0]
	return workerproto.Report{Job: w.job, Incarnation: w.inc + 1, Rank: 0, StepTime: 0.1, LocalBatch: 1, Done: true, Token: w.token}, w
}
func unknownJobReport(t *target) (workerproto.Report, worker) {
	w := t.victim[0]
	return workerproto.Report{Job: "no-such-job", Incarnation: w.inc, Rank: 0, StepTime: 0.1, LocalBatch: 1, Done: true, Token: w.token}, w
}
