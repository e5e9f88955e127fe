package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"pollux/actors/server/api"
)

// view is what the observer sees of the cluster: the replicated state as
// the leader's read API answers it (jobs with state and incarnation,
// nodes, Raft peers, API tokens, leader and term), every server's and agent's
// process alive, the workers of every job, and the files in the marker
// directory.
type view struct {
	leader  string
	term    uint64
	peers   []string
	tokens  []string          // the API tokens: accessor, role, revoked
	nodes   map[string]string // id -> health/GPUs
	jobs    map[string]api.Job
	down    []string       // members whose process is not running
	workers map[string]int // job -> worker processes
	files   []string       // in the marker directory
}

// observe reads a view, retrying for a while: an election (a loaded
// machine) makes reads fail until a new leader serves.
func (t *target) observe(ctx context.Context) (*view, error) {
	var err error
	for range 10 {
		var v *view
		if v, err = t.observeOnce(ctx); err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		if m, _, lerr := t.c.Leader(ctx, 10*time.Second); lerr == nil {
			t.leader = m
		}
	}
	return nil, err
}

func (t *target) observeOnce(ctx context.Context) (*view, error) {
	v := &view{nodes: map[string]string{}, jobs: map[string]api.Job{}, workers: map[string]int{}}
	for _, m := range append(slices.Clone(t.c.Servers), t.c.Agents...) {
		if !m.Running() {
			v.down = append(v.down, string(m.Role)+"/"+m.ID)
		}
	}
	var st api.Status
	var err error
	for range 20 { // the leader's linearizable view
		if st, err = getJSON[api.Status](ctx, t, api.PathStatus); err == nil && !st.Stale && st.Leader != "" {
			break
		}
		if m := t.c.Member(st.Leader); m != nil && st.Leader != t.leader.ID {
			t.leader = m
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	v.leader, v.term = st.Leader, st.Term
	jobs, err := getJSON[[]api.Job](ctx, t, api.PathJobs)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		v.jobs[j.ID] = j
	}
	nodes, err := getJSON[[]api.Node](ctx, t, api.PathNodes)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		v.nodes[n.ID] = fmt.Sprintf("%s/%d GPUs", n.Health, n.GPUs)
	}
	peers, err := getJSON[[]api.Peer](ctx, t, api.PathPeers)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		v.peers = append(v.peers, fmt.Sprintf("%s=%s voter=%t", p.ID, p.Address, p.Voter))
	}
	sort.Strings(v.peers)
	toks, err := getJSON[[]api.Token](ctx, t, api.PathACLTokens)
	if err != nil {
		return nil, err
	}
	for _, tok := range toks {
		v.tokens = append(v.tokens, fmt.Sprintf("%s %s role=%s revoked=%t", tok.Accessor, tok.Name, tok.Role, tok.Revoked))
	}
	sort.Strings(v.tokens)
	for _, w := range t.workers() {
		v.workers[w.job]++
	}
	ents, _ := os.ReadDir(t.marker)
	for _, e := range ents {
		v.files = append(v.files, e.Name())
	}
	return v, nil
}

// getJSON reads path from the leader.
func getJSON[T any](ctx context.Context, t *target, path string) (T, error) {
	var out T
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+t.leader.HTTP+path, nil)
	if err != nil {
		return out, err
	}
	resp, err := t.http.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return out, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return out, json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out)
}

// changes lists what differs between two views, except what the cluster
// does by itself (the victim's progress, the allocation generation) and
// the jobs the attacks submitted on purpose, as long as each ended as
// expected (failed, its reason naming the refusal, no worker). notes are
// differences that are not changes of the state: an election, which the
// run then judges by the case's availability bound (leaderChange).
func (t *target) changes(before, after *view) (out, notes []string) {
	if before.leader != after.leader || before.term != after.term {
		notes = append(notes, fmt.Sprintf("meanwhile leader %s term %d became %s term %d", before.leader, before.term, after.leader, after.term))
	}
	if !slices.Equal(before.peers, after.peers) {
		out = append(out, fmt.Sprintf("raft peers %v became %v", before.peers, after.peers))
	}
	if !slices.Equal(before.tokens, after.tokens) {
		out = append(out, fmt.Sprintf("API tokens %v became %v", before.tokens, after.tokens))
	}
	if !maps.Equal(before.nodes, after.nodes) {
		out = append(out, fmt.Sprintf("nodes %v became %v", before.nodes, after.nodes))
	}
	if len(after.down) > 0 {
		out = append(out, fmt.Sprintf("%v not running", after.down))
	}
	if !slices.Equal(before.files, after.files) {
		out = append(out, fmt.Sprintf("files %v written in %s", after.files, t.marker))
	}
	for _, id := range slices.Sorted(maps.Keys(after.jobs)) {
		a := after.jobs[id]
		b, had := before.jobs[id]
		if reason, expected := t.expect[id]; expected {
			if had && a.State == b.State && a.Incarnation == b.Incarnation && after.workers[id] == before.workers[id] {
				continue // judged when it changed
			}
			if a.State != "failed" || !strings.Contains(a.Reason, reason) || after.workers[id] > 0 {
				out = append(out, fmt.Sprintf("job %s is %s (%q) with %d workers, want failed: %s", id, a.State, a.Reason, after.workers[id], reason))
			}
			continue
		}
		switch {
		case !had:
			out = append(out, fmt.Sprintf("job %s appeared (%s)", id, a.State))
		case a.State != b.State || a.Incarnation != b.Incarnation:
			out = append(out, fmt.Sprintf("job %s went from %s incarnation %d to %s incarnation %d %s", id, b.State, b.Incarnation,
				a.State, a.Incarnation, a.Reason))
		}
	}
	for id := range before.jobs {
		if _, ok := after.jobs[id]; !ok {
			out = append(out, "job "+id+" vanished")
		}
	}
	for id, n := range after.workers {
		if _, known := after.jobs[id]; !known || (t.expect[id] != "" && n != before.workers[id]) {
			out = append(out, fmt.Sprintf("%d worker processes of %s", n, id))
		}
	}
	return out, notes
}

// worker is one worker process as /proc shows it.
type worker struct {
	pid        int
	job        string
	inc        uint64
	rank       int
	token      string
	reportAddr string
}

type workers []worker

// workers lists the processes whose environment names a job and one of
// the cluster's agents' report listeners (the cluster's workers), by job
// and rank.
func (t *target) workers() workers {
	ours := map[string]bool{}
	for _, a := range t.c.Agents {
		ours[a.Reports()] = true
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	var out workers
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		env := map[string]string{}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok && strings.HasPrefix(k, "POLLUX_") {
				env[k] = v
			}
		}
		job := env["POLLUX_JOB_ID"]
		if job == "" || !ours[env["POLLUX_REPORT_ADDR"]] {
			continue
		}
		w := worker{job: job, token: env["POLLUX_REPORT_TOKEN"], reportAddr: env["POLLUX_REPORT_ADDR"]}
		if f := env["POLLUX_REPORT_TOKEN_FILE"]; w.token == "" && f != "" {
			// The agent's file, readable by the worker's user (and so by
			// this process, which runs as it or as root).
			tok, _ := os.ReadFile(f)
			w.token = strings.TrimSpace(string(tok))
		}
		w.pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
		w.inc, _ = strconv.ParseUint(env["POLLUX_INCARNATION"], 10, 64)
		w.rank, _ = strconv.Atoi(env["POLLUX_RANK"])
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].job != out[j].job {
			return out[i].job < out[j].job
		}
		return out[i].rank < out[j].rank
	})
	return out
}

// findWorkers lists the cluster's worker processes of job.
func (t *target) findWorkers(job string) workers {
	var out workers
	for _, w := range t.workers() {
		if w.job == job {
			out = append(out, w)
		}
	}
	return out
}
