package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/consensus/state"
)

// runJob submits job resnet with c and places it on 1, then 2 GPUs of
// n1 (as the allocator's rounds would).
func runJob(c *client.Client, fb *fakeBackend) error {
	if _, err := c.Submit(context.Background(), []byte("name: resnet\napplication: cifar10\ninit_batch_size: 128\n")); err != nil {
		return err
	}
	for i, k := range []int{1, 2} {
		r := &state.Round{Generation: uint64(3 + i), Term: 1, Time: float64(1_700_000_100 + 10*i),
			Jobs: map[string][]state.Slot{"resnet": {{Node: "n1", GPUs: k}}}}
		if err := fb.ApplyCommand(context.Background(), r); err != nil {
			return err
		}
	}
	return nil
}

// A client lists a job's events, each with its reason.
func ExampleClient_Events() {
	srv, fb := newServer()
	defer srv.Close()
	c, err := client.New(client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := runJob(c, fb); err != nil {
		fmt.Println(err)
		return
	}
	evs, err := c.Events(context.Background(), "resnet", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ev := range evs.Events {
		fmt.Printf("%d %s: %s\n", ev.Seq, ev.Type, ev.Reason)
	}
	// Output:
	// 1 submitted: submitted by bootstrap for 1 to 64 GPUs
	// 3 placed: placed on 1 GPU on n1 (1) (generation 3, incarnation 1)
	// 4 resized: resized from 1 GPU on n1 (1) to 2 GPUs on n1 (2) (incarnation 2): the allocator's new allocation (generation 4)
}

// TestFollowEventsResumesOnAnotherServer: a stream that breaks or ends
// after an event, before the job's end, is resumed on the next server
// after that event (Last-Event-ID),
// nothing is delivered twice, events written meanwhile arrive, and
// following a job ends when it has finished.
func TestFollowEventsResumesOnAnotherServer(t *testing.T) {
	for _, abort := range []bool{true, false} {
		t.Run(fmt.Sprintf("abort=%v", abort), func(t *testing.T) { followAcrossServers(t, abort) })
	}
}

// followAcrossServers follows a job whose first server sends one event,
// then dies (abort) or ends the stream (not abort).
func followAcrossServers(t *testing.T, abort bool) {
	srv, fb := newServer()
	defer srv.Close()
	admin := newClient(t, client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err := runJob(admin, fb); err != nil {
		t.Fatal(err)
	}

	// The first server sends the first event, then dies mid-stream or
	// ends the stream.
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evs, _ := fb.LocalEvents("resnet", 0, 1)
		data, _ := json.Marshal(api.EventOf(evs[0]))
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", evs[0].Seq, evs[0].Type, data)
		w.(http.Flusher).Flush()
		if abort {
			panic(http.ErrAbortHandler)
		}
	}))
	defer first.Close()
	var mu sync.Mutex
	var resumedAfter []string
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumedAfter = append(resumedAfter, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer second.Close()

	c := newClient(t, client.Config{Servers: []string{first.URL, second.URL}, Token: readSecret, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	err := c.FollowEvents(ctx, "resnet", 0, func(ev api.Event) error {
		got = append(got, fmt.Sprintf("%d %s", ev.Seq, ev.Type))
		if ev.Type == "resized" {
			// Written while the client follows.
			return fb.ApplyCommand(context.Background(), &state.FinishJob{ID: "resnet", State: state.Completed, Reason: "trained", Time: 1_700_000_200})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1 submitted", "3 placed", "4 resized", "5 completed"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumedAfter) != 1 || resumedAfter[0] != "1" {
		t.Errorf("the second server was asked after %q, want once after 1", resumedAfter)
	}
}

// TestFollowEventsRefusals: an unknown job is a refusal at once, a
// callback's error ends the stream as it is, and servers that all fail
// are ErrUnavailable.
func TestFollowEventsRefusals(t *testing.T) {
	srv, fb := newServer()
	defer srv.Close()
	c := newClient(t, client.Config{Servers: []string{srv.URL}, Token: readSecret, Timeout: 30 * time.Second})
	var refused *client.APIError
	if err := c.FollowEvents(context.Background(), "nope", 0, func(api.Event) error { return nil }); !errors.As(err, &refused) || refused.StatusCode != http.StatusNotFound {
		t.Errorf("unknown job: %v", err)
	}
	if err := runJob(newClient(t, client.Config{Servers: []string{srv.URL}, Token: adminSecret}), fb); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	if err := c.FollowEvents(context.Background(), "", 0, func(api.Event) error { return stop }); err != stop {
		t.Errorf("callback error: %v", err)
	}
	dead := newClient(t, client.Config{Servers: []string{down(t)}, Token: readSecret, Timeout: 30 * time.Second})
	if err := dead.FollowEvents(context.Background(), "", 0, func(api.Event) error { return nil }); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("no server: %v", err)
	}
}

// TestWriteEvents prints events one a line.
func TestWriteEvents(t *testing.T) {
	var b strings.Builder
	err := client.WriteEvents(&b, api.Events{Events: []api.Event{
		{Seq: 7, Time: 1_700_000_000, Type: "placed", Job: "j1", Reason: "placed on 2 GPUs"},
		{Seq: 8, Time: 1_700_000_001, Type: "node_lost", Node: "n2", Reason: "node n2 is dead"},
		{Seq: 9, Time: 1_700_000_002, Type: "leader_changed", Reason: "server s2 leads in term 3"}}})
	want := "7\t2023-11-14T22:13:20Z\tplaced    \tj1\tplaced on 2 GPUs\n8\t2023-11-14T22:13:21Z\tnode_lost \tnode n2\tnode n2 is dead\n" +
		"9\t2023-11-14T22:13:22Z\tleader_changed\tcluster\tserver s2 leads in term 3\n"
	if err != nil || b.String() != want {
		t.Errorf("%q, %v", b.String(), err)
	}
	b.Reset()
	if err := client.WriteEvents(&b, api.Events{}); err != nil || b.String() != "no events\n" {
		t.Errorf("%q, %v", b.String(), err)
	}
}
