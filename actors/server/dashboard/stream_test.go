package dashboard

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/pb"
	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// streamFixture is newFixture's cluster with job b cancelled (an event
// of it, and a finished job whose streams end) and an agent on n1 whose
// log of b (rank 0, incarnation 1) holds one line.
func streamFixture(t *testing.T) *fixture {
	t.Helper()
	fb := &fakeBackend{st: testState(), leader: "s1", servers: []raft.Server{{ID: "s1", Suffrage: raft.Voter}}}
	fb.st.Nodes["n1"].Addresses = []string{"n1-actor"}
	fb.st.Jobs["b"].Submitter = "acc-alice"
	if _, err := state.ApplyTo(fb.st, &state.CancelJob{ID: "b", Reason: "test", Time: 10}, 2); err != nil {
		t.Fatal(err)
	}
	logs := func(_ context.Context, addr string, req *pb.LogRead) (*pb.LogChunk, error) {
		if addr != "n1-actor" || req.GetJob() != "b" || req.GetRank() != 0 {
			return &pb.LogChunk{}, nil
		}
		if req.GetOffset() > 0 {
			return &pb.LogChunk{Found: true, Incarnation: 1, Closed: true, Next: req.GetOffset()}, nil
		}
		return &pb.LogChunk{Found: true, Incarnation: 1, Node: "n1", Next: 40, Closed: true,
			Lines: []*pb.LogLine{{Text: "time=2026-12-06T04:00:00Z level=INFO msg=\"worker: exiting\"", TimeUnixNano: 1}}}, nil
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := api.New("s1", api.Config{Backend: fb, Apps: []string{"cifar10"}, Logs: logs, Logger: log})
	d, err := New(Config{ID: "s1", Backend: fb, API: a, Logger: log, Now: func() time.Time { return time.Unix(1_000_000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{fb: fb, dash: d, h: d.Handler(a)}
}

// TestStreamsGoThroughTheAPI reads a job's log and events through the
// dashboard's own endpoints, signed in by the cookie: the API's rules
// decide (a read token sees events but not logs, a submitter its own
// job's log), and the streams end with the finished job.
func TestStreamsGoThroughTheAPI(t *testing.T) {
	tests := []struct {
		name, path, cookie string
		code               int
		ctype, want        string
	}{
		{"log, its submitter", PathJob + "b/logs?follow=true", submitSecret, 200, "application/x-ndjson", `"line":"time=2026-12-06T04:00:00Z level=INFO msg=\"worker: exiting\""`},
		{"log, an admin", PathJob + "b/logs?follow=true&tail=10", adminSecret, 200, "application/x-ndjson", `"incarnation":1,"rank":0,"node":"n1"`},
		{"log, a read token", PathJob + "b/logs?follow=true", readSecret, 403, "application/json", "needs submit"},
		{"log, another's job", PathJob + "c/logs", submitSecret, 403, "application/json", "only its submitter or an admin"},
		{"log, no token", PathJob + "b/logs", "", 401, "application/json", "error"},
		{"log, a bad query", PathJob + "b/logs?rank=x", adminSecret, 400, "application/json", "rank"},
		{"log, an unknown job", PathJob + "zz/logs", adminSecret, 404, "application/json", "zz"},
		{"events, a read token", PathJob + "b/events", readSecret, 200, "text/event-stream", "event: cancelled\ndata: {\"seq\":1,"},
		{"events, after the last", PathJob + "b/events?since=1", readSecret, 200, "text/event-stream", ""},
		{"events, a token in the query", PathJob + "b/events?token=" + readSecret, "", 400, "application/json", "query"},
		{"events, an unknown job", PathJob + "zz/events", readSecret, 404, "application/json", "unknown job"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := streamFixture(t)
			done := make(chan struct{})
			var code int
			var body, ctype string
			go func() {
				defer close(done)
				rec := f.do(req{path: tc.path, cookie: tc.cookie})
				code, body, ctype = rec.Code, rec.Body.String(), rec.Header().Get("Content-Type")
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the stream of a finished job did not end within 30 s")
			}
			if code != tc.code || !strings.HasPrefix(ctype, tc.ctype) || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s: %d %s %q, want %d %s containing %q", tc.path, code, ctype, body, tc.code, tc.ctype, tc.want)
			}
			if tc.name == "events, after the last" && strings.Contains(body, "event:") {
				t.Errorf("events after the last: %q", body)
			}
		})
	}
}

// TestStreamPassesLastEventID resumes an event stream as a reconnecting
// EventSource does: by its Last-Event-ID header.
func TestStreamPassesLastEventID(t *testing.T) {
	f := streamFixture(t)
	for _, tc := range []struct {
		last string
		want bool
	}{{"", true}, {"0", true}, {"1", false}} {
		h := map[string]string{}
		if tc.last != "" {
			h["Last-Event-ID"] = tc.last
		}
		rec := f.do(req{path: PathJob + "b/events", cookie: readSecret, header: h})
		if got := strings.Contains(rec.Body.String(), "event: cancelled"); rec.Code != 200 || got != tc.want {
			t.Errorf("Last-Event-ID %q: %d %q, want the cancelled event %v", tc.last, rec.Code, rec.Body.String(), tc.want)
		}
	}
}
