package realdemo

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/worker"
	"pollux/testbed/launch"
)

func TestResizes(t *testing.T) {
	for _, tc := range []struct {
		replicas []int
		want     int
	}{
		{nil, 0},
		{[]int{1}, 0},
		{[]int{1, 1, 1}, 0},
		{[]int{1, 2}, 1},
		{[]int{1, 2, 2, 4, 1}, 3},
	} {
		if got := (JobResult{Replicas: tc.replicas}).Resizes(); got != tc.want {
			t.Errorf("Resizes(%v) = %d, want %d", tc.replicas, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	good := JobResult{Accuracy: 0.98, Target: 0.97, Incarnations: 3, Replicas: []int{1, 2, 1}, BatchSizes: []int{32, 64, 32}}
	if err := (Result{Jobs: map[string]JobResult{"a": good}}).Check(); err != nil {
		t.Errorf("good result: %v", err)
	}
	low, once := good, good
	low.Accuracy = 0.96
	once.Replicas = []int{1, 2, 2}
	err := Result{Jobs: map[string]JobResult{"low": low, "once": once}}.Check()
	if !errors.Is(err, ErrShort) || !strings.Contains(err.Error(), "low reached accuracy 0.9600, short of its target 0.97") ||
		!strings.Contains(err.Error(), "once was resized 1 times") {
		t.Errorf("Check = %v", err)
	}
}

func TestWorkload(t *testing.T) {
	jobs := Workload(20*time.Second, 16, 40)
	if len(jobs) != 3 || jobs[0].After != 0 || jobs[1].After != 20*time.Second || jobs[2].After != 40*time.Second {
		t.Fatalf("workload %+v", jobs)
	}
	l := worker.Layout{Dir: "/w", Digits: "/w/train_digits.py"}
	for _, j := range jobs {
		s, err := j.Example.Spec(j.Name, l, "/ck/"+j.Name, j.Args...)
		if err != nil {
			t.Fatalf("%s: %v", j.Name, err)
		}
		cmd := strings.Join(s.Command, " ")
		epochs := "--min-epochs 40 "
		if j.Example.Model == "mlp" {
			epochs = "--min-epochs 160 "
		}
		if !strings.Contains(cmd, "--augment 16 ") || !strings.Contains(cmd, epochs) || !strings.Contains(cmd, "--lr 0.02") {
			t.Errorf("%s: command %q", j.Name, cmd)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Exec: []string{"pollux"}, Dir: "/d"}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Servers != 3 || o.Agents != 2 || o.Slots != 2 || len(o.Jobs) != 3 || o.TimeScale != 20 || o.Python != worker.Python {
		t.Errorf("defaults %+v", o)
	}
	for name, bad := range map[string]Options{
		"no exec":       {Dir: "/d"},
		"no dir":        {Exec: []string{"p"}},
		"negative":      {Exec: []string{"p"}, Dir: "/d", Slots: -1},
		"duplicate job": {Exec: []string{"p"}, Dir: "/d", Jobs: []Job{{Name: "a"}, {Name: "a"}}},
		"negative time": {Exec: []string{"p"}, Dir: "/d", TimeScale: -1},
	} {
		if err := bad.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	r := Result{Jobs: map[string]JobResult{
		"digits-mlp-3": {Accuracy: 0.9666, Target: 0.95, Incarnations: 4, Replicas: []int{1, 2, 4, 1}, BatchSizes: []int{32, 186, 512, 512}, JCT: 61.2},
		"digits-cnn-1": {Accuracy: 1, Target: 0.97, Incarnations: 2, Replicas: []int{1, 2}, BatchSizes: []int{32, 512}, JCT: 49.7},
	}}
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "digits-cnn-1") || !strings.Contains(lines[2], "1 2 4 1") ||
		!strings.Contains(lines[2], "32 186 512 512") || !strings.Contains(lines[2], "0.9666") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestCores(t *testing.T) {
	tests := []struct {
		agents []*launch.Member
		slots  int
		want   string
	}{
		{[]*launch.Member{{ID: "a0", CPUs: []int{0}}, {ID: "a1", CPUs: []int{1}}}, 1,
			"agents' cores: a0 on cores 0 (1 CPU slot), a1 on cores 1 (1 CPU slot)"},
		{[]*launch.Member{{ID: "a0", CPUs: []int{0, 1, 2}}, {ID: "a1", CPUs: []int{3, 4, 5, 6}}}, 3,
			"agents' cores: a0 on cores 0-2 (3 CPU slots), a1 on cores 3-6 (3 CPU slots)"},
		{[]*launch.Member{{ID: "a0"}, {ID: "a1"}, {ID: "a2"}}, 1, "agents' cores: all of them, each agent's slots splitting them (fewer cores than slots in all)"},
	}
	for _, tc := range tests {
		if got := cores(tc.agents, tc.slots); got != tc.want {
			t.Errorf("cores(%d slots) = %q, want %q", tc.slots, got, tc.want)
		}
	}
}
