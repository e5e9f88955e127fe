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
)

func TestValidate(t *testing.T) {
	ok := map[string]Line{
		"invoke":       {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Submit, Server: "s0", Job: "a"}},
		"created":      {T: 1, Op: &Op{Type: OK, ID: 1, F: Submit, Job: "a", Code: 201}},
		"exists":       {T: 1, Op: &Op{Type: OK, ID: 1, F: Submit, Job: "a", Code: 409}},
		"refused":      {T: 1, Op: &Op{Type: Fail, ID: 1, F: Submit, Job: "a", Code: 400, Error: "bad spec"}},
		"timeout":      {T: 1, Op: &Op{Type: Info, ID: 1, F: Cancel, Job: "a", Error: "timeout"}},
		"unavailable":  {T: 1, Op: &Op{Type: Info, ID: 1, F: Submit, Job: "a", Code: 503}},
		"empty list":   {T: 1, Op: &Op{Type: OK, ID: 2, F: Jobs, Code: 200}},
		"job found":    {T: 1, Op: &Op{Type: OK, ID: 2, F: GetJob, Job: "a", Code: 200, Jobs: []Job{{ID: "a", State: "cancelled"}}}},
		"job absent":   {T: 1, Op: &Op{Type: OK, ID: 2, F: GetJob, Job: "a", Code: 404, Stale: true}},
		"list":         {T: 1, Op: &Op{Type: OK, ID: 2, F: Jobs, Code: 200, Stale: true, Jobs: []Job{{ID: "a", State: "failed", Reason: "crash loop"}}}},
		"status":       {T: 1, Op: &Op{Type: OK, ID: 2, F: Status, Code: 200, Status: &StatusView{Serving: "s1", Term: 3}}},
		"run begin":    {T: 1, Ev: &Event{Kind: RunBegin, Scenario: "x", Planned: []Planned{{0, "leader-kill"}, {1, "leader-kill"}}}},
		"start":        {T: 1, Ev: &Event{Kind: ProcStart, Role: Agent, ID: "a0", PID: 3, Inc: 1}},
		"exit 0":       {T: 1, Ev: &Event{Kind: ProcExit, Role: Agent, ID: "a0", PID: 3, Inc: 1}},
		"kill worker":  {T: 1, Ev: &Event{Kind: Signal, Role: Worker, ID: "j", Node: "a0", PID: 3, Inc: 1, Sig: "KILL", Fault: "worker-kill", Seq: 4}},
		"worker gone":  {T: 1, Ev: &Event{Kind: WorkerGone, Node: "a0", Job: "j", PID: 3, Inc: 1, Rank: 2}},
		"fault begin":  {T: 1, Ev: &Event{Kind: FaultBegin, Fault: "leader-pause", Targets: []string{"s1"}, Leader: "s1", Deposes: true}},
		"disk":         {T: 1, Ev: &Event{Kind: Disk, Fault: "disk-full", Detail: "fill", Targets: []string{"s1"}}},
		"planned none": {T: 1, Ev: &Event{Kind: RunBegin, Scenario: "x"}},
	}
	for name, l := range ok {
		if err := l.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]Line{
		"no time":               {Op: &Op{Type: Invoke, ID: 1, F: Submit, Server: "s0", Job: "a"}},
		"both":                  {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Jobs, Server: "s0"}, Ev: &Event{Kind: RunEnd}},
		"neither":               {T: 1},
		"unknown f":             {T: 1, Op: &Op{Type: Invoke, ID: 1, F: "delete", Server: "s0"}},
		"unknown type":          {T: 1, Op: &Op{Type: "maybe", ID: 1, F: Jobs}},
		"no id":                 {T: 1, Op: &Op{Type: Invoke, F: Jobs, Server: "s0"}},
		"invoke without server": {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Jobs}},
		"submit without job":    {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Submit, Server: "s0"}},
		"jobs with job":         {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Jobs, Server: "s0", Job: "a"}},
		"ok with 500":           {T: 1, Op: &Op{Type: OK, ID: 1, F: Submit, Job: "a", Code: 500}},
		"ok cancel 409":         {T: 1, Op: &Op{Type: OK, ID: 1, F: Cancel, Job: "a", Code: 409}},
		"job read of no job":    {T: 1, Op: &Op{Type: Invoke, ID: 1, F: GetJob, Server: "s0"}},
		"job found without it":  {T: 1, Op: &Op{Type: OK, ID: 1, F: GetJob, Job: "a", Code: 200}},
		"job found, another":    {T: 1, Op: &Op{Type: OK, ID: 1, F: GetJob, Job: "a", Code: 200, Jobs: []Job{{ID: "b", State: "running"}}}},
		"job absent with it":    {T: 1, Op: &Op{Type: OK, ID: 1, F: GetJob, Job: "a", Code: 404, Jobs: []Job{{ID: "a", State: "running"}}}},
		"ok jobs 404":           {T: 1, Op: &Op{Type: OK, ID: 1, F: Jobs, Code: 404}},
		"fail with 503":         {T: 1, Op: &Op{Type: Fail, ID: 1, F: Submit, Job: "a", Code: 503}},
		"invoke with code":      {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Jobs, Server: "s", Code: 200}},
		"status without answer": {T: 1, Op: &Op{Type: OK, ID: 1, F: Status, Code: 200}},
		"stale submit":          {T: 1, Op: &Op{Type: OK, ID: 1, F: Submit, Job: "a", Code: 201, Stale: true}},
		"jobs on a failure":     {T: 1, Op: &Op{Type: Info, ID: 1, F: Jobs, Jobs: []Job{{ID: "a", State: "running"}}}},
		"unknown state":         {T: 1, Op: &Op{Type: OK, ID: 1, F: Jobs, Code: 200, Jobs: []Job{{ID: "a", State: "zombie"}}}},
		"job twice":             {T: 1, Op: &Op{Type: OK, ID: 1, F: Jobs, Code: 200, Jobs: []Job{{ID: "a", State: "running"}, {ID: "a", State: "running"}}}},
		"negative progress":     {T: 1, Op: &Op{Type: OK, ID: 1, F: Jobs, Code: 200, Jobs: []Job{{ID: "a", State: "running", Progress: -1}}}},
		"unknown event":         {T: 1, Ev: &Event{Kind: "boom"}},
		"start without pid":     {T: 1, Ev: &Event{Kind: ProcStart, Role: Agent, ID: "a0", Inc: 1}},
		"worker proc_start":     {T: 1, Ev: &Event{Kind: ProcStart, Role: Worker, ID: "a0", PID: 1, Inc: 1}},
		"signal without sig":    {T: 1, Ev: &Event{Kind: Signal, Role: Agent, ID: "a0", PID: 1, Inc: 1}},
		"unknown signal":        {T: 1, Ev: &Event{Kind: Signal, Role: Agent, ID: "a0", PID: 1, Inc: 1, Sig: "SIGKILL"}},
		"gone without node":     {T: 1, Ev: &Event{Kind: WorkerGone, Job: "j", PID: 3, Inc: 1}},
		"alive on a start":      {T: 1, Ev: &Event{Kind: ProcStart, Role: Agent, ID: "a0", PID: 3, Inc: 1, Alive: 5}},
		"negative alive":        {T: 1, Ev: &Event{Kind: WorkerGone, Node: "n", Job: "j", PID: 3, Inc: 1, Alive: -1}},
		"fault without kind":    {T: 1, Ev: &Event{Kind: FaultBegin, Seq: 2}},
		"net without detail":    {T: 1, Ev: &Event{Kind: Net, Fault: "x"}},
		"exit on start":         {T: 1, Ev: &Event{Kind: ProcStart, Role: Agent, ID: "a0", PID: 3, Inc: 1, Exit: 2}},
		"scenario on end":       {T: 1, Ev: &Event{Kind: RunEnd, Scenario: "x"}},
		"planned twice":         {T: 1, Ev: &Event{Kind: RunBegin, Scenario: "x", Planned: []Planned{{1, "a"}, {1, "b"}}}},
		"leader on end":         {T: 1, Ev: &Event{Kind: FaultEnd, Fault: "x", Leader: "s0"}},
		"space in id":           {T: 1, Ev: &Event{Kind: ProcStart, Role: Agent, ID: "a 0", PID: 3, Inc: 1}},
		"long job":              {T: 1, Op: &Op{Type: Invoke, ID: 1, F: Submit, Server: "s", Job: strings.Repeat("j", MaxName+1)}},
	}
	for name, l := range bad {
		if err := l.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func TestDecodeFile(t *testing.T) {
	lines, err := ReadFile("testdata/run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 24 {
		t.Fatalf("%d lines, want 24", len(lines))
	}
	if o := lines[5].Op; o == nil || o.Type != OK || len(o.Jobs) != 1 || o.Jobs[0].Progress != 210.5 {
		t.Errorf("jobs answer decoded as %+v", lines[5])
	}
	if e := lines[0].Ev; e == nil || e.Kind != RunBegin || len(e.Planned) != 2 || e.Planned[1].Fault != "partition-2-1" {
		t.Errorf("run begin decoded as %+v", lines[0])
	}
	// Encoding what was decoded reproduces the file byte for byte.
	var buf bytes.Buffer
	for i := range lines {
		b, err := Encode(&lines[i])
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
	good := `{"t":5,"ev":{"kind":"run_end"}}` + "\n"
	cases := map[string]struct {
		in   string
		line int
	}{
		"bad json":        {good + "{\"t\":\n", 2},
		"unknown field":   {good + `{"t":5,"ev":{"kind":"run_end","color":1}}` + "\n", 2},
		"torn last line":  {good + `{"t":6,"ev":{"ki`, 2},
		"no newline":      {strings.TrimSuffix(good, "\n"), 1},
		"two objects":     {strings.TrimSuffix(good, "\n") + good, 1},
		"empty line":      {good + "\n", 2},
		"time backwards":  {good + `{"t":4,"ev":{"kind":"run_end"}}` + "\n", 2},
		"invalid line":    {`{"t":5}` + "\n", 1},
		"float time":      {`{"t":5.5,"ev":{"kind":"run_end"}}` + "\n", 1},
		"array":           {"[]\n", 1},
		"negative uint":   {`{"t":5,"op":{"type":"invoke","id":-1,"client":0,"f":"jobs","server":"s"}}` + "\n", 1},
		"binary garbage":  {good + "\x00\xff\xfe\n", 2},
		"null":            {"null\n", 1},
		"too long":        {good + `{"t":6,"ev":{"kind":"net","fault":"x","detail":"` + strings.Repeat("d", MaxLine) + "\"}}\n", 2},
		"string for code": {`{"t":5,"op":{"type":"ok","id":1,"client":0,"f":"jobs","code":"200"}}` + "\n", 1},
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
	if ls, err := Decode(strings.NewReader(""), "empty"); err != nil || len(ls) != 0 {
		t.Errorf("empty input: %v, %v", ls, err)
	}
}

func TestRecorder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	r, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path); !errors.Is(err, ErrIO) {
		t.Errorf("a second recorder on the same file: %v", err)
	}
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id := r.NextID()
				if _, err := r.Op(Op{Type: Invoke, ID: id, Client: w, F: Jobs, Server: "s0"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// An invalid line is refused, and the refusal sticks.
	if _, err := r.Event(Event{Kind: "boom"}); !errors.Is(err, ErrMalformed) {
		t.Errorf("invalid event: %v", err)
	}
	if _, err := r.Event(Event{Kind: RunEnd}); !errors.Is(err, ErrMalformed) || !errors.Is(r.Err(), ErrMalformed) {
		t.Errorf("after an error: %v, Err %v", err, r.Err())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	ids := map[uint64]bool{}
	for _, l := range lines {
		ids[l.Op.ID] = true
	}
	if len(ids) != writers*each {
		t.Errorf("%d distinct ids", len(ids))
	}
	r2, _ := Create(filepath.Join(t.TempDir(), "x"))
	r2.Close()
	if _, err := r2.Event(Event{Kind: RunEnd}); !errors.Is(err, ErrIO) {
		t.Errorf("closed recorder: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, err := os.ReadFile("testdata/run.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lines, err := Decode(bytes.NewReader(in), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrIO) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		for i := range lines {
			if err := lines[i].Validate(); err != nil {
				t.Fatalf("decoded an invalid line: %v", err)
			}
			if i > 0 && lines[i].T < lines[i-1].T {
				t.Fatal("decoded out of order")
			}
		}
	})
}

// BenchmarkDecode decodes 10,000 lines: jobs reads of 20 jobs each, the
// bulk of a long run's history.
func BenchmarkDecode(b *testing.B) {
	var buf bytes.Buffer
	jobs := make([]Job, 20)
	for i := range jobs {
		jobs[i] = Job{ID: fmt.Sprintf("m-%02d-cifar10", i), State: "running", Inc: 3, Epoch: 17, Progress: 6721.5024943469725}
	}
	for i := range 5000 {
		inv := Line{T: int64(2*i + 1), Op: &Op{Type: Invoke, ID: uint64(i + 1), Client: 1, F: Jobs, Server: "s0"}}
		ok := Line{T: int64(2*i + 2), Op: &Op{Type: OK, ID: uint64(i + 1), Client: 1, F: Jobs, Code: 200, Jobs: jobs}}
		for _, l := range []*Line{&inv, &ok} {
			e, err := Encode(l)
			if err != nil {
				b.Fatal(err)
			}
			buf.Write(e)
		}
	}
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for b.Loop() {
		if ls, err := Decode(bytes.NewReader(buf.Bytes()), "bench"); err != nil || len(ls) != 10000 {
			b.Fatal(len(ls), err)
		}
	}
}
