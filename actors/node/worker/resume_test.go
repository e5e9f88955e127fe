package worker

import (
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledWorkerResumesFromItsCheckpoint trains the CNN example on two
// replicas with a periodic checkpoint every 0.15 s, SIGKILLs rank 0 in the
// middle of an epoch (as a dying machine would), and restarts the job as
// a new incarnation on one replica with another batch configuration. The
// checkpoint left behind is mid-epoch and holds at least the progress
// reported one interval before the kill; the new incarnation starts from
// it (not from zero) and trains to the target accuracy.
func TestKilledWorkerResumesFromItsCheckpoint(t *testing.T) {
	l := library(t)
	s := newSink(t)
	dir := t.TempDir()
	const interval = 150 * time.Millisecond
	ex := Examples[1]
	// An epoch takes 0.7 s to a few seconds on two cores: at least eight
	// of them, with a checkpoint every 0.15 s, leave several chances to
	// see one in the first third of an epoch whatever the machine's speed.
	args := ex.Command(l, "--augment", "8", "--min-epochs", "8", "--report-every", "0.1",
		"--checkpoint-interval", "0.15")[2:]
	first := run{job: "digits-cnn", incarnation: 1, replicas: 2, initBatch: 32, atomicBatch: 16,
		dir: dir, reportAddr: s.addr(), args: args}
	ws := start(t, l, first)

	// Wait for a periodic checkpoint in the middle of epoch 1 or later,
	// then kill rank 0 less than an interval after it.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no mid-epoch checkpoint; rank 0 output:\n%s", tail(ws[0].out.String()))
		}
		// In the first third of the epoch (11504 samples with --augment 8),
		// so that the epoch does not end before the kill.
		if sum, err := readSummary(dir); err == nil && sum.Epoch >= 1 && sum.Position > 0 && sum.Position < 4000 && !sum.Done {
			break
		}
		select {
		case <-ws[0].done:
			t.Fatalf("rank 0 exited early: %v\n%s", ws[0].err, tail(ws[0].out.String()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(interval / 2)
	ws[0].killed = true
	tKill := time.Now()
	if err := syscall.Kill(-ws[0].cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ws[0].done
	// Rank 1 loses its peer in the middle of a collective and fails.
	select {
	case <-ws[1].done:
		if ws[1].err == nil {
			t.Errorf("rank 1 exited 0 after its peer was killed")
		}
	case <-time.After(time.Minute):
		t.Fatalf("rank 1 still running a minute after rank 0 was killed:\n%s", tail(ws[1].out.String()))
	}

	ck, err := readSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Position == 0 || ck.Done {
		t.Fatalf("checkpoint at epoch %d position %d (done %v), want mid-epoch", ck.Epoch, ck.Position, ck.Done)
	}
	var lastBefore, reportedInterval float64
	for _, r := range s.all(1) {
		if r.Rank != 0 || r.at.After(tKill) {
			continue
		}
		lastBefore = max(lastBefore, r.Progress)
		if !r.at.After(tKill.Add(-interval)) {
			reportedInterval = max(reportedInterval, r.Progress)
		}
	}
	if ck.Progress < reportedInterval {
		t.Errorf("checkpoint progress %.2f is behind %.2f, reported a checkpoint interval (%v) before the kill",
			ck.Progress, reportedInterval, interval)
	}

	second := run{job: first.job, incarnation: 2, replicas: 1, initBatch: 32, atomicBatch: 32, accumSteps: 1,
		dir: dir, reportAddr: s.addr(), args: args}
	ws2 := start(t, l, second)
	wait(t, ws2, 3*time.Minute)
	out := ws2[0].out.String()
	if !strings.Contains(out, "restored") {
		t.Errorf("the new incarnation did not restore; output:\n%s", tail(out))
	}
	reps := s.all(2)
	if len(reps) == 0 {
		t.Fatal("no report from the new incarnation")
	}
	if reps[0].Progress < ck.Progress || reps[0].Epoch < ck.Epoch {
		t.Errorf("new incarnation's first report at epoch %d progress %.2f, before the checkpoint's epoch %d progress %.2f",
			reps[0].Epoch, reps[0].Progress, ck.Epoch, ck.Progress)
	}
	final, err := readSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !final.Done || final.Metrics["accuracy"] < ex.Target || !reps[len(reps)-1].Done {
		t.Errorf("final %+v: want done at accuracy >= %v with a done report", final, ex.Target)
	}
	// The run history: both incarnations with what they ran, the second
	// starting where the checkpoint stood.
	wantRuns := []Run{
		{Incarnation: 1, Replicas: 2, Nodes: 1, AtomicBatch: 16, AccumSteps: 0, BatchSize: 32},
		{Incarnation: 2, Replicas: 1, Nodes: 1, AtomicBatch: 32, AccumSteps: 1, BatchSize: 64, Epoch: ck.Epoch, Progress: ck.Progress},
	}
	if !reflect.DeepEqual(final.Runs, wantRuns) {
		t.Errorf("run history %+v, want %+v", final.Runs, wantRuns)
	}
	t.Logf("killed at progress %.2f (last report); checkpoint epoch %d position %d progress %.2f: lost %.2f steps at M0 "+
		"(reported %v before the kill: %.2f); finished at epoch %d, accuracy %.4f",
		lastBefore, ck.Epoch, ck.Position, ck.Progress, lastBefore-ck.Progress, interval, reportedInterval,
		final.Epoch, final.Metrics["accuracy"])
}
