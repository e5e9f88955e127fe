package server

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/jobspec"
	"pollux/cluster"
	"pollux/internal/member"
	"pollux/internal/secure"
	"pollux/internal/usage"
	"pollux/optimizer"
)

// Config is the configuration of one server. The comments name the
// `pollux server` flags the fields come from; errors about a field name
// its flag.
type Config struct {
	ID      string // --id, unique in the cluster
	DataDir string // --data-dir, of the Raft log and snapshots
	// Bind is the address of the gossip and actor listeners (--bind);
	// GossipPort and ActorPort their ports (0: any free port).
	Bind                  string
	GossipPort, ActorPort int
	RaftAddr, HTTPAddr    string // --raft, --http
	// Peers are every server of the cluster (--peers); Bootstrap forms
	// the cluster from them (no effect on a server with state).
	Peers     []Peer
	Bootstrap bool
	// Join are gossip addresses of members to join (--join).
	Join       []string
	FastGossip bool // --fast-gossip: sub-second failure detection
	// RaftElection, if set, is Raft's heartbeat and election timeout
	// (the leader lease half of it) instead of consensus.DefaultConfig's
	// (--raft-election-timeout).
	RaftElection time.Duration
	Interval     time.Duration
	NodeGrace    time.Duration
	AgentLease   time.Duration
	// MaxFailures is --max-failures (-1: retry forever); TimeScale the
	// emulated seconds per real second of emulated workers.
	MaxFailures int
	TimeScale   float64
	// CheckpointRoot is the cluster's checkpoint root (set once, at
	// bootstrap); Retain how long finished jobs and dead nodes are kept
	// (0: forever).
	CheckpointRoot string
	Retain         time.Duration
	// Topology is where this server sits (level=domain pairs); Levels
	// the cluster's levels if given (--topology-levels; nil: not given,
	// the cluster's own).
	Topology string
	Levels   []string
	// Policy decides rounds on one GPU type, TypedPolicy rounds on
	// several; PolicyName is --policy as given (logged, and autoscaling
	// needs auto or pollux).
	Policy, TypedPolicy optimizer.Policy
	PolicyName          string
	// Apps are the names of the applications jobs may emulate, and
	// AppLimits their batch limits (a spec's defaults).
	Apps       []string
	AppLimits  jobspec.AppLimits
	Security   secure.Options
	Federation Federation
	Autoscale  Autoscale
	// Logger is the server's log; LibLogger the libraries' (Raft,
	// memberlist, protoactor; nil: Logger).
	Logger, LibLogger *slog.Logger
	// OnReady, if set, is called once the server serves.
	OnReady func(Ready)
}

// Peer is one server of the cluster as --peers lists it.
type Peer struct{ ID, RaftAddr, HTTPAddr string }

// Ready is what a server tells once it serves: `pollux server` prints it
// as a JSON line on stdout.
type Ready struct {
	ID     string `json:"id"`
	HTTP   string `json:"http"`
	Raft   string `json:"raft"`
	Gossip string `json:"gossip"`
	Actor  string `json:"actor"`
	// Federation is the federation listener's address (with
	// --federation); FederationGossip its address in the federation's
	// gossip pool (with --federation-gossip-key).
	Federation       string `json:"federation,omitempty"`
	FederationGossip string `json:"federation_gossip,omitempty"`
}

// ParsePeers parses --peers: id=raftaddr=httpaddr entries, comma
// separated ("" is none).
func ParsePeers(s string) ([]Peer, error) {
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		parts := strings.Split(p, "=")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return nil, usage.Errorf("server: --peers entry %q is not id=raftaddr=httpaddr", p)
		}
		if seen[parts[0]] {
			return nil, usage.Errorf("server: --peers names %q twice", parts[0])
		}
		seen[parts[0]] = true
		peers = append(peers, Peer{ID: parts[0], RaftAddr: parts[1], HTTPAddr: parts[2]})
	}
	return peers, nil
}

// checked is what check derives from a valid Config.
type checked struct {
	place cluster.Meta
	fed   *fedlink.Federation // nil without --federation
}

// check refuses a bad configuration before anything starts.
func (c *Config) check() (checked, error) {
	var out checked
	if err := c.checkRun(); err != nil {
		return out, err
	}
	place, err := member.Place(c.Topology, "", "")
	if err != nil {
		return out, usage.Errorf("server: %w", err)
	}
	if c.Levels != nil {
		if _, err := cluster.CheckTopology(place.Topology, c.Levels); err != nil {
			return out, usage.Errorf("server: --topology does not fit --topology-levels: %w", err)
		}
	}
	if err := c.Autoscale.check(); err != nil {
		return out, usage.Wrap(err)
	}
	if c.Autoscale.Provider != "" && c.PolicyName != "auto" && c.PolicyName != "pollux" {
		return out, usage.Errorf("server: --autoscale decides with the Pollux policy, not --policy %s", c.PolicyName)
	}
	fed, err := c.Federation.check(c.Security.Insecure)
	if err != nil {
		return out, usage.Wrap(err)
	}
	if c.Peers != nil && !slices.ContainsFunc(c.Peers, func(p Peer) bool { return p.ID == c.ID }) {
		return out, usage.Errorf("server: --peers does not list this server %q", c.ID)
	}
	return checked{place: place, fed: fed}, nil
}

// checkRun checks the settings of the server's own run.
func (c *Config) checkRun() error {
	if c.ID == "" || c.DataDir == "" {
		return usage.Errorf("server: --id and --data-dir are required")
	}
	if c.Bootstrap && len(c.Peers) == 0 {
		return usage.Errorf("server: --bootstrap needs --peers")
	}
	if !(c.TimeScale > 0) || c.Interval <= 0 || c.Retain < 0 {
		return usage.Errorf("server: --time-scale %v and --interval %v must be positive, --retain %v not negative", c.TimeScale, c.Interval, c.Retain)
	}
	if err := checkLease(c.AgentLease, c.NodeGrace); err != nil {
		return usage.Wrap(err)
	}
	if c.RaftElection != 0 && (c.RaftElection < 50*time.Millisecond || c.RaftElection > 10*time.Second) {
		return usage.Errorf("server: --raft-election-timeout %v outside [50ms, 10s]", c.RaftElection)
	}
	if c.CheckpointRoot != "" && !filepath.IsAbs(c.CheckpointRoot) {
		return usage.Errorf("server: --checkpoint-root %q is not an absolute path", c.CheckpointRoot)
	}
	return nil
}

// checkLease refuses an agent lease that leaves no margin under the node
// grace: the leader restarts a dead agent's jobs only once the agent's
// lease plus its margin has ended, so a longer lease would hold every
// re-placement beyond --node-grace.
func checkLease(lease, grace time.Duration) error {
	if lease < 4*time.Millisecond || lease > 10*time.Minute {
		return fmt.Errorf("server: --agent-lease %v outside [4ms, 10m]", lease)
	}
	if wait := lease + allocator.LeaseMargin(lease); wait > grace {
		return fmt.Errorf("server: --agent-lease %v leaves no margin under --node-grace %v: a dead agent's jobs would wait "+
			"for its lease and margin (%v) rather than for --node-grace; use a lease of at most %v or a longer --node-grace",
			lease, grace, wait, grace*2/3)
	}
	return nil
}

// hostOf is the host of a host:port address ("" if it has none).
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return h
}
