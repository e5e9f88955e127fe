package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/api"
)

// proc is one subprocess of a test cluster.
type proc struct {
	name  string
	cmd   *exec.Cmd
	ready chan string
}

// startProc starts `pollux ARGS...` through the test binary and waits for
// its ready line. It is killed at cleanup if still running.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	full := append(slices.Clone(selfExec), args...)
	p := &proc{name: name, cmd: exec.Command(full[0], full[1:]...), ready: make(chan string, 1)}
	p.cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
	logf, err := os.Create(t.TempDir() + "/" + name + ".log")
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = logf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("--- %s log (last 3000 bytes)\n%s", name, tail(b, 3000))
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case p.ready <- sc.Text():
			default:
			}
		}
	}()
	select {
	case <-p.ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready within 60 s", name)
	}
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited: %v", p.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30 s", p.name)
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func getJSON(addrs []string, path string, out any) error {
	var errs []string
	for _, a := range addrs {
		c := http.Client{Timeout: 3 * time.Second}
		resp, err := c.Get("http://" + a + path)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			errs = append(errs, resp.Status)
			continue
		}
		return json.Unmarshal(buf.Bytes(), out)
	}
	return fmt.Errorf("no server answered: %s", strings.Join(errs, "; "))
}

// TestClusterSurvivesLeaderKill runs 3 servers and 2 agents as separate
// processes, submits a small workload, SIGKILLs the Raft leader mid-run
// and checks that every job completes exactly once, that the GPUs were
// never over-committed and that batch sizes adapted.
func TestClusterSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	ports := freePorts(t, 7)
	raftAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	httpAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[3+i]) }
	gossip := fmt.Sprintf("127.0.0.1:%d", ports[6])
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("s%d=%s=%s", i, raftAddr(i), httpAddr(i)))
	}
	const scale = "400"
	servers := map[string]*proc{}
	var httpAddrs []string
	for i := range 3 {
		args := []string{"server", "--id", fmt.Sprintf("s%d", i), "--data-dir", t.TempDir(), "--raft", raftAddr(i),
			"--http", httpAddr(i), "--peers", strings.Join(peers, ","), "--bootstrap", "--fast-gossip",
			"--interval", "1s", "--time-scale", scale, "--log-level", "info"}
		if i == 0 {
			args = append(args, "--gossip-port", fmt.Sprint(ports[6]))
		} else {
			args = append(args, "--join", gossip)
		}
		servers[fmt.Sprintf("s%d", i)] = startProc(t, fmt.Sprintf("s%d", i), args...)
		httpAddrs = append(httpAddrs, httpAddr(i))
	}
	var agents []*proc
	for i := range 2 {
		agents = append(agents, startProc(t, fmt.Sprintf("a%d", i), "agent", "--name", fmt.Sprintf("a%d", i), "--gpus", "4",
			"--join", gossip, "--fast-gossip", "--time-scale", scale, "--restart-cost", "30s", "--grace", "5s",
			"--worker-exec", strings.Join(selfExec, ","), "--log-level", "info"))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st api.Status
		if err := getJSON(httpAddrs, api.PathStatus, &st); err == nil && st.GPUs == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster never saw both agents' 8 GPUs")
		}
		time.Sleep(200 * time.Millisecond)
	}
	jobs := map[string]string{"cifar-1": "cifar10", "cifar-2": "cifar10", "ds-1": "deepspeech2", "cifar-3": "cifar10"}
	for name, app := range jobs {
		spec := fmt.Sprintf("name: %s\napplication: %s\nmax_replicas: 8\n", name, app)
		switch app {
		case "cifar10":
			spec += "init_batch_size: 128\nmax_batch_size: 4096\nmin_local_batch_size: 32\nmax_local_batch_size: 1024\naccumulation: true\n"
		case "deepspeech2":
			spec += "init_batch_size: 20\nmax_batch_size: 640\nmin_local_batch_size: 10\nmax_local_batch_size: 80\naccumulation: true\n"
		}
		resp, err := http.Post("http://"+httpAddrs[len(jobs)%3]+api.PathJobs, "application/yaml", strings.NewReader(spec))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit %s: %s", name, resp.Status)
		}
	}
	killed := false
	begin := time.Now()
	deadline = begin.Add(150 * time.Second)
	var final []api.Job
	for {
		var st api.Status
		if err := getJSON(httpAddrs, api.PathStatus, &st); err == nil {
			if st.GPUsUsed > st.GPUs || st.GPUsUsed > 8 {
				t.Errorf("GPUs over-committed: %+v", st)
			}
			if !killed && time.Since(begin) > 5*time.Second && st.Leader != "" {
				p := servers[st.Leader]
				t.Logf("killing leader %s at generation %d", st.Leader, st.Generation)
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
				httpAddrs = slices.DeleteFunc(httpAddrs, func(a string) bool { return a == httpAddr(int(st.Leader[1]-'0')) })
				killed = true
			}
		}
		var js []api.Job
		if err := getJSON(httpAddrs, api.PathJobs, &js); err == nil {
			done := 0
			for _, j := range js {
				if j.State == "completed" {
					done++
				}
				if j.State == "failed" {
					t.Fatalf("job %s failed: %s", j.ID, j.Reason)
				}
			}
			if done == len(jobs) && killed {
				final = js
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not all completed within %v: %+v", deadline.Sub(begin), js)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("all %d jobs completed %v after submission", len(jobs), time.Since(begin))
	if len(final) != len(jobs) {
		t.Errorf("%d jobs listed, want %d", len(final), len(jobs))
	}
	adapted := false
	for _, j := range final {
		if j.FinishTime <= 0 {
			t.Errorf("job %s completed without a finish time", j.ID)
		}
		for _, p := range j.Profiled {
			if p.Replicas*p.LocalBatch > j.InitBatch {
				adapted = true
			}
		}
	}
	if !adapted {
		t.Error("no job ran at a batch above its initial one")
	}
	for _, a := range agents {
		a.stop(t)
	}
	for _, s := range servers {
		s.stop(t)
	}
	for name := range jobs {
		if pids := processesWithEnv("POLLUX_JOB_ID=" + name); len(pids) > 0 {
			t.Errorf("workers of %s still running: %v", name, pids)
		}
	}
}
