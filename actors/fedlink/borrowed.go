package fedlink

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"pollux/actors/pb"
	"pollux/cluster/federation"
)

// Workers on borrowed GPUs: the borrower's allocator hands each borrowed
// node's Assign to SendOrder, which posts it to the lender; the lender
// merges the runs its ledger authorises (Borrowed) into its own node's
// Assign, so only the lender starts processes on its machines. Acks
// (SplitAck), reports and exits (Relay) go back to the borrower's leader
// (docs/federation.md, "Borrowed GPUs as extra nodes").

// relayTimeout bounds one relayed message.
const relayTimeout = 10 * time.Second

// SendOrder posts the Assign of a borrowed node (id is
// federation.BorrowedID) to its lender and, once the lender took it,
// remembers its jobs and their owners, to whom the lender's reports go.
func (l *Link) SendOrder(ctx context.Context, id string, as *pb.Assign) error {
	lender, node, ok := federation.SplitBorrowed(id)
	if !ok {
		return fmt.Errorf("%w: %q is not a borrowed node", ErrConfig, id)
	}
	enc, err := proto.Marshal(as)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	body, err := json.Marshal(OrderMessage{From: l.cfg.Name, Node: node, Assign: enc})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	jobs := map[string]*pb.Ref{}
	for _, rj := range as.Runs {
		jobs[rj.Job] = rj.Owner
	}
	if err := l.post(ctx, lender, PathOrder, body); err != nil {
		return err
	}
	l.mu.Lock()
	l.sent[id] = jobs
	l.mu.Unlock()
	return nil
}

// Borrowed is the runs borrowers ordered on the lab's node that its
// ledger authorises now, to merge into the node's Assign, their owner
// set to this server's relay actor (Config.RelayOwner). An order the
// ledger no longer authorises (its lease ended) is forgotten and logged:
// the node's next Assign leaves its runs out, which stops them.
func (l *Link) Borrowed(node string) []*pb.RunJob {
	st := l.cfg.Store.LocalState()
	at := seconds(l.cfg.Now())
	var relay *pb.Ref
	if l.cfg.RelayOwner != nil {
		relay = l.cfg.RelayOwner()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*pb.RunJob
	for _, k := range sortedOrders(l.orders) {
		if k.node != node {
			continue
		}
		o := l.orders[k]
		gpus := 0
		for _, rj := range o.runs {
			gpus += int(rj.Replicas)
		}
		var err error
		if st.Fed == nil {
			err = fmt.Errorf("%w: the cluster has no federation configuration", ErrRefused)
		} else if gpus > 0 {
			err = st.Fed.Ledger.Authorize(federation.Order{Borrower: k.borrower, Node: node, GPUs: gpus, At: at})
		}
		if err != nil {
			l.cfg.Logger.Info("federation: borrowed workers stopped: the lease ended", "borrower", k.borrower, "node", node, "err", err.Error())
			delete(l.orders, k)
			continue
		}
		o.merged = o.fence
		root := l.checkpointRoot(k.borrower)
		for _, rj := range o.runs {
			c := proto.Clone(rj).(*pb.RunJob)
			c.Owner, c.CheckpointRoot = relay, root
			out = append(out, c)
		}
	}
	return out
}

// checkpointRoot is the checkpoint root the federation file declares
// for peer's jobs ("" none: the lab's own root applies).
func (l *Link) checkpointRoot(peer string) string {
	for _, p := range l.cfg.Federation.Peers {
		if p.Name == peer {
			return p.CheckpointRoot
		}
	}
	return ""
}

// borrowerOf is the borrower whose order on node lists job ("" none).
// Called with l.mu held.
func (l *Link) borrowerOf(node, job string) string {
	for k, o := range l.orders {
		if k.node == node && slices.ContainsFunc(o.runs, func(rj *pb.RunJob) bool { return rj.Job == job }) {
			return k.borrower
		}
	}
	return ""
}

// SplitAck takes a node's ack apart: it returns the ack with the runs
// of borrowers taken out (what the lab's own allocator reconciles), and
// sends each borrower with an order on the node its runs, fenced with
// the borrower's order the node was last given.
func (l *Link) SplitAck(ack *pb.AssignAck) *pb.AssignAck {
	l.mu.Lock()
	theirs := map[string][]*pb.RunStatus{}
	fences := map[string]fence{}
	for k, o := range l.orders {
		if k.node == ack.Node && o.merged.cluster != "" {
			theirs[k.borrower] = nil
			fences[k.borrower] = o.merged
		}
	}
	if len(theirs) == 0 {
		l.mu.Unlock()
		return ack
	}
	own := proto.Clone(ack).(*pb.AssignAck)
	own.Runs = nil
	for _, rs := range ack.Runs {
		if b := l.borrowerOf(ack.Node, rs.Job); b != "" {
			if _, ok := theirs[b]; ok {
				theirs[b] = append(theirs[b], rs)
				continue
			}
		}
		own.Runs = append(own.Runs, rs)
	}
	l.mu.Unlock()
	for b, runs := range theirs {
		f := fences[b]
		out := &pb.AssignAck{Ok: ack.Ok, Error: ack.Error, Node: ack.Node, ClusterId: f.cluster, Term: f.term,
			Generation: f.generation, Runs: runs}
		enc, err := proto.Marshal(out)
		if err != nil {
			continue
		}
		l.relay(b, PathAck, RelayMessage{From: l.cfg.Name, Ack: enc})
	}
	return own
}

// Relay sends the workers' reports or exit (from this lab's node actors,
// addressed to the relay actor) to the borrowers whose runs they are.
func (l *Link) Relay(msg proto.Message) {
	switch m := msg.(type) {
	case *pb.WorkerReports:
		by := map[string]*pb.WorkerReports{}
		l.mu.Lock()
		for _, rep := range m.Reports {
			if b := l.borrowerOf(rep.Node, rep.Job); b != "" {
				if by[b] == nil {
					by[b] = &pb.WorkerReports{}
				}
				by[b].Reports = append(by[b].Reports, rep)
			}
		}
		l.mu.Unlock()
		for b, reps := range by {
			if enc, err := proto.Marshal(reps); err == nil {
				l.relay(b, PathReport, RelayMessage{From: l.cfg.Name, Reports: enc})
			}
		}
	case *pb.WorkerExited:
		l.mu.Lock()
		b := l.borrowerOf(m.Node, m.Job)
		l.mu.Unlock()
		if enc, err := proto.Marshal(m); err == nil && b != "" {
			l.relay(b, PathReport, RelayMessage{From: l.cfg.Name, Exited: [][]byte{enc}})
		}
	}
}

// relay posts m to peer in the background (best effort: a lost report
// is made good by the next, a lost ack by the next round's).
func (l *Link) relay(peer, path string, m RelayMessage) {
	body, err := json.Marshal(m)
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		defer cancel()
		if err := l.post(ctx, peer, path, body); err != nil {
			l.cfg.Logger.Debug("federation: relaying to a borrower", "peer", peer, "path", path, "err", err)
		}
	}()
}

// serveOrder checks a borrower's order (fenced by its cluster, term and
// generation; within the GPUs the borrower leases on the node now, by
// this lab's ledger) and keeps it as the borrower's newest for the node.
// A refused order is logged and changes nothing.
func (l *Link) serveOrder(w http.ResponseWriter, r *http.Request, peer string, b []byte) {
	o, err := DecodeOrder(b)
	switch {
	case err != nil:
		l.refuse(w, r, peer, http.StatusBadRequest, err)
		return
	case o.From != peer:
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: order from %q, sent by %s", ErrRefused, o.From, peer))
		return
	}
	nf := fence{cluster: o.Assign.ClusterId, term: o.Assign.Term, generation: o.Assign.Generation}
	l.mu.Lock()
	f, seen := l.fences[peer]
	l.mu.Unlock()
	if seen && f.cluster == nf.cluster && (nf.term < f.term || nf.term == f.term && nf.generation < f.generation) {
		l.refuse(w, r, peer, http.StatusConflict, fmt.Errorf("%w: stale order of term %d generation %d: %s's newest is term %d generation %d",
			ErrStaleOrder, nf.term, nf.generation, peer, f.term, f.generation))
		return
	}
	if gpus := o.GPUs(); gpus > 0 {
		st := l.cfg.Store.LocalState()
		if st.Fed == nil {
			reply(w, http.StatusServiceUnavailable, "fedlink: the cluster has not joined its federation yet")
			return
		}
		if err := st.Fed.Ledger.Authorize(federation.Order{Borrower: peer, Node: o.Node, GPUs: gpus, At: seconds(l.cfg.Now())}); err != nil {
			l.refuse(w, r, peer, http.StatusConflict, fmt.Errorf("%w: %w", ErrRefused, err))
			return
		}
	}
	k := orderKey{borrower: peer, node: o.Node}
	l.mu.Lock()
	defer l.mu.Unlock()
	if seen && f.cluster != nf.cluster {
		l.cfg.Logger.Warn("federation: a borrower's orders come from another cluster id: its Raft cluster was rebuilt; its older orders are dropped",
			"peer", peer, "old_cluster", f.cluster, "new_cluster", nf.cluster)
		for ok := range l.orders {
			if ok.borrower == peer {
				delete(l.orders, ok)
			}
		}
	}
	l.fences[peer] = nf
	var before []*pb.RunJob
	if cur := l.orders[k]; cur != nil {
		before = cur.runs
	}
	changed := !slices.EqualFunc(before, o.Assign.Runs, func(a, b *pb.RunJob) bool { return proto.Equal(a, b) })
	if len(o.Assign.Runs) == 0 {
		delete(l.orders, k)
	} else if cur := l.orders[k]; cur != nil {
		cur.fence, cur.runs = nf, o.Assign.Runs
	} else {
		l.orders[k] = &ordered{fence: nf, runs: o.Assign.Runs}
	}
	if changed && l.cfg.OnOrder != nil {
		l.cfg.OnOrder()
	}
	reply(w, http.StatusOK, "")
}

// serveRelay hands what a lender relays about this lab's runs on its
// node to the allocator (an ack, its node named federation.BorrowedID)
// and the jobs' actors (reports, exits): only about jobs this lab
// ordered on that node.
func (l *Link) serveRelay(w http.ResponseWriter, r *http.Request, peer string, b []byte) {
	m, err := DecodeRelay(b)
	switch {
	case err != nil:
		l.refuse(w, r, peer, http.StatusBadRequest, err)
		return
	case m.From != peer:
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: relay from %q, sent by %s", ErrRefused, m.From, peer))
		return
	}
	l.mu.Lock()
	owner := func(node, job string) *pb.Ref {
		jobs, ok := l.sent[federation.BorrowedID(peer, node)]
		if !ok {
			return nil
		}
		if o := jobs[job]; o != nil {
			return o
		}
		if _, ok := jobs[job]; ok {
			return &pb.Ref{}
		}
		return nil
	}
	var ack *pb.AssignAck
	if m.Ack != nil {
		if node := m.Ack.Node; l.sent[federation.BorrowedID(peer, node)] != nil {
			ack = m.Ack
			ack.Node = federation.BorrowedID(peer, node)
			ack.Runs = slices.DeleteFunc(ack.Runs, func(rs *pb.RunStatus) bool { return owner(node, rs.Job) == nil })
		}
	}
	type delivery struct {
		to  *pb.Ref
		msg proto.Message
	}
	var out []delivery
	if m.Reports != nil {
		by := map[*pb.Ref]*pb.WorkerReports{}
		var order []*pb.Ref
		for _, rep := range m.Reports.Reports {
			o := owner(rep.Node, rep.Job)
			if o == nil || o.Id == "" {
				continue
			}
			rep.Node = federation.BorrowedID(peer, rep.Node)
			if by[o] == nil {
				by[o] = &pb.WorkerReports{}
				order = append(order, o)
			}
			by[o].Reports = append(by[o].Reports, rep)
		}
		for _, o := range order {
			out = append(out, delivery{o, by[o]})
		}
	}
	for _, ev := range m.Exited {
		if o := owner(ev.Node, ev.Job); o != nil && o.Id != "" {
			ev.Node = federation.BorrowedID(peer, ev.Node)
			out = append(out, delivery{o, ev})
		}
	}
	l.mu.Unlock()
	if ack != nil && l.cfg.OnAck != nil {
		l.cfg.OnAck(ack)
	}
	if l.cfg.Deliver != nil {
		for _, d := range out {
			l.cfg.Deliver(d.to, d.msg)
		}
	}
	reply(w, http.StatusOK, "")
}
