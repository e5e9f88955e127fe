package labloss

import (
	"context"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/fedlab"
)

// leaseSeen is what the poller saw of one lease: when (mono ns) it was
// first and last in a ledger, and its latest expiry (mono ns).
type leaseSeen struct {
	lease             federation.Lease
	first, last, exps int64
}

// ledgerSight is what the poller saw of one lease in one lab's own
// ledger (mono ns): the start of the last poll whose answer held it (it
// was there then or later), the end of the first poll after that whose
// answer did not (0: none yet; it was gone by then), and its expiry as
// last shown.
type ledgerSight struct {
	present, gone, expires int64
}

// leaseWatch polls every running lab's status and keeps what it saw of
// the leases.
type leaseWatch struct {
	ls    *fedlab.Set
	seen  map[string]*leaseSeen // by lease ID
	held  map[string][]federation.Lease
	in    map[string]map[string]*ledgerSight // by lab, lease ID
	every time.Duration
}

// poll reads each running lab's ledger once; held is set to what each
// lab answered (a lab that did not answer keeps its last answer).
func (lw *leaseWatch) poll(ctx context.Context) {
	for _, n := range lw.ls.Names {
		c := lw.ls.Labs[n]
		before := mono.Now()
		st, err := c.Client().StatusAny(ctx)
		now := mono.Now()
		if err != nil || st.Federation == nil {
			continue
		}
		// The leases' times are Unix seconds on the lab's clock, the
		// same machine's as the monotonic clock here.
		off := now - time.Now().UnixNano()
		lw.held[n] = st.Federation.Leases
		if lw.in[n] == nil {
			lw.in[n] = map[string]*ledgerSight{}
		}
		held := map[string]bool{}
		for _, l := range st.Federation.Leases {
			s := lw.seen[l.ID]
			if s == nil {
				s = &leaseSeen{lease: l, first: now}
				lw.seen[l.ID] = s
			}
			exp := int64(l.Expires*1e9) + off
			s.last = now
			s.exps = max(s.exps, exp)
			held[l.ID] = true
			lw.in[n][l.ID] = &ledgerSight{present: before, expires: exp}
		}
		for id, s := range lw.in[n] {
			if !held[id] && s.gone == 0 {
				s.gone = now
			}
		}
	}
}

// withLab are the leases lab n's last answer holds with lab peer.
func (lw *leaseWatch) withLab(n, peer string) []federation.Lease {
	var out []federation.Lease
	for _, l := range lw.held[n] {
		if l.Lender == peer || l.Borrower == peer {
			out = append(out, l)
		}
	}
	return out
}

// watcher runs a leaseWatch's polls in a goroutine of its own: every
// other use of the leaseWatch goes through ask, on that goroutine.
type watcher struct {
	lw      *leaseWatch
	queries chan func(*leaseWatch)
	polled  chan struct{}
	cancel  context.CancelFunc
}

// startWatch starts polling the labs of ls every 250 ms, until close.
func startWatch(ctx context.Context, ls *fedlab.Set) *watcher {
	lw := &leaseWatch{ls: ls, seen: map[string]*leaseSeen{}, held: map[string][]federation.Lease{}, in: map[string]map[string]*ledgerSight{},
		every: 250 * time.Millisecond}
	pollCtx, cancel := context.WithCancel(ctx)
	w := &watcher{lw: lw, queries: make(chan func(*leaseWatch)), polled: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.polled)
		t := time.NewTicker(lw.every)
		defer t.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case q := <-w.queries:
				q(lw)
			case <-t.C:
				lw.poll(pollCtx)
			}
		}
	}()
	return w
}

// ask runs q on the polling goroutine and waits for it; after close it
// does nothing.
func (w *watcher) ask(q func(*leaseWatch)) {
	done := make(chan struct{})
	select {
	case w.queries <- func(l *leaseWatch) { q(l); close(done) }:
		<-done
	case <-w.polled:
	}
}

// close stops the polls and waits for the goroutine to end.
func (w *watcher) close() {
	w.cancel()
	<-w.polled
}
