package worker

import (
	"testing"
	"time"
)

// TestTwoRanksReportToTheGoDecoder runs the MLP example as two replicas
// (gloo on 127.0.0.1, one accumulation step) to its target, and checks
// what a node agent would receive: every line decodes with workerproto,
// both ranks report their configuration, progress only grows, the gradient
// statistics get measured, and exactly one done report comes, from rank 0,
// once the summary shows the target reached.
func TestTwoRanksReportToTheGoDecoder(t *testing.T) {
	l := library(t)
	s := newSink(t)
	dir := t.TempDir()
	ex := Examples[0]
	r := run{job: "digits-mlp", incarnation: 3, replicas: 2, initBatch: 32, atomicBatch: 16, accumSteps: 1,
		dir: dir, reportAddr: s.addr(), args: ex.Command(l, "--report-every", "0.2")[2:]}
	ws := start(t, l, r)
	wait(t, ws, 3*time.Minute)

	reps := s.all()
	byRank := map[int]int{}
	done := 0
	last := map[int]float64{}
	measured := false
	for _, rep := range reps {
		byRank[rep.Rank]++
		if rep.Job != r.job || rep.Incarnation != r.incarnation || rep.LocalBatch != 16 || rep.AccumSteps != 1 {
			t.Errorf("report %+v does not carry the run's job, incarnation and batch configuration", rep.Report)
		}
		if rep.Progress < last[rep.Rank] {
			t.Errorf("rank %d: progress fell from %v to %v", rep.Rank, last[rep.Rank], rep.Progress)
		}
		last[rep.Rank] = rep.Progress
		if rep.GradSqr > 0 && rep.GradVar > 0 {
			measured = true
		}
		if rep.SyncTime <= 0 {
			t.Errorf("rank %d: sync_time %v with 2 replicas, want > 0", rep.Rank, rep.SyncTime)
		}
		if rep.Done {
			done++
			if rep.Rank != 0 {
				t.Errorf("done report from rank %d", rep.Rank)
			}
		}
	}
	if byRank[0] == 0 || byRank[1] == 0 {
		t.Errorf("reports by rank %v, want both ranks", byRank)
	}
	if done != 1 || !lastOfRank(reps, 0).Done {
		t.Errorf("%d done reports, want 1 (rank 0's last)", done)
	}
	if !measured {
		t.Error("no report carried gradient statistics")
	}
	sum, err := readSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || sum.Metrics["accuracy"] < ex.Target {
		t.Errorf("summary %+v: want done at accuracy >= %v", sum, ex.Target)
	}
	final := lastOfRank(reps, 0)
	if final.Epoch != sum.Epoch || final.Progress != sum.Progress {
		t.Errorf("done report at epoch %d progress %v, checkpoint at epoch %d progress %v",
			final.Epoch, final.Progress, sum.Epoch, sum.Progress)
	}
	// The done report names the final checkpoint, which the summary
	// describes.
	if ck := final.Checkpoint; ck.Epoch != sum.Epoch || ck.Progress != sum.Progress || ck.SavedAt != sum.SavedAt {
		t.Errorf("done report's checkpoint %+v, the summary's epoch %d progress %v saved at %v", ck, sum.Epoch, sum.Progress, sum.SavedAt)
	}
	t.Logf("%d reports (%v by rank), done at epoch %d, progress %.1f, accuracy %.4f, grad_sqr %.3g grad_var %.3g",
		len(reps), byRank, sum.Epoch, sum.Progress, sum.Metrics["accuracy"], final.GradSqr, final.GradVar)
}

func lastOfRank(reps []timedReport, rank int) timedReport {
	var out timedReport
	for _, r := range reps {
		if r.Rank == rank {
			out = r
		}
	}
	return out
}
