package failover

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat"
)

// FloodSource is the address the benchmark's flood comes from: a
// loopback address that is none of the servers' (they run on 127.0.0.1).
const FloodSource = "127.0.0.2"

// redial is how long a flood connection the server closed (or could
// not be made) waits before it is dialled again: the flood holds what
// the servers let it hold, and comes back each second for the rest.
const redial = time.Second

// statusSamples is how many status requests, each on a new connection,
// time the status latency of a run.
const statusSamples = 20

// flooder holds n silent TCP connections (no TLS, no bytes) from
// FloodSource to each of a set of ports, dialling again, after redial,
// each one the server closes, until stopped.
type flooder struct {
	n      int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	open   atomic.Int64 // connections held now
	dials  atomic.Int64 // connections made in all
}

func newFlooder(ctx context.Context, n int) *flooder {
	ctx, cancel := context.WithCancel(ctx)
	return &flooder{n: n, ctx: ctx, cancel: cancel}
}

// aim floods addr with f.n connections.
func (f *flooder) aim(addr string) {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(FloodSource)}}
	for range f.n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			buf := make([]byte, 1)
			for f.ctx.Err() == nil {
				c, err := d.DialContext(f.ctx, "tcp", addr)
				if err != nil {
					// A server down (killed, not yet back) or a full
					// backlog: try again shortly.
					sleep(f.ctx, redial)
					continue
				}
				f.dials.Add(1)
				f.open.Add(1)
				stop := context.AfterFunc(f.ctx, func() { c.Close() })
				_, _ = c.Read(buf) // returns when the server (or stop) closes it
				stop()
				c.Close()
				f.open.Add(-1)
				sleep(f.ctx, redial)
			}
		}()
	}
}

// stop closes every connection and waits for the flood to end.
func (f *flooder) stop() {
	f.cancel()
	f.wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// statusLatency times statusSamples status requests to members (in
// turn), each on a new connection (its TCP and TLS handshake included),
// and returns their median and maximum in seconds. A request that fails
// counts as failed, not as a time.
func statusLatency(ctx context.Context, client *http.Client, members []*benchMember) (median, maxS float64, failed int) {
	tr, ok := client.Transport.(*http.Transport)
	if !ok {
		tr = http.DefaultTransport.(*http.Transport)
	}
	fresh := &http.Client{Transport: tr.Clone(), Timeout: 5 * time.Second}
	fresh.Transport.(*http.Transport).DisableKeepAlives = true
	defer fresh.CloseIdleConnections()
	var samples []float64
	for i := range statusSamples {
		m := members[i%len(members)]
		if !m.alive() {
			continue
		}
		begin := time.Now()
		if _, err := getStatus(ctx, fresh, m); err != nil {
			failed++
			continue
		}
		samples = append(samples, time.Since(begin).Seconds())
	}
	if len(samples) == 0 {
		return 0, 0, failed
	}
	slices.Sort(samples)
	return stat.Quantile(0.5, stat.Empirical, samples, nil), samples[len(samples)-1], failed
}

// floodNote is the flood's line in the notes.
func (f *flooder) note() string {
	return fmt.Sprintf("flood: %d connections held from %s, %d made in all", f.open.Load(), FloodSource, f.dials.Load())
}
