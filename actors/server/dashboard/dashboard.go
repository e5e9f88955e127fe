package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/allocator"
	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/optimizer/topology"
)

// Paths. Every page and endpoint is under Prefix; the pages are
// Prefix (the cluster grid), Prefix+"jobs", Prefix+"jobs/{id}",
// Prefix+"control" and Prefix+"history".
const (
	Prefix       = "/ui/"
	PathOverview = Prefix + "api/overview"
	PathJob      = Prefix + "api/jobs/"
	PathStatic   = Prefix + "static/"
)

// Defaults of Config.
const (
	DefaultSampleEvery = 5 * time.Second
	DefaultRetention   = 6 * time.Hour
	DefaultGradHistory = 720
	DefaultStaleAfter  = 5 * time.Second
)

// Backend is what the dashboard reads: a consensus server.
type Backend interface {
	Leadership() (term uint64, leader bool)
	Leader() (raft.ServerID, raft.ServerAddress)
	Read(ctx context.Context) (*state.State, error)
	LocalState() *state.State
	Servers() ([]raft.Server, error)
	Unreachable() map[raft.ServerID]time.Time
}

var _ Backend = (*consensus.Server)(nil)

// Config configures the dashboard of one server.
type Config struct {
	// ID is this server's id.
	ID      string
	Backend Backend
	// API is this server's API handler: the dashboard asks it who a
	// token is and sends cancels through it, so that the pages are
	// behind exactly the API's authentication.
	API http.Handler
	// Members lists the gossip members (servers' racks, who is alive);
	// nil: only this server is known.
	Members func() []cluster.Member
	// LastContact is when this server last heard from a leader (Raft's
	// LastContact); nil: unknown. A follower that has not heard from one
	// for StaleAfter says its data is stale.
	LastContact func() time.Time
	StaleAfter  time.Duration
	// SampleEvery is the period of the time series, Retention how far
	// back it goes (the ring holds Retention/SampleEvery samples);
	// GradHistory bounds each job's gradient history.
	SampleEvery time.Duration
	Retention   time.Duration
	GradHistory int
	// Autoscaling and NodeCost are the server's autoscaling settings
	// (api.Config's): the control-plane view shows the autoscaler's
	// machines, node-hours and, on a server that autoscales, their cost.
	Autoscaling bool
	NodeCost    float64
	Now         func() time.Time
	Logger      *slog.Logger
}

// Dashboard is the web dashboard of one server: an http.Handler of
// Prefix and the sampler of its time series.
type Dashboard struct {
	cfg    Config
	mux    *http.ServeMux
	static http.Handler
	pages  *template.Template

	mu        sync.Mutex
	series    *ring[Sample]
	grads     map[string]*ring[GradPoint]
	lastRound *api.RoundJSON
	bases     baseCache
}

//go:embed assets
var assets embed.FS

// New returns the dashboard of cfg.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Backend == nil || cfg.API == nil {
		return nil, errors.New("dashboard: a backend and an API are required")
	}
	cfg.SampleEvery = cmp.Or(cfg.SampleEvery, DefaultSampleEvery)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.GradHistory = cmp.Or(cfg.GradHistory, DefaultGradHistory)
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, DefaultStaleAfter)
	if cfg.SampleEvery < 0 || cfg.Retention < cfg.SampleEvery || cfg.GradHistory < 1 || cfg.StaleAfter < 0 {
		return nil, errors.New("dashboard: sample period, retention, gradient history and stale bound must be positive")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pages, err := template.ParseFS(assets, "assets/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux(), pages: pages,
		static: http.StripPrefix(PathStatic, http.FileServerFS(static)),
		series: newRing[Sample](int(cfg.Retention / cfg.SampleEvery)), grads: map[string]*ring[GradPoint]{}}
	for _, v := range views {
		d.mux.HandleFunc("GET "+v.path, d.page(v))
	}
	d.mux.HandleFunc("GET "+Prefix+"jobs/{id}", d.jobPage)
	d.mux.HandleFunc("GET "+PathOverview, d.apiOverview)
	d.mux.HandleFunc("GET "+PathJob+"{id}", d.apiJob)
	d.mux.HandleFunc("POST "+PathJob+"{id}/cancel", d.apiCancel)
	d.mux.HandleFunc("GET "+PathJob+"{id}/logs", d.apiLogs)
	d.mux.HandleFunc("GET "+PathJob+"{id}/events", d.apiEvents)
	d.mux.HandleFunc("GET "+PathStatic+"{file...}", d.serveStatic)
	d.mux.HandleFunc("GET "+Prefix+"logout", d.logout)
	d.mux.HandleFunc("GET "+PathLogin, d.loginPage)
	d.mux.HandleFunc("POST "+PathLogin, d.login)
	d.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		d.errorPage(w, r, http.StatusNotFound, "Not found", "There is no page "+r.URL.Path+" on this dashboard.")
	})
	return d, nil
}

// Handler serves the dashboard under Prefix, redirects / to it, and
// hands every other request to next (the API).
func (d *Dashboard) Handler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Prefix, d)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusFound)
	})
	mux.Handle("/", next)
	return mux
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "+
		"frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	r.Body = http.MaxBytesReader(w, r.Body, api.MaxBody)
	d.mux.ServeHTTP(w, r)
}

// ObserveRound records the allocator's round (a allocator.Observer), for
// the control-plane view.
func (d *Dashboard) ObserveRound(ri allocator.RoundInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastRound = &api.RoundJSON{Generation: ri.Generation, Jobs: ri.Jobs, Fitness: finite(ri.Fitness), Seconds: ri.Duration.Seconds(), Policy: ri.Policy}
}

// Run samples the time series every SampleEvery until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.SampleEvery)
	defer t.Stop()
	d.Sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sample()
		}
	}
}

// view is one page of the dashboard.
type view struct {
	name, path, title string
}

var views = []view{
	{"cluster", Prefix + "{$}", "Cluster"},
	{"jobs", Prefix + "jobs", "Jobs"},
	{"control", Prefix + "control", "Control plane"},
	{"history", Prefix + "history", "History"},
}

// pageData is what a page template gets: the view, and the data the
// page starts from (so that it shows the cluster before its first
// poll, even to a client that runs no script for long).
type pageData struct {
	View, Title, Serving string
	Overview             Overview
	Job                  *JobDetail
	JobID                string
	// EventTypes names every event type, for the job page's timeline
	// (an EventSource listens by name).
	EventTypes []string
}

// authorize lets r in or answers why not (an HTML page, or JSON for the
// endpoints under api/).
func (d *Dashboard) authorize(w http.ResponseWriter, r *http.Request, asJSON bool) (Viewer, bool) {
	tok, err := tokenOf(r)
	if errors.Is(err, ErrQueryToken) {
		d.cfg.Logger.Warn("dashboard: refused a token in a URL's query", "peer", r.RemoteAddr, "path", r.URL.Path)
	}
	if err != nil && !errors.Is(err, ErrNoToken) {
		d.refuse(w, r, asJSON, http.StatusBadRequest, err.Error(), "")
		return Viewer{}, false
	}
	v, err := d.whoami(r, tok)
	var ref *refusal
	if errors.As(err, &ref) {
		// Only a token refused as unknown or revoked is signed out: a
		// server that cannot tell now (503) may know it in a moment.
		if ref.code == http.StatusUnauthorized && tok != "" {
			if _, cerr := r.Cookie(CookieName(r)); cerr == nil {
				http.SetCookie(w, clearCookie(r))
			}
		}
		d.refuse(w, r, asJSON, ref.code, ref.msg, ref.leader)
		return Viewer{}, false
	}
	return v, true
}

// loginData is what the sign-in page gets: whether its script may post
// a token from the URL's fragment without a click (the browser says the
// user opened the URL, not another site), where to go next, and why an
// attempt failed.
type loginData struct {
	Auto        bool
	Next, Error string
	Code        int
}

// loginPage serves the sign-in form (GET PathLogin).
func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	site := r.Header.Get("Sec-Fetch-Site")
	d.render(w, http.StatusOK, "login.html.tmpl", loginData{Auto: site == "none" || site == "same-origin",
		Next: nextPage(r.URL.Query().Get(FormNext))})
}

// login signs a browser in (POST PathLogin, form field FormToken): from
// this dashboard's own page only (a form of another site would sign the
// victim in with the attacker's token), with a token the API knows. The
// token goes into the cookie and the browser on to the form's next page.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	next := Prefix
	fail := func(code int, msg string) {
		d.cfg.Logger.Warn("dashboard: sign-in refused", "peer", r.RemoteAddr, "code", code, "reason", msg)
		d.render(w, code, "login.html.tmpl", loginData{Next: next, Error: msg, Code: code})
	}
	if !sameOrigin(r) {
		fail(http.StatusForbidden, "a sign-in must come from this dashboard's own page, not from another site")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "dashboard: sign-in form: "+err.Error())
		return
	}
	next = nextPage(r.PostForm.Get(FormNext))
	tok, err := ParseToken(strings.TrimSpace(r.PostForm.Get(FormToken)))
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if _, err := d.whoami(r, tok); err != nil {
		var ref *refusal
		if errors.As(err, &ref) {
			fail(ref.code, ref.msg)
			return
		}
		fail(http.StatusUnauthorized, err.Error())
		return
	}
	http.SetCookie(w, tokenCookie(r, tok))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, asJSON bool, code int, msg, leader string) {
	if asJSON {
		writeJSON(w, code, api.Error{Error: msg})
		return
	}
	hint := "Sign in with a token of this cluster (read is enough) at " + PathLogin + ", or open " + PathLogin + "#token=SECRET " +
		"(pollux demo --ui prints such a URL; `pollux acl token create --role read` makes a token):"
	if leader != "" {
		if u, err := url.Parse(leader); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
			d.render(w, code, "error.html.tmpl", errorData{Code: code, Title: http.StatusText(code), Message: msg,
				Hint: "Try again in a moment, or sign in on the leader's dashboard:", Link: u.Scheme + "://" + u.Host + Prefix})
			return
		}
	}
	title := http.StatusText(code)
	d.render(w, code, "error.html.tmpl", errorData{Code: code, Title: title, Message: msg, Hint: hint,
		Link: PathLogin + "?" + url.Values{FormNext: {nextPage(r.URL.RequestURI())}}.Encode()})
}

// errorData is what the error page shows: Hint, then a link to Link.
type errorData struct {
	Code                 int
	Title, Message, Hint string
	Link                 string
}

func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	if _, ok := d.authorize(w, r, false); !ok {
		return
	}
	d.render(w, code, "error.html.tmpl", errorData{Code: code, Title: title, Message: msg, Hint: "Back to the cluster:", Link: Prefix})
}

func (d *Dashboard) render(w http.ResponseWriter, code int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := d.pages.ExecuteTemplate(w, name, data); err != nil {
		d.cfg.Logger.Warn("dashboard: page", "template", name, "err", err)
	}
}

func (d *Dashboard) page(v view) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		viewer, ok := d.authorize(w, r, false)
		if !ok {
			return
		}
		d.render(w, http.StatusOK, "page.html.tmpl", pageData{View: v.name, Title: v.title, Serving: d.cfg.ID,
			Overview: d.overview(r.Context(), viewer, 0)})
	}
}

func (d *Dashboard) jobPage(w http.ResponseWriter, r *http.Request) {
	viewer, ok := d.authorize(w, r, false)
	if !ok {
		return
	}
	id := r.PathValue("id")
	ov, st := d.snapshot(r.Context(), viewer, 0)
	det, found := d.detail(st, id)
	if !found {
		d.render(w, http.StatusNotFound, "error.html.tmpl", errorData{Code: http.StatusNotFound, Title: "No such job",
			Message: "This cluster has no job " + strconv.Quote(id) + " (it may never have existed, or finished and been pruned).",
			Hint:    "The jobs of the cluster:", Link: Prefix + "jobs"})
		return
	}
	d.render(w, http.StatusOK, "page.html.tmpl", pageData{View: "job", Title: "Job " + id, Serving: d.cfg.ID,
		Overview: ov, Job: &det, JobID: id, EventTypes: state.EventTypeNames()})
}

func (d *Dashboard) apiOverview(w http.ResponseWriter, r *http.Request) {
	viewer, ok := d.authorize(w, r, true)
	if !ok {
		return
	}
	since := 0.0
	if s := r.URL.Query().Get("since"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			writeJSON(w, http.StatusBadRequest, api.Error{Error: "dashboard: since " + strconv.Quote(s) + " is not a time in Unix seconds"})
			return
		}
		since = v
	}
	writeJSON(w, http.StatusOK, d.overview(r.Context(), viewer, since))
}

func (d *Dashboard) apiJob(w http.ResponseWriter, r *http.Request) {
	viewer, ok := d.authorize(w, r, true)
	if !ok {
		return
	}
	id := r.PathValue("id")
	_, st := d.snapshot(r.Context(), viewer, 0)
	det, found := d.detail(st, id)
	if !found {
		writeJSON(w, http.StatusNotFound, api.Error{Error: "dashboard: no job " + strconv.Quote(id)})
		return
	}
	writeJSON(w, http.StatusOK, det)
}

// apiCancel cancels a job through the API (its permission checks: a
// submit token its own jobs, an admin any). Only the page's own script
// may send it: it must carry the X-Pollux-UI header (which a form or a
// page of another site cannot send without the server's consent) and,
// when the browser says, come from this site.
func (d *Dashboard) apiCancel(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Pollux-UI") != "1" || !sameOrigin(r) {
		writeJSON(w, http.StatusForbidden, api.Error{Error: "dashboard: a cancel must come from the dashboard's own page"})
		return
	}
	if _, ok := d.authorize(w, r, true); !ok {
		return
	}
	tok, _ := tokenOf(r)
	rec := d.callAPI(r.Context(), r, http.MethodPost, api.PathJobs+"/"+url.PathEscape(r.PathValue("id"))+"/cancel", tok)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body.Bytes())
}

// sameOrigin reports whether the browser says r comes from this site:
// Sec-Fetch-Site when it sends it (a page under Referrer-Policy
// no-referrer posts its forms with Origin: null), else Origin against
// Host; a client that sends neither (a script) passes.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

func (d *Dashboard) serveStatic(w http.ResponseWriter, r *http.Request) {
	if path.Ext(r.URL.Path) == ".tmpl" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	d.static.ServeHTTP(w, r)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, clearCookie(r))
	d.render(w, http.StatusOK, "error.html.tmpl", errorData{Code: http.StatusOK, Title: "Signed out",
		Message: "The dashboard's token cookie is removed from this browser.", Hint: "Sign in again:", Link: PathLogin})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// snapshot reads the state (the leader's linearizable read, or the
// local copy) and builds the overview, with the samples after since.
func (d *Dashboard) snapshot(ctx context.Context, v Viewer, since float64) (Overview, *state.State) {
	b := d.cfg.Backend
	now := d.cfg.Now()
	term, isLeader := b.Leadership()
	leader, _ := b.Leader()
	ov := Overview{Serving: d.cfg.ID, Leader: string(leader), IsLeader: isLeader, Term: term, Health: HealthOK,
		Now: unix(now), Viewer: v, SampleEvery: d.cfg.SampleEvery.Seconds()}
	var st *state.State
	if isLeader {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := b.Read(rctx)
		cancel()
		if err != nil {
			ov.Health, ov.HealthReason = HealthNoQuorum, "this server leads but cannot confirm it with a majority of the servers ("+err.Error()+"): "+
				"no write commits, and what it shows may be behind"
			ov.Stale = true
		} else {
			st = s
		}
	} else {
		ov.Stale = true
		switch {
		case leader == "":
			ov.Health, ov.HealthReason = HealthStale, "no quorum: this server knows no leader; it shows its last copy of the state, which may be behind"
		case d.cfg.LastContact != nil:
			if lc := d.cfg.LastContact(); !lc.IsZero() {
				ago := now.Sub(lc).Seconds()
				ov.LastContact = &ago
				if now.Sub(lc) > d.cfg.StaleAfter {
					ov.Health, ov.HealthReason = HealthStale, "stale: this server last heard from the leader "+
						strconv.FormatFloat(ago, 'f', 1, 64)+" s ago; what it shows may be behind"
				}
			}
		}
	}
	if st == nil {
		st = b.LocalState()
	}
	ov.Generation = st.Allocation.Generation
	ov.JobCount = map[string]int{}
	ov.GPUs, ov.GPUsUsed = st.GPUCounts()
	for _, j := range st.Jobs {
		ov.JobCount[j.State.String()]++
	}
	ov.Racks = racksOf(st)
	ov.Jobs = jobsOf(st, &d.bases)
	ov.Goodput = goodputOf(ov.Jobs)
	ov.Peers = d.peers(string(leader))
	d.mu.Lock()
	ov.LastRound = d.lastRound
	ov.Series = d.series.items(func(s Sample) bool { return s.Time > since })
	d.mu.Unlock()
	ov.Autoscale = api.AutoscaleOf(st, now, d.cfg.Autoscaling, d.cfg.NodeCost)
	if ov.Racks == nil {
		ov.Racks = []Rack{}
	}
	if ov.Jobs == nil {
		ov.Jobs = []Job{}
	}
	return ov, st
}

func (d *Dashboard) overview(ctx context.Context, v Viewer, since float64) Overview {
	ov, _ := d.snapshot(ctx, v, since)
	return ov
}

// detail is job id's page data from st and this server's history.
func (d *Dashboard) detail(st *state.State, id string) (JobDetail, bool) {
	d.mu.Lock()
	var hist []GradPoint
	if h := d.grads[id]; h != nil {
		hist = h.items(func(GradPoint) bool { return true })
	}
	d.mu.Unlock()
	return detailOf(st, id, hist, unix(d.cfg.Now()), &d.bases)
}

// peers lists the Raft servers with their racks and whether they are
// alive (gossip sees them and, on the leader, their heartbeats do not
// fail).
func (d *Dashboard) peers(leader string) []Peer {
	servers, err := d.cfg.Backend.Servers()
	if err != nil {
		return []Peer{}
	}
	alive := map[string]bool{d.cfg.ID: true}
	racks := map[string]string{}
	if d.cfg.Members != nil {
		for _, m := range d.cfg.Members() {
			if m.Meta.Role == cluster.RoleServer {
				alive[m.Name] = true
				racks[m.Name] = cmp.Or(m.Meta.Rack, topology.DefaultDomain)
			}
		}
	}
	for id := range d.cfg.Backend.Unreachable() {
		if string(id) != d.cfg.ID {
			delete(alive, string(id))
		}
	}
	out := []Peer{}
	for _, s := range servers {
		id := string(s.ID)
		out = append(out, Peer{ID: id, Voter: s.Suffrage == raft.Voter, Leader: id == leader, Alive: alive[id], Rack: racks[id], Serving: id == d.cfg.ID})
	}
	slices.SortFunc(out, func(x, y Peer) int { return cmp.Compare(x.ID, y.ID) })
	return out
}
