package workload

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func knownApps(name string) bool { return name == "cifar10" || name == "ncf" }

func TestDecode(t *testing.T) {
	body := "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,6,2048\nncf-1,135.5,ncf,1,32768\n"
	wl, err := Decode(strings.NewReader(body), "dir/workload-1.csv", knownApps)
	if err != nil {
		t.Fatal(err)
	}
	want := Workload{Name: "workload-1", Jobs: []Job{
		{Name: "cifar10-0", Time: 107, App: "cifar10", Replicas: 6, Batch: 2048},
		{Name: "ncf-1", Time: 135.5, App: "ncf", Replicas: 1, Batch: 32768},
	}}
	if !reflect.DeepEqual(wl, want) {
		t.Errorf("got %+v, want %+v", wl, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	const h = "name,time,application,num_replicas,batch_size\n"
	tests := []struct {
		name, body string
		wantErr    error
		want       string
	}{
		{"unknown app", h + "a,1,cifar10,1,2\nb,2,resnet,1,2\n", ErrUnknownApp, "w.csv:3"},
		{"negative time", h + "a,-5,cifar10,1,2\n", ErrMalformed, "w.csv:2: workload: malformed workload file: negative time"},
		{"bad header", "name,time\na,1\n", ErrMalformed, "w.csv:1"},
		{"not csv", "\x89PNG\r\n\x1a\n\"\x00", ErrMalformed, "w.csv:1"},
		{"empty", "", ErrMalformed, "w.csv:1"},
		{"no jobs", h, ErrMalformed, "no jobs"},
		{"zero replicas", h + "a,1,ncf,0,2\n", ErrMalformed, "w.csv:2"},
		{"short row", h + "a,1,ncf\n", ErrMalformed, "w.csv:2"},
		{"duplicate", h + "a,1,ncf,1,2\na,2,ncf,1,2\n", ErrMalformed, "w.csv:3"},
		{"NaN time", h + "a,NaN,ncf,1,2\n", ErrMalformed, "w.csv:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(tt.body), "w.csv", knownApps)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %v containing %q", err, tt.wantErr, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	row := "name,time,application,num_replicas,batch_size\na,1,ncf,1,2\n"
	for _, n := range []string{"workload-2.csv", "workload-1.csv"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(row), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wls, err := Load(dir, knownApps)
	if err != nil || len(wls) != 2 || wls[0].Name != "workload-1" || wls[1].Name != "workload-2" {
		t.Fatalf("got %+v, %v", wls, err)
	}
	if _, err := Load(filepath.Join(dir, "README.md"), knownApps); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "README.md:1") {
		t.Errorf("non-csv file: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "absent.csv"), knownApps); !errors.Is(err, ErrNoWorkload) {
		t.Errorf("absent file: %v", err)
	}
	if _, err := Load(t.TempDir(), knownApps); !errors.Is(err, ErrNoWorkload) {
		t.Errorf("empty dir: %v", err)
	}
}

func TestGenerate(t *testing.T) {
	cfg := DefaultGenConfig()
	a, err := Generate(cfg, 7, "gen")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(cfg, 7, "gen")
	c, _ := Generate(cfg, 8, "gen")
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different workloads")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("different seeds, same workload")
	}
	if len(a.Jobs) != cfg.Jobs {
		t.Fatalf("%d jobs", len(a.Jobs))
	}
	apps := map[string]int{}
	for i, j := range a.Jobs {
		if j.Time < 0 || j.Time > cfg.Window || (i > 0 && j.Time < a.Jobs[i-1].Time) {
			t.Fatalf("job %d time %v out of order or window", i, j.Time)
		}
		apps[j.App]++
	}
	// 160 draws from the default mix: NCF (39 %) and CIFAR-10 (39 %)
	// dominate; a 4-sigma band is about +-25 jobs around 63.
	for _, app := range []string{"ncf", "cifar10"} {
		if apps[app] < 38 || apps[app] > 88 {
			t.Errorf("%s: %d jobs", app, apps[app])
		}
	}
	if _, err := Generate(GenConfig{Jobs: 0, Window: 1, Mix: DefaultMix()}, 1, "x"); !errors.Is(err, ErrBadMix) {
		t.Errorf("zero jobs: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,6,2048\n")
	f.Add("name,time,application,num_replicas,batch_size\na,-1,x,1,1\n")
	f.Add("\"")
	f.Fuzz(func(t *testing.T, body string) {
		wl, err := Decode(strings.NewReader(body), "fuzz.csv", knownApps)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, j := range wl.Jobs {
			if j.Time < 0 || j.Replicas < 1 || j.Batch < 1 || !knownApps(j.App) {
				t.Fatalf("bad job accepted: %+v", j)
			}
		}
	})
}

// A directory of directories is a sweep, as is a pattern naming them:
// each workload named after its directory.
func TestLoadSweep(t *testing.T) {
	root := t.TempDir()
	row := "name,time,application,num_replicas,batch_size\na,1,ncf,1,2\n"
	for _, p := range []string{"rate_20/workload-1.csv", "rate_10/workload-2.csv", "rate_10/workload-1.csv", "other_1/workload-1.csv"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(row), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{root, []string{"other_1/workload-1", "rate_10/workload-1", "rate_10/workload-2", "rate_20/workload-1"}},
		{filepath.Join(root, "rate_*"), []string{"rate_10/workload-1", "rate_10/workload-2", "rate_20/workload-1"}},
		{filepath.Join(root, "rate_10"), []string{"workload-1", "workload-2"}},
	} {
		wls, err := Load(c.path, knownApps)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		var names []string
		for _, wl := range wls {
			names = append(names, wl.Name)
		}
		if !reflect.DeepEqual(names, c.want) {
			t.Errorf("%s: %v, want %v", c.path, names, c.want)
		}
	}
	if _, err := Load(filepath.Join(root, "none_*"), knownApps); !errors.Is(err, ErrNoWorkload) {
		t.Errorf("pattern matching nothing: %v", err)
	}
}
