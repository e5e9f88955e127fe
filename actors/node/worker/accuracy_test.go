package worker

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/optimizer/goodput"
)

// placement is one batch configuration a job runs on, on one node or
// (agents > 1) as the CPU slots of several agents.
type placement struct{ replicas, atomic, accum, agents int }

func (p placement) nodes() int { return max(p.agents, 1) }

func (p placement) String() string {
	if p.agents > 1 {
		return fmt.Sprintf("K=%d m=%d s=%d N=%d", p.replicas, p.atomic, p.accum, p.agents)
	}
	return fmt.Sprintf("K=%d m=%d s=%d", p.replicas, p.atomic, p.accum)
}

// profile runs each placement, all of them once and then all again
// (so that a slow spell of this shared machine does not fall on one
// placement only), each as a new incarnation built by build (a run that
// ends by itself), and returns for each the lower quartiles of rank 0's
// reported step time and accumulation time (step_time - sync_time), the
// two times the job actor fits. neighbours, if not nil, starts what else
// runs beside a placement and returns what stops it.
func profile(t *testing.T, l Layout, s *sink, inc *uint64, ps []placement, build func(placement, uint64) run,
	neighbours func(placement) (stop func())) []goodput.ProfilePoint {
	t.Helper()
	const rounds = 3
	incs := make([][]uint64, len(ps))
	busy0, wall0 := cpuBusy(), time.Now()
	var ours time.Duration
	for range rounds {
		for i, p := range ps {
			*inc++
			stop := func() {}
			if neighbours != nil {
				stop = neighbours(p)
			}
			ws := start(t, l, build(p, *inc))
			wait(t, ws, 5*time.Minute)
			stop()
			for _, w := range ws {
				ours += w.cmd.ProcessState.UserTime() + w.cmd.ProcessState.SystemTime()
			}
			incs[i] = append(incs[i], *inc)
		}
	}
	// What else ran meanwhile: a busy machine inflates some placements'
	// times more than others (this test's figures assume it runs alone;
	// `make test` runs this package after the others for that reason).
	if busy := cpuBusy() - busy0; busy > 0 && neighbours == nil {
		wall := time.Since(wall0)
		t.Logf("during the measurement (%v): the workers used %.0f%% of one core, other processes %.0f%%",
			wall.Round(time.Second), 100*ours.Seconds()/wall.Seconds(), 100*(busy-ours).Seconds()/wall.Seconds())
	}
	out := make([]goodput.ProfilePoint, len(ps))
	for i, p := range ps {
		var step, acc []float64
		for _, inc := range incs[i] {
			for _, rep := range s.all(inc) {
				if rep.Rank == 0 && !rep.Done {
					step = append(step, rep.StepTime)
					acc = append(acc, rep.StepTime-rep.SyncTime)
				}
			}
		}
		if len(step) < 3*rounds {
			t.Fatalf("%v: %d reports, want at least %d", p, len(step), 3*rounds)
		}
		out[i] = goodput.ProfilePoint{Nodes: p.nodes(), Replicas: p.replicas, LocalBatch: p.atomic,
			AccumTime: quantile(acc, 0.25), StepTime: quantile(step, 0.25)}
	}
	return out
}

// cpuBusy is the machine's total non-idle CPU time so far, from
// /proc/stat (0 where it cannot be read).
func cpuBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var jiffies int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		jiffies += n
	}
	return time.Duration(jiffies) * time.Second / 100 // USER_HZ
}

// quantile is the q-quantile of v (linear interpolation).
func quantile(v []float64, q float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	x := q * float64(len(v)-1)
	i := int(x)
	if i+1 >= len(v) {
		return v[len(v)-1]
	}
	return v[i] + (x-float64(i))*(v[i+1]-v[i])
}

// TestThroughputModelPredictsAnUnseenPlacement fits the throughput model
// (goodput.Fit, as the job actor does) to the reports of the CNN example on
// five placements, then runs it on a sixth it has not seen, with two
// replicas and a batch it never ran, and compares the measured step time
// with the model's prediction: within 15 %.
func TestThroughputModelPredictsAnUnseenPlacement(t *testing.T) {
	l := library(t)
	s := newSink(t)
	seen := []placement{{1, 64, 0, 1}, {1, 128, 0, 1}, {1, 256, 0, 1}, {2, 64, 0, 1}, {2, 256, 0, 1}}
	unseen := placement{2, 128, 0, 1}
	var inc uint64
	cnn := func(p placement, inc uint64) run {
		return run{job: "digits-tput", incarnation: inc, replicas: p.replicas, initBatch: 32, atomicBatch: p.atomic,
			accumSteps: p.accum, dir: filepath.Join(t.TempDir(), "ck"), reportAddr: s.addr(),
			args: Examples[1].Command(l, "--augment", "8", "--min-epochs", "2", "--max-epochs", "2",
				"--report-every", "0.1")[2:]}
	}
	all := profile(t, l, s, &inc, append(slices.Clone(seen), unseen), cnn, nil)
	points, got := all[:len(seen)], all[len(seen)]
	params, err := goodput.Fit(points)
	if err != nil {
		t.Fatal(err)
	}
	pred := params.SyncTime(1, unseen.replicas, float64(unseen.atomic))
	errRel := pred/got.StepTime - 1
	var table strings.Builder
	fmt.Fprintf(&table, "%-14s %10s %10s\n", "placement", "step_s", "accum_s")
	for i, p := range seen {
		fmt.Fprintf(&table, "%-14v %10.5f %10.5f\n", p, points[i].StepTime, points[i].AccumTime)
	}
	fmt.Fprintf(&table, "%-14v %10.5f %10.5f  (unseen; predicted step %.5f, error %+.1f%%)\n",
		unseen, got.StepTime, got.AccumTime, pred, 100*errRel)
	t.Logf("fitted %+v\n%s", params, table.String())
	if math.Abs(errRel) > 0.15 {
		t.Errorf("predicted step time %.5f s on %v, measured %.5f s: error %+.1f%%, want within 15%%",
			pred, unseen, got.StepTime, 100*errRel)
	}
}

// offlineNoise is what python/tests/offline_noise.py prints.
type offlineNoise struct {
	GradSqr    float64 `json:"grad_sqr"`
	Trace      float64 `json:"trace"`
	NoiseScale float64 `json:"noise_scale"`
	Batches    int     `json:"batches"`
	Batch      int     `json:"batch"`
}

// TestReportedNoiseScaleAgreesWithOffline trains the CNN example for two
// epochs on one replica and stops it with SIGTERM (it checkpoints and
// exits 0), then runs it on two replicas with one accumulation step and a
// learning rate of 0, so that its parameters stay those of the
// checkpoint, and takes the gradient-noise scale of its last report,
// M0 * grad_var / grad_sqr. An offline estimate at the same parameters
// from thousands of small batches (python/tests/offline_noise.py) must
// agree within 25 %.
func TestReportedNoiseScaleAgreesWithOffline(t *testing.T) {
	l := library(t)
	s := newSink(t)
	dir := t.TempDir()
	const job = "digits-gns"
	first := run{job: job, incarnation: 1, replicas: 1, initBatch: 32, atomicBatch: 32, dir: dir,
		reportAddr: s.addr(), args: Examples[1].Command(l, "--min-epochs", "100", "--max-epochs", "100")[2:]}
	ws := start(t, l, first)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if sum, err := readSummary(dir); err == nil && sum.Epoch >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at epoch 2; output:\n%s", tail(ws[0].out.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ws[0].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait(t, ws, time.Minute) // exit 0 required
	ck, err := readSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Done || ck.Epoch < 2 {
		t.Fatalf("checkpoint after SIGTERM: %+v, want epoch >= 2, not done", ck)
	}

	epochs := strconv.Itoa(ck.Epoch + 25)
	second := run{job: job, incarnation: 2, replicas: 2, initBatch: 32, atomicBatch: 16, accumSteps: 1, dir: dir,
		reportAddr: s.addr(), args: Examples[1].Command(l, "--lr", "0", "--min-epochs", epochs, "--max-epochs", epochs,
			"--report-every", "0.2")[2:]}
	wait(t, start(t, l, second), 3*time.Minute)
	last := lastOfRank(s.all(2), 0)
	if !last.Done || !(last.GradSqr > 0) {
		t.Fatalf("last report %+v: want done with gradient statistics", last.Report)
	}
	reported := float64(second.initBatch) * last.GradVar / last.GradSqr

	cmd := exec.Command(Python, filepath.Join(l.Tests, "offline_noise.py"), dir, job, "--model", "cnn")
	cmd.Env = append(cleanEnv(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("offline estimate: %v\n%s", err, out)
	}
	var off offlineNoise
	if err := json.Unmarshal(out, &off); err != nil {
		t.Fatalf("offline estimate %q: %v", out, err)
	}
	ratio := reported / off.NoiseScale
	t.Logf("at epoch %d: reported |G|^2 %.4g, tr(Sigma) %.4g (grad_var %.4g at M0=32), noise scale %.1f; "+
		"offline (%d batches of %d) |G|^2 %.4g, tr(Sigma) %.4g, noise scale %.1f; ratio %.3f",
		ck.Epoch, last.GradSqr, 32*last.GradVar, last.GradVar, reported,
		off.Batches, off.Batch, off.GradSqr, off.Trace, off.NoiseScale, ratio)
	if math.Abs(ratio-1) > 0.25 {
		t.Errorf("reported noise scale %.1f, offline %.1f: ratio %.3f, want within 25%%", reported, off.NoiseScale, ratio)
	}
}
