package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/jobspec"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// Paths of the API. A job's own resource is PathJobs/{id}; cancelling it
// is POST PathJobs/{id}/cancel; a Raft peer is PathPeers/{id}.
const (
	PathJobs   = "/v1/jobs"
	PathNodes  = "/v1/nodes"
	PathStatus = "/v1/status"
	PathPeers  = "/v1/operator/raft/peers"
)

// HeaderStale is set on every answer read from the state: "true" when a
// follower answered from its local copy (which may lag), "false" for the
// leader's linearizable read.
const HeaderStale = "X-Pollux-Stale"

var _ Backend = (*consensus.Server)(nil)

// Backend is what the API reads and writes: a consensus server.
type Backend interface {
	Leadership() (term uint64, leader bool)
	Leader() (raft.ServerID, raft.ServerAddress)
	Read(ctx context.Context) (*state.State, error)
	LocalState() *state.State
	LocalJob(id string) (*state.Job, state.ClusterConfig)
	// LocalEvents returns up to limit events of the local copy after
	// sequence number since (of job only, unless job is ""; all when
	// limit <= 0) and the last sequence number given.
	LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64)
	// ApplyCommand commits a write (SubmitJob, CancelJob, the token
	// commands) and returns the state machine's refusal, if any.
	ApplyCommand(ctx context.Context, c state.Command) error
	// Authenticate finds a token by its secret in the local copy of the
	// token table, and says whether the table is bootstrapped.
	Authenticate(secret string) (state.Token, bool, error)
	Servers() ([]raft.Server, error)
	AddVoter(ctx context.Context, id raft.ServerID, addr raft.ServerAddress) error
	RemoveServer(ctx context.Context, id raft.ServerID) error
	Unreachable() map[raft.ServerID]time.Time
	// SaveSnapshot and RestoreSnapshot back the replicated state up and
	// put a backup back (the leader only).
	SaveSnapshot(ctx context.Context) ([]byte, error)
	RestoreSnapshot(ctx context.Context, b []byte) error
}

// Config configures the API.
type Config struct {
	Backend Backend
	// Apps are the emulated applications a spec may name, and AppLimits
	// their batch limits, the defaults of a spec naming one (nil: none).
	Apps      []string
	AppLimits jobspec.AppLimits
	// FederationPeers, if set, is what the federation link knows of the
	// peer labs (fedlink.Link.Peers), shown by the leader's status.
	FederationPeers func() []fedlink.PeerStatus
	// Collectors are more metrics for /metrics (the TLS listeners'
	// pre-authentication counters).
	Collectors []prometheus.Collector
	// Members lists the cluster's gossip members: which servers are
	// alive (operator raft) and where the leader's API is (operator
	// writes on a follower are redirected there). Nil: only this server
	// is known to be alive.
	Members func() []cluster.Member
	// Logs reads workers' logs from the agents (nil: GET
	// PathJobs/{id}/logs answers 503).
	Logs LogFetcher
	// Stats are the allocator's counters, exported as metrics (nil: none).
	Stats *allocator.Stats
	// Insecure turns the token check off (pollux server --insecure):
	// every request acts as an anonymous admin.
	Insecure bool
	// Autoscaling is set on a server that autoscales (pollux server
	// --autoscale), and NodeCost is then the price of a node-hour of the
	// autoscaler's machines (--node-cost): /v1/status shows their cost at
	// it.
	Autoscaling bool
	NodeCost    float64
	// Interval is the scheduling interval (metric
	// pollux_allocation_interval_seconds; 0: not exported).
	Interval time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
}

// Job is one job as the API shows it.
type Job struct {
	ID          string  `json:"id"`
	State       string  `json:"state"`
	App         string  `json:"application,omitempty"`
	GPUs        int     `json:"gpus"`
	Nodes       int     `json:"nodes"`
	Incarnation uint64  `json:"incarnation"`
	Restarts    int     `json:"restarts"`
	Epoch       int     `json:"epoch"`
	Progress    float64 `json:"progress"`
	Attained    float64 `json:"attained_gpu_seconds"`
	SubmitTime  float64 `json:"submit_time"`
	FinishTime  float64 `json:"finish_time,omitempty"`
	InitBatch   int     `json:"init_batch_size"`
	Reason      string  `json:"reason,omitempty"`
	// Submitter is the name of the token that submitted the job and
	// SubmitterAccessor its accessor (empty: submitted without a token).
	Submitter         string `json:"submitter"`
	SubmitterAccessor string `json:"submitter_accessor,omitempty"`
	// Profiled are the configurations the job has run and measured, and
	// ProfiledTypes the GPU types it has been measured on (named types,
	// sorted; its throughput model is fitted per type).
	Profiled      []Profiled `json:"profiled,omitempty"`
	ProfiledTypes []string   `json:"profiled_types,omitempty"`
	// Crashes counts failed incarnations in a row (without an epoch
	// finished in between).
	Crashes int `json:"crashes,omitempty"`
	// Topology and GPUType are the job's constraints, as submitted.
	Topology *optimizer.TopologyConstraint `json:"topology,omitempty"`
	GPUType  string                        `json:"gpu_type,omitempty"`
	// Epochs are the epochs the job declared it trains for (omitted: not
	// declared).
	Epochs int `json:"epochs,omitempty"`
	// Placement is where the job's replicas run: GPUs per node, in node
	// order, with each node's rack and GPU type.
	Placement []SlotJSON `json:"placement,omitempty"`
	// Bid is the job actor's latest replicated bid (GET PathJobs/{id}
	// only).
	Bid *BidJSON `json:"bid,omitempty"`
}

// SlotJSON is a job's GPUs on one node.
type SlotJSON struct {
	Node    string `json:"node"`
	GPUs    int    `json:"gpus"`
	Rack    string `json:"rack"`
	GPUType string `json:"gpu_type,omitempty"`
}

// BidJSON is a job's bid as the API shows it.
type BidJSON struct {
	Version      uint64             `json:"version"`
	Model        *goodput.Params    `json:"model,omitempty"`
	Grad         *goodput.GradStats `json:"grad,omitempty"`
	MostProfiled int                `json:"most_profiled"`
	// Single and Multi are the batch configurations for 1..K replicas
	// on one node and over several nodes.
	Single []ChoiceJSON `json:"single_node"`
	Multi  []ChoiceJSON `json:"multi_node"`
	// Types are the job's models per GPU type it has run on (Model and
	// the tables above are then those of the type measured most).
	Types []TypeBidJSON `json:"types,omitempty"`
}

// TypeBidJSON is a bid's part for one GPU type: the model fitted on that
// type's measurements and the batch configurations it chooses there.
type TypeBidJSON struct {
	GPUType      string         `json:"gpu_type"`
	Model        goodput.Params `json:"model"`
	MostProfiled int            `json:"most_profiled"`
	Single       []ChoiceJSON   `json:"single_node"`
	Multi        []ChoiceJSON   `json:"multi_node"`
}

// ChoiceJSON is one batch configuration.
type ChoiceJSON struct {
	LocalBatch int     `json:"local_bsz"`
	AccumSteps int     `json:"accum_steps"`
	Gain       float64 `json:"gain"`
}

// Peer is one Raft server as the operator API shows it.
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
	// Alive: gossip sees the server.
	Alive bool `json:"alive"`
	// Rack and Topology are where the server declared it sits, as gossip
	// tells (Rack "default" when it declared nothing; both empty when
	// gossip does not see it).
	Rack     string `json:"rack,omitempty"`
	Topology string `json:"topology,omitempty"`
}

// AddPeer is the body of POST PathPeers.
type AddPeer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// Profiled is one measured configuration of a job.
type Profiled struct {
	Nodes      int    `json:"nodes"`
	Replicas   int    `json:"replicas"`
	LocalBatch int    `json:"local_bsz"`
	GPUType    string `json:"gpu_type,omitempty"`
	// Racks is how many racks the configuration spanned (left out for
	// one).
	Racks int `json:"racks,omitempty"`
}

// Node is one node as the API shows it.
type Node struct {
	ID     string `json:"id"`
	Health string `json:"health"`
	GPUs   int    `json:"gpus"`
	Used   int    `json:"gpus_used"`
	// Rack is the node's rack ("default" when it declared none) and
	// Topology its domain at every level of the cluster, innermost first
	// ("rack=r1,zone=z1"); GPUType the type of its GPUs ("" untyped).
	Rack     string `json:"rack"`
	Topology string `json:"topology,omitempty"`
	GPUType  string `json:"gpu_type,omitempty"`
	Address  string `json:"address,omitempty"`
}

// Status is the cluster's state in brief.
type Status struct {
	// Leader is the leader's id; Serving is this server; Stale is set
	// when the answer comes from a follower's local copy.
	Leader     string `json:"leader"`
	Serving    string `json:"serving"`
	Stale      bool   `json:"stale"`
	Term       uint64 `json:"term"`
	Generation uint64 `json:"generation"`
	GPUs       int    `json:"gpus"`
	GPUsUsed   int    `json:"gpus_used"`
	// GPUsBorrowed are the GPUs the allocation uses on nodes borrowed
	// from other labs (federation), which GPUs and GPUsUsed leave out.
	GPUsBorrowed int            `json:"gpus_borrowed,omitempty"`
	Jobs         map[string]int `json:"jobs"`
	LastRound    *RoundJSON     `json:"last_round,omitempty"`
	// Autoscale is the autoscaler's replicated state, once it has
	// decided anything (or the server autoscales).
	Autoscale *AutoscaleJSON `json:"autoscale,omitempty"`
	// Federation is the lab's federation state (docs/federation.md), when
	// the cluster is named.
	Federation *FederationJSON `json:"federation,omitempty"`
}

// FederationJSON is a lab's federation state: its name, the GPUs it
// lends and borrows, its leases and, on the leader, what it knows of its
// peers.
type FederationJSON struct {
	Cluster  string               `json:"cluster"`
	Lent     int                  `json:"gpus_lent"`
	Borrowed int                  `json:"gpus_borrowed"`
	Leases   []federation.Lease   `json:"leases"`
	Peers    []fedlink.PeerStatus `json:"peers,omitempty"`
}

// AutoscaleJSON is what the autoscaler decided and what its machines
// cost so far.
type AutoscaleJSON struct {
	// Desired is the last committed desired cluster size; Asked counts
	// the machines ever asked for.
	Desired  int           `json:"desired"`
	Asked    uint64        `json:"machines_asked"`
	Machines []MachineJSON `json:"machines"`
	// NodeHours are the hours the autoscaler's machines were paid for,
	// each from its request to its removal (or now), on the servers'
	// clocks; Cost is their price at this server's --node-cost (absent
	// on a server that does not autoscale).
	NodeHours float64  `json:"node_hours"`
	Cost      *float64 `json:"cost,omitempty"`
}

// MachineJSON is one machine the autoscaler manages: its phase
// (booting, up, draining), since when (Unix seconds), and when it was
// asked for.
type MachineJSON struct {
	Name  string  `json:"name"`
	Phase string  `json:"phase"`
	Since float64 `json:"since"`
	Asked float64 `json:"asked"`
}

// RoundJSON is the allocator's last round on this server.
type RoundJSON struct {
	Generation uint64  `json:"generation"`
	Jobs       int     `json:"jobs"`
	Fitness    float64 `json:"fitness"`
	Seconds    float64 `json:"seconds"`
	// Policy names the policy that decided it (pollux, pollux-het, ...).
	Policy string `json:"policy,omitempty"`
}

// API is the HTTP handler and the metrics it exports.
type API struct {
	cfg Config
	id  string
	mux *http.ServeMux
	reg *prometheus.Registry
	// routes are the endpoints and the role each needs.
	routes []route
	// openapi is the document served at PathOpenAPI.
	openapi []byte

	roundTime   prometheus.Histogram
	fitness     prometheus.Gauge
	leaderships prometheus.Counter

	mu        sync.Mutex
	lastRound *allocator.RoundInfo
	lastTerm  uint64
	root      string // the cluster's checkpoint root, once seen (it never changes)

	plant plant // a planted bug's state (test binaries with the judgebugs tag only)
}

// New returns the API of server id.
func New(id string, cfg Config) *API {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &API{cfg: cfg, id: id, mux: http.NewServeMux(), reg: prometheus.NewRegistry()}
	a.roundTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pollux_allocation_round_seconds",
		Help: "Wall time of allocation rounds run by this server as leader.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	a.fitness = prometheus.NewGauge(prometheus.GaugeOpts{Name: "pollux_allocation_fitness", Help: "Fitness of the last allocation this server decided."})
	a.leaderships = prometheus.NewCounter(prometheus.CounterOpts{Name: "pollux_leader_changes_total", Help: "Leaderships this server has taken up."})
	a.reg.MustRegister(a.roundTime, a.fitness, a.leaderships, stateCollector{a})
	a.reg.MustRegister(cfg.Collectors...)
	metrics := promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{})
	read, submit, admin := state.RoleRead, state.RoleSubmit, state.RoleAdmin
	for _, rt := range []route{
		{"POST " + PathJobs, submit, a.submit},
		{"GET " + PathJobs, read, a.jobs},
		{"GET " + PathJobs + "/{id}", read, a.job},
		// Its own jobs only, unless admin (checked by the handler and
		// the state machine).
		{"POST " + PathJobs + "/{id}/cancel", submit, a.cancel},
		// Its own jobs only, unless admin (checked by the handler).
		{"GET " + PathJobs + "/{id}/logs", submit, a.logs},
		{"GET " + PathNodes, read, a.nodes},
		{"GET " + PathStatus, read, a.status},
		{"GET " + PathEvents, read, a.events},
		{"GET /metrics", read, metrics.ServeHTTP},
		{"GET " + PathPeers, admin, a.peers},
		{"POST " + PathPeers, admin, a.addPeer},
		{"DELETE " + PathPeers + "/{id}", admin, a.removePeer},
		{"GET " + PathACLTokens, admin, a.listTokens},
		{"POST " + PathACLTokens, admin, a.createToken},
		{"POST " + PathACLTokens + "/{accessor}/revoke", admin, a.revokeToken},
		{"GET " + PathACLSelf, read, a.self},
		{"GET " + PathACLQuotas, admin, a.listQuotas},
		{"POST " + PathACLQuotas, admin, a.setQuota},
		{"POST " + PathACLBootstrap, roleBootstrap, a.bootstrap},
		{"GET " + PathSnapshot, admin, a.saveSnapshot},
		{"PUT " + PathSnapshot, admin, a.restoreSnapshot},
		{"GET " + PathOpenAPI, read, a.openAPIDoc},
	} {
		a.handle(rt)
	}
	needs := map[string]state.Role{}
	for _, rt := range a.routes {
		needs[rt.pattern] = rt.need
	}
	a.openapi = openAPI(needs)
	if cfg.Insecure {
		cfg.Logger.Warn("INSECURE MODE: API tokens are NOT checked: anyone who reaches the API acts as an admin " +
			"(submits, cancels any job, changes the Raft membership). Development only.")
	}
	return a
}

// MaxBody bounds the body of a request to any endpoint that sets no
// bound of its own (a job submission allows jobspec.MaxBytes).
const MaxBody = 64 << 10

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	limit := int64(MaxBody)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == PathJobs:
		limit = jobspec.MaxBytes + 1
	case r.Method == http.MethodPut && r.URL.Path == PathSnapshot:
		limit = state.MaxSnapshot
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	a.mux.ServeHTTP(w, r)
}

// ObserveRound records one allocator round (a allocator.Observer).
func (a *API) ObserveRound(ri allocator.RoundInfo) {
	a.roundTime.Observe(ri.Duration.Seconds())
	a.fitness.Set(ri.Fitness)
	a.mu.Lock()
	defer a.mu.Unlock()
	if ri.Term != a.lastTerm {
		a.lastTerm = ri.Term
		a.leaderships.Inc()
	}
	a.lastRound = &ri
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) submit(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	key, err := idempotencyKey(r)
	if err != nil {
		a.refuse(w, r, http.StatusBadRequest, p, err.Error())
		return
	}
	body := newDigestReader(http.MaxBytesReader(w, r.Body, jobspec.MaxBytes+1))
	spec, err := jobspec.DecodeWith(body, a.cfg.AppLimits)
	if err == nil && spec.Application != "" && !slices.Contains(a.cfg.Apps, spec.Application) {
		err = &jobspec.FieldError{Field: "application", Value: fmt.Sprintf("%q", spec.Application),
			Reason: fmt.Sprintf("not a built-in application (%v)", a.cfg.Apps)}
	}
	if err == nil && spec.CheckpointDir != "" {
		// Agents run a job only with its checkpoints below the cluster's
		// root: say so now rather than when it is placed. (Before this
		// server knows the root, the agents still refuse.)
		if root := a.checkpointRoot(); root != "" {
			err = jobspec.CheckCheckpointDir(root, spec.CheckpointDir)
		}
	}
	if err != nil {
		code := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.Is(err, jobspec.ErrTooLarge) || errors.As(err, &mbe) {
			code = http.StatusRequestEntityTooLarge
		}
		a.refuse(w, r, code, p, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if !spec.Topology.IsZero() || spec.GPUType != "" {
		st, _, err := a.state(ctx)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
			return
		}
		if err := Placeable(st, spec); err != nil {
			writeJSON(w, http.StatusBadRequest, Error{err.Error()})
			return
		}
	}
	cs := state.JobSpec{Name: spec.Name, Command: spec.Command, App: spec.Application,
		MinReplicas: spec.MinReplicas, MaxReplicas: spec.MaxReplicas, Limits: spec.Limits(), CheckpointDir: spec.CheckpointDir,
		Topology: spec.Topology, GPUType: spec.GPUType, Epochs: spec.Epochs, ResumeFrom: spec.ResumeFrom}
	// With a key, a retry of a submission that committed (same key,
	// submitter and body) applies as a no-op and gets the same answer.
	err = a.cfg.Backend.ApplyCommand(ctx, &state.SubmitJob{ID: spec.Name, Spec: cs, SubmitTime: a.now(), Submitter: p.accessor(), Owned: true,
		Key: body.submitKey(key)})
	if err != nil {
		a.writeRefusal(w, r, p, err)
		return
	}
	a.cfg.Logger.Info("api: job submitted", "job", spec.Name, "by", p.String())
	writeJSON(w, http.StatusCreated, map[string]string{"id": spec.Name})
}

// checkpointRoot is the cluster's checkpoint root as this server's state
// has it ("" until then).
func (a *API) checkpointRoot() string {
	a.mu.Lock()
	root := a.root
	a.mu.Unlock()
	if root == "" {
		_, cfg := a.cfg.Backend.LocalJob("")
		root = cfg.CheckpointRoot
		a.mu.Lock()
		a.root = root
		a.mu.Unlock()
	}
	return root
}

// state reads the leader's linearizable state or, on a follower, the
// local copy (stale true).
func (a *API) state(ctx context.Context) (*state.State, bool, error) {
	if _, leader := a.cfg.Backend.Leadership(); leader {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := a.cfg.Backend.Read(ctx)
		return st, false, err
	}
	st, stale := a.plant.staleRead(a, a.cfg.Backend.LocalState())
	return st, stale, nil
}

func (a *API) jobs(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	w.Header().Set(HeaderStale, strconv.FormatBool(stale))
	writeJSON(w, http.StatusOK, JobsOf(st))
}

// JobsOf lists the jobs of st by submission time.
func JobsOf(st *state.State) []Job {
	out := []Job{}
	for _, id := range st.JobIDs() {
		out = append(out, jobOf(st, id))
	}
	slices.SortStableFunc(out, func(x, y Job) int { return cmp.Compare(x.SubmitTime, y.SubmitTime) })
	return out
}

func jobOf(st *state.State, id string) Job {
	j := st.Jobs[id]
	slots := st.Allocation.Jobs[id]
	k := 0
	for _, sl := range slots {
		k += sl.GPUs
	}
	out := Job{ID: id, State: j.State.String(), App: j.Spec.App, GPUs: k, Nodes: len(slots),
		Incarnation: j.Incarnation, Restarts: j.Restarts, Epoch: j.Epoch, Progress: j.Progress, Attained: j.Attained,
		SubmitTime: j.SubmitTime, FinishTime: j.FinishTime, InitBatch: j.Spec.Limits.InitBatch, Reason: j.Reason, Crashes: j.Crashes,
		Submitter: j.SubmitterName, SubmitterAccessor: j.Submitter}
	for _, e := range j.Profile {
		out.Profiled = append(out.Profiled, Profiled{Nodes: e.Nodes, Replicas: e.Replicas, LocalBatch: e.LocalBatch, GPUType: e.GPUType, Racks: e.Racks})
	}
	for _, t := range j.ProfiledTypes() {
		if t != "" {
			out.ProfiledTypes = append(out.ProfiledTypes, t)
		}
	}
	if !j.Spec.Topology.IsZero() {
		tc := j.Spec.Topology
		out.Topology = &tc
	}
	out.GPUType, out.Epochs = j.Spec.GPUType, j.Spec.Epochs
	for _, sl := range slots {
		p := SlotJSON{Node: sl.Node, GPUs: sl.GPUs, Rack: topology.DefaultDomain}
		if n := st.Nodes[sl.Node]; n != nil {
			p.Rack, p.GPUType = cmp.Or(n.Rack, topology.DefaultDomain), n.GPUType
		}
		out.Placement = append(out.Placement, p)
	}
	return out
}

func bidOf(b *state.Bid) *BidJSON {
	if b.Version == 0 {
		return nil
	}
	out := &BidJSON{Version: b.Version, MostProfiled: b.MostProfiled}
	if b.HasModel {
		p := b.Params
		out.Model = &p
	}
	if b.HasGrad {
		g := b.Grad
		out.Grad = &g
	}
	out.Single, out.Multi = choicesOf(b.Single), choicesOf(b.Multi)
	for _, tb := range b.Types {
		out.Types = append(out.Types, TypeBidJSON{GPUType: tb.GPUType, Model: tb.Params, MostProfiled: tb.MostProfiled,
			Single: choicesOf(tb.Single), Multi: choicesOf(tb.Multi)})
	}
	return out
}

func choicesOf(cs []state.BatchChoice) []ChoiceJSON {
	var out []ChoiceJSON
	for _, c := range cs {
		out = append(out, ChoiceJSON{LocalBatch: c.LocalBatch, AccumSteps: c.AccumSteps, Gain: c.Gain})
	}
	return out
}

func (a *API) job(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	w.Header().Set(HeaderStale, strconv.FormatBool(stale))
	id := r.PathValue("id")
	j := st.Jobs[id]
	if j == nil {
		writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: no job %q", id)})
		return
	}
	out := jobOf(st, id)
	out.Bid = bidOf(&j.Bid)
	writeJSON(w, http.StatusOK, out)
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := principalOf(r)
	key, err := idempotencyKey(r)
	if err != nil {
		a.refuse(w, r, http.StatusBadRequest, p, err.Error())
		return
	}
	// Another's job is refused from the local copy before anything is
	// written; the state machine checks again, in log order.
	if j, _ := a.cfg.Backend.LocalJob(id); j != nil && p.role() != state.RoleAdmin && j.Submitter != p.accessor() {
		owner := "nobody known (only an admin may cancel it)"
		if j.Submitter != "" {
			owner = fmt.Sprintf("token %s (%s)", j.Submitter, j.SubmitterName)
		}
		a.refuse(w, r, http.StatusForbidden, p, fmt.Sprintf("api: job %q was submitted by %s; only its submitter or an admin may cancel it", id, owner))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	reason := "cancelled by a user"
	if !p.anonymous {
		reason = "cancelled by token " + p.token.Name
	}
	// With a key, a retry of the cancel that finished the job applies as
	// a no-op and gets the same answer.
	err = a.cfg.Backend.ApplyCommand(ctx, &state.CancelJob{ID: id, By: p.accessor(), Reason: reason, Time: a.now(), Key: key})
	switch {
	case errors.Is(err, state.ErrUnknownJob):
		writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: no job %q", id)})
	case errors.Is(err, state.ErrJobFinished):
		writeJSON(w, http.StatusConflict, Error{fmt.Sprintf("api: job %q has already finished: %v", id, err)})
	case err != nil:
		a.writeRefusal(w, r, p, err)
	default:
		a.cfg.Logger.Info("api: job cancelled", "job", id, "by", p.String())
		out := CancelResult{ID: id, State: state.Cancelled.String()}
		if inc, ok := a.finalIncarnation(ctx, id); ok {
			out.Incarnation = &inc
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// CancelResult is the answer to a cancel. Incarnation is the job's last
// incarnation, the one the cancel took effect in: no worker of a later
// one ever starts, and workers of it still being started when the
// cancel was acknowledged (an assignment already on its way) are
// stopped by the next round. It is absent if this server could not see
// the cancel applied within a second.
type CancelResult struct {
	ID          string  `json:"id"`
	State       string  `json:"state"`
	Incarnation *uint64 `json:"incarnation,omitempty"`
}

// finalIncarnation waits (briefly) until this server's state shows job
// finished, and returns its incarnation then, which never changes again.
func (a *API) finalIncarnation(ctx context.Context, id string) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for {
		if st, _, err := a.state(ctx); err == nil {
			if j := st.Jobs[id]; j != nil && j.State.Terminal() {
				return j.Incarnation, true
			}
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (a *API) nodes(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	w.Header().Set(HeaderStale, strconv.FormatBool(stale))
	used := st.UsedGPUs()
	out := []Node{}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		nd := Node{ID: id, Health: n.Health.String(), GPUs: n.GPUs, Used: used[id], Rack: cmp.Or(n.Rack, topology.DefaultDomain),
			Topology: topology.FormatTopology(n.Domains(), st.Config.TopologyLevels()), GPUType: n.GPUType}
		if len(n.Addresses) > 0 {
			nd.Address = n.Addresses[0]
		}
		out = append(out, nd)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	leader, _ := a.cfg.Backend.Leader()
	term, _ := a.cfg.Backend.Leadership()
	s := Status{Leader: string(leader), Serving: a.id, Stale: stale, Term: term, Generation: st.Allocation.Generation, Jobs: map[string]int{}}
	w.Header().Set(HeaderStale, strconv.FormatBool(stale))
	s.GPUs, s.GPUsUsed = st.GPUCounts()
	s.GPUsBorrowed = st.BorrowedInUse()
	for _, j := range st.Jobs {
		s.Jobs[j.State.String()]++
	}
	a.mu.Lock()
	if ri := a.lastRound; ri != nil {
		s.LastRound = &RoundJSON{Generation: ri.Generation, Jobs: ri.Jobs, Fitness: ri.Fitness, Seconds: ri.Duration.Seconds(), Policy: ri.Policy}
	}
	a.mu.Unlock()
	s.Autoscale = AutoscaleOf(st, a.cfg.Now(), a.cfg.Autoscaling, a.cfg.NodeCost)
	if st.Fed != nil {
		lg := st.Fed.Ledger
		s.Federation = &FederationJSON{Cluster: st.Fed.Lab.Name, Lent: lg.Lent(), Borrowed: lg.Borrowed(), Leases: lg.Leases()}
		if _, leader := a.cfg.Backend.Leadership(); leader && a.cfg.FederationPeers != nil {
			s.Federation.Peers = a.cfg.FederationPeers()
		}
	}
	writeJSON(w, http.StatusOK, s)
}

// AutoscaleOf is the status's autoscaler section at now, as a server
// that autoscales (or not) at nodeCost per node-hour shows it: nil when
// the autoscaler never decided anything and the server does not
// autoscale; the cost only on a server that does.
func AutoscaleOf(st *state.State, now time.Time, autoscaling bool, nodeCost float64) *AutoscaleJSON {
	sc := st.Scale
	if sc.Seq == 0 && sc.Desired == 0 && !autoscaling {
		return nil
	}
	t := float64(now.UnixNano()) / 1e9
	out := &AutoscaleJSON{Desired: sc.Desired, Asked: sc.Seq, Machines: []MachineJSON{}, NodeHours: sc.NodeSeconds(t) / 3600}
	for _, name := range sc.Names() {
		m := sc.Nodes[name]
		out.Machines = append(out.Machines, MachineJSON{Name: name, Phase: m.Phase.String(), Since: m.Since, Asked: m.Asked})
	}
	if autoscaling {
		cost := out.NodeHours * nodeCost
		out.Cost = &cost
	}
	return out
}

// stateCollector exports gauges computed from the local state at scrape
// time.
type stateCollector struct{ a *API }

var (
	descJobs     = prometheus.NewDesc("pollux_jobs", "Jobs by state.", []string{"state"}, nil)
	descGPUs     = prometheus.NewDesc("pollux_gpus_allocated", "GPUs in the committed allocation.", nil, nil)
	descGPUTotal = prometheus.NewDesc("pollux_gpus", "GPUs of alive nodes.", nil, nil)
	descRestarts = prometheus.NewDesc("pollux_job_restarts", "Re-placements of all jobs so far.", nil, nil)
	descGen      = prometheus.NewDesc("pollux_allocation_generation", "Committed allocation generation.", nil, nil)

	descBids        = prometheus.NewDesc("pollux_bids_total", "Bids this server's allocator received from job actors.", nil, nil)
	descBidsDropped = prometheus.NewDesc("pollux_bids_dropped_total", "Bids refused: malformed, absurd, of unknown or finished jobs, stale incarnations or sessions.", nil, nil)
	descRoundDrops  = prometheus.NewDesc("pollux_round_entries_dropped_total", "Entries of committed rounds the state machine dropped (jobs finished meanwhile, stale incarnations).", nil, nil)

	descLeader   = prometheus.NewDesc("pollux_raft_leader", "1 while this server is the Raft leader, else 0.", nil, nil)
	descCrashing = prometheus.NewDesc("pollux_jobs_crash_looping", "Live jobs whose last CrashLoop or more incarnations failed in a row.", nil, nil)
	descInterval = prometheus.NewDesc("pollux_allocation_interval_seconds", "The scheduling interval this server runs rounds at as leader.", nil, nil)
)

// CrashLoop is how many failed incarnations in a row make a live job
// count as crash-looping (metric pollux_jobs_crash_looping).
const CrashLoop = 2

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descGPUs, descGPUTotal, descRestarts, descGen, descBids, descBidsDropped, descRoundDrops,
		descLeader, descCrashing, descInterval} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.cfg.Backend.LocalState()
	byState := map[string]int{}
	restarts, crashing := 0, 0
	for _, j := range st.Jobs {
		byState[j.State.String()]++
		restarts += j.Restarts
		if !j.State.Terminal() && j.Crashes >= CrashLoop {
			crashing++
		}
	}
	leader := 0.0
	if _, ok := c.a.cfg.Backend.Leadership(); ok {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descCrashing, prometheus.GaugeValue, float64(crashing))
	if c.a.cfg.Interval > 0 {
		ch <- prometheus.MustNewConstMetric(descInterval, prometheus.GaugeValue, c.a.cfg.Interval.Seconds())
	}
	for _, s := range []state.JobState{state.Pending, state.Running, state.Rescaling, state.Completed, state.Failed, state.Cancelled} {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(byState[s.String()]), s.String())
	}
	total, used := st.GPUCounts()
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(descGPUTotal, prometheus.GaugeValue, float64(total))
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(restarts))
	ch <- prometheus.MustNewConstMetric(descGen, prometheus.GaugeValue, float64(st.Allocation.Generation))
	if s := c.a.cfg.Stats; s != nil {
		ch <- prometheus.MustNewConstMetric(descBids, prometheus.CounterValue, float64(s.Bids.Load()))
		ch <- prometheus.MustNewConstMetric(descBidsDropped, prometheus.CounterValue, float64(s.BidsDropped.Load()))
		ch <- prometheus.MustNewConstMetric(descRoundDrops, prometheus.CounterValue, float64(s.RoundDrops.Load()))
	}
}
