package worker

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecodeProgress(t *testing.T) {
	good := `{"job":"j","incarnation":3,"epoch":2,"position":64,"progress":41.5,"epoch_finished":false,"done":true,` +
		`"metrics":{"accuracy":0.97,"target":0.95},"grad_sqr":0.6,"grad_var":30,"iterations":9,"last_times":[0.1,0.01],` +
		`"runs":[{"incarnation":1,"replicas":2,"nodes":2,"atomic_bsz":16,"accum_steps":1,"batch_size":64,"epoch":0,"progress":0}],` +
		`"saved_at":1700000000.5}`
	p, err := DecodeProgress([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if p.Job != "j" || p.Incarnation != 3 || !p.Done || p.Metrics["accuracy"] != 0.97 || len(p.Runs) != 1 ||
		p.Runs[0].BatchSize != 64 || p.Runs[0].Nodes != 2 || p.SavedAt != 1700000000.5 {
		t.Errorf("decoded %+v", p)
	}
	for _, tc := range []struct{ name, in string }{
		{"empty", ``},
		{"not json", `checkpoint`},
		{"no job", `{"epoch":1}`},
		{"negative epoch", `{"job":"j","epoch":-1}`},
		{"negative progress", `{"job":"j","progress":-0.5}`},
		{"NaN", `{"job":"j","progress":NaN}`},
		{"trailing", `{"job":"j"}{}`},
		{"wrong type", `{"job":"j","metrics":{"accuracy":"high"}}`},
		{"run without incarnation", `{"job":"j","runs":[{"replicas":1,"nodes":1,"atomic_bsz":8,"batch_size":8}]}`},
		{"run batch mismatch", `{"job":"j","runs":[{"incarnation":1,"replicas":2,"nodes":1,"atomic_bsz":8,"batch_size":8}]}`},
		{"run no replicas", `{"job":"j","runs":[{"incarnation":1,"replicas":0,"nodes":1,"atomic_bsz":8,"batch_size":0}]}`},
		{"too large", `{"job":"j","x":"` + strings.Repeat("a", maxProgressSize) + `"}`},
	} {
		if p, err := DecodeProgress([]byte(tc.in)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", tc.name, p)
		}
	}
}

func TestReadProgress(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadProgress(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no file: %v, want not exist", err)
	}
	path := filepath.Join(dir, ProgressFile)
	if err := os.WriteFile(path, []byte(`{"job":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProgress(dir); !errors.Is(err, ErrBadProgress) || !strings.Contains(err.Error(), path) {
		t.Errorf("truncated file: %v, want ErrBadProgress naming %s", err, path)
	}
}

func FuzzDecodeProgress(f *testing.F) {
	f.Add([]byte(`{"job":"j","epoch":1,"runs":[{"incarnation":1,"replicas":1,"nodes":1,"atomic_bsz":8,"batch_size":8}]}`))
	f.Add([]byte(`{"job":"j","metrics":{"accuracy":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeProgress(b)
		if err != nil {
			return
		}
		if p.Job == "" || p.Epoch < 0 || p.Position < 0 || p.Progress < 0 {
			t.Errorf("accepted %+v", p)
		}
		for _, r := range p.Runs {
			if r.Replicas < 1 || r.AtomicBatch < 1 || r.AccumSteps < 0 {
				t.Errorf("accepted run %+v", r)
			}
		}
	})
}
