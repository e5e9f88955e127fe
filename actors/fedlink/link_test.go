package fedlink

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
)

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testLab is one lab: a CA in dir, a one-server Raft group with two
// nodes of 4 GPUs, and (once started) a link serving on loopback.
type testLab struct {
	name  string
	dir   string
	ca    *pki.CA
	creds *pki.Credentials
	srv   *consensus.Server
	addr  string
	ln    net.Listener
	link  *Link
	logs  *logbuf.Buffer
	hs    *http.Server
}

func newTestLab(t *testing.T, name string) *testLab {
	t.Helper()
	l := &testLab{name: name, dir: t.TempDir(), logs: &logbuf.Buffer{}}
	var err error
	if l.ca, err = pki.NewCA(pki.CAOptions{CommonName: name + " CA"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.WriteCA(l.dir, l.ca); err != nil {
		t.Fatal(err)
	}
	id := pki.Identity{Role: pki.RoleServer, Name: "s0", Cluster: name}
	is, err := l.ca.Issue(pki.CertRequest{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.WriteIssued(l.dir, id, is)
	if err != nil {
		t.Fatal(err)
	}
	if l.creds, err = pki.LoadCredentials(filepath.Join(l.dir, pki.CAFile), cert, key); err != nil {
		t.Fatal(err)
	}
	if l.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	l.addr = l.ln.Addr().String()
	cfg := consensus.DefaultConfig("s0")
	cfg.Logger = slog.New(slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	addr, trans := raft.NewInmemTransport("s0")
	store := raft.NewInmemStore()
	if l.srv, err = consensus.NewServer(cfg, consensus.Stores{Transport: trans, Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.srv.Shutdown() })
	if err := l.srv.Bootstrap([]raft.Server{{ID: "s0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The agents' addresses (never dialled): n0's host 10.9.0.10, n1's
	// 10.9.0.11.
	for i, n := range []string{"n0", "n1"} {
		for {
			err := l.srv.RegisterNode(ctx, state.Node{ID: n, GPUs: 4, Addresses: []string{fmt.Sprintf("10.9.0.%d:7000", 10+i)}})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return l
}

// federationFile writes l's federation file naming peers.
func (l *testLab) federationFile(t *testing.T, q federation.Quota, peers ...*testLab) string {
	t.Helper()
	f := File{Quota: q}
	for _, p := range peers {
		f.Peers = append(f.Peers, PeerFile{Name: p.name, Addresses: []string{p.addr}, CAFile: filepath.Join(p.dir, pki.CAFile)})
	}
	b, _ := json.Marshal(f)
	path := filepath.Join(l.dir, "federation.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start loads the federation, commits SetLab and serves the link.
func (l *testLab) start(t *testing.T, clk *clock, q federation.Quota, peers ...*testLab) {
	t.Helper()
	fed, err := Load(l.federationFile(t, q, peers...), l.name)
	if err != nil {
		t.Fatal(err)
	}
	fed.Settings.TTL = 60
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.srv.ApplyCommand(ctx, &state.SetLab{Name: l.name, CA: pki.Fingerprint(l.ca.Cert), Quota: fed.Quota, Peers: fed.LabPeers()}); err != nil {
		t.Fatal(err)
	}
	l.link, err = New(Config{Name: l.name, Creds: l.creds, Federation: fed, Store: l.srv, Interval: time.Second, Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(l.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := l.creds.FederationServerConfig(fed.Pools)
	if err != nil {
		t.Fatal(err)
	}
	ln := pki.NewListener(l.ln, tc, pki.ListenerOptions{Channel: pki.ChannelFederation, Logger: slog.New(slog.NewTextHandler(l.logs, nil))})
	l.hs = &http.Server{Handler: l.link, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.hs.Serve(ln) }()
	t.Cleanup(func() { l.hs.Close(); l.link.Close() })
}

func (l *testLab) ledger() *federation.Ledger { return l.srv.LocalState().Fed.Ledger }

var quota = federation.Quota{Nominal: 8, LendingLimit: 8, BorrowingLimit: 4}

func pair(t *testing.T) (*clock, *testLab, *testLab) {
	clk := &clock{t: time.Unix(1_000_000, 0)}
	a, b := newTestLab(t, "lab-a"), newTestLab(t, "lab-b")
	a.start(t, clk, quota, b)
	b.start(t, clk, quota, a)
	return clk, a, b
}

// A grant, a renewal and a reclaim are each committed in both labs'
// Raft logs; a grant the borrower refuses is committed in neither.
func TestTwoClusterCommit(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	at := seconds(clk.Now())
	g := federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "l1", Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "n0", GPUs: 4}}, At: at, TTL: 60}
	if err := a.link.Commit(ctx, g); err != nil {
		t.Fatal(err)
	}
	la, oka := a.ledger().Lease("l1")
	lb, okb := b.ledger().Lease("l1")
	if !oka || !okb || la.Expires != at+60 || lb.Expires != at+60 || a.ledger().Lent() != 4 || b.ledger().Borrowed() != 4 {
		t.Fatalf("after the grant: lender %v %+v, borrower %v %+v", oka, la, okb, lb)
	}
	// Beyond lab-b's borrowing limit of 4: lab-b refuses, lab-a commits nothing.
	big := g
	big.Lease, big.Nodes = "l2", []federation.NodeGPUs{{Node: "n1", GPUs: 4}}
	if err := a.link.Commit(ctx, big); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "borrowing limit") {
		t.Fatalf("grant beyond the borrowing limit: %v", err)
	}
	if _, ok := a.ledger().Lease("l2"); ok || a.ledger().Lent() != 4 {
		t.Fatal("the lender committed a grant its borrower refused")
	}
	renew := federation.Command{Op: federation.OpRenew, From: "lab-a", Lease: "l1", At: at + 30, TTL: 60}
	if err := a.link.Commit(ctx, renew); err != nil {
		t.Fatal(err)
	}
	la, _ = a.ledger().Lease("l1")
	lb, _ = b.ledger().Lease("l1")
	if la.Expires != at+90 || lb.Expires != at+90 {
		t.Fatalf("after the renewal: %v and %v, want %v", la.Expires, lb.Expires, at+90)
	}
	if err := a.link.Commit(ctx, federation.Command{Op: federation.OpReclaim, From: "lab-a", Lease: "l1", At: at + 31}); err != nil {
		t.Fatal(err)
	}
	if len(a.ledger().Leases()) != 0 || len(b.ledger().Leases()) != 0 || a.ledger().LastReclaim() != at+31 {
		t.Fatalf("after the reclaim: %v and %v", a.ledger().Leases(), b.ledger().Leases())
	}
	// A renewal of the reclaimed lease is refused by lab-a's own ledger.
	if err := a.link.Commit(ctx, renew); !errors.Is(err, state.ErrLeaseRefused) {
		t.Errorf("renewal of a reclaimed lease: %v", err)
	}
	// A release: the borrower commits, then tells the lender.
	g.Lease, g.At = "l3", at+40
	if err := a.link.Commit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := b.link.Commit(ctx, federation.Command{Op: federation.OpRelease, From: "lab-b", Lease: "l3", At: at + 41}); err != nil {
		t.Fatal(err)
	}
	if len(a.ledger().Leases()) != 0 || len(b.ledger().Leases()) != 0 || b.ledger().Borrowed() != 0 {
		t.Fatalf("after the release: %v and %v", a.ledger().Leases(), b.ledger().Leases())
	}
	// A lab issues only its own commands.
	if err := b.link.Commit(ctx, renew); !errors.Is(err, ErrConfig) {
		t.Errorf("lab-b carrying out lab-a's renewal: %v", err)
	}
}

// follower is a store that is not the leader.
type follower struct{ Store }

func (follower) Leadership() (uint64, bool) { return 1, false }

// A bid that reaches a follower is redirected to the leader's
// federation address (which the sender's client follows); a lease
// command is committed through the leader.
func TestFollowerRedirectsBids(t *testing.T) {
	clk, a, b := pair(t)
	fed := b.link.cfg.Federation
	f, err := New(Config{Name: "lab-b", Creds: b.creds, Federation: fed, Store: follower{b.srv}, Now: clk.Now,
		LeaderAddr: func() string { return b.addr }, Logger: slog.New(slog.NewTextHandler(b.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	peer := &http.Request{Method: http.MethodPost, RemoteAddr: "127.0.0.1:1", TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{a.creds.Cert.Leaf}}}
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{PathBid, `{}`, http.StatusTemporaryRedirect},
		{PathLease, fmt.Sprintf(`{"op":"grant","from":"lab-a","lease":"z","lender":"lab-a","borrower":"lab-b","nodes":[{"node":"n0","gpus":4}],"at":%v,"ttl_s":60}`, seconds(clk.Now())), http.StatusOK},
	} {
		r := peer.Clone(context.Background())
		r.URL, _ = url.Parse("https://" + b.addr + tc.path)
		r.Body = io.NopCloser(strings.NewReader(tc.body))
		w := httptest.NewRecorder()
		f.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("%s on a follower: %d %s, want %d", tc.path, w.Code, w.Body, tc.code)
		}
		if tc.code == http.StatusTemporaryRedirect && w.Header().Get("Location") != "https://"+b.addr+PathBid {
			t.Errorf("redirected to %q", w.Header().Get("Location"))
		}
	}
	if _, ok := b.ledger().Lease("z"); !ok {
		t.Error("the lease command taken by the follower is not in the lab's state")
	}
	// Without a known leader, a bid is answered 503 and the sender tries
	// another address.
	f.cfg.LeaderAddr = func() string { return "" }
	r := peer.Clone(context.Background())
	r.URL, _ = url.Parse("https://" + b.addr + PathBid)
	r.Body = io.NopCloser(strings.NewReader(`{}`))
	w := httptest.NewRecorder()
	f.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("a bid on a follower without a known leader: %d", w.Code)
	}
}

// post sends body to a lab's endpoint as the holder of creds and returns
// the status (0 when the connection was refused) and answer.
func post(t *testing.T, to *testLab, creds *pki.Credentials, path, body string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(to.ca.Cert)
	tc, err := creds.FederationClientConfig(to.name, pool)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Post("https://"+to.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every bad message is refused, logged once at WARN naming the peer,
// and changes nothing.
func TestRefusals(t *testing.T) {
	clk, a, b := pair(t)
	at := seconds(clk.Now())
	before := state.EncodeState(b.srv.LocalState())
	spoof := fmt.Sprintf(`{"op":"grant","from":"lab-b","lease":"x","lender":"lab-b","borrower":"lab-a","nodes":[{"node":"n0","gpus":4}],"at":%v,"ttl_s":60}`, at)
	notOwned := fmt.Sprintf(`{"op":"grant","from":"lab-a","lease":"x","lender":"lab-a","borrower":"lab-b","nodes":[{"node":"n0","gpus":4}],"at":%v,"ttl_s":60}`, at)
	cases := []struct {
		name, path, body string
		code             int
		log              string
	}{
		{"a command claiming another cluster", PathLease, spoof, http.StatusForbidden, "sent by lab-a"},
		{"garbage", PathLease, `{"op":"grant"`, http.StatusBadRequest, "malformed"},
		{"an unknown field", PathLease, `{"op":"expire","from":"lab-a","at":1,"extra":1}`, http.StatusBadRequest, "unknown field"},
		{"an expire for the peer", PathLease, fmt.Sprintf(`{"op":"expire","from":"lab-a","at":%v}`, at), http.StatusConflict, "expire the leases"},
		{"a renewal of an unknown lease", PathLease, fmt.Sprintf(`{"op":"renew","from":"lab-a","lease":"nope","at":%v}`, at), http.StatusConflict, "unknown lease"},
		{"a bid claiming another cluster", PathBid, `{"from":"lab-x","at":1,"lab":{"name":"lab-x","ca":"c","nodes":[],"quota":{"nominal_quota":0,"borrowing_limit":0,"lending_limit":0},"peers":[]},"curve":[],"last_reclaim":0}`, http.StatusForbidden, "bid from"},
	}
	for _, tc := range cases {
		code, text := post(t, b, a.creds, tc.path, tc.body)
		if code != tc.code || !strings.Contains(text, tc.log) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, text, tc.code, tc.log)
		}
	}
	// A grant of a node the lender does not own is refused by the
	// lender's own ledger before it is proposed: the borrower never sees it.
	if err := a.link.Commit(context.Background(), federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "y", Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "gpu-9", GPUs: 4}}, At: at, TTL: 60}); !errors.Is(err, state.ErrLeaseRefused) || !errors.Is(err, federation.ErrNotOwner) {
		t.Errorf("a grant of a node the lender does not own: %v", err)
	}
	if _, ok := a.ledger().Lease("y"); ok {
		t.Error("the lender holds a lease of a node it does not own")
	}
	if after := state.EncodeState(b.srv.LocalState()); !bytes.Equal(after, before) {
		t.Error("refused messages changed lab-b's state")
	}
	warns := 0
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(line, "federation: refused") {
			warns++
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "peer=lab-a") {
				t.Errorf("refusal line %q", line)
			}
		}
	}
	if warns != len(cases) {
		t.Errorf("%d refusal lines for %d refusals:\n%s", warns, len(cases), b.logs.String())
	}
	// A cluster that is no peer of lab-b does not get through the
	// handshake; nor does lab-a with a certificate of another CA.
	c := newTestLab(t, "lab-c")
	if code, text := post(t, b, c.creds, PathLease, spoof); code != 0 {
		t.Errorf("a stranger reached lab-b's handler: %d %s", code, text)
	}
	fake, err := c.ca.Issue(pki.CertRequest{Identity: pki.Identity{Role: pki.RoleServer, Name: "s0", Cluster: "lab-a"}})
	if err != nil {
		t.Fatal(err)
	}
	impostor := &pki.Credentials{Cert: tls.Certificate{Certificate: [][]byte{fake.Cert.Raw}, PrivateKey: fake.Key, Leaf: fake.Cert},
		Identity: pki.Identity{Role: pki.RoleServer, Name: "s0", Cluster: "lab-a"}}
	if code, text := post(t, b, impostor, PathLease, notOwned); code != 0 || !strings.Contains(text, "bad certificate") {
		t.Errorf("lab-a under another CA reached lab-b's handler: %d %s", code, text)
	}
	// The listener logs a refused handshake once the handshake failed on
	// its side, which may be just after the dialer gave up.
	for _, want := range []string{"lab-c/server/s0", "cluster lab-c is not a peer", "not signed by a CA trusted for cluster lab-a"} {
		if !poll.Wait(10*time.Second, func() bool { return strings.Contains(b.logs.String(), want) }) {
			t.Errorf("lab-b's log does not say %q:\n%s", want, b.logs.String())
		}
	}
}

// A round: an idle lender lends a node to a peer whose jobs want more
// GPUs, committed in both ledgers; the next round renews it; when the
// borrower disappears, the lender notices within three intervals and the
// lease runs out by the lender's clock.
func TestRoundLendsRenewsAndNoticesLoss(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	a.link.SetBid(LocalBid{Used: map[string]int{}})
	curve := make([]float64, 12)
	for i := range curve {
		curve[i] = 1
	}
	b.link.SetBid(LocalBid{Curve: curve, Used: map[string]int{"n0": 4, "n1": 4}})
	b.link.Round(ctx) // lab-b's bid reaches lab-a
	done, failed := a.link.Round(ctx)
	if len(done) != 1 || len(failed) != 0 || done[0].Op != federation.OpGrant || done[0].Borrower != "lab-b" {
		t.Fatalf("first round: done %+v, failed %+v", done, failed)
	}
	id := done[0].Lease
	if _, ok := b.ledger().Lease(id); !ok || a.ledger().Lent() != 4 {
		t.Fatalf("the grant is not in both ledgers")
	}
	// lab-b knows where the agents of lab-a's nodes are, from lab-a's
	// bid: a job of lab-b first on lab-a's node has its rendezvous there.
	a.link.Round(ctx) // lab-a's bid reaches lab-b
	for node, host := range map[string]string{"n0": "10.9.0.10", "n1": "10.9.0.11"} {
		if got := b.link.Host(federation.BorrowedID("lab-a", node)); got != host {
			t.Errorf("lab-b's host of lab-a's %s: %q, want %q", node, got, host)
		}
	}
	if got := b.link.Host(federation.BorrowedID("lab-c", "n0")); got != "" {
		t.Errorf("host of a lab that never bid: %q", got)
	}
	clk.Add(time.Second)
	b.link.Round(ctx)
	done, failed = a.link.Round(ctx)
	if len(done) != 1 || done[0].Op != federation.OpRenew || len(failed) != 0 {
		t.Fatalf("second round: done %+v, failed %+v", done, failed)
	}
	if st := a.link.Peers(); len(st) != 1 || !st[0].Up {
		t.Fatalf("peers: %+v", st)
	}
	// lab-a's own jobs now want every GPU it has: the next round reclaims
	// the lease (lab-a commits, then tells lab-b), and it is gone from
	// both ledgers.
	want := make([]float64, 8)
	for i := range want {
		want[i] = 1
	}
	// Not while its what-if round would not use the lent node...
	a.link.SetBid(LocalBid{Curve: want, Used: map[string]int{"n1": 4}, Reclaimable: map[string]bool{}})
	clk.Add(time.Second)
	b.link.Round(ctx)
	if done, _ = a.link.Round(ctx); len(done) != 1 || done[0].Op != federation.OpRenew {
		t.Fatalf("round with no node reclaimable: %+v", done)
	}
	// ...and at once when it would.
	lent := ""
	for _, n := range []string{"n0", "n1"} {
		if a.ledger().LentOn(n) > 0 {
			lent = n
		}
	}
	a.link.SetBid(LocalBid{Curve: want, Used: map[string]int{"n1": 4}, Reclaimable: map[string]bool{lent: true}})
	clk.Add(time.Second)
	b.link.Round(ctx)
	done, failed = a.link.Round(ctx)
	if len(done) != 1 || done[0].Op != federation.OpReclaim || done[0].Lease != id || len(failed) != 0 {
		t.Fatalf("round after lab-a's jobs grew: done %+v, failed %+v", done, failed)
	}
	if _, ok := b.ledger().Lease(id); ok || a.ledger().Lent() != 0 {
		t.Fatal("the reclaimed lease is still held")
	}
	// lab-a idle again, past its lending cooldown: it lends again.
	a.link.SetBid(LocalBid{Used: map[string]int{}})
	clk.Add(time.Duration(a.link.Settings().Cooldown+1) * time.Second)
	b.link.Round(ctx)
	done, _ = a.link.Round(ctx)
	if len(done) != 1 || done[0].Op != federation.OpGrant {
		t.Fatalf("round after the cooldown: %+v", done)
	}
	id = done[0].Lease
	// lab-b is lost.
	b.hs.Close()
	lost := clk.Now()
	var noticed time.Time
	for range 5 {
		clk.Add(time.Second)
		a.link.Round(ctx)
		if !a.link.Peers()[0].Up {
			noticed = clk.Now()
			break
		}
	}
	if noticed.IsZero() || noticed.Sub(lost) > 3*time.Second {
		t.Fatalf("loss not noticed within three intervals (%v)", noticed.Sub(lost))
	}
	if !strings.Contains(a.logs.String(), "peer lost") {
		t.Error("the loss is not logged")
	}
	le, _ := a.ledger().Lease(id)
	clk.t = time.Unix(0, int64(le.Expires*1e9)).Add(time.Second)
	a.link.Round(ctx)
	if len(a.ledger().Leases()) != 0 || a.ledger().Lent() != 0 {
		t.Fatalf("the lease outlived its time to live: %v", a.ledger().Leases())
	}
}

// Until its allocator has handed over a bid in the current leadership, a
// leader neither bids nor plans: it would look idle and lend everything.
func TestNoRoundWithoutABid(t *testing.T) {
	_, a, b := pair(t)
	ctx := context.Background()
	b.link.SetBid(LocalBid{Curve: []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}})
	b.link.Round(ctx)
	if done, failed := a.link.Round(ctx); len(done)+len(failed) != 0 {
		t.Fatalf("a leader without a bid carried out %+v and %+v", done, failed)
	}
	if st := b.link.Peers(); st[0].Up {
		t.Fatal("a leader without a bid sent one")
	}
	a.link.SetBid(LocalBid{})
	if done, _ := a.link.Round(ctx); len(done) != 1 || done[0].Op != federation.OpGrant {
		t.Fatalf("with its bid: %+v", done)
	}
}

// With the federation's gossip pool: a peer's servers found there are
// reached even when the file's addresses are stale, and a peer whose
// servers all left the pool is lost as soon as its last bid is an
// interval old, not two.
func TestGossip(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	var mu sync.Mutex
	members := []cluster.Member{{Name: "lab-b/s0", Meta: cluster.Meta{Role: cluster.RoleServer, FederationAddr: b.addr}}}
	a.link.cfg.Gossip = func() []cluster.Member {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(members)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stale := dead.Addr().String()
	dead.Close()
	a.link.clients["lab-b"].addrs = []string{stale}
	a.link.SetBid(LocalBid{})
	b.link.SetBid(LocalBid{Curve: []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}})
	b.link.Round(ctx)
	if done, failed := a.link.Round(ctx); len(done) != 1 || len(failed) != 0 {
		t.Fatalf("through the gossip's address: done %+v, failed %+v", done, failed)
	}
	a.link.check(clk.Now())
	mu.Lock()
	members = nil
	mu.Unlock()
	clk.Add(1100 * time.Millisecond)
	a.link.check(clk.Now())
	if a.link.Peers()[0].Up {
		t.Fatal("a peer gone from the gossip is still up")
	}
	if !strings.Contains(a.logs.String(), "left the federation's gossip") {
		t.Errorf("the loss is not logged with its reason:\n%s", a.logs.String())
	}
}

// A lease only the borrower holds (its lender never committed it) is
// released by the borrower once a bid of the lender made after the grant
// does not list it, and the lender's own plan never counts it: then the
// node is lent for real.
func TestHalfCommittedLease(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	half := fmt.Sprintf(`{"op":"grant","from":"lab-a","lease":"half","lender":"lab-a","borrower":"lab-b","nodes":[{"node":"n0","gpus":4}],"at":%v,"ttl_s":60}`, seconds(clk.Now()))
	if code, text := post(t, b, a.creds, PathLease, half); code != http.StatusOK {
		t.Fatalf("the borrower's half: %d %s", code, text)
	}
	a.link.SetBid(LocalBid{})
	b.link.SetBid(LocalBid{Curve: []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}})
	clk.Add(time.Second)
	a.link.Round(ctx) // a bid after the grant, without it (lab-b has not bid yet: no plan)
	done, failed := b.link.Round(ctx)
	if len(done) != 1 || done[0].Op != federation.OpRelease || done[0].Lease != "half" || len(failed) != 0 {
		t.Fatalf("borrower's round: done %+v, failed %+v", done, failed)
	}
	if len(b.ledger().Leases()) != 0 {
		t.Fatalf("the half lease is still held: %v", b.ledger().Leases())
	}
	done, failed = a.link.Round(ctx)
	if len(failed) != 0 || len(done) != 1 || done[0].Op != federation.OpGrant {
		t.Fatalf("lender's round: done %+v, failed %+v", done, failed)
	}
	clk.Add(time.Second)
	a.link.Round(ctx)
	if done, _ := b.link.Round(ctx); len(done) != 0 {
		t.Errorf("the borrower released a lease its lender holds: %+v", done)
	}
	if len(b.ledger().Leases()) != 1 {
		t.Errorf("borrower's leases %v", b.ledger().Leases())
	}
}

// A borrower cannot extend its lease, however it asks: its renewal (a
// day ahead, for a day) is refused with a 403 naming the rule, logged
// once naming the peer, and changes nothing. When it then stops
// answering, the lease runs out by the lender's clock at its time to
// live: the lender's rounds expire it and its orders are no longer
// authorised (the lender stops its workers at its next Assign).
func TestOnlyTheLenderRenews(t *testing.T) {
	clk, a, b := pair(t)
	ctx := context.Background()
	at := seconds(clk.Now())
	g := federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "l1", Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "n0", GPUs: 4}}, At: at, TTL: 60}
	if err := a.link.Commit(ctx, g); err != nil {
		t.Fatal(err)
	}
	before := state.EncodeState(a.srv.LocalState())
	for _, body := range []string{
		fmt.Sprintf(`{"op":"renew","from":"lab-b","lease":"l1","at":%v,"ttl_s":86400}`, at+86400),
		fmt.Sprintf(`{"op":"renew","from":"lab-b","lease":"l1","at":%v,"ttl_s":86400}`, at+1),
		fmt.Sprintf(`{"op":"renew","from":"lab-b","lease":"l1","at":%v}`, at+1),
	} {
		code, text := post(t, a, b.creds, PathLease, body)
		if code != http.StatusForbidden || !strings.Contains(text, "only its lender lab-a extends a lease") {
			t.Errorf("the borrower's renewal %s: %d %s", body, code, text)
		}
	}
	if after := state.EncodeState(a.srv.LocalState()); !bytes.Equal(after, before) {
		t.Error("the borrower's renewals changed the lender's state")
	}
	if n := len(a.logs.Lines("federation: refused")); n != 3 || len(a.logs.Lines("peer=lab-b")) != 3 {
		t.Errorf("%d refusal lines, want 3 naming lab-b:\n%s", n, a.logs.String())
	}
	// The ledger refuses it too, however it gets there.
	err := a.srv.ApplyCommand(ctx, &state.Lease{Cmd: federation.Command{Op: federation.OpRenew, From: "lab-b", Lease: "l1", At: at + 1, TTL: 86400}})
	if !errors.Is(err, federation.ErrNotParty) {
		t.Errorf("the borrower's renewal through Raft: %v", err)
	}
	order := federation.Order{Borrower: "lab-b", Node: "n0", GPUs: 4, At: at + 59}
	if err := a.ledger().Authorize(order); err != nil {
		t.Fatalf("an order within the lease: %v", err)
	}
	// lab-b's workers run on n0 under the lease.
	owner := &pb.Ref{Address: "lab-b-s0", Id: "jobhost/job-j1"}
	if err := b.link.SendOrder(ctx, federation.BorrowedID("lab-a", "n0"),
		&pb.Assign{ClusterId: "cluster-b", Term: 2, Generation: 5, Runs: []*pb.RunJob{run("j1", 2, owner)}}); err != nil {
		t.Fatal(err)
	}
	if m := a.link.Borrowed("n0"); len(m) != 1 {
		t.Fatalf("n0's Assign under the lease holds %v", m)
	}
	// lab-b goes silent. Within the time to live nothing changes...
	clk.Add(59 * time.Second)
	a.link.Round(ctx)
	if _, ok := a.ledger().Lease("l1"); !ok {
		t.Fatal("the lease ended before its time to live")
	}
	// ...and at it, the lease is gone from the lender's ledger, whatever
	// lab-b sent before, and lab-b's orders there are refused.
	clk.Add(time.Second)
	a.link.Round(ctx)
	if _, ok := a.ledger().Lease("l1"); ok || a.ledger().Lent() != 0 {
		t.Fatalf("the lease of the silent borrower outlived its time to live: %+v", a.ledger().Leases())
	}
	order.At = at + 60
	if err := a.ledger().Authorize(order); !errors.Is(err, federation.ErrNotLeased) {
		t.Errorf("an order of the lost borrower after the expiry: %v", err)
	}
	// n0's next Assign holds none of lab-b's runs: its workers stop.
	if m := a.link.Borrowed("n0"); len(m) != 0 {
		t.Errorf("n0's Assign after the expiry still holds the lost borrower's runs %v", m)
	}
	if len(a.logs.Lines("borrowed workers stopped")) != 1 {
		t.Errorf("no line says the lost borrower's workers stopped:\n%s", a.logs.String())
	}
}
