package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"pollux/consensus/state"
)

// placeJ1 submits job j1 through the API and places it on n1 (the
// fake's state), then resizes it.
func placeJ1(t testing.TB, a *API, fb *fakeBackend) {
	t.Helper()
	if code, body := doAs(a, submitSecret, "POST", PathJobs, good); code != http.StatusCreated {
		t.Fatalf("submit: %d %s", code, body)
	}
	for i, slots := range [][]state.Slot{{{Node: "n1", GPUs: 1}}, {{Node: "n1", GPUs: 2}}} {
		r := &state.Round{Generation: uint64(3 + i), Term: 3, Time: float64(100 + i), Jobs: map[string][]state.Slot{"j1": slots}}
		if err := fb.ApplyCommand(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEventsJSON: a read token lists a job's events, oldest first, with
// their reasons; since skips what the reader has; bad queries and
// unknown jobs are refused; no token, no events.
func TestEventsJSON(t *testing.T) {
	a, fb := newTest()
	placeJ1(t, a, fb)
	code, body := doAs(a, readSecret, "GET", PathEvents+"?job=j1", "")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var got Events
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range got.Events {
		types = append(types, ev.Type)
		if ev.Job != "j1" || ev.Reason == "" || ev.Seq == 0 {
			t.Errorf("event %+v", ev)
		}
	}
	if strings.Join(types, " ") != "submitted placed resized" || got.LastSeq != got.Events[2].Seq {
		t.Fatalf("events %+v", got)
	}
	if !strings.Contains(got.Events[0].Reason, "submitted by alice") || !strings.Contains(got.Events[2].Reason, "to 2 GPUs on n1 (2)") {
		t.Errorf("reasons %q, %q", got.Events[0].Reason, got.Events[2].Reason)
	}

	since := got.Events[1].Seq
	for _, tc := range []struct {
		name, path string
		secret     string
		code       int
		mention    string
	}{
		{"since", PathEvents + "?job=j1&since=" + strconv.FormatUint(since, 10), readSecret, http.StatusOK, `"type":"resized"`},
		{"all jobs", PathEvents, readSecret, http.StatusOK, `"job":"j1"`},
		{"unknown job", PathEvents + "?job=nope", readSecret, http.StatusNotFound, "unknown job"},
		{"bad since", PathEvents + "?since=-1", readSecret, http.StatusBadRequest, "sequence number"},
		{"bad follow", PathEvents + "?follow=maybe", readSecret, http.StatusBadRequest, "follow"},
		{"no token", PathEvents, "", http.StatusUnauthorized, "no token"},
	} {
		code, body := doAs(a, tc.secret, "GET", tc.path, "")
		if code != tc.code || !strings.Contains(body, tc.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, body, tc.code, tc.mention)
		}
		if tc.name == "since" && strings.Contains(body, `"placed"`) {
			t.Errorf("since: %s holds the events before %d", body, since)
		}
	}
}

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct{ id, name, data string }

// readSSE reads server-sent events from body into a channel, closed at
// the end of the stream.
func readSSE(body io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch
}

// next waits (generously) for the next event of ch.
func next(t *testing.T, ch <-chan sseEvent) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	return sseEvent{}, false
}

// stream opens the event stream of job j1 as a read token, resuming
// after lastID if it is not "".
func stream(t *testing.T, ctx context.Context, url, lastID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+PathEvents+"?job=j1", nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	return resp
}

// TestEventsStreamResumes: the stream sends each event with its sequence
// number as id; a client that reconnects with Last-Event-ID gets what
// came after, nothing twice; events written while it streams arrive;
// the stream of a finished job ends once its last event is sent.
func TestEventsStreamResumes(t *testing.T) {
	a, fb := newTest()
	placeJ1(t, a, fb)
	srv := httptest.NewServer(a)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	resp := stream(t, ctx, srv.URL, "")
	ch := readSSE(resp.Body)
	first, _ := next(t, ch)
	if first.name != "submitted" || !strings.Contains(first.data, `"type":"submitted"`) {
		t.Fatalf("first event %+v", first)
	}
	// The client goes away after the first event.
	cancel()
	resp.Body.Close()
	for range ch {
	}

	resp = stream(t, context.Background(), srv.URL, first.id)
	defer resp.Body.Close()
	ch = readSSE(resp.Body)
	var names []string
	for range 2 {
		ev, _ := next(t, ch)
		names = append(names, ev.name)
	}
	// Written while the client streams: arrives, then the stream ends.
	if err := fb.ApplyCommand(context.Background(), &state.FinishJob{ID: "j1", State: state.Completed, Reason: "trained", Time: 200}); err != nil {
		t.Fatal(err)
	}
	last, _ := next(t, ch)
	names = append(names, last.name)
	if got := strings.Join(names, " "); got != "placed resized completed" || !strings.Contains(last.data, `"reason":"trained"`) {
		t.Fatalf("after resuming: %s (last %+v)", got, last)
	}
	if ev, ok := next(t, ch); ok {
		t.Fatalf("the stream of a finished job goes on: %+v", ev)
	}

	// follow=true streams too, and a finished job's stream ends after
	// its history (event 2 is the first round's leader_changed, 3 the
	// job's placed).
	resp2, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest("GET", srv.URL+PathEvents+"?job=j1&follow=true&since=3", nil)
		req.Header.Set("Authorization", "Bearer "+readSecret)
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var rest []string
	for ev := range readSSE(resp2.Body) {
		rest = append(rest, ev.name)
	}
	if strings.Join(rest, " ") != "resized completed" {
		t.Errorf("follow=true since 3: %v", rest)
	}
}

// FuzzEventsQuery sends any query and Last-Event-ID to PathEvents as a
// read token: never a 5xx; a JSON answer is valid and holds only events
// after the sequence number asked for; a stream (follow) is server-sent
// events. (The request's context is over, so a stream ends after one
// poll.)
func FuzzEventsQuery(f *testing.F) {
	for _, seed := range []struct{ query, lastID string }{
		{"job=j1", ""}, {"job=j1&since=1", ""}, {"since=2", "1"}, {"follow=true&job=j1", "2"},
		{"since=18446744073709551616", ""}, {"job=%00&since=-0", "x"}, {"follow=1", ""}, {"job=nope", ""},
	} {
		f.Add(seed.query, seed.lastID)
	}
	a, fb := newTest()
	placeJ1(f, a, fb)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, query, lastID string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		r.URL.Path, r.URL.RawQuery = PathEvents, query
		r.Header.Set("Authorization", "Bearer "+readSecret)
		if lastID != "" && !strings.ContainsAny(lastID, "\r\n\x00") {
			r.Header.Set("Last-Event-ID", lastID)
		}
		a.ServeHTTP(rec, r)
		out := rec.Body.String()
		switch {
		case rec.Code >= 500:
			t.Fatalf("%q (Last-Event-ID %q): %d %s", query, lastID, rec.Code, out)
		case rec.Header().Get("Content-Type") == "text/event-stream":
			if rec.Code != http.StatusOK || (out != "" && !strings.HasPrefix(out, "id: ")) {
				t.Fatalf("%q: stream %d %q", query, rec.Code, out)
			}
		case !json.Valid([]byte(out)):
			t.Fatalf("%q: %d, not JSON: %s", query, rec.Code, out)
		case rec.Code == http.StatusOK:
			eq, err := parseEventsQuery(r)
			var got Events
			if err != nil || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("%q: answered %s to a query that does not parse (%v)", query, out, err)
			}
			for _, ev := range got.Events {
				if ev.Seq <= eq.since || (eq.job != "" && ev.Job != eq.job) {
					t.Fatalf("%q: event %+v after %d of job %q", query, ev, eq.since, eq.job)
				}
			}
		}
	})
}
