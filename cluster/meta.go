package cluster

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/hashicorp/memberlist"

	"pollux/internal/jsonin"
	"pollux/optimizer/topology"
)

// Role is what a member does.
type Role string

// The roles.
const (
	RoleServer Role = "server"
	RoleAgent  Role = "agent"
)

// MaxGPUs bounds the GPUs one member may advertise.
const MaxGPUs = 1024

// Meta is what a member advertises about itself.
type Meta struct {
	Role Role `json:"role"`
	// Rack is the member's rack: the first domain of Topology, or, from
	// a member of an older version, a label alone.
	Rack string `json:"rack,omitempty"`
	// Topology is where the member sits, as declared
	// ("rack=r3,zone=z1", innermost first; see ParseTopology).
	Topology string `json:"topology,omitempty"`
	// GPUType is the type of the member's GPUs (agents; "" untyped).
	GPUType string `json:"gpu_type,omitempty"`
	// Levels are the cluster's topology levels as a server knows them
	// from the replicated state ("rack,zone"), so that an agent can check
	// its declared topology when it joins.
	Levels string `json:"levels,omitempty"`
	// GPUs is the member's GPU count (agents).
	GPUs int `json:"gpus,omitempty"`
	// ActorAddr is the host:port of the member's actor system.
	ActorAddr string `json:"actor,omitempty"`
	// RaftAddr is the host:port of the member's Raft transport (servers).
	RaftAddr string `json:"raft,omitempty"`
	// HTTPAddr is the host:port of the member's HTTP API (servers).
	HTTPAddr string `json:"http,omitempty"`
	// FederationAddr is the host:port of the member's federation
	// listener (servers of a lab in a federation): where a follower
	// redirects a peer's bid to the leader.
	FederationAddr string `json:"federation,omitempty"`
}

// Validate reports whether m is usable.
func (m Meta) Validate() error {
	switch m.Role {
	case RoleServer, RoleAgent:
	default:
		return fmt.Errorf("%w: role %q, want %q or %q", ErrBadMeta, m.Role, RoleServer, RoleAgent)
	}
	if m.GPUs < 0 || m.GPUs > MaxGPUs {
		return fmt.Errorf("%w: gpus %d outside [0, %d]", ErrBadMeta, m.GPUs, MaxGPUs)
	}
	if len(m.Rack) > 64 {
		return fmt.Errorf("%w: rack label longer than 64 bytes", ErrBadMeta)
	}
	if m.Topology != "" {
		_, domains, err := ParseTopology(m.Topology)
		if err != nil {
			return err
		}
		if domains[0] != m.Rack {
			return fmt.Errorf("%w: rack %q but topology %q", ErrBadMeta, m.Rack, m.Topology)
		}
	}
	if m.GPUType != "" {
		if err := topology.CheckName("GPU type", m.GPUType); err != nil {
			return fmt.Errorf("%w: %w", ErrBadMeta, err)
		}
	}
	if m.Levels != "" {
		if _, err := topology.ParseLevels(m.Levels); err != nil {
			return fmt.Errorf("%w: levels: %w", ErrBadMeta, err)
		}
	}
	for _, a := range []struct{ name, addr string }{{"actor", m.ActorAddr}, {"raft", m.RaftAddr}, {"http", m.HTTPAddr}, {"federation", m.FederationAddr}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%w: %s address %q: %w", ErrBadMeta, a.name, a.addr, err)
		}
	}
	return nil
}

// Encode returns m as gossip metadata.
func (m Meta) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMeta, err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, gossip allows %d", ErrBadMeta, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// DecodeMeta parses and validates a peer's metadata.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > memberlist.MetaMaxSize {
		return Meta{}, fmt.Errorf("%w: %d bytes", ErrBadMeta, len(b))
	}
	var m Meta
	if err := jsonin.Decode(b, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %w", ErrBadMeta, err)
	}
	if err := m.Validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}
