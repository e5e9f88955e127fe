package history

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := map[string]Event{
		"proc_start":   {Kind: ProcStart, Src: "harness", Role: Server, ID: "s1", PID: 10, Inc: 1},
		"restart":      {Kind: ProcStart, Src: "harness", Role: Agent, ID: "n1", PID: 10, Inc: 2, Fault: "agent-restart", FSeq: 4},
		"proc_exit":    {Kind: ProcExit, Src: "harness", Role: Agent, ID: "n1", PID: 10, Inc: 1, Exit: -1, Sig: "KILL"},
		"signal":       {Kind: Signal, Src: "harness", Role: Worker, ID: "job-a", PID: 10, Inc: 3, Sig: "STOP"},
		"worker_start": {Kind: WorkerStart, Src: "agent/n1", Node: "n1", PID: 10, Job: "a", Inc: 1, Rank: 2, GPUs: []int{0, 3}},
		"worker_stop":  {Kind: WorkerStop, Src: "harness", Node: "n1", PID: 10, Job: "a", Inc: 1},
		"commit":       {Kind: Commit, Src: "server/s1", Gen: 4, Term: 2, Index: 30, Alloc: "ab"},
		"submit":       {Kind: Submit, Src: "harness", Job: "a"},
		"complete":     {Kind: Complete, Src: "server/s2", Job: "a", Index: 31, Inc: 2},
		"report":       {Kind: Report, Src: "server/s2", Job: "a", Inc: 2, Into: 2},
		"time zero":    {T: 0, Kind: Submit, Src: "harness", Job: "a"},
	}
	for name, e := range ok {
		if err := e.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]Event{
		"unknown kind":       {Kind: "boom", Src: "h"},
		"no src":             {Kind: Submit, Job: "a"},
		"negative time":      {T: -1, Kind: Submit, Src: "h", Job: "a"},
		"missing pid":        {Kind: ProcStart, Src: "h", Role: Server, ID: "s1", Inc: 1},
		"missing inc":        {Kind: WorkerStart, Src: "h", Node: "n", PID: 1, Job: "a", GPUs: []int{0}},
		"missing gpus":       {Kind: WorkerStart, Src: "h", Node: "n", PID: 1, Job: "a", Inc: 1},
		"extra field":        {Kind: Submit, Src: "h", Job: "a", Gen: 3},
		"fault on commit":    {Kind: Commit, Src: "h", Gen: 1, Term: 1, Index: 1, Alloc: "x", Fault: "leader-kill"},
		"fseq without fault": {Kind: Signal, Src: "h", Role: Server, ID: "s", PID: 1, Inc: 1, Sig: "KILL", FSeq: 2},
		"unknown role":       {Kind: ProcStart, Src: "h", Role: "judge", ID: "s", PID: 1, Inc: 1},
		"worker proc_start":  {Kind: ProcStart, Src: "h", Role: Worker, ID: "s", PID: 1, Inc: 1},
		"unknown signal":     {Kind: Signal, Src: "h", Role: Server, ID: "s", PID: 1, Inc: 1, Sig: "SIGKILL"},
		"negative pid":       {Kind: ProcStart, Src: "h", Role: Server, ID: "s", PID: -4, Inc: 1},
		"negative gpu":       {Kind: WorkerStart, Src: "h", Node: "n", PID: 1, Job: "a", Inc: 1, GPUs: []int{-1}},
		"gpu twice":          {Kind: WorkerStart, Src: "h", Node: "n", PID: 1, Job: "a", Inc: 1, GPUs: []int{1, 1}},
		"space in job":       {Kind: Submit, Src: "h", Job: "a b"},
		"long job":           {Kind: Submit, Src: "h", Job: strings.Repeat("j", MaxName+1)},
	}
	for name, e := range bad {
		if err := e.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func TestDecodeFile(t *testing.T) {
	events, err := ReadFile("testdata/run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 10 {
		t.Fatalf("decoded %d events, want 10", len(events))
	}
	w := events[4]
	if w.Kind != WorkerStart || w.Node != "n1" || w.PID != 4200 || w.Inc != 1 || len(w.GPUs) != 2 || w.T != 3500*time.Microsecond {
		t.Errorf("worker_start decoded as %+v", w)
	}
	// Encoding the decoded events reproduces the file byte for byte.
	var buf bytes.Buffer
	for i := range events {
		b, err := Encode(&events[i])
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
	}
	want, _ := os.ReadFile("testdata/run.jsonl")
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("re-encoding differs:\n%s\nwant:\n%s", buf.Bytes(), want)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := `{"t":1,"kind":"submit","src":"h","job":"a"}` + "\n"
	cases := map[string]struct {
		in   string
		line int
	}{
		"bad json":         {good + "{\"t\":\n", 2},
		"unknown field":    {good + good + `{"t":1,"kind":"submit","src":"h","job":"a","color":"red"}` + "\n", 3},
		"torn last line":   {good + `{"t":1,"kind":"sub`, 2},
		"no newline":       {strings.TrimSuffix(good, "\n"), 1},
		"two objects":      {strings.TrimSuffix(good, "\n") + good, 1},
		"empty line":       {good + "\n" + good, 2},
		"too long":         {good + `{"t":1,"kind":"submit","src":"h","job":"` + strings.Repeat("a", MaxLine) + "\"}\n", 2},
		"invalid event":    {`{"t":1,"kind":"submit","src":"h"}` + "\n", 1},
		"float time":       {`{"t":1.5,"kind":"submit","src":"h","job":"a"}` + "\n", 1},
		"array":            {"[]\n", 1},
		"string for pid":   {`{"t":1,"kind":"proc_start","src":"h","role":"server","id":"s","pid":"7","inc":1}` + "\n", 1},
		"negative uint":    {`{"t":1,"kind":"report","src":"h","job":"a","inc":-1,"into":1}` + "\n", 1},
		"binary garbage":   {good + "\x00\xff\xfe\n", 2},
		"null then object": {"null\n", 1},
	}
	for name, c := range cases {
		_, err := Decode(strings.NewReader(c.in), "h.jsonl")
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
			continue
		}
		if want := fmt.Sprintf("h.jsonl:%d:", c.line); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not name %s", name, err, want)
		}
	}
	if ev, err := Decode(strings.NewReader(""), "empty"); err != nil || len(ev) != 0 {
		t.Errorf("empty history: %v, %v", ev, err)
	}
}

func TestEncodeTooLong(t *testing.T) {
	gpus := make([]int, MaxGPUs)
	for i := range gpus {
		gpus[i] = i
	}
	e := Event{Kind: WorkerStart, Src: "agent/n1", Node: "n1", PID: 1, Job: "a", Inc: 1, GPUs: gpus}
	if _, err := Encode(&e); !errors.Is(err, ErrTooLong) {
		t.Errorf("got %v, want ErrTooLong", err)
	}
}

type fixedClock struct{ t time.Duration }

func (c *fixedClock) Now() time.Duration { return c.t }

// Writers with their own file descriptions append concurrently; every
// line decodes and none is lost.
func TestConcurrentRecorders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	const writers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Open(path, fmt.Sprintf("agent/n%d", w), &fixedClock{t: time.Duration(w)})
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			for i := range each {
				// Long-ish lines make interleaving visible if it happened.
				job := fmt.Sprintf("job-%d-%d-%s", w, i, strings.Repeat("x", 100))
				if err := r.Record(Event{Kind: Submit, Job: job}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	events, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != writers*each {
		t.Fatalf("%d events, want %d", len(events), writers*each)
	}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Src != fmt.Sprintf("agent/n%d", e.T) {
			t.Fatalf("event %+v stamped by the wrong recorder", e)
		}
		seen[e.Job] = true
	}
	if len(seen) != writers*each {
		t.Errorf("%d distinct jobs, want %d", len(seen), writers*each)
	}
}

func TestRecorderRejectsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	r, err := Open(path, "harness", &fixedClock{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Record(Event{Kind: Submit}); !errors.Is(err, ErrMalformed) {
		t.Errorf("got %v, want ErrMalformed", err)
	}
	if err := r.RecordAt(7, Event{Kind: Submit, Job: "a"}); err != nil {
		t.Fatal(err)
	}
	events, err := ReadFile(path)
	if err != nil || len(events) != 1 || events[0].T != 7 || events[0].Src != "harness" {
		t.Errorf("got %+v, %v", events, err)
	}
	if _, err := Open(path, "has space", &fixedClock{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad src: got %v", err)
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	if err := r.Record(Event{Kind: Submit, Job: "a"}); err != nil {
		t.Error(err)
	}
	if r.Now() != 0 || r.Close() != nil {
		t.Error("nil recorder is not a no-op")
	}
}

func TestMonotonicAndEnv(t *testing.T) {
	clock, err := NewEpoch()
	if err != nil {
		t.Fatal(err)
	}
	a := clock.Now()
	time.Sleep(time.Millisecond)
	b := clock.Now()
	if a < 0 || b-a < time.Millisecond {
		t.Errorf("readings %v then %v after a 1 ms sleep", a, b)
	}
	path := filepath.Join(t.TempDir(), "h.jsonl")
	for _, kv := range clock.Env(path) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	r, err := FromEnv("server/s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Record(Event{Kind: Submit, Job: "a"}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	events, err := ReadFile(path)
	if err != nil || len(events) != 1 || events[0].T < b || events[0].Src != "server/s1" {
		t.Errorf("got %+v, %v (clock read %v before)", events, err, b)
	}

	t.Setenv(EnvEpoch, "soon")
	if _, err := FromEnv("server/s1"); !errors.Is(err, ErrEnv) {
		t.Errorf("bad epoch: got %v", err)
	}
	t.Setenv(EnvFile, "")
	if r, err := FromEnv("server/s1"); r != nil || err != nil {
		t.Errorf("no history: got %v, %v", r, err)
	}
}

func TestSortStable(t *testing.T) {
	ev := []Event{{T: 5, Job: "c"}, {T: 1, Job: "a"}, {T: 5, Job: "d"}, {T: 1, Job: "b"}}
	Sort(ev)
	got := ""
	for _, e := range ev {
		got += e.Job
	}
	if got != "abcd" {
		t.Errorf("order %q", got)
	}
}

func FuzzDecode(f *testing.F) {
	data, err := os.ReadFile("testdata/run.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		f.Add(line)
	}
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"t":1,"kind":"worker_start","src":"a","node":"n","pid":1,"job":"j","inc":1,"gpus":[0,0]}` + "\n"))
	f.Add([]byte("\x00garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		events, err := Decode(bytes.NewReader(in), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes re-encodes, and decodes to the same events.
		var buf bytes.Buffer
		for i := range events {
			b, err := Encode(&events[i])
			if err != nil {
				t.Fatalf("decoded event %+v does not encode: %v", events[i], err)
			}
			buf.Write(b)
		}
		again, err := Decode(&buf, "re-encoded")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again) != fmt.Sprint(events) {
			t.Fatalf("round trip changed events:\n%v\n%v", events, again)
		}
	})
}

// BenchmarkRecord measures one appended commit event (encode + write(2)):
// what every server pays per applied allocation when the harness records.
func BenchmarkRecord(b *testing.B) {
	clock, err := NewEpoch()
	if err != nil {
		b.Fatal(err)
	}
	r, err := Open(filepath.Join(b.TempDir(), "h.jsonl"), "server/s1", clock)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	e := Event{Kind: Commit, Gen: 1234, Term: 7, Index: 98765, Alloc: "3f2a9c0d11e2b7a4", Leader: "s2"}
	for b.Loop() {
		if err := r.Record(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	data, err := os.ReadFile("testdata/run.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	big := bytes.Repeat(data, 100)
	b.SetBytes(int64(len(big)))
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(big), "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
