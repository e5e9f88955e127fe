package demo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/internal/usage"
	"pollux/testbed/launch"
)

func TestPrepare(t *testing.T) {
	for _, keep := range []bool{false, true} {
		var exec []string
		dir := ""
		done, err := prepare(&exec, &dir, "pollux-demo-test-", keep)
		if err != nil || len(exec) != 1 || dir == "" {
			t.Fatalf("exec %v, dir %q, err %v", exec, dir, err)
		}
		done()
		if _, err := os.Stat(dir); os.IsNotExist(err) != !keep {
			t.Errorf("keep %v: the directory exists afterwards: %v", keep, !os.IsNotExist(err))
		}
		os.RemoveAll(dir)
	}
	exec, dir := []string{"/bin/pollux", "--flag"}, t.TempDir()
	done, err := prepare(&exec, &dir, "unused-", false)
	done()
	if err != nil || exec[0] != "/bin/pollux" {
		t.Errorf("given exec %v: %v", exec, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("a given directory was removed: %v", err)
	}
}

// Each lab's four jobs fall in its own window of the spread, in turn.
func TestFedDemoJobs(t *testing.T) {
	spread := 60 * time.Second
	for i, lab := range []string{"lab-a", "lab-b", "lab-c"} {
		jobs := fedDemoJobs(lab, i, 3, spread)
		if len(jobs) != 4 || jobs[0].Name != strings.TrimPrefix(lab, "lab-")+"-cifar10-1" {
			t.Fatalf("%s: %+v", lab, jobs)
		}
		for _, j := range jobs {
			if j.After < time.Duration(i)*spread/3 || j.After >= time.Duration(i+1)*spread/3 {
				t.Errorf("%s's job %s at %v, outside its window", lab, j.Name, j.After)
			}
		}
	}
}

// What a lab's logs show: its reclaims for need, the time from each to
// its next own worker's start, and the other labs' workers on its agents.
func TestObserveLogs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	server := write("s0.log", `time=2024-05-01T10:00:10Z level=INFO msg="federation: lease" op=reclaim reason=need
time=2024-05-01T10:00:20Z level=INFO msg="federation: lease" op=reclaim reason=rebalance
`)
	agent := write("a0.log", `time=2024-05-01T10:00:05Z level=INFO msg="node: worker started" job=b-ncf-2 rank=0
time=2024-05-01T10:00:12.5Z level=INFO msg="node: worker started" job=a-cifar10-1 rank=0
`)
	c := &launch.Cluster{Servers: []*launch.Member{{Log: server}}, Agents: []*launch.Member{{Log: agent}}}
	o := &labOutcome{Lab: "lab-a"}
	observeLogs(o, c, map[string][]string{"lab-a": {"a-cifar10-1"}, "lab-b": {"b-ncf-2"}})
	if o.Reclaims != 1 || o.Rebalances != 1 || o.ForeignWorkers != 1 || o.Followed != 1 || o.ReclaimToStartMax != 2500*time.Millisecond {
		t.Errorf("outcome %+v", o)
	}
	var out bytes.Buffer
	if err := writeFederationTable(&out, []string{"lab-a"}, map[string]*labOutcome{"lab-a": o}); err != nil || !strings.Contains(out.String(), "2.5 (1)") {
		t.Errorf("table (%v):\n%s", err, out.String())
	}
}

func TestAutoscaleProblems(t *testing.T) {
	ok := AutoscaleSummary{Jobs: 12, Completed: 12, StartNodes: 1, PeakNodes: 3, FinalNodes: 1}
	if err := problems(ok, time.Minute, nil, nil); err != nil {
		t.Errorf("a good run fails: %v", err)
	}
	bad := AutoscaleSummary{Jobs: 12, Completed: 11, Lost: 1, StartNodes: 1, PeakNodes: 1, FinalNodes: 2, ProcessesLeft: 1}
	err := problems(bad, time.Minute, nil, errors.New("stop failed"))
	for _, want := range []string{"stop failed", "1 of 12 jobs", "never grew", "shrink back", "1 processes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q in it", err, want)
		}
	}
	var out bytes.Buffer
	writeAutoscaleSummary(&out, AutoscaleSummary{Jobs: 2, Completed: 2, Timeline: []NodesAt{{T: 0, Nodes: 1}, {T: 12.4, Nodes: 2}}})
	if !strings.Contains(out.String(), "nodes over time (real s): 0s:1 12s:2\n") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// Settings the autoscaling demo cannot run with are bad input, refused
// before anything starts.
func TestAutoscaleBadInput(t *testing.T) {
	dir := t.TempDir()
	o := AutoscaleOptions{Servers: 1, GPUs: 2, MaxNodes: 0, Scale: 100, Timeout: time.Minute, Settle: time.Minute, Dir: dir}
	if err := Autoscale(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("err = %v, want bad input", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the refused demo wrote %d entries", len(entries))
	}
}
