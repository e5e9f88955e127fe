package attack

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"pollux/actors/fedlink"
	"pollux/actors/pb"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/testbed/builtin"
	"pollux/testbed/fedlab"
	"pollux/testbed/launch"
)

// fedAttacks are a peer lab's, run on two labs of their own (lender, the
// lab attacked, lends its node to borrower, the attacker): the borrower
// extending or taking the lender's node by lease commands, and the
// borrower lost while it holds the lease (last: it ends the federation).
var fedAttacks = []attack{
	{name: "federation-lease-renewal-by-the-borrower", fed: forgedLease(func(f *fedTarget, at float64) federation.Command {
		return federation.Command{Op: federation.OpRenew, From: borrower, Lease: f.lent.ID, At: at, TTL: federation.MaxTTL}
	}, http.StatusForbidden, "only its lender "+lender+" extends a lease")},
	{name: "federation-renewal-posing-as-the-lender", fed: forgedLease(func(f *fedTarget, at float64) federation.Command {
		return federation.Command{Op: federation.OpRenew, From: lender, Lease: f.lent.ID, At: at, TTL: federation.MaxTTL}
	}, http.StatusForbidden, "sent by "+borrower)},
	{name: "federation-grant-by-the-borrower", fed: forgedLease(func(f *fedTarget, at float64) federation.Command {
		return federation.Command{Op: federation.OpGrant, From: borrower, Lease: "attack-grant", Lender: lender, Borrower: borrower,
			Nodes: []federation.NodeGPUs{{Node: f.free, GPUs: 2}}, At: at, TTL: federation.MaxTTL}
	}, http.StatusConflict, "not by its lender "+lender)},
	{name: "federation-order-on-a-node-not-leased", fed: forged(fedlink.PathOrder, orderOnFreeNode, http.StatusConflict, "not leased to the borrower")},
	{name: "flood-federation", fed: floodFederation},
	{name: "federation-lost-borrowers-lease", fed: lostBorrower},
}

// The two labs of the federation cases.
const (
	lender   = "lab-a"
	borrower = "lab-b"
	// fedTTL is the leases' time to live (the lender's lease_ttl_s).
	fedTTL = 10 * time.Second
	// fedInterval is the federation rounds' interval.
	fedInterval = 500 * time.Millisecond
)

// fedTarget is the federation the fed cases attack: the lender's lab,
// the borrower's, the lease between them, and the borrower's federation
// client (its server certificate, trusting the lender's CA).
type fedTarget struct {
	ls     *fedlab.Set
	lender *launch.Cluster
	lent   federation.Lease
	free   string // a node of the lender's that it does not lend
	client *http.Client
	tls    *tls.Config // the borrower's server's, dialling the lender
	addr   string      // the lender's federation address
	log    func(msg string, args ...any)
}

// runFederation starts the two labs, waits until the borrower runs
// workers on the lender's node, runs the fed cases in order into res and
// stops the labs.
func runFederation(ctx context.Context, dir string, o Options, res *Result) error {
	var todo []attack
	for _, a := range attacks {
		if a.fed != nil && (len(o.Only) == 0 || slices.Contains(o.Only, a.name)) {
			todo = append(todo, a)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	f, err := startFederation(ctx, dir, o)
	if f != nil && f.ls != nil {
		defer func() {
			if serr := f.ls.Stop(); serr != nil && err == nil {
				err = fmt.Errorf("%w: stopping the labs: %w", ErrRun, serr)
			}
		}()
	}
	if err != nil {
		return err
	}
	for _, a := range todo {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		how, refused := a.fed(ctx, f)
		res.Attacks++
		if refused {
			res.Refused++
		} else {
			res.Succeeded++
		}
		res.Cases[a.name] = Case{Refused: refused, How: how}
		o.Logger.Info("attack", "name", a.name, "refused", refused, "how", how)
	}
	return nil
}

// startFederation starts the lender and the borrower, one server and
// two agents of 2 GPUs each; the lender may lend all its GPUs and
// borrows nothing, the borrower borrows up to a node and lends nothing.
// Four jobs of the borrower's want more than its GPUs: it borrows one of
// the lender's nodes and runs workers there; the other stays free.
func startFederation(ctx context.Context, dir string, o Options) (*fedTarget, error) {
	terms := federation.DefaultSettings()
	terms.TTL = fedTTL.Seconds()
	tmpl := launch.Options{Exec: o.Exec, Env: o.Env, Dir: filepath.Join(dir, "federation"), Servers: 1, Agents: 2, GPUsPerAgent: 2,
		Interval: time.Second, TimeScale: 100, LogLevel: "info", Observe: true, Scenario: "attack-federation", Logger: o.Logger}
	shape := func(lab string, f *fedlink.File) {
		if lab == lender {
			f.Quota = federation.Quota{Nominal: 4, LendingLimit: 4}
		} else {
			f.Quota = federation.Quota{Nominal: 4, BorrowingLimit: 2}
		}
	}
	o.Logger.Info("attack: starting two federated labs", "lender", lender, "borrower", borrower)
	ls, err := fedlab.StartWith(ctx, tmpl, []string{lender, borrower}, federation.Quota{}, fedInterval, terms, shape)
	f := &fedTarget{ls: ls, log: o.Logger.Info}
	if err != nil {
		return f, fmt.Errorf("%w: starting the labs: %w", ErrRun, err)
	}
	f.lender = ls.Labs[lender]
	fed, err := fedlink.Load(filepath.Join(tmpl.Dir, borrower, "federation.json"), borrower)
	if err != nil {
		return f, fmt.Errorf("%w: %w", ErrRun, err)
	}
	creds, err := ls.Labs[borrower].TLS().Credentials(ls.Labs[borrower].Servers[0].ID)
	if err != nil {
		return f, fmt.Errorf("%w: the borrower's credentials: %w", ErrRun, err)
	}
	tc, err := creds.FederationClientConfig(lender, fed.Peers[0].Pool)
	if err != nil {
		return f, fmt.Errorf("%w: %w", ErrRun, err)
	}
	f.tls, f.client = tc, &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	f.addr = fed.Peers[0].Addresses[0]
	cat, err := builtin.Catalog()
	if err != nil {
		return f, err
	}
	for _, job := range []string{"b-1", "b-2", "b-3", "b-4"} {
		spec, err := launch.Job{Name: job, App: "cifar10"}.Spec(cat, 4)
		if err != nil {
			return f, fmt.Errorf("%w: %w", ErrRun, err)
		}
		if a := ls.Labs[borrower].Client().SubmitAny(ctx, job, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			return f, fmt.Errorf("%w: submitting %s to %s: %s", ErrRun, job, borrower, a.Error())
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if l, ok := f.lease(ctx); ok && len(l.Nodes) == 1 && len(f.borrowedWorkers()) > 0 {
			f.lent = l
			for _, a := range f.lender.Agents {
				if a.ID != l.Nodes[0].Node {
					f.free = a.ID
				}
			}
			o.Logger.Info("attack: the borrower runs workers on the lender's node", "lease", l.ID, "nodes", l.Nodes)
			return f, nil
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("%w: %s never ran workers on a node leased from %s within 2 minutes", ErrRun, borrower, lender)
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// leases are the leases in the lender's own ledger.
func (f *fedTarget) leases(ctx context.Context) ([]federation.Lease, error) {
	st, err := f.lender.Client().StatusAny(ctx)
	if err != nil {
		return nil, err
	}
	if st.Federation == nil {
		return nil, fmt.Errorf("%s shows no federation", lender)
	}
	return st.Federation.Leases, nil
}

// lease is the lender's lease to the borrower, as its ledger holds it.
func (f *fedTarget) lease(ctx context.Context) (federation.Lease, bool) {
	ls, err := f.leases(ctx)
	if err != nil {
		return federation.Lease{}, false
	}
	for _, l := range ls {
		if l.Lender == lender && l.Borrower == borrower {
			return l, true
		}
	}
	return federation.Lease{}, false
}

// borrowedWorkers are the borrower's workers on the lender's agents.
func (f *fedTarget) borrowedWorkers() []launch.Worker {
	return slices.DeleteFunc(f.lender.Workers(), func(w launch.Worker) bool { return !strings.HasPrefix(w.Job, "b-") })
}

// post sends body to the lender's federation listener as the borrower's
// server, and returns the status and the answer's text.
func (f *fedTarget) post(ctx context.Context, path string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+f.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// forgedLease is forged for a lease command, build's (at: now on the
// borrower's clock).
func forgedLease(build func(f *fedTarget, at float64) federation.Command, want int, mention string) func(context.Context, *fedTarget) (string, bool) {
	return forged(fedlink.PathLease, func(f *fedTarget, at float64) (string, any) {
		c := build(f, at)
		return fmt.Sprintf("%s %s ttl_s %v", c.Op, c.Lease, c.TTL), c
	}, want, mention)
}

// orderOnFreeNode is the borrower's order (an Assign of its own) for
// workers of a job on the lender's node that it does not lease.
func orderOnFreeNode(f *fedTarget, _ float64) (string, any) {
	as := &pb.Assign{ClusterId: "attack", Term: 1 << 40, Generation: 1 << 40, Runs: []*pb.RunJob{{Job: "attack-order", Incarnation: 1,
		Application: "cifar10", Replicas: 2, WorldSize: 2, NumNodes: 1, InitBatch: 128, ReportTokens: []string{"attack-0", "attack-1"}}}}
	raw, _ := proto.Marshal(as)
	return "order of 2 workers of attack-order on " + f.free, fedlink.OrderMessage{From: borrower, Node: f.free, Assign: raw}
}

// forged sends the message build makes (at: now on the borrower's
// clock) to the lender's path as the borrower. Refused if the lender
// answers want mentioning mention, logs one refusal naming the
// borrower, its ledger holds the same leases with each expiring no later
// than its own time to live from now, no worker of an attack's job runs
// on its agents, and the borrower's workers still run on the lent node
// (the lease goes on; within 15 s: its jobs rescale now and then).
func forged(path string, build func(f *fedTarget, at float64) (string, any), want int, mention string) func(context.Context, *fedTarget) (string, bool) {
	return func(ctx context.Context, f *fedTarget) (string, bool) {
		before, err := f.leases(ctx)
		if err != nil {
			return "reading the lender's ledger: " + err.Error(), false
		}
		srv := f.lender.Servers[0]
		subs := []string{"federation: refused", "peer=" + borrower, "path=" + path}
		n0, _ := countLines(srv.Log, subs...)
		what, msg := build(f, float64(time.Now().UnixNano())/1e9)
		body, _ := json.Marshal(msg)
		code, text, err := f.post(ctx, path, body)
		if err != nil {
			return "request failed: " + err.Error(), false
		}
		how := fmt.Sprintf("%s: %d %s", what, code, text)
		if code != want || !strings.Contains(text, mention) {
			return how + fmt.Sprintf(" (want %d mentioning %q)", want, mention), false
		}
		n, line := countLines(srv.Log, subs...)
		for deadline := time.Now().Add(5 * time.Second); n == n0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			n, line = countLines(srv.Log, subs...)
		}
		if n-n0 != 1 {
			return fmt.Sprintf("%s; %d refusal lines of %s naming %s, want 1", how, n-n0, lender, borrower), false
		}
		// Three of the lender's rounds, for an order that got through.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if i := slices.IndexFunc(f.lender.Workers(), func(w launch.Worker) bool { return strings.HasPrefix(w.Job, "attack-") }); i >= 0 {
				w := f.lender.Workers()[i]
				return fmt.Sprintf("%s; worker %s rank %d runs on the lender's %s", how, w.Job, w.Rank, w.Node), false
			}
		}
		after, err := f.leases(ctx)
		if err != nil {
			return how + "; reading the lender's ledger afterwards: " + err.Error(), false
		}
		if ids(before) != ids(after) {
			return fmt.Sprintf("%s; the lender's leases %s became %s", how, ids(before), ids(after)), false
		}
		limit := float64(time.Now().UnixNano())/1e9 + fedTTL.Seconds() + 1
		for _, l := range after {
			if l.Expires > limit {
				return fmt.Sprintf("%s; lease %s of the lender's ledger now expires %.0f s from now, past its time to live of %v",
					how, l.ID, l.Expires-float64(time.Now().Unix()), fedTTL), false
			}
		}
		// The borrower's jobs rescale now and then: a moment without
		// its workers there is no refusal's doing.
		for end := time.Now().Add(15 * time.Second); len(f.borrowedWorkers()) == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(end) {
				return how + "; the borrower's workers no longer run on the lent node", false
			}
		}
		return fmt.Sprintf("%s; %s logged: %s; its leases %s, each expiring within its own %v", how, lender, logMsg(line), ids(after), fedTTL), true
	}
}

// floodFederation opens floodConns silent TCP connections from
// floodSource to the lender's federation port. Refused if, while they
// are held, the borrower's server completes its handshake there within
// memberWithin, the lender logs the flooder on the federation channel
// and its pollux_preauth_refused_total of that channel grows.
func floodFederation(ctx context.Context, f *fedTarget) (string, bool) {
	srv := f.lender.Servers[0]
	hc := f.lender.HTTPClient(10 * time.Second)
	before, err := refusedMetric(ctx, hc, srv, pki.ChannelFederation)
	if err != nil {
		return "cannot read /metrics before the flood: " + err.Error(), false
	}
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(floodSource)}}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var dialErrs int
	for range floodConns {
		c, err := d.DialContext(ctx, "tcp", f.addr)
		if err != nil {
			dialErrs++
			continue
		}
		conns = append(conns, c)
	}
	begin := time.Now()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: memberWithin}, "tcp", f.addr, f.tls)
	if err != nil {
		return fmt.Sprintf("with %d silent connections from %s held, the borrower's handshake: %v", len(conns), floodSource, err), false
	}
	c.Close()
	took := time.Since(begin)
	if took > memberWithin {
		return fmt.Sprintf("with %d silent connections from %s held the borrower waited %v (bound %v)", len(conns), floodSource,
			took.Round(time.Millisecond), memberWithin), false
	}
	line, ok := logLineIn(srv.Log, 5*time.Second, "refused connection", "channel="+string(pki.ChannelFederation), "peer="+floodSource+":")
	if !ok {
		return fmt.Sprintf("%s logged no refusal of %s on the federation channel", lender, floodSource), false
	}
	how := fmt.Sprintf("%d silent connections from %s (%d not even accepted); the borrower's server got through in %v; %s logged: %s",
		len(conns), floodSource, dialErrs, took.Round(time.Millisecond), lender, logMsg(line))
	after, err := refusedMetric(ctx, hc, srv, pki.ChannelFederation)
	if err != nil {
		return how + "; cannot read /metrics after the flood: " + err.Error(), false
	}
	if after <= before {
		return how + fmt.Sprintf("; pollux_preauth_refused_total{channel=%q} stayed %v", pki.ChannelFederation, before), false
	}
	return how + fmt.Sprintf("; pollux_preauth_refused_total{channel=%q} %v -> %v", pki.ChannelFederation, before, after), true
}

// ids lists the IDs, lenders and borrowers of leases.
func ids(ls []federation.Lease) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.ID+" "+l.Lender+"->"+l.Borrower)
	}
	slices.Sort(out)
	return "[" + strings.Join(out, ", ") + "]"
}

// lostBorrower kills every process of the borrower's lab (its servers,
// its agents and the workers on them), leaving its workers on the
// lender's node to the lender. Refused if the lender logs the borrower
// lost, its ledger drops the lease within the time to live of the kill
// (and a bound for noticing and committing), the borrower's workers on
// its node stop, and a job of the lender's own then runs on that node.
func lostBorrower(ctx context.Context, f *fedTarget) (string, bool) {
	b := f.ls.Labs[borrower]
	srv := f.lender.Servers[0]
	l, ok := f.lease(ctx)
	if !ok {
		return "the lender holds no lease to the borrower before the kill", false
	}
	theirs := f.borrowedWorkers()
	if len(theirs) == 0 {
		return "no workers of the borrower on the lender's node before the kill", false
	}
	for _, w := range b.Workers() {
		_ = b.KillWorker(w, "attack", 1)
	}
	if err := b.KillAll(append(slices.Clone(b.Servers), b.Agents...), "attack", 1); err != nil {
		return "killing the borrower: " + err.Error(), false
	}
	killed := time.Now()
	bound := fedTTL + 4*fedInterval + 5*time.Second
	var gone time.Duration
	for {
		if _, held := f.lease(ctx); !held {
			gone = time.Since(killed)
			break
		}
		if time.Since(killed) > bound+30*time.Second {
			return fmt.Sprintf("the lender still holds lease %s %v after the borrower's loss (time to live %v)", l.ID, time.Since(killed).Round(time.Second), fedTTL), false
		}
		time.Sleep(250 * time.Millisecond)
	}
	how := fmt.Sprintf("borrower killed holding lease %s (%d workers on the lender's node); the lender's ledger dropped it after %v",
		l.ID, len(theirs), gone.Round(100*time.Millisecond))
	if gone > bound {
		return fmt.Sprintf("%s, past the time to live %v and its bound %v", how, fedTTL, bound), false
	}
	lost, ok := logLineIn(srv.Log, 5*time.Second, "federation: peer lost", "peer="+borrower)
	if !ok {
		return how + "; but " + lender + " logged no loss of " + borrower, false
	}
	how += "; " + lender + " logged: " + logMsg(lost)
	deadline := time.Now().Add(30 * time.Second)
	for _, w := range theirs {
		for launch.WorkerAlive(w) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if launch.WorkerAlive(w) {
			return fmt.Sprintf("%s; the borrower's worker %s rank %d (pid %d) still runs on %s 30 s later", how, w.Job, w.Rank, w.PID, w.Node), false
		}
	}
	how += fmt.Sprintf("; its %d workers on the node stopped", len(theirs))
	if stopped, ok := logLineIn(srv.Log, time.Second, "federation: borrowed workers stopped", "borrower="+borrower); ok {
		how += " (" + logMsg(stopped) + ")"
	}
	return ownJobRuns(ctx, f, l.Nodes[0].Node, how)
}

// ownJobRuns submits two jobs of the lender's own, of up to 2 GPUs
// each (the lender's 4), and waits for a worker of one on node, the
// node it lent.
func ownJobRuns(ctx context.Context, f *fedTarget, node, how string) (string, bool) {
	cat, err := builtin.Catalog()
	if err != nil {
		return how + "; " + err.Error(), false
	}
	jobs := []string{"a-after-1", "a-after-2"}
	for _, job := range jobs {
		spec, err := launch.Job{Name: job, App: "cifar10"}.Spec(cat, 2)
		if err != nil {
			return how + "; " + err.Error(), false
		}
		if a := f.lender.Client().SubmitAny(ctx, job, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			return how + "; the lender refused its own job: " + a.Error(), false
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if slices.ContainsFunc(f.lender.Workers(), func(w launch.Worker) bool { return slices.Contains(jobs, w.Job) && w.Node == node }) {
			return how + "; the lender's own jobs then ran on " + node, true
		}
		if time.Now().After(deadline) {
			var states []string
			for _, job := range jobs {
				j, _, _ := f.lender.Client().JobAny(ctx, job)
				states = append(states, fmt.Sprintf("%s %s %s", job, j.State, j.Reason))
			}
			return fmt.Sprintf("%s; no worker of the lender's own jobs ran on %s within 60 s (%s)", how, node, strings.Join(states, "; ")), false
		}
		select {
		case <-ctx.Done():
			return how + "; " + ctx.Err().Error(), false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logLineIn waits up to within for a line of the log file path holding
// every one of subs, and returns it.
func logLineIn(path string, within time.Duration, subs ...string) (string, bool) {
	deadline := time.Now().Add(within)
	for {
		if n, line := countLines(path, subs...); n > 0 {
			return line, true
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
