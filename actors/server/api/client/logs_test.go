package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

// newLogServer serves the real API over newBackend, with job "train"
// (submitted by the admin, at incarnation 1) whose rank 0 has written
// two lines to the log store (in dir) of its agent, n1; w writes more.
// stop stops the server and closes w.
func newLogServer(dir string) (srv *httptest.Server, w *workerlog.Writer, stop func(), err error) {
	fb := newBackend(false)
	store, err := workerlog.Open(workerlog.Config{Dir: filepath.Join(dir, "logs")})
	if err != nil {
		return nil, nil, nil, err
	}
	fetch := func(_ context.Context, addr string, req *pb.LogRead) (*pb.LogChunk, error) {
		return workerlog.Answer("n1", store, req), nil
	}
	a := api.New("s1", api.Config{Backend: fb, Apps: []string{"cifar10"}, Logs: fetch, Logger: slog.New(slog.DiscardHandler)})
	srv = httptest.NewServer(a)
	c, err := client.New(client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err == nil {
		defer c.Close()
		_, err = c.Submit(context.Background(), []byte("name: train\napplication: cifar10\ninit_batch_size: 128\n"))
	}
	if err == nil {
		fb.mu.Lock()
		fb.st.Jobs["train"].Incarnation = 1
		fb.mu.Unlock()
		w, err = store.Create(workerlog.Key{Job: "train", Incarnation: 1, Rank: 0})
	}
	if err != nil {
		srv.Close()
		return nil, nil, nil, err
	}
	fmt.Fprintln(w, "epoch 0 loss 2.30")
	fmt.Fprintln(w, "epoch 1 loss 1.10")
	return srv, w, func() { srv.Close(); w.Close() }, nil
}

func TestLogs(t *testing.T) {
	srv, w, stop, err := newLogServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, tc := range []struct {
		name    string
		servers []string
		secret  string
		job     string
		q       api.LogQuery
		want    string // the lines joined by |, or the error's part
		status  int    // of an APIError
	}{
		{"all", []string{srv.URL}, adminSecret, "train", api.LogQuery{}, "epoch 0 loss 2.30|epoch 1 loss 1.10", 0},
		{"tail", []string{srv.URL}, adminSecret, "train", api.LogQuery{Tail: 1}, "epoch 1 loss 1.10", 0},
		{"first server down", []string{down(t), srv.URL}, adminSecret, "train", api.LogQuery{Incarnation: 1}, "epoch 0 loss 2.30|epoch 1 loss 1.10", 0},
		{"read token", []string{srv.URL}, readSecret, "train", api.LogQuery{}, "needs submit", http.StatusForbidden},
		{"unknown job", []string{srv.URL}, adminSecret, "nope", api.LogQuery{}, `no job "nope"`, http.StatusNotFound},
		{"rank never ran", []string{srv.URL}, adminSecret, "train", api.LogQuery{Rank: 3}, "no agent has the log", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, client.Config{Servers: tc.servers, Token: tc.secret, Timeout: 10 * time.Second})
			var got []string
			err := c.Logs(context.Background(), tc.job, tc.q, func(l api.LogLine) error {
				got = append(got, l.Line)
				if l.Incarnation != 1 || l.Rank != 0 || l.Time.IsZero() {
					t.Errorf("line %+v", l)
				}
				return nil
			})
			var refused *client.APIError
			switch {
			case tc.status != 0:
				if !errors.As(err, &refused) || refused.StatusCode != tc.status || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %d saying %q", err, tc.status, tc.want)
				}
			case err != nil:
				t.Fatal(err)
			case strings.Join(got, "|") != tc.want:
				t.Fatalf("lines %q, want %q", got, tc.want)
			}
		})
	}
	// Following: a line written later arrives; the worker's exit ends it.
	c := newClient(t, client.Config{Servers: []string{srv.URL}, Token: adminSecret, Timeout: time.Second})
	lines := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.Logs(context.Background(), "train", api.LogQuery{Incarnation: 1, Follow: true}, func(l api.LogLine) error {
			lines <- l.Line
			return nil
		})
	}()
	for _, want := range []string{"epoch 0 loss 2.30", "epoch 1 loss 1.10", "epoch 2 loss 0.70"} {
		if want == "epoch 2 loss 0.70" {
			fmt.Fprintln(w, want)
		}
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("followed %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no line %q", want)
		}
	}
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with the worker")
	}
}

func TestDecodeLogs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		lines int
		err   error
	}{
		{"lines", `{"incarnation":1,"rank":0,"time":"2026-12-06T01:00:00Z","line":"a"}` + "\n" + `{"incarnation":1,"rank":0,"time":"2026-12-06T01:00:01Z","line":"b"}` + "\n", 2, nil},
		{"blank lines", "\n\n", 0, nil},
		{"server error", `{"incarnation":1,"rank":0,"time":"0001-01-01T00:00:00Z","line":"","error":"agent n1: gone"}` + "\n", 0, client.ErrLogCut},
		{"not JSON", "hello\n", 0, errors.New("")},
		{"too long", strings.Repeat("x", 2<<20), 0, client.ErrLogCut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := client.DecodeLogs(strings.NewReader(tc.in), func(api.LogLine) error { n++; return nil })
			switch {
			case tc.err == nil && err != nil, tc.err != nil && err == nil:
				t.Fatalf("err %v, want %v", err, tc.err)
			case tc.err != nil && tc.err.Error() != "" && !errors.Is(err, tc.err):
				t.Fatalf("err %v, want %v", err, tc.err)
			case n != tc.lines:
				t.Fatalf("%d lines, want %d", n, tc.lines)
			}
		})
	}
}

func FuzzDecodeLogs(f *testing.F) {
	f.Add([]byte(`{"incarnation":1,"rank":0,"time":"2026-12-06T01:00:00Z","line":"a"}` + "\n"))
	f.Add([]byte(`{"error":"x"}` + "\n"))
	f.Add([]byte("\n{}\n[]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = client.DecodeLogs(strings.NewReader(string(b)), func(l api.LogLine) error {
			if l.Error != "" {
				t.Fatalf("a line with an error reached fn: %+v", l)
			}
			return nil
		})
	})
}

// A client prints the last line of a worker's log (rank 0 of the job's
// newest incarnation).
func ExampleClient_Logs() {
	dir, err := os.MkdirTemp("", "pollux-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, _, stop, err := newLogServer(dir) // the real API over an in-memory cluster and agent
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, err := client.New(client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	err = c.Logs(context.Background(), "train", api.LogQuery{Tail: 1}, func(l api.LogLine) error {
		fmt.Printf("incarnation %d rank %d: %s\n", l.Incarnation, l.Rank, l.Line)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// incarnation 1 rank 0: epoch 1 loss 1.10
}
