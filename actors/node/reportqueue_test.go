package node

import (
	"slices"
	"sync"
	"testing"

	"pollux/actors/node/workerproto"
)

func TestReportQueueWakesOncePerBatch(t *testing.T) {
	var q reportQueue
	rep := func(rank int) workerproto.Report { return workerproto.Report{Job: "j", Incarnation: 1, Rank: rank} }
	if !q.push(rep(0)) {
		t.Fatal("the first report into an empty queue did not ask for a wake-up")
	}
	for r := 1; r < 4; r++ {
		if q.push(rep(r)) {
			t.Fatalf("report %d asked for a second wake-up before the actor took the first batch", r)
		}
	}
	got := q.take(nil)
	if ranks := ranksOf(got); !slices.Equal(ranks, []int{0, 1, 2, 3}) {
		t.Fatalf("took ranks %v, want 0 1 2 3 in order", ranks)
	}
	if !q.push(rep(4)) {
		t.Fatal("the first report after a take did not ask for a wake-up")
	}
	if again := q.take(got); !slices.Equal(ranksOf(again), []int{4}) {
		t.Fatalf("second take: ranks %v, want 4", ranksOf(again))
	}
	if left := q.take(nil); len(left) != 0 {
		t.Fatalf("an empty queue gave %d reports", len(left))
	}
}

// TestReportQueueLosesNothing pushes from many goroutines while an
// actor stand-in takes on every wake-up: every report arrives once, each
// sender's in its order, and a wake-up was pending whenever reports
// were queued.
func TestReportQueueLosesNothing(t *testing.T) {
	const senders, each = 8, 2000
	var q reportQueue
	wake := make(chan struct{}, senders*each)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if q.push(workerproto.Report{Rank: s, Epoch: i}) {
					wake <- struct{}{}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]int, senders)
	var taken []workerproto.Report
	got := 0
	for got < senders*each {
		select {
		case <-wake:
		case <-done:
			select {
			case <-wake:
			default:
				t.Fatalf("all sent, %d taken, and no wake-up pending", got)
			}
		}
		taken = q.take(taken)
		for _, r := range taken {
			if r.Epoch != next[r.Rank] {
				t.Fatalf("sender %d: report %d came where %d was due", r.Rank, r.Epoch, next[r.Rank])
			}
			next[r.Rank]++
			got++
		}
	}
}

func ranksOf(reps []workerproto.Report) []int {
	var out []int
	for _, r := range reps {
		out = append(out, r.Rank)
	}
	return out
}
