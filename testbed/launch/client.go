package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed/chaos/history"
)

// Client sends API requests to chosen servers and, when the cluster is
// observed, records each as an operation of the client-side history: an
// invoke before the request leaves, then ok, fail (a 4xx or a 507: it
// definitely did not happen) or info (a timeout, a broken connection,
// another 5xx: unknown).
// One client issues one operation at a time; use one per goroutine.
type Client struct {
	c  *Cluster
	id int
	// keys counts the idempotency keys NewKey made.
	keys int
	// reads counts the reads sent to "any" server: each starts from the
	// next server in turn (readOrder).
	reads int
}

// readOrder lists the cluster's servers starting from the next one in
// turn at each call, so that a client's successive reads do not all go to
// the first server that answers: a follower that wrongly claims to be
// fresh is then read between the leader's answers, where the checker
// sees it show the past.
func (cl *Client) readOrder() []*Member {
	s := cl.c.Servers
	if len(s) == 0 {
		return nil
	}
	k := cl.reads % len(s)
	cl.reads++
	return append(append(make([]*Member, 0, len(s)), s[k:]...), s[:k]...)
}

// NewKey returns a new idempotency key for one logical write: sent again
// with each retry of it (to any server), a retry of a write that took
// effect answers as the write did (201 or 200) instead of 409. It is
// unique per process, client and call.
func (cl *Client) NewKey() string {
	cl.keys++
	return fmt.Sprintf("launch-%d-%d-%d", os.Getpid(), cl.id, cl.keys)
}

// Client returns a new logical client.
func (c *Cluster) Client() *Client { return &Client{c: c, id: int(c.clients.Add(1)) - 1} }

// Answer is how an operation ended.
type Answer struct {
	// Type is OK, Fail or Info.
	Type history.Type
	// Code is the HTTP status (0 if none arrived); Err says what went
	// wrong (empty for OK).
	Code int
	Err  string
}

// OK reports whether the operation succeeded.
func (a Answer) OK() bool { return a.Type == history.OK }

func (a Answer) Error() string {
	if a.Code != 0 {
		return fmt.Sprintf("%s (%d): %s", a.Type, a.Code, a.Err)
	}
	return fmt.Sprintf("%s: %s", a.Type, a.Err)
}

// do sends one request and classifies the answer; decode, when set, reads
// a 2xx body (an error there makes the answer unknown).
func (cl *Client) do(ctx context.Context, m *Member, f history.F, job, method, path string, body []byte,
	timeout time.Duration, decode func(*http.Response, *history.Op) error) Answer {
	return cl.doKeyed(ctx, m, f, job, "", method, path, body, timeout, decode)
}

// doKeyed is do with the idempotency key key ("": none) of a write.
func (cl *Client) doKeyed(ctx context.Context, m *Member, f history.F, job, key, method, path string, body []byte,
	timeout time.Duration, decode func(*http.Response, *history.Op) error) Answer {
	var id uint64
	if h := cl.c.hist; h != nil {
		id = h.NextID()
		if _, err := h.Op(history.Op{Type: history.Invoke, ID: id, Client: cl.id, F: f, Server: m.ID, Job: job, Key: key}); err != nil {
			return Answer{Type: history.Info, Err: err.Error()}
		}
	}
	done := history.Op{ID: id, Client: cl.id, F: f, Job: job}
	ans := cl.send(ctx, m, method, path, key, body, timeout, decode, &done)
	done.Type, done.Code = ans.Type, ans.Code
	if ans.Type != history.OK {
		done.Error = truncate(ans.Err, 512)
	}
	if h := cl.c.hist; h != nil {
		if _, err := h.Op(done); err != nil {
			cl.c.log.Error("launch: history", "err", err)
		}
	}
	return ans
}

func (cl *Client) send(ctx context.Context, m *Member, method, path, key string, body []byte, timeout time.Duration,
	decode func(*http.Response, *history.Op) error, done *history.Op) Answer {
	if m.HTTP == "" {
		return Answer{Type: history.Fail, Code: 400, Err: m.ID + " serves no API"}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+m.HTTP+path, bytes.NewReader(body))
	if err != nil {
		return Answer{Type: history.Info, Err: err.Error()}
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	resp, err := cl.c.http.Do(req)
	if err != nil {
		return Answer{Type: history.Info, Err: err.Error()}
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		if decode != nil {
			if err := decode(resp, done); err != nil {
				return Answer{Type: history.Info, Code: code, Err: "unreadable answer: " + err.Error()}
			}
		}
		return Answer{Type: history.OK, Code: code}
	case code == http.StatusNotFound && done.F == history.GetJob && decode != nil:
		// A read that found no such job: an answer like any other.
		if err := decode(resp, done); err != nil {
			return Answer{Type: history.Info, Code: code, Err: "unreadable answer: " + err.Error()}
		}
		return Answer{Type: history.OK, Code: code}
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e api.Error
	text := strings.TrimSpace(string(msg))
	if json.Unmarshal(msg, &e) == nil && e.Error != "" {
		text = e.Error
	}
	// 507: the leader refused the write before logging it (its disk is
	// full): it definitely did not happen.
	if code >= 400 && code < 500 || code == http.StatusInsufficientStorage {
		return Answer{Type: history.Fail, Code: code, Err: text}
	}
	return Answer{Type: history.Info, Code: code, Err: text}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Submit posts a job spec to m with a new idempotency key: OK is 201;
// 409 (the name is another job's) is a refusal.
func (cl *Client) Submit(ctx context.Context, m *Member, job string, spec []byte, timeout time.Duration) Answer {
	return cl.SubmitKeyed(ctx, m, job, spec, cl.NewKey(), timeout)
}

// SubmitKeyed posts a job spec to m with idempotency key key (NewKey):
// OK is 201, the first time or as the answer to a retry (the same key,
// spec and token) of a submission that took effect; 409 is a refusal
// (the name is another submission's job).
func (cl *Client) SubmitKeyed(ctx context.Context, m *Member, job string, spec []byte, key string, timeout time.Duration) Answer {
	return cl.doKeyed(ctx, m, history.Submit, job, key, http.MethodPost, api.PathJobs, spec, timeout, nil)
}

// Cancel asks m to cancel job with a new idempotency key (CancelKeyed).
func (cl *Client) Cancel(ctx context.Context, m *Member, job string, timeout time.Duration) Answer {
	return cl.CancelKeyed(ctx, m, job, cl.NewKey(), timeout)
}

// CancelKeyed asks m to cancel job with idempotency key key: OK is 200
// (cancelled now, or a retry of the cancel that did it, with the
// incarnation it took effect in when the server says); a definite
// refusal is 404 (no such job) or 409 (already finished).
func (cl *Client) CancelKeyed(ctx context.Context, m *Member, job, key string, timeout time.Duration) Answer {
	return cl.doKeyed(ctx, m, history.Cancel, job, key, http.MethodPost, api.PathJobs+"/"+url.PathEscape(job)+"/cancel", nil, timeout, func(resp *http.Response, o *history.Op) error {
		var c api.CancelResult
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&c); err != nil {
			return err
		}
		if c.ID != job {
			return fmt.Errorf("cancelled job %s, answer names %q", job, c.ID)
		}
		o.Inc = c.Incarnation
		return nil
	})
}

// Job reads one job as m sees it: found false when m answers that there
// is no such job (404); stale says a follower answered from its local
// copy.
func (cl *Client) Job(ctx context.Context, m *Member, job string, timeout time.Duration) (j api.Job, found, stale bool, a Answer) {
	a = cl.do(ctx, m, history.GetJob, job, http.MethodGet, api.PathJobs+"/"+url.PathEscape(job), nil, timeout, func(resp *http.Response, o *history.Op) error {
		switch resp.Header.Get(api.HeaderStale) {
		case "true":
			stale = true
		case "false":
		default:
			return fmt.Errorf("no %s header", api.HeaderStale)
		}
		o.Stale = stale
		if resp.StatusCode == http.StatusNotFound {
			return nil
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&j); err != nil {
			return err
		}
		if j.ID != job {
			return fmt.Errorf("asked for job %s, got %q", job, j.ID)
		}
		found = true
		o.Jobs = []history.Job{{ID: j.ID, State: j.State, Inc: j.Incarnation, Epoch: j.Epoch, Progress: j.Progress, Reason: truncate(j.Reason, 1024), GPUs: j.GPUs}}
		return nil
	})
	return j, found, stale, a
}

// Jobs lists the jobs as m sees them; stale says a follower answered from
// its local copy.
func (cl *Client) Jobs(ctx context.Context, m *Member, timeout time.Duration) (jobs []api.Job, stale bool, a Answer) {
	a = cl.do(ctx, m, history.Jobs, "", http.MethodGet, api.PathJobs, nil, timeout, func(resp *http.Response, o *history.Op) error {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&jobs); err != nil {
			return err
		}
		switch resp.Header.Get(api.HeaderStale) {
		case "true":
			stale = true
		case "false":
		default:
			return fmt.Errorf("no %s header", api.HeaderStale)
		}
		o.Stale = stale
		o.Jobs = make([]history.Job, 0, len(jobs))
		for _, j := range jobs {
			o.Jobs = append(o.Jobs, history.Job{ID: j.ID, State: j.State, Inc: j.Incarnation, Epoch: j.Epoch, Progress: j.Progress, Reason: truncate(j.Reason, 1024), GPUs: j.GPUs})
		}
		return nil
	})
	return jobs, stale, a
}

// Status reads m's status.
func (cl *Client) Status(ctx context.Context, m *Member, timeout time.Duration) (st api.Status, a Answer) {
	a = cl.do(ctx, m, history.Status, "", http.MethodGet, api.PathStatus, nil, timeout, func(resp *http.Response, o *history.Op) error {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
			return err
		}
		if st.Serving == "" {
			return errors.New("status names no serving server")
		}
		o.Stale = st.Stale
		o.Status = &history.StatusView{Leader: st.Leader, Serving: st.Serving, Term: st.Term, Generation: st.Generation}
		return nil
	})
	return st, a
}

// Nodes lists the nodes as m sees them (not recorded: the history has no
// use for them).
func (cl *Client) Nodes(ctx context.Context, m *Member, timeout time.Duration) ([]api.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+m.HTTP+api.PathNodes, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("launch: %s: %s", m.ID, resp.Status)
	}
	var ns []api.Node
	return ns, json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ns)
}
