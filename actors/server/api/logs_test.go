package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/consensus/state"
)

// agents are fake agents' log stores by actor address; an address
// without one does not answer.
type agents map[string]*workerlog.Store

func (ag agents) fetch(_ context.Context, addr string, req *pb.LogRead) (*pb.LogChunk, error) {
	s := ag[addr]
	if s == nil {
		return nil, fmt.Errorf("actor: request to %s timed out", addr)
	}
	return workerlog.Answer("node-at-"+addr, s, req), nil
}

// logTest is newTest's API with two agents (n1, n2) holding logs of
// alice's job "alices": incarnation 1 rank 0 on n1 (its worker exited),
// incarnation 2 ranks 0 and 1 on n2 (running). The job is at
// incarnation 2.
type logTest struct {
	a      *API
	fb     *fakeBackend
	n1, n2 *workerlog.Store
	live   *workerlog.Writer // incarnation 2 rank 0
}

func newLogTest(t *testing.T) *logTest {
	t.Helper()
	_, fb := newTest()
	lt := &logTest{fb: fb}
	fb.st.Nodes["n2"] = &state.Node{ID: "n2", GPUs: 4, Health: state.Alive, Addresses: []string{"127.0.0.1:10"}}
	var err error
	if lt.n1, err = workerlog.Open(workerlog.Config{Dir: filepath.Join(t.TempDir(), "n1")}); err != nil {
		t.Fatal(err)
	}
	if lt.n2, err = workerlog.Open(workerlog.Config{Dir: filepath.Join(t.TempDir(), "n2")}); err != nil {
		t.Fatal(err)
	}
	ag := agents{"127.0.0.1:9": lt.n1, "127.0.0.1:10": lt.n2}
	lt.a = New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Logs: ag.fetch, Logger: slog.New(slog.DiscardHandler)})
	if code, out := doAs(lt.a, submitSecret, "POST", PathJobs, strings.Replace(good, "j1", "alices", 1)); code != http.StatusCreated {
		t.Fatalf("alice submits: %d %s", code, out)
	}
	fb.st.Jobs["alices"].Incarnation = 2
	w1, _ := lt.n1.Create(workerlog.Key{Job: "alices", Incarnation: 1, Rank: 0})
	fmt.Fprintln(w1, "one: started")
	fmt.Fprintln(w1, "one: epoch 1")
	w1.Close()
	lt.live, _ = lt.n2.Create(workerlog.Key{Job: "alices", Incarnation: 2, Rank: 0})
	fmt.Fprintln(lt.live, "two: started")
	r1, _ := lt.n2.Create(workerlog.Key{Job: "alices", Incarnation: 2, Rank: 1})
	fmt.Fprintln(r1, "two: rank 1")
	t.Cleanup(func() { lt.live.Close(); r1.Close() })
	return lt
}

// lines decodes an answer's JSON lines.
func lines(t *testing.T, body string) []LogLine {
	t.Helper()
	var out []LogLine
	dec := json.NewDecoder(strings.NewReader(body))
	for {
		var l LogLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		out = append(out, l)
	}
}

func TestLogsQueriesAndAccess(t *testing.T) {
	lt := newLogTest(t)
	base := PathJobs + "/alices/logs"
	for _, tc := range []struct {
		name   string
		secret string
		path   string
		code   int
		want   []string // the lines, or a part of the error
	}{
		{"newest incarnation", submitSecret, base, 200, []string{"two: started"}},
		{"earlier incarnation", submitSecret, base + "?incarnation=1", 200, []string{"one: started", "one: epoch 1"}},
		{"rank", submitSecret, base + "?rank=1", 200, []string{"two: rank 1"}},
		{"tail", adminSecret, base + "?incarnation=1&tail=1", 200, []string{"one: epoch 1"}},
		{"finished follow ends", submitSecret, base + "?incarnation=1&follow=true", 200, []string{"one: started", "one: epoch 1"}},
		{"admin reads any", adminSecret, base, 200, []string{"two: started"}},
		{"read token", readSecret, base, 403, []string{"needs submit"}},
		{"other submitter", otherSecret, base, 403, []string{"not yours"}},
		{"no token", "", base, 401, []string{"no token"}},
		{"unknown job", adminSecret, PathJobs + "/nope/logs", 404, []string{`no job "nope"`}},
		{"incarnation not reached", adminSecret, base + "?incarnation=3", 404, []string{"newest is 2"}},
		{"rank never ran", adminSecret, base + "?rank=7", 404, []string{"no agent has the log"}},
		{"incarnation 0", adminSecret, base + "?incarnation=0", 400, []string{"start at 1"}},
		{"negative rank", adminSecret, base + "?rank=-1", 400, []string{"rank"}},
		{"bad follow", adminSecret, base + "?follow=maybe", 400, []string{"follow"}},
		{"bad tail", adminSecret, base + "?tail=x", 400, []string{"tail"}},
		{"huge tail", adminSecret, base + "?tail=999999999", 400, []string{"tail"}},
		{"unknown key", adminSecret, base + "?lines=3", 400, []string{"unknown query"}},
		{"repeated key", adminSecret, base + "?rank=1&rank=2", 400, []string{"2 times"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := doAs(lt.a, tc.secret, "GET", tc.path, "")
			if code != tc.code {
				t.Fatalf("%d %s, want %d", code, body, tc.code)
			}
			if code != 200 {
				var e Error
				if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.want[0]) {
					t.Fatalf("error %s, want it to say %q", body, tc.want[0])
				}
				return
			}
			var got []string
			for _, l := range lines(t, body) {
				got = append(got, l.Line)
				if l.Time.IsZero() || l.Error != "" {
					t.Errorf("line %+v", l)
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("lines %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLogsAgentDown: a log on an agent that does not answer is an
// error naming the agent, not an empty log.
func TestLogsAgentDown(t *testing.T) {
	lt := newLogTest(t)
	lt.fb.st.Nodes["n3"] = &state.Node{ID: "n3", GPUs: 4, Health: state.Dead, Addresses: []string{"127.0.0.1:11"}}
	code, body := do(lt.a, "GET", PathJobs+"/alices/logs?rank=3", "")
	if code != http.StatusBadGateway || !strings.Contains(body, "n3") {
		t.Fatalf("%d %s", code, body)
	}
	// The others' logs are still served.
	if code, body := do(lt.a, "GET", PathJobs+"/alices/logs?incarnation=1", ""); code != 200 || len(lines(t, body)) != 2 {
		t.Fatalf("%d %s", code, body)
	}
}

// TestLogsFollowSeesNewLine streams a running worker's log over HTTP:
// a line written after the request arrives on the open stream.
func TestLogsFollowSeesNewLine(t *testing.T) {
	lt := newLogTest(t)
	srv := httptest.NewServer(lt.a)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+PathJobs+"/alices/logs?"+url.Values{"follow": {"1"}, "incarnation": {"2"}}.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+submitSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() LogLine {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var l LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := next(); l.Line != "two: started" || l.Incarnation != 2 || l.Rank != 0 {
		t.Fatalf("first line %+v", l)
	}
	fmt.Fprintln(lt.live, "two: a new line")
	if l := next(); l.Line != "two: a new line" {
		t.Fatalf("followed line %+v", l)
	}
	// The worker exits: the stream of its incarnation ends cleanly.
	lt.live.Close()
	if sc.Scan() {
		t.Fatalf("more after the end: %s", sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestLogsFollowNextIncarnation: following without an incarnation goes
// on with the next incarnation's log once it starts.
func TestLogsFollowNextIncarnation(t *testing.T) {
	lt := newLogTest(t)
	srv := httptest.NewServer(lt.a)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+PathJobs+"/alices/logs?follow=true&tail=1", nil)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "two: started") {
		t.Fatalf("first: %q %v", sc.Text(), sc.Err())
	}
	lt.live.Close()
	w3, _ := lt.n1.Create(workerlog.Key{Job: "alices", Incarnation: 3, Rank: 0})
	fmt.Fprintln(w3, "three: started")
	fmt.Fprintln(w3, "three: running")
	// Read whole, although the first was read from its tail.
	for _, want := range []string{"three: started", "three: running"} {
		if !sc.Scan() || !strings.Contains(sc.Text(), want) || !strings.Contains(sc.Text(), `"incarnation":3`) {
			t.Fatalf("next incarnation: %q %v, want %q", sc.Text(), sc.Err(), want)
		}
	}
	w3.Close()
}
