package fedlink

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"pollux/actors/jobspec"
	"pollux/actors/pb"
	"pollux/cluster/federation"
	"pollux/internal/jsonin"
)

// Paths of the federation listener for workers on borrowed GPUs
// (docs/federation.md, "Borrowed GPUs as extra nodes").
const (
	// PathOrder receives a borrower's order (an OrderMessage), on the
	// lender's leader.
	PathOrder = "/v1/federation/order"
	// PathAck receives, on the borrower's leader, the lender's node's
	// answer about the borrower's runs there (a RelayMessage with an
	// AssignAck).
	PathAck = "/v1/federation/ack"
	// PathReport receives, on the borrower's leader, its workers'
	// reports and exits from a lender's node (a RelayMessage).
	PathReport = "/v1/federation/report"
)

// maxOrderBytes bounds an encoded order or relayed message.
const maxOrderBytes = 4 << 20

// OrderMessage is a borrower's Assign for the GPUs it leases of one of
// the lender's nodes: the runs it wants there, fenced like an Assign by
// the borrower's cluster id, Raft term and generation. Assign is the
// protobuf encoding of a pb.Assign (base64 in JSON); its Node attributes
// are not used.
type OrderMessage struct {
	From   string `json:"from"`
	Node   string `json:"node"`
	Assign []byte `json:"assign"`
}

// RelayMessage carries, from a lender to a borrower, what the lender's
// node says about the borrower's runs: an AssignAck (PathAck), or worker
// reports and exits (PathReport). Each field is the protobuf encoding of
// its message.
type RelayMessage struct {
	From    string   `json:"from"`
	Ack     []byte   `json:"ack,omitempty"`
	Reports []byte   `json:"reports,omitempty"`
	Exited  [][]byte `json:"exited,omitempty"`
}

// maxRelayExits bounds the exits of one relayed message.
const maxRelayExits = 4096

// decodeStrict reads one JSON object of at most maxOrderBytes, no
// unknown fields, no trailing data.
func decodeStrict(b []byte, v any) error {
	if len(b) > maxOrderBytes {
		return fmt.Errorf("%w: message of %d bytes, at most %d", ErrBadMessage, len(b), maxOrderBytes)
	}
	if err := jsonin.Decode(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	return nil
}

// Order is a decoded, validated order.
type Order struct {
	From   string
	Node   string
	Assign *pb.Assign
}

// GPUs is the GPUs the order's runs take.
func (o *Order) GPUs() int {
	g := 0
	for _, rj := range o.Assign.Runs {
		g += int(rj.Replicas)
	}
	return g
}

// DecodeOrder reads one order from a peer and checks its shape: the
// borrower and node are valid names, the assignment names a cluster,
// and every run is one the lender's node would accept (a valid job
// name, 1 to MaxNodeGPUs workers with their ranks within the world
// size, exactly one of an application and a command, one non-empty
// report token per worker, listed once), so that a borrower's run can
// never make the lender's node refuse its own jobs' assignment.
func DecodeOrder(b []byte) (*Order, error) {
	var m OrderMessage
	if err := decodeStrict(b, &m); err != nil {
		return nil, err
	}
	if !federation.ValidName(m.From) || !federation.ValidName(m.Node) {
		return nil, fmt.Errorf("%w: order from %q for node %q", ErrBadMessage, m.From, m.Node)
	}
	as := &pb.Assign{}
	if err := proto.Unmarshal(m.Assign, as); err != nil {
		return nil, fmt.Errorf("%w: order's assignment: %v", ErrBadMessage, err)
	}
	if as.ClusterId == "" {
		return nil, fmt.Errorf("%w: order names no cluster", ErrBadMessage)
	}
	seen := map[string]bool{}
	total := 0
	for _, rj := range as.Runs {
		if err := checkRun(rj); err != nil {
			return nil, fmt.Errorf("%w: order's job %q: %v", ErrBadMessage, rj.GetJob(), err)
		}
		if seen[rj.Job] {
			return nil, fmt.Errorf("%w: order lists job %q twice", ErrBadMessage, rj.Job)
		}
		seen[rj.Job] = true
		total += int(rj.Replicas)
	}
	if total > federation.MaxNodeGPUs {
		return nil, fmt.Errorf("%w: order for %d GPUs", ErrBadMessage, total)
	}
	return &Order{From: m.From, Node: m.Node, Assign: as}, nil
}

func checkRun(rj *pb.RunJob) error {
	if err := jobspec.CheckName(rj.GetJob()); err != nil {
		return err
	}
	switch {
	case rj.Replicas < 1 || rj.Replicas > federation.MaxNodeGPUs:
		return fmt.Errorf("replicas %d outside [1, %d]", rj.Replicas, federation.MaxNodeGPUs)
	case uint64(rj.FirstRank)+uint64(rj.Replicas) > uint64(rj.WorldSize):
		return fmt.Errorf("ranks %d+%d beyond world size %d", rj.FirstRank, rj.Replicas, rj.WorldSize)
	case (rj.Application == "") == (len(rj.Command) == 0):
		return errors.New("want exactly one of application and command")
	case len(rj.Command) > 0 && rj.Command[0] == "":
		return errors.New("empty program")
	case len(rj.ReportTokens) != int(rj.Replicas) || slices.Contains(rj.ReportTokens, ""):
		return fmt.Errorf("%d report tokens for %d workers", len(rj.ReportTokens), rj.Replicas)
	}
	return nil
}

// Relay is a decoded, validated relayed message.
type Relay struct {
	From    string
	Ack     *pb.AssignAck
	Reports *pb.WorkerReports
	Exited  []*pb.WorkerExited
}

// DecodeRelay reads one relayed message from a lender: valid names, at
// least one part, each part a message about the lender's nodes (a node
// name that is a federation node name) and valid job names.
func DecodeRelay(b []byte) (*Relay, error) {
	var m RelayMessage
	if err := decodeStrict(b, &m); err != nil {
		return nil, err
	}
	if !federation.ValidName(m.From) {
		return nil, fmt.Errorf("%w: relay from %q", ErrBadMessage, m.From)
	}
	if m.Ack == nil && m.Reports == nil && len(m.Exited) == 0 {
		return nil, fmt.Errorf("%w: an empty relay", ErrBadMessage)
	}
	if len(m.Exited) > maxRelayExits {
		return nil, fmt.Errorf("%w: %d exits", ErrBadMessage, len(m.Exited))
	}
	r := &Relay{From: m.From}
	node := func(id string) error {
		if !federation.ValidName(id) {
			return fmt.Errorf("%w: relay about node %q", ErrBadMessage, id)
		}
		return nil
	}
	job := func(id string) error {
		if err := jobspec.CheckName(id); err != nil {
			return fmt.Errorf("%w: relay about job %q: %v", ErrBadMessage, id, err)
		}
		return nil
	}
	if m.Ack != nil {
		r.Ack = &pb.AssignAck{}
		if err := proto.Unmarshal(m.Ack, r.Ack); err != nil {
			return nil, fmt.Errorf("%w: relayed ack: %v", ErrBadMessage, err)
		}
		if err := node(r.Ack.Node); err != nil {
			return nil, err
		}
		for _, rs := range r.Ack.Runs {
			if err := job(rs.Job); err != nil {
				return nil, err
			}
		}
	}
	if m.Reports != nil {
		r.Reports = &pb.WorkerReports{}
		if err := proto.Unmarshal(m.Reports, r.Reports); err != nil {
			return nil, fmt.Errorf("%w: relayed reports: %v", ErrBadMessage, err)
		}
		for _, rep := range r.Reports.Reports {
			if err := errors.Join(node(rep.Node), job(rep.Job)); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range m.Exited {
		ev := &pb.WorkerExited{}
		if err := proto.Unmarshal(e, ev); err != nil {
			return nil, fmt.Errorf("%w: relayed exit: %v", ErrBadMessage, err)
		}
		if err := errors.Join(node(ev.Node), job(ev.Job)); err != nil {
			return nil, err
		}
		r.Exited = append(r.Exited, ev)
	}
	return r, nil
}

// fence is what a lender remembers of a borrower's newest order: its
// cluster, term and generation (orders older are refused, as a node
// refuses an older Assign).
type fence struct {
	cluster          string
	term, generation uint64
}

// ordered is the runs a borrower ordered on one of the lender's nodes.
type ordered struct {
	fence fence
	runs  []*pb.RunJob
	// merged is the fence of the order when its runs were last merged
	// into the node's Assign (zero: not yet): the node's acks answer it.
	merged fence
}

// orderKey names a borrower's order on a node.
type orderKey struct{ borrower, node string }

// sortedOrders returns the keys of m in (node, borrower) order.
func sortedOrders(m map[orderKey]*ordered) []orderKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b orderKey) int {
		if a.node != b.node {
			if a.node < b.node {
				return -1
			}
			return 1
		}
		if a.borrower < b.borrower {
			return -1
		}
		if a.borrower > b.borrower {
			return 1
		}
		return 0
	})
}
