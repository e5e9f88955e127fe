package launch

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"pollux/actors/server/api"
)

// Leader returns the server that says, asked directly, that it leads
// (not stale), waiting up to timeout for one; with its status.
func (c *Cluster) Leader(ctx context.Context, timeout time.Duration) (*Member, api.Status, error) {
	cl := c.Client()
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range c.Servers {
			if !m.Serving() {
				continue
			}
			if st, a := cl.Status(ctx, m, time.Second); a.OK() && st.Leader == m.ID && st.Serving == m.ID && !st.Stale {
				return m, st, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, api.Status{}, fmt.Errorf("%w: no leader within %s", ErrCluster, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, api.Status{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitGPUs waits until the leader reports want GPUs.
func (c *Cluster) WaitGPUs(ctx context.Context, want int, timeout time.Duration) error {
	cl := c.Client()
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range c.Servers {
			if !m.Serving() {
				continue
			}
			if st, a := cl.Status(ctx, m, time.Second); a.OK() && !st.Stale && st.GPUs == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the cluster did not report %d GPUs within %s", ErrCluster, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SubmitAny submits a job through the serving servers in turn until one
// acknowledges it (201, to the first attempt or, with the same
// idempotency key, to a retry of one that took effect), retrying every
// retry while none does, for up to within. A definite refusal (4xx,
// 409 for a name another submission holds among them) ends it.
func (cl *Client) SubmitAny(ctx context.Context, job string, spec []byte, retry, within time.Duration) Answer {
	return cl.SubmitAnyKeyed(ctx, job, spec, cl.NewKey(), retry, within)
}

// SubmitAnyKeyed is SubmitAny with the idempotency key key, for a caller
// that retries one logical submission over several calls.
func (cl *Client) SubmitAnyKeyed(ctx context.Context, job string, spec []byte, key string, retry, within time.Duration) Answer {
	deadline := time.Now().Add(within)
	last := Answer{Type: "info", Err: "no server is serving"}
	for {
		for _, m := range cl.c.Servers {
			if !m.Serving() {
				continue
			}
			last = cl.SubmitKeyed(ctx, m, job, spec, key, 5*time.Second)
			if last.OK() || last.Type == "fail" {
				return last
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		select {
		case <-ctx.Done():
			return Answer{Type: "info", Err: ctx.Err().Error()}
		case <-time.After(retry):
		}
	}
}

// CancelAny cancels a job through the serving servers in turn, with one
// idempotency key, until one answers definitely (200, to the first
// attempt or to a retry of one that took effect, or a refusal: 404,
// 409), retrying every retry while none does (no answer, a 5xx, or 507:
// a full disk refused it), for up to within.
func (cl *Client) CancelAny(ctx context.Context, job string, retry, within time.Duration) Answer {
	key := cl.NewKey()
	deadline := time.Now().Add(within)
	last := Answer{Type: "info", Err: "no server is serving"}
	for {
		for _, m := range cl.c.Servers {
			if !m.Serving() {
				continue
			}
			last = cl.CancelKeyed(ctx, m, job, key, 5*time.Second)
			if last.OK() || last.Type == "fail" && last.Code != http.StatusInsufficientStorage {
				return last
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		select {
		case <-ctx.Done():
			return Answer{Type: "info", Err: ctx.Err().Error()}
		case <-time.After(retry):
		}
	}
}

// JobAny reads one job from the leader (a linearizable read), trying the
// serving servers in turn (from the next one at each call, readOrder);
// found is false if the leader has no such job.
func (cl *Client) JobAny(ctx context.Context, job string) (j api.Job, found bool, err error) {
	var last Answer
	for _, m := range cl.readOrder() {
		if !m.Serving() {
			continue
		}
		j, found, stale, a := cl.Job(ctx, m, job, 5*time.Second)
		if a.OK() && !stale {
			return j, found, nil
		}
		last = a
	}
	return api.Job{}, false, fmt.Errorf("%w: no leader answered a read of job %s: %s", ErrCluster, job, last.Error())
}

// JobsAny lists the jobs from the leader (a linearizable read), trying
// the serving servers in turn (from the next one at each call,
// readOrder); a follower's stale answer is returned only if no leader
// answers.
func (cl *Client) JobsAny(ctx context.Context) ([]api.Job, bool, error) {
	var staleJobs []api.Job
	var last Answer
	gotStale := false
	for _, m := range cl.readOrder() {
		if !m.Serving() {
			continue
		}
		js, stale, a := cl.Jobs(ctx, m, 5*time.Second)
		if a.OK() && !stale {
			return js, false, nil
		}
		if a.OK() && !gotStale {
			staleJobs, gotStale = js, true
		}
		last = a
	}
	if gotStale {
		return staleJobs, true, nil
	}
	return nil, false, fmt.Errorf("%w: no server listed the jobs: %s", ErrCluster, last.Error())
}

// StatusAny is the status from the leader if one answers, else from any
// serving server (asked from the next one at each call, readOrder).
func (cl *Client) StatusAny(ctx context.Context) (api.Status, error) {
	var fallback *api.Status
	var last Answer
	for _, m := range cl.readOrder() {
		if !m.Serving() {
			continue
		}
		st, a := cl.Status(ctx, m, 5*time.Second)
		if a.OK() && !st.Stale {
			return st, nil
		}
		if a.OK() && fallback == nil {
			fallback = &st
		}
		last = a
	}
	if fallback != nil {
		return *fallback, nil
	}
	return api.Status{}, fmt.Errorf("%w: no server answered the status: %s", ErrCluster, last.Error())
}
