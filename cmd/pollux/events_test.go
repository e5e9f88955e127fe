package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// eventsBackend is the part of a consensus server the events endpoint
// reads, over a state in memory (the other methods are not called).
type eventsBackend struct {
	api.Backend
	mu sync.Mutex
	st *state.State
}

func (b *eventsBackend) Leadership() (uint64, bool) { return 1, true }
func (b *eventsBackend) LocalJob(id string) (*state.Job, state.ClusterConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j := b.st.Jobs[id]; j != nil {
		return j.Clone(), b.st.Config
	}
	return nil, b.st.Config
}
func (b *eventsBackend) LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st.Events.Since(job, since, limit), b.st.Events.LastSeq()
}

// eventsServer serves the API (--insecure) over a state where job j was
// submitted, placed, checkpointed, resized and completed.
func eventsServer(t *testing.T) string {
	t.Helper()
	st := state.New()
	spec := state.JobSpec{Name: "j", App: "cifar10", MinReplicas: 1, MaxReplicas: 4, CheckpointDir: "/ckpt/j"}
	spec.Limits.InitBatch, spec.Limits.MaxBatch, spec.Limits.MinLocal, spec.Limits.MaxLocal = 128, 1024, 32, 256
	for _, c := range []state.Command{
		&state.RegisterNode{Node: state.Node{ID: "n1", GPUs: 4, Health: state.Alive}},
		&state.SubmitJob{ID: "j", Spec: spec, SubmitTime: 1_700_000_000},
		&state.Round{Generation: 1, Term: 1, Time: 1_700_000_010, Jobs: map[string][]state.Slot{"j": {{Node: "n1", GPUs: 1}}}},
		&state.Round{Generation: 2, Term: 1, Time: 1_700_000_020, Jobs: map[string][]state.Slot{"j": {{Node: "n1", GPUs: 2}}},
			Updates: []state.RoundJob{{ID: "j", Incarnation: 1, HasMeas: true, Meas: state.Measurement{Session: 1, To: 1, Epoch: 3, Progress: 300,
				Checkpoint: state.Checkpoint{Incarnation: 1, Epoch: 3, Progress: 300, Time: 1_700_000_015}}}}},
		&state.FinishJob{ID: "j", State: state.Completed, Reason: "trained 10 epochs", Time: 1_700_000_030},
	} {
		if _, err := state.ApplyTo(st, c, 1); err != nil {
			t.Fatal(err)
		}
	}
	a := api.New("s1", api.Config{Backend: &eventsBackend{st: st}, Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestEventsCommand: pollux events --job JOB --json prints one object
// listing the job's events in order, each with its reason; with -f, one
// object a line, ending when the job has finished; bad input exits 2.
func TestEventsCommand(t *testing.T) {
	url := eventsServer(t)
	code, out := runOut("events", "--server", url, "--job", "j", "--json")
	if code != 0 {
		t.Fatalf("events --json: %d %s", code, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var got struct {
		Events []api.Event `json:"events"`
	}
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		t.Errorf("more than one object on stdout: %q", out)
	}
	var types []string
	for _, ev := range got.Events {
		types = append(types, ev.Type)
		if ev.Reason == "" || ev.Job != "j" {
			t.Errorf("event %+v", ev)
		}
	}
	if strings.Join(types, " ") != "submitted placed checkpointed resized completed" || !strings.Contains(got.Events[2].Reason, "checkpoint at epoch 3") {
		t.Errorf("events of j: %v", types)
	}

	code, out = runOut("events", "--server", url, "--job", "j", "-f", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(types) {
		t.Fatalf("events -f --json: %d %q", code, out)
	}
	for i, line := range lines {
		var ev api.Event
		if err := json.NewDecoder(bytes.NewReader([]byte(line))).Decode(&ev); err != nil || ev.Type != types[i] {
			t.Errorf("line %d: %q (%v)", i, line, err)
		}
	}
	if code, out := runOut("events", "--server", url); code != 0 || !strings.Contains(out, "resized") || !strings.Contains(out, "trained 10 epochs") {
		t.Errorf("events: %d %s", code, out)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"an argument", []string{"events", "j", "--server", url}},
		{"unknown job", []string{"events", "--job", "nope", "--server", url}},
		{"unknown flag", []string{"events", "--jobs", "j", "--server", url}},
	} {
		if code, out := runOut(tc.args...); code != 2 {
			t.Errorf("%s: exit %d (%s), want 2", tc.name, code, out)
		}
	}
}
