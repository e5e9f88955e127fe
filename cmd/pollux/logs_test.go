package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestLogsCommand: pollux logs passes its flags as the query, prints one
// line of output per log line (or with --json one JSON object a line),
// and exits 2 on bad input and refusals.
func TestLogsCommand(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/jobs/j/logs":
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprintln(w, `{"incarnation":3,"rank":2,"node":"n1","time":"2026-12-06T01:00:00Z","line":"hello"}`)
			fmt.Fprintln(w, `{"incarnation":3,"rank":2,"node":"n1","time":"2026-12-06T01:00:01Z","line":"  spaced\ttab"}`)
		case "/v1/jobs/cut/logs":
			fmt.Fprintln(w, `{"incarnation":1,"rank":0,"time":"2026-12-06T01:00:00Z","line":"one"}`)
			fmt.Fprintln(w, `{"incarnation":1,"rank":0,"time":"0001-01-01T00:00:00Z","line":"","error":"agent n1: gone"}`)
		default:
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, `{"error":"api: not yours"}`)
		}
	}))
	defer srv.Close()
	cli := []string{"--server", srv.URL, "--token", "plx_test"}
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		out   string
		query string
	}{
		{"text", []string{"logs", "j", "--rank", "2", "--incarnation", "3", "--tail", "5", "-f"}, 0, "hello\n  spaced\ttab\n",
			"/v1/jobs/j/logs?follow=true&incarnation=3&rank=2&tail=5"},
		{"json", []string{"logs", "j", "--json"}, 0,
			`{"incarnation":3,"rank":2,"node":"n1","time":"2026-12-06T01:00:00Z","line":"hello"}` + "\n" +
				`{"incarnation":3,"rank":2,"node":"n1","time":"2026-12-06T01:00:01Z","line":"  spaced\ttab"}` + "\n", "/v1/jobs/j/logs?"},
		{"cut", []string{"logs", "cut"}, 1, "one\n", "/v1/jobs/cut/logs?"},
		{"refused", []string{"logs", "other"}, 2, "", "/v1/jobs/other/logs?"},
		{"no job", []string{"logs"}, 2, "", ""},
		{"negative rank", []string{"logs", "j", "--rank", "-1"}, 2, "", ""},
		{"negative tail", []string{"logs", "j", "--tail", "-1"}, 2, "", ""},
		{"bad incarnation", []string{"logs", "j", "--incarnation", "x"}, 2, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			queries = nil
			mu.Unlock()
			root := newRootCmd()
			var out, errs bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errs)
			root.SetArgs(append(tc.args, cli...))
			if code := exitCode(root.Execute()); code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.code, errs.String())
			}
			if out.String() != tc.out {
				t.Errorf("stdout %q, want %q", out.String(), tc.out)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := strings.Join(queries, " "); got != tc.query {
				t.Errorf("asked %q, want %q", got, tc.query)
			}
		})
	}
}
