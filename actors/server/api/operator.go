package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"pollux/cluster"
	"pollux/consensus/state"
	"pollux/optimizer/topology"
)

// alive is the set of servers gossip sees and, on the leader, whose
// heartbeats do not fail (this server always): gossip alone takes about
// a second to notice a dead server.
func (a *API) alive() map[string]bool {
	out := map[string]bool{a.id: true}
	if a.cfg.Members != nil {
		for _, m := range a.cfg.Members() {
			if m.Meta.Role == cluster.RoleServer {
				out[m.Name] = true
			}
		}
	}
	for id := range a.cfg.Backend.Unreachable() {
		if string(id) != a.id {
			delete(out, string(id))
		}
	}
	return out
}

func (a *API) peers(w http.ResponseWriter, _ *http.Request) {
	servers, err := a.cfg.Backend.Servers()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	leader, _ := a.cfg.Backend.Leader()
	alive := a.alive()
	places := map[string]cluster.Meta{}
	if a.cfg.Members != nil {
		for _, m := range a.cfg.Members() {
			if m.Meta.Role == cluster.RoleServer {
				places[m.Name] = m.Meta
			}
		}
	}
	out := []Peer{}
	for _, s := range servers {
		p := Peer{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter,
			Leader: s.ID == leader, Alive: alive[string(s.ID)]}
		if m, ok := places[p.ID]; ok {
			p.Rack, p.Topology = cmp.Or(m.Rack, topology.DefaultDomain), m.Topology
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y Peer) int {
		if x.ID < y.ID {
			return -1
		}
		if x.ID > y.ID {
			return 1
		}
		return 0
	})
	writeJSON(w, http.StatusOK, out)
}

// toLeader redirects a membership change to the leader's API (307, so
// the client re-sends it with its body and its credentials) and reports
// whether it did: only the leader changes the Raft configuration.
func (a *API) toLeader(w http.ResponseWriter, r *http.Request) bool {
	if _, leader := a.cfg.Backend.Leadership(); leader {
		return false
	}
	id, loc := a.leaderURL(r)
	if loc == "" {
		writeJSON(w, http.StatusServiceUnavailable, Error{fmt.Sprintf("api: this server does not lead and the leader's API is unknown (leader %q)", id)})
		return true
	}
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusTemporaryRedirect, Error{fmt.Sprintf("api: the leader is %s at %s", id, loc)})
	return true
}

// leaderURL is the leader's id and the URL of r on its API, from the
// gossip members ("" if unknown).
func (a *API) leaderURL(r *http.Request) (raft.ServerID, string) {
	id, _ := a.cfg.Backend.Leader()
	addr := ""
	if a.cfg.Members != nil && id != "" {
		for _, m := range a.cfg.Members() {
			if m.Name == string(id) && m.Meta.Role == cluster.RoleServer {
				addr = m.Meta.HTTPAddr
			}
		}
	}
	if addr == "" {
		return id, ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return id, scheme + "://" + addr + r.URL.RequestURI()
}

func (a *API) addPeer(w http.ResponseWriter, r *http.Request) {
	var p AddPeer
	if err := decodeBody(r, &p, false); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: add-server body: %v (want {\"id\": ..., \"address\": \"host:port\"})", err)})
		return
	}
	if p.ID == "" {
		writeJSON(w, http.StatusBadRequest, Error{"api: add-server needs the new server's id"})
		return
	}
	if _, _, err := net.SplitHostPort(p.Address); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: add-server address %q: %v (want its Raft host:port)", p.Address, err)})
		return
	}
	if a.toLeader(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.cfg.Backend.AddVoter(ctx, raft.ServerID(p.ID), raft.ServerAddress(p.Address)); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, state.ErrInvalid) {
			code = http.StatusBadRequest
		}
		writeJSON(w, code, Error{fmt.Sprintf("api: adding server %q: %v", p.ID, err)})
		return
	}
	a.cfg.Logger.Info("api: server added", "id", p.ID, "address", p.Address)
	writeJSON(w, http.StatusOK, map[string]string{"id": p.ID, "address": p.Address})
}

func (a *API) removePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if a.toLeader(w, r) {
		return
	}
	servers, err := a.cfg.Backend.Servers()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	if err := checkRemoval(servers, id, a.alive()); err != nil {
		code := http.StatusConflict
		if errors.Is(err, errNoPeer) {
			code = http.StatusNotFound
		}
		writeJSON(w, code, Error{err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.cfg.Backend.RemoveServer(ctx, raft.ServerID(id)); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{fmt.Sprintf("api: removing server %q: %v", id, err)})
		return
	}
	a.cfg.Logger.Info("api: server removed", "id", id)
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

var errNoPeer = errors.New("api: no such server")

// checkRemoval refuses to remove a server when the configuration left
// could not make progress: the last voter, or when fewer of the remaining
// voters are alive than a quorum of them (as when asked to remove a
// majority of the cluster, or a live server while others are dead).
func checkRemoval(servers []raft.Server, id string, alive map[string]bool) error {
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return fmt.Errorf("%w: %q is not in the Raft configuration", errNoPeer, id)
	}
	if servers[i].Suffrage != raft.Voter {
		return nil
	}
	var rest []string
	live := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != id {
			rest = append(rest, string(s.ID))
			if alive[string(s.ID)] {
				live++
			}
		}
	}
	if len(rest) == 0 {
		return fmt.Errorf("api: refusing to remove %q: it is the last voter, the cluster would have no members", id)
	}
	if quorum := len(rest)/2 + 1; live < quorum {
		return fmt.Errorf("api: refusing to remove %q: of the %d voters left %v only %d are alive, below a quorum of %d; "+
			"bring servers back or add new ones first", id, len(rest), rest, live, quorum)
	}
	return nil
}

// RackMajority reports a rack that holds a majority of the voters among
// peers (with two voters or more), and which voters it holds: losing
// that rack loses the quorum. Voters whose rack is unknown (gossip does
// not see them) are counted as voters but in no rack.
func RackMajority(peers []Peer) (rack string, voters []string) {
	total := 0
	byRack := map[string][]string{}
	for _, p := range peers {
		if !p.Voter {
			continue
		}
		total++
		if p.Rack != "" {
			byRack[p.Rack] = append(byRack[p.Rack], p.ID)
		}
	}
	if total < 2 {
		return "", nil
	}
	for _, r := range slices.Sorted(maps.Keys(byRack)) {
		if ids := byRack[r]; 2*len(ids) > total {
			return r, ids
		}
	}
	return "", nil
}

// PathSnapshot is the replicated state as a backup: GET saves it, PUT
// restores it (on the leader; admin).
const PathSnapshot = "/v1/operator/snapshot"

// Restored is the answer to a restore: the backup's size and jobs.
type Restored struct {
	Bytes int `json:"bytes"`
	Jobs  int `json:"jobs"`
}

func (a *API) saveSnapshot(w http.ResponseWriter, r *http.Request) {
	if a.toLeader(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	b, err := a.cfg.Backend.SaveSnapshot(ctx)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{fmt.Sprintf("api: snapshot: %v", err)})
		return
	}
	a.cfg.Logger.Info("api: snapshot saved", "bytes", len(b), "by", principalOf(r).String())
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

func (a *API) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	if a.toLeader(w, r) {
		return
	}
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeJSON(w, http.StatusRequestEntityTooLarge, Error{fmt.Sprintf("api: restore: a snapshot over %d bytes", state.MaxSnapshot)})
		return
	case err != nil:
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: restore: reading the snapshot: %v", err)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := a.cfg.Backend.RestoreSnapshot(ctx, b); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, state.ErrMalformed) {
			code = http.StatusBadRequest
		}
		writeJSON(w, code, Error{fmt.Sprintf("api: restore: %v", err)})
		return
	}
	jobs := len(a.cfg.Backend.LocalState().Jobs)
	a.cfg.Logger.Warn("api: replicated state restored from a snapshot", "bytes", len(b), "jobs", jobs, "by", principalOf(r).String())
	writeJSON(w, http.StatusOK, Restored{Bytes: len(b), Jobs: jobs})
}
