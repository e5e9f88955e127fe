package record

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/testbed/chaos/mono"
)

func TestValidate(t *testing.T) {
	id := Record{Job: "a", Inc: 1, Rank: 0, PID: 10, T: 5}
	with := func(f func(*Record)) Record {
		r := id
		f(&r)
		return r
	}
	ok := map[string]Record{
		"start":        with(func(r *Record) { r.Kind, r.Boot, r.GPUs = Start, 9, []int{0, 2} }),
		"fresh":        with(func(r *Record) { r.Kind, r.T0, r.Fresh = Restore, 4, true }),
		"restore":      with(func(r *Record) { r.Kind, r.T0, r.From, r.Epoch, r.Progress = Restore, 5, 3, 2, 10.5 }),
		"checkpoint 0": with(func(r *Record) { r.Kind, r.T0 = Checkpoint, 1 }),
		"finished":     with(func(r *Record) { r.Kind, r.T0, r.Finished, r.Epoch = Checkpoint, 1, true, 9 }),
		"done":         with(func(r *Record) { r.Kind, r.Epoch, r.Progress = Done, 3, 30 }),
		"exit":         with(func(r *Record) { r.Kind, r.Code = Exit, -1 }),
	}
	for name, r := range ok {
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]Record{
		"unknown kind":         with(func(r *Record) { r.Kind = "boom" }),
		"no time":              with(func(r *Record) { r.Kind, r.T = Exit, 0 }),
		"no job":               with(func(r *Record) { r.Kind, r.Job = Exit, "" }),
		"space in job":         with(func(r *Record) { r.Kind, r.Job = Exit, "a b" }),
		"long job":             with(func(r *Record) { r.Kind, r.Job = Exit, strings.Repeat("j", MaxName+1) }),
		"no pid":               with(func(r *Record) { r.Kind, r.PID = Exit, 0 }),
		"negative rank":        with(func(r *Record) { r.Kind, r.Rank = Exit, -1 }),
		"start without boot":   with(func(r *Record) { r.Kind, r.GPUs = Start, []int{0} }),
		"gpus on exit":         with(func(r *Record) { r.Kind, r.GPUs = Exit, []int{0} }),
		"gpu twice":            with(func(r *Record) { r.Kind, r.Boot, r.GPUs = Start, 1, []int{1, 1} }),
		"gpu out of range":     with(func(r *Record) { r.Kind, r.Boot, r.GPUs = Start, 1, []int{MaxGPUs} }),
		"restore without t0":   with(func(r *Record) { r.Kind, r.Fresh = Restore, true }),
		"t0 after t":           with(func(r *Record) { r.Kind, r.T0, r.Fresh = Restore, 6, true }),
		"t0 on done":           with(func(r *Record) { r.Kind, r.T0 = Done, 1 }),
		"fresh with progress":  with(func(r *Record) { r.Kind, r.T0, r.Fresh, r.Progress = Restore, 1, true, 3 }),
		"from on checkpoint":   with(func(r *Record) { r.Kind, r.T0, r.From = Checkpoint, 1, 2 }),
		"progress on start":    with(func(r *Record) { r.Kind, r.Boot, r.Progress = Start, 1, 1 }),
		"negative epoch":       with(func(r *Record) { r.Kind, r.Epoch = Done, -1 }),
		"negative progress":    with(func(r *Record) { r.Kind, r.Progress = Done, -0.5 }),
		"finished on done":     with(func(r *Record) { r.Kind, r.Finished = Done, true }),
		"code on done":         with(func(r *Record) { r.Kind, r.Code = Done, 1 }),
		"checkpoint negative0": with(func(r *Record) { r.Kind, r.T0 = Checkpoint, -1 }),
	}
	for name, r := range bad {
		if err := r.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func TestReadRoot(t *testing.T) {
	ws, err := ReadRoot("testdata/root")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("%d workers, want 3", len(ws))
	}
	a := ws[0]
	if a.Node != "n1" || len(a.Records) != 6 || a.Torn || a.Start().GPUs[1] != 1 || a.Records[1].From != 1 || a.Records[1].Progress != 300.5 {
		t.Errorf("worker a: %+v", a)
	}
	if d, ok := a.Find(Done); !ok || d.Epoch != 5 {
		t.Errorf("done of a: %+v %v", d, ok)
	}
	if b := ws[1]; b.Node != "n2" || b.Records[1].Code != 3 {
		t.Errorf("worker b: %+v", b)
	}
	if c := ws[2]; !c.Torn || len(c.Records) != 1 {
		t.Errorf("worker c should be torn after its start: %+v", c)
	}
}

func TestDecodeErrors(t *testing.T) {
	start := `{"t":10,"kind":"start","job":"a","inc":1,"rank":0,"pid":7,"boot":1,"gpus":[0]}` + "\n"
	exit := `{"t":20,"kind":"exit","job":"a","inc":1,"rank":0,"pid":7}` + "\n"
	cases := map[string]struct {
		in   string
		line int
	}{
		"empty":            {"", 0},
		"only a torn line": {`{"t":10,"kind":"st`, 0},
		"no start first":   {exit, 1},
		"second start":     {start + start, 2},
		"after exit":       {start + exit + exit, 3},
		"other worker":     {start + strings.Replace(exit, `"pid":7`, `"pid":8`, 1), 2},
		"time backwards":   {start + strings.Replace(exit, `"t":20`, `"t":5`, 1), 2},
		"unknown field":    {start + strings.Replace(exit, `"pid":7`, `"pid":7,"color":1`, 1), 2},
		"two restores": {start + `{"t":11,"t0":11,"kind":"restore","job":"a","inc":1,"rank":0,"pid":7,"fresh":true}` + "\n" +
			`{"t":12,"t0":12,"kind":"restore","job":"a","inc":1,"rank":0,"pid":7,"fresh":true}` + "\n", 3},
		"too long":       {start + `{"t":20,"kind":"exit","job":"` + strings.Repeat("a", MaxLine) + "\"}\n", 2},
		"not an object":  {"[]\n", 1},
		"two objects":    {strings.TrimSuffix(start, "\n") + start, 1},
		"float pid":      {strings.Replace(start, `"pid":7`, `"pid":7.5`, 1), 1},
		"binary garbage": {start + "\x00\xff\n", 2},
	}
	for name, c := range cases {
		_, err := Decode(strings.NewReader(c.in), "w.jsonl")
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
			continue
		}
		want := "w.jsonl:"
		if c.line > 0 {
			want = fmt.Sprintf("w.jsonl:%d:", c.line)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not name %s", name, err, want)
		}
	}
}

func TestReadRootErrors(t *testing.T) {
	root := t.TempDir()
	if ws, err := ReadRoot(root); err != nil || len(ws) != 0 {
		t.Errorf("empty root: %v, %v", ws, err)
	}
	if _, err := ReadRoot(filepath.Join(root, "missing")); !errors.Is(err, ErrIO) {
		t.Errorf("missing root: %v", err)
	}
	os.WriteFile(filepath.Join(root, "stray"), nil, 0o644)
	if _, err := ReadRoot(root); !errors.Is(err, ErrMalformed) {
		t.Errorf("stray file: %v", err)
	}
	os.Remove(filepath.Join(root, "stray"))
	os.Mkdir(filepath.Join(root, "n1"), 0o755)
	os.WriteFile(filepath.Join(root, "n1", "x.txt"), nil, 0o644)
	if _, err := ReadRoot(root); !errors.Is(err, ErrMalformed) {
		t.Errorf("stray node file: %v", err)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "n7")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDir, dir)
	t0 := mono.Now()
	w, err := FromEnv(t0, "job-1", 4, 1, []int{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	steps := []error{
		w.Restore(mono.Now(), false, 3, 7, 700),
		w.Checkpoint(mono.Now(), 8, 800, false),
		w.Done(9, 900),
		w.Checkpoint(mono.Now(), 9, 900, true),
		w.Exit(0),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := w.Done(1, 1); err == nil {
		t.Error("a record after Exit was written")
	}
	ws, err := ReadRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Node != "n7" || len(ws[0].Records) != 6 || ws[0].File != w.Path() {
		t.Fatalf("read back %+v", ws)
	}
	s := ws[0].Start()
	if s.T != t0 || s.PID != os.Getpid() || s.Boot == 0 || s.Inc != 4 || s.Rank != 1 {
		t.Errorf("start %+v", s)
	}
	for i := 1; i < 6; i++ {
		if r := ws[0].Records[i]; r.T < t0 || (r.T0 != 0 && r.T0 > r.T) {
			t.Errorf("record %d times %d/%d before the start %d", i, r.T0, r.T, t0)
		}
	}
	// A second writer for the same worker (same pid) refuses to reuse the file.
	if _, err := Create(dir, t0, "job-1", 4, 1, []int{2}); !errors.Is(err, ErrIO) {
		t.Errorf("second writer: %v", err)
	}
	t.Setenv(EnvDir, "")
	if w, err := FromEnv(t0, "job-1", 4, 1, nil); w != nil || err != nil {
		t.Errorf("no directory: %v, %v", w, err)
	}
	var nilw *Writer
	if nilw.Restore(1, true, 0, 0, 0) != nil || nilw.Exit(0) != nil || nilw.Path() != "" {
		t.Error("nil writer is not a no-op")
	}
}

func FuzzDecode(f *testing.F) {
	for _, p := range []string{"testdata/root/n1/a.2.0.4100.jsonl", "testdata/root/n2/b.1.1.4200.jsonl", "testdata/root/n2/c.1.0.4300.jsonl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := Decode(strings.NewReader(string(b)), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrIO) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if len(w.Records) == 0 || w.Records[0].Kind != Start {
			t.Fatalf("decoded without a start: %+v", w)
		}
		for _, r := range w.Records {
			if err := r.Validate(); err != nil {
				t.Fatalf("decoded an invalid record: %v", err)
			}
		}
	})
}

// A worker killed before its start record was complete leaves only a
// temporary file, which readers skip.
func TestTempFilesAreSkipped(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "n1")
	os.Mkdir(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "a.1.0.77.jsonl"+TempSuffix), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ws, err := ReadRoot(root); err != nil || len(ws) != 0 {
		t.Errorf("%v, %v", ws, err)
	}
	w, err := Create(dir, mono.Now(), "b", 1, 0, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path() + TempSuffix); err == nil {
		t.Error("the temporary file is still there after the start record")
	}
	if ws, err := ReadRoot(root); err != nil || len(ws) != 1 {
		t.Errorf("%v, %v", ws, err)
	}
}
