package emulator

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/cluster/pki"
	"pollux/optimizer/goodput"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
)

// toyApp is a two-epoch application: one micro-step takes 0.1 s of which
// 0.02 s is sync, each epoch needs 100 steps at M0, and gradient noise
// gives a gain of 1.5 at batch 2*M0.
type toyApp struct{}

func (toyApp) Name() string { return "toy" }
func (toyApp) Limits() goodput.Limits {
	return goodput.Limits{InitBatch: 32, MaxBatch: 256, MinLocal: 8, MaxLocal: 64, Accumulation: true}
}
func (toyApp) MaxEpochs() int                              { return 2 }
func (toyApp) StepTimes([]int, float64) (float64, float64) { return 0.1, 0.02 }
func (toyApp) GradStats(float64, int) goodput.GradStats {
	return goodput.GradStats{GradSqr: 1, GradVar: 32}
}
func (toyApp) EpochEnd(e int) float64          { return 100 * float64(e) }
func (toyApp) Iterations(float64, int) float64 { return 0 }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// collector is a report listener.
type collector struct {
	ln      net.Listener
	mu      sync.Mutex
	reports []workerproto.Report
}

func listen(t *testing.T) *collector { return listenTLS(t, nil) }

// listenTLS is a report listener over TLS with cfg (nil: plaintext).
func listenTLS(t *testing.T, cfg *tls.Config) *collector {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	c := &collector{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				rd := workerproto.NewReader(conn)
				for {
					r, err := rd.Next()
					if err != nil {
						if errors.Is(err, workerproto.ErrBadReport) {
							t.Errorf("bad report: %v", err)
							continue
						}
						return
					}
					c.mu.Lock()
					c.reports = append(c.reports, r)
					c.mu.Unlock()
				}
			}()
		}
	}()
	return c
}

func (c *collector) all() []workerproto.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]workerproto.Report(nil), c.reports...)
}

func env(dir, addr string) workerproto.Env {
	return workerproto.Env{
		JobID: "toy-1", Incarnation: 2, Rank: 0, WorldSize: 2, NumNodes: 1,
		MasterAddr: "127.0.0.1", MasterPort: 29500, GPUs: []int{0},
		InitBatch: 32, AtomicBatch: 16, AccumSteps: 1, Gain: 1.5,
		CheckpointDir: dir, ReportAddr: addr, ReportToken: "rank-0-token",
	}
}

func TestAdvanceCrossesEpochs(t *testing.T) {
	w := &worker{cfg: Config{App: toyApp{}, Env: env("/x", "127.0.0.1:1")}}
	w.setup()
	// K*m*(s+1) = 2*16*2 = 64 = 2*M0: gain (32+1)/(16+1) = 33/17.
	// iteration = step + s*(step-sync) = 0.1 + 0.08 = 0.18 s.
	if w.batch != 64 || math.Abs(w.iter-0.18) > 1e-12 {
		t.Fatalf("batch %v, iteration %v", w.batch, w.iter)
	}
	rate := 33.0 / 17 / 0.18
	w.advance(50 / rate)
	if math.Abs(w.st.Progress-50) > 1e-9 || w.st.Epoch != 0 {
		t.Fatalf("after 50 steps' time: %+v", w.st)
	}
	w.advance(100 / rate)
	if math.Abs(w.st.Progress-150) > 1e-9 || w.st.Epoch != 1 || w.st.Done {
		t.Fatalf("after 150 steps' time: %+v", w.st)
	}
	w.advance(1000)
	if w.st.Progress != 200 || w.st.Epoch != 2 || !w.st.Done {
		t.Fatalf("after the end: %+v", w.st)
	}
}

func TestRunToCompletion(t *testing.T) {
	c := listen(t)
	dir := t.TempDir()
	// 200 steps of progress at rate ~10.8/s simulated: ~18.5 s simulated,
	// ~0.19 s real at scale 100.
	cfg := Config{Env: env(dir, c.ln.Addr().String()), App: toyApp{}, TimeScale: 100,
		Tick: 5 * time.Millisecond, ReportEvery: 20 * time.Millisecond, Logger: quiet()}
	st, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Done || st.Epoch != 2 {
		t.Fatalf("final state %+v", st)
	}
	saved, err := Restore(dir, "toy-1")
	if err != nil || saved != st {
		t.Fatalf("saved checkpoint %+v, %v; want %+v", saved, err, st)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs := c.all()
		if len(rs) > 0 && rs[len(rs)-1].Done {
			last := rs[len(rs)-1]
			if last.Epoch != 2 || last.Progress != 200 || last.Incarnation != 2 || last.LocalBatch != 16 || last.AccumSteps != 1 {
				t.Errorf("final report %+v", last)
			}
			for _, r := range rs {
				if r.Token != "rank-0-token" {
					t.Errorf("report without the worker's token: %+v", r)
				}
			}
			if len(rs) < 3 {
				t.Errorf("only %d reports", len(rs))
			}
			// The first report precedes every checkpoint; the done
			// report names the one saved at the first epoch's end.
			if rs[0].Checkpoint != (workerproto.SavedCheckpoint{}) {
				t.Errorf("first report with a checkpoint: %+v", rs[0])
			}
			if ck := last.Checkpoint; ck.Epoch != 1 || ck.Progress < 100 || ck.Progress >= 200 || !(ck.SavedAt > 0) {
				t.Errorf("final report's checkpoint %+v, want the one at epoch 1", ck)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no done report among %d", len(rs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCancelCheckpointsAndRestartResumes(t *testing.T) {
	c := listen(t)
	dir := t.TempDir()
	cfg := Config{Env: env(dir, c.ln.Addr().String()), App: toyApp{}, TimeScale: 20,
		Tick: 5 * time.Millisecond, Logger: quiet()}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	st, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Done || !(st.Progress > 0) {
		t.Fatalf("cancelled state %+v", st)
	}
	if saved, _ := Restore(dir, "toy-1"); saved != st {
		t.Fatalf("saved %+v, want %+v", saved, st)
	}
	// The next incarnation continues from the checkpoint.
	cfg.TimeScale = 1000
	cfg.Env.Incarnation = 3
	final, err := Run(context.Background(), cfg)
	if err != nil || !final.Done {
		t.Fatalf("resumed run: %+v, %v", final, err)
	}
	for _, r := range c.all() {
		if r.Incarnation == 3 && r.Progress < st.Progress {
			t.Fatalf("incarnation 3 reported progress %v below checkpoint %v", r.Progress, st.Progress)
		}
	}
}

func TestRestartCostDelaysProgress(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Env: env(dir, "127.0.0.1:1"), App: toyApp{}, TimeScale: 100,
		RestartCost: 30 * time.Second, Tick: 5 * time.Millisecond, Logger: quiet()}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := Run(ctx, cfg) // 30 s simulated = 300 ms real: no progress yet
	if err != nil || st.Progress != 0 {
		t.Fatalf("state %+v, %v; want no progress during the restart", st, err)
	}
}

func TestRestoreRejects(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":   "not json",
		"other job": `{"job":"other","epoch":1,"progress":5}`,
		"negative":  `{"job":"toy-1","epoch":-1,"progress":5}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CheckpointFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(dir, "toy-1"); err == nil {
			t.Errorf("%s: Restore accepted %q", name, content)
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	e := env(t.TempDir(), "127.0.0.1:1")
	if _, err := Run(context.Background(), Config{Env: e, App: toyApp{}, TimeScale: 0}); !errors.Is(err, ErrConfig) {
		t.Errorf("zero time scale: %v", err)
	}
	e.Rank = 5
	if _, err := Run(context.Background(), Config{Env: e, App: toyApp{}, TimeScale: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad env: %v", err)
	}
}

func TestCheckpointIsReadAfterStartUp(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Env: env(dir, "127.0.0.1:1"), App: toyApp{}, TimeScale: 100,
		RestartCost: 20 * time.Second, Tick: 5 * time.Millisecond, Logger: quiet()}
	// A predecessor finishes saving while this worker starts up (200 ms).
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = Save(dir, Checkpoint{Job: "toy-1", Epoch: 1, Progress: 150})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st, err := Run(ctx, cfg)
	if err != nil || st.Epoch < 1 || st.Progress < 150 {
		t.Fatalf("state %+v, %v; want to continue from the predecessor's checkpoint", st, err)
	}
}

func TestCheckpointsEveryEpoch(t *testing.T) {
	dir := t.TempDir()
	// Epoch 1 ends after ~9.3 s emulated = ~0.19 s real at scale 50.
	cfg := Config{Env: env(dir, "127.0.0.1:1"), App: toyApp{}, TimeScale: 50, Tick: 5 * time.Millisecond, Logger: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _, _ = Run(ctx, cfg); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := Restore(dir, "toy-1"); err == nil && c.Epoch >= 1 && !c.Done {
			return // saved at the boundary, while still training
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint at the first epoch boundary")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReportsOverTLS: with POLLUX_REPORT_CA the worker reports over TLS
// to an agent certificate of that CA, refuses an agent of another CA, and
// refuses to start on a CA file it cannot read.
func TestReportsOverTLS(t *testing.T) {
	b, err := pki.DevBundle(t.TempDir(), nil, []string{"agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.DevBundle(t.TempDir(), nil, []string{"agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := b.Credentials("agent-1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := creds.ServerConfig(pki.ChannelReport)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ca      string
		reports bool
	}{{"the cluster CA", b.CA, true}, {"another CA", other.CA, false}} {
		c := listenTLS(t, srv)
		e := env(t.TempDir(), c.ln.Addr().String())
		e.ReportCA = tc.ca
		st, err := Run(context.Background(), Config{Env: e, App: toyApp{}, TimeScale: 100,
			Tick: 5 * time.Millisecond, ReportEvery: 20 * time.Millisecond, Logger: quiet()})
		if err != nil || !st.Done {
			t.Fatalf("%s: %+v, %v", tc.name, st, err)
		}
		time.Sleep(100 * time.Millisecond)
		if got := len(c.all()) > 0; got != tc.reports {
			t.Errorf("%s: reports arrived %v, want %v", tc.name, got, tc.reports)
		}
	}
	e := env(t.TempDir(), "127.0.0.1:1")
	e.ReportCA = "/nonexistent/ca.pem"
	if _, err := Run(context.Background(), Config{Env: e, App: toyApp{}, TimeScale: 1, Logger: quiet()}); !errors.Is(err, ErrConfig) {
		t.Errorf("missing CA file: %v, want ErrConfig", err)
	}
}

// TestRecords runs two incarnations with worker records on: the first
// starts fresh and is cancelled (it checkpoints), the second restores the
// first's checkpoint and finishes.
func TestRecords(t *testing.T) {
	c := listen(t)
	dir, recDir := t.TempDir(), t.TempDir()
	cfg := Config{Env: env(dir, c.ln.Addr().String()), App: toyApp{}, TimeScale: 20,
		Tick: 5 * time.Millisecond, Logger: quiet()}
	w1, err := record.Create(recDir, mono.Now(), "toy-1", 2, 0, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Record = w1
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	st, err := Run(ctx, cfg)
	if err != nil || w1.Exit(0) != nil {
		t.Fatal(err)
	}
	cfg.TimeScale, cfg.Env.Incarnation = 1000, 3
	w2, err := record.Create(recDir, mono.Now(), "toy-1", 3, 0, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Record = w2
	final, err := Run(context.Background(), cfg)
	if err != nil || !final.Done || w2.Exit(0) != nil {
		t.Fatal(err)
	}
	read := func(w *record.Writer) []record.Record {
		f, err := os.Open(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		d, err := record.Decode(f, w.Path())
		if err != nil {
			t.Fatal(err)
		}
		return d.Records
	}
	kinds := func(rs []record.Record) (out []record.Kind) {
		for _, r := range rs {
			out = append(out, r.Kind)
		}
		return out
	}
	r1, r2 := read(w1), read(w2)
	if k := kinds(r1); !slices.Equal(k, []record.Kind{record.Start, record.Restore, record.Checkpoint, record.Exit}) {
		t.Fatalf("first incarnation wrote %v", k)
	}
	if !r1[1].Fresh || r1[2].Progress != st.Progress || r1[2].Finished {
		t.Errorf("first incarnation: restore %+v, checkpoint %+v (state %+v)", r1[1], r1[2], st)
	}
	k := kinds(r2)
	if k[1] != record.Restore || k[len(k)-3] != record.Done || k[len(k)-2] != record.Checkpoint || k[len(k)-1] != record.Exit {
		t.Fatalf("second incarnation wrote %v", k)
	}
	if r := r2[1]; r.Fresh || r.From != 2 || r.Progress != st.Progress || r.Epoch != st.Epoch {
		t.Errorf("second incarnation restored %+v, want incarnation 2's %+v", r, st)
	}
	if last := r2[len(r2)-2]; !last.Finished || last.Epoch != 2 || last.Progress != 200 {
		t.Errorf("final checkpoint %+v", last)
	}
	if saved, _ := Restore(dir, "toy-1"); saved.Incarnation != 3 {
		t.Errorf("checkpoint written by incarnation %d, want 3", saved.Incarnation)
	}
}

// TestDeliverAllRanks: with Deliver, reports go to the function and not
// to the report address (there is none); with AllRanks every rank
// reports, but only rank 0 ever says done.
func TestDeliverAllRanks(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var got []workerproto.Report
	deliver := func(r workerproto.Report) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
	}
	for _, rank := range []int{1, 0} {
		e := env(dir, "in-process:0") // unreachable: a dial would fail the reports
		e.Rank = rank
		cfg := Config{Env: e, App: toyApp{}, TimeScale: 100, Tick: 5 * time.Millisecond, ReportEvery: 20 * time.Millisecond,
			Deliver: deliver, AllRanks: true, Logger: quiet()}
		if st, err := Run(context.Background(), cfg); err != nil || !st.Done {
			t.Fatalf("rank %d: %+v, %v", rank, st, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	n := map[int]int{}
	done := map[int]bool{}
	for _, r := range got {
		n[r.Rank]++
		done[r.Rank] = done[r.Rank] || r.Done
	}
	if n[0] < 2 || n[1] < 2 || done[1] || !done[0] {
		t.Errorf("reports per rank %v, done per rank %v: want several from both, done from rank 0 only", n, done)
	}
}

// pauser is a Config.Hold: it blocks while paused and fails once killed.
type pauser struct {
	mu     sync.Mutex
	paused bool
	killed bool
	cont   *sync.Cond
}

func newPauser() *pauser {
	p := &pauser{}
	p.cont = sync.NewCond(&p.mu)
	return p
}

func (p *pauser) hold() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.paused && !p.killed {
		p.cont.Wait()
	}
	if p.killed {
		return errors.New("killed")
	}
	return nil
}

func (p *pauser) set(paused, killed bool) {
	p.mu.Lock()
	p.paused, p.killed = paused, killed
	p.mu.Unlock()
	p.cont.Broadcast()
}

func TestHoldPausesAndAKilledWorkerWritesNothing(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var reports []workerproto.Report
	p := newPauser()
	cfg := Config{Env: env(dir, "in-process:0"), App: toyApp{}, TimeScale: 2, Tick: 5 * time.Millisecond,
		ReportEvery: 5 * time.Millisecond, Logger: quiet(), Hold: p.hold,
		Deliver: func(r workerproto.Report) { mu.Lock(); reports = append(reports, r); mu.Unlock() }}
	last := func() (int, float64) {
		mu.Lock()
		defer mu.Unlock()
		if len(reports) == 0 {
			return 0, 0
		}
		return len(reports), reports[len(reports)-1].Progress
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := Run(ctx, cfg); done <- err }()
	for n, _ := last(); n < 3; n, _ = last() {
		time.Sleep(5 * time.Millisecond)
	}
	p.set(true, false)
	time.Sleep(20 * time.Millisecond) // a step in progress ends
	n, before := last()
	time.Sleep(300 * time.Millisecond)
	if m, _ := last(); m != n {
		t.Fatalf("%d reports while paused", m-n)
	}
	p.set(false, false)
	for m, _ := last(); m < n+2; m, _ = last() {
		time.Sleep(5 * time.Millisecond)
	}
	// The 300 ms paused made no progress: at time scale 2 and 0.1 s a
	// step, they would have made 6 steps.
	if _, after := last(); after-before > 2 {
		t.Fatalf("progress %v before the pause, %v just after it", before, after)
	}
	// Killed while paused, as a superseded worker: nothing written, at
	// the end either.
	saved, err := Restore(dir, "toy-1")
	if err != nil {
		t.Fatal(err)
	}
	p.set(true, false)
	cancel() // a stopped process ignores SIGTERM ...
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a paused worker ended (%v) before it was killed or continued", err)
	default:
	}
	p.set(true, true) // ... until SIGKILL
	if err := <-done; err == nil {
		t.Fatal("killed worker ended without error")
	}
	if now, err := Restore(dir, "toy-1"); err != nil || now != saved {
		t.Fatalf("checkpoint %+v (%v) after the kill, want %+v untouched", now, err, saved)
	}
}
