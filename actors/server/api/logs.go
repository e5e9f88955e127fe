package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/consensus/state"
)

// LogFetcher asks the agent whose actor address is addr for part of a
// worker's log (the server sends req to that agent's pb.LogsActor over
// the cluster's mutual-TLS actor channel).
type LogFetcher func(ctx context.Context, addr string, req *pb.LogRead) (*pb.LogChunk, error)

// LogLine is one line of a worker's log as GET PathJobs/{id}/logs
// streams it: one JSON object per line (application/x-ndjson).
// SkippedBytes, when set, counts the bytes before this line that the
// size cap rotated away; an object with Error set is the stream's last:
// the log could not be read on (its agent stopped answering).
type LogLine struct {
	Incarnation  uint64    `json:"incarnation"`
	Rank         int       `json:"rank"`
	Node         string    `json:"node,omitempty"`
	Time         time.Time `json:"time"`
	Line         string    `json:"line"`
	SkippedBytes int64     `json:"skipped_bytes,omitempty"`
	Error        string    `json:"error,omitempty"`
}

// LogQuery is the query of GET PathJobs/{id}/logs: the incarnation (0:
// the newest with a log, and, with Follow, the newer ones as they start),
// the rank (default 0), Follow (stream new lines until the worker exits;
// without an incarnation, until the job has finished) and Tail (start at
// the tail-th line from the end; 0: the oldest kept).
type LogQuery struct {
	Incarnation uint64
	Rank        int
	Follow      bool
	Tail        int
}

// Values encodes q as a URL query.
func (q LogQuery) Values() url.Values {
	v := url.Values{}
	if q.Incarnation > 0 {
		v.Set("incarnation", strconv.FormatUint(q.Incarnation, 10))
	}
	if q.Rank > 0 {
		v.Set("rank", strconv.Itoa(q.Rank))
	}
	if q.Follow {
		v.Set("follow", "true")
	}
	if q.Tail > 0 {
		v.Set("tail", strconv.Itoa(q.Tail))
	}
	return v
}

// ParseLogQuery decodes the query of GET PathJobs/{id}/logs, refusing
// unknown or repeated keys and bad values.
func ParseLogQuery(v url.Values) (LogQuery, error) {
	var q LogQuery
	for key, vals := range v {
		if len(vals) != 1 {
			return q, fmt.Errorf("api: query %q given %d times", key, len(vals))
		}
		s := vals[0]
		var err error
		switch key {
		case "incarnation":
			q.Incarnation, err = strconv.ParseUint(s, 10, 64)
			if err == nil && q.Incarnation == 0 {
				err = fmt.Errorf("incarnations start at 1")
			}
		case "rank":
			q.Rank, err = strconv.Atoi(s)
			if err == nil && (q.Rank < 0 || q.Rank > maxRank) {
				err = fmt.Errorf("want 0 to %d", maxRank)
			}
		case "follow":
			q.Follow, err = strconv.ParseBool(s)
		case "tail":
			q.Tail, err = strconv.Atoi(s)
			if err == nil && (q.Tail < 0 || q.Tail > workerlog.MaxTail) {
				err = fmt.Errorf("want 0 to %d", workerlog.MaxTail)
			}
		default:
			return q, fmt.Errorf("api: unknown query %q (want incarnation, rank, follow, tail)", key)
		}
		if err != nil {
			return q, fmt.Errorf("api: query %s=%.32q: %w", key, s, err)
		}
	}
	return q, nil
}

// maxRank bounds a rank in a query.
const maxRank = 1 << 20

// Log reading's pace and bounds.
const (
	logPoll       = 200 * time.Millisecond // follow: between reads that found nothing new
	logRediscover = time.Second            // follow: between searches for a log not yet found
	logAsk        = 3 * time.Second        // one request to an agent
	logFanOut     = 32                     // agents asked at once
	logWrite      = 30 * time.Second       // to write one chunk to the client
)

// logs streams a worker's log, read from the agent that ran it: the
// job's submitter or an admin only (read tokens are refused by the
// route's role).
func (a *API) logs(w http.ResponseWriter, r *http.Request) {
	id, p := r.PathValue("id"), principalOf(r)
	q, err := ParseLogQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{err.Error()})
		return
	}
	st, _, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	j := st.Jobs[id]
	if j == nil {
		writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: no job %q", id)})
		return
	}
	if p.role() != state.RoleAdmin && j.Submitter != p.accessor() {
		a.refuse(w, r, http.StatusForbidden, p, fmt.Sprintf("api: job %q is not yours: only its submitter or an admin reads its logs", id))
		return
	}
	if q.Incarnation > j.Incarnation {
		writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: job %q has not reached incarnation %d (its newest is %d)", id, q.Incarnation, j.Incarnation)})
		return
	}
	if a.cfg.Logs == nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{"api: this server cannot reach the agents' logs"})
		return
	}
	s := &logStream{a: a, w: w, rc: http.NewResponseController(w), job: id, q: q}
	s.run(r.Context())
}

// logStream is one answer of GET PathJobs/{id}/logs.
type logStream struct {
	a       *API
	w       http.ResponseWriter
	rc      *http.ResponseController
	job     string
	q       LogQuery
	started bool // the 200 and its headers are sent
}

// run finds the log, then reads it chunk by chunk (following it if
// asked) and writes its lines.
func (s *logStream) run(ctx context.Context) {
	var after uint64 // with Follow and no incarnation: the incarnation read last
	for {
		addr, c, code, msg := s.find(ctx, after)
		for code != 0 && s.q.Follow && s.jobLive() {
			// Not started yet (or its agent is not answering): wait.
			if !s.sleep(ctx, logRediscover) {
				return
			}
			addr, c, code, msg = s.find(ctx, after)
		}
		if code != 0 {
			if !s.started {
				writeJSON(s.w, code, Error{msg})
			}
			return
		}
		if !s.read(ctx, addr, c) {
			return
		}
		// The worker exited. Follow the job's next incarnation, unless
		// one was named or the job has finished.
		if !s.q.Follow || s.q.Incarnation != 0 || !s.jobLive() {
			return
		}
		after = c.Incarnation
	}
}

// jobLive says whether the job has not finished.
func (s *logStream) jobLive() bool {
	j, _ := s.a.cfg.Backend.LocalJob(s.job)
	return j != nil && !j.State.Terminal()
}

// sleep waits d or until ctx ends (false).
func (s *logStream) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// find asks every agent the state knows for the log (an incarnation
// newer than after, when after is set) and returns the first chunk of
// the one that has it. A failure is an HTTP status and why.
func (s *logStream) find(ctx context.Context, after uint64) (string, *pb.LogChunk, int, string) {
	st := s.a.cfg.Backend.LocalState()
	type answer struct {
		node, addr string
		c          *pb.LogChunk
		err        error
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		sem     = make(chan struct{}, logFanOut)
	)
	req := &pb.LogRead{Job: s.job, Incarnation: s.q.Incarnation, Rank: uint32(s.q.Rank), Tail: uint32(s.q.Tail)}
	if after > 0 {
		req.Tail = 0 // a next incarnation's log is read whole
	}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if len(n.Addresses) == 0 {
			continue
		}
		wg.Add(1)
		go func(node, addr string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			actx, cancel := context.WithTimeout(ctx, logAsk)
			defer cancel()
			c, err := s.a.cfg.Logs(actx, addr, req)
			mu.Lock()
			answers = append(answers, answer{node, addr, c, err})
			mu.Unlock()
		}(id, n.Addresses[0])
	}
	wg.Wait()
	var best *answer
	var down, failed []string
	for i := range answers {
		an := &answers[i]
		switch {
		case an.err != nil:
			down = append(down, an.node)
		case an.c.GetError() != "":
			failed = append(failed, fmt.Sprintf("%s: %s", an.node, an.c.GetError()))
		case an.c.GetFound() && an.c.GetIncarnation() > after && (best == nil || an.c.GetIncarnation() > best.c.GetIncarnation()):
			best = an
		}
	}
	slices.Sort(down)
	slices.Sort(failed)
	which := fmt.Sprintf("job %q rank %d", s.job, s.q.Rank)
	if s.q.Incarnation > 0 {
		which += fmt.Sprintf(" incarnation %d", s.q.Incarnation)
	}
	switch {
	case best != nil:
		return best.addr, best.c, 0, ""
	case len(failed) > 0:
		return "", nil, http.StatusBadGateway, fmt.Sprintf("api: the log of %s: %s", which, strings.Join(failed, "; "))
	case len(down) > 0:
		return "", nil, http.StatusBadGateway, fmt.Sprintf("api: no agent that answered has the log of %s; agents %s did not answer "+
			"(down or unreachable): a log kept there cannot be read now", which, strings.Join(down, ", "))
	}
	return "", nil, http.StatusNotFound, fmt.Sprintf("api: no agent has the log of %s (not started yet, never ran, or pruned)", which)
}

// read writes c's lines and those after it, following the log if
// asked, until the log ends (true) or the client or the agent goes
// away (false).
func (s *logStream) read(ctx context.Context, addr string, c *pb.LogChunk) bool {
	req := &pb.LogRead{Job: s.job, Incarnation: c.GetIncarnation(), Rank: uint32(s.q.Rank)}
	for {
		if !s.write(c) {
			return false
		}
		if len(c.GetLines()) == 0 {
			if c.GetClosed() || !s.q.Follow {
				return true
			}
			if !s.sleep(ctx, logPoll) {
				return false
			}
		}
		req.Offset = c.GetNext()
		actx, cancel := context.WithTimeout(ctx, logAsk)
		next, err := s.a.cfg.Logs(actx, addr, req)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil || next.GetError() != "" || !next.GetFound():
			why := fmt.Sprintf("agent %s: ", c.GetNode())
			switch {
			case err != nil:
				why += err.Error()
			case next.GetError() != "":
				why += next.GetError()
			default:
				why += "the log is gone (pruned, or the agent lost its data)"
			}
			s.write(&pb.LogChunk{Error: why, Incarnation: c.GetIncarnation(), Node: c.GetNode()})
			return false
		}
		next.Node = cmp.Or(next.GetNode(), c.GetNode())
		c = next
	}
}

// write sends c's lines (or its error) to the client, one JSON object a
// line, and flushes them.
func (s *logStream) write(c *pb.LogChunk) bool {
	if !s.started {
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.Header().Set("Cache-Control", "no-store")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	var buf []byte
	add := func(l LogLine) {
		b, _ := json.Marshal(l) // strings, numbers and a time: always encodes
		buf = append(append(buf, b...), '\n')
	}
	for i, l := range c.GetLines() {
		out := LogLine{Incarnation: c.GetIncarnation(), Rank: s.q.Rank, Node: c.GetNode(), Line: l.GetText()}
		if l.GetTimeUnixNano() != 0 {
			out.Time = time.Unix(0, l.GetTimeUnixNano()).UTC()
		}
		if i == 0 {
			out.SkippedBytes = c.GetSkipped()
		}
		add(out)
	}
	if c.GetError() != "" {
		add(LogLine{Incarnation: c.GetIncarnation(), Rank: s.q.Rank, Node: c.GetNode(), Error: c.GetError()})
	}
	if len(buf) > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(logWrite))
		if _, err := s.w.Write(buf); err != nil {
			return false
		}
	}
	return s.rc.Flush() == nil
}
