package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"pollux/consensus/state"
)

// PathEvents serves the cluster's events: GET PathEvents?job=ID&since=SEQ,
// streamed as server-sent events with follow=1 or Accept:
// text/event-stream (each event's id is its sequence number, so a client
// resumes with Last-Event-ID).
const PathEvents = "/v1/events"

// Event is one event of the cluster's history as the API shows it: its
// sequence number, time (Unix seconds, the proposer's clock), type
// (submitted, placed, resized, restarted, preempted, checkpointed,
// completed, failed, cancelled; node_joined, node_lost, node_drained;
// leader_changed, lease_granted, lease_reclaimed), the job or node it is
// about (neither for a leader's or a lease's), and why.
type Event struct {
	Seq    uint64  `json:"seq"`
	Time   float64 `json:"time"`
	Type   string  `json:"type"`
	Job    string  `json:"job,omitempty"`
	Node   string  `json:"node,omitempty"`
	Reason string  `json:"reason"`
}

// Events is the answer of GET PathEvents: the events after since, oldest
// first, and the sequence number of the last event the server's state
// holds (a reader asks again with since=LastSeq).
type Events struct {
	Events  []Event `json:"events"`
	LastSeq uint64  `json:"last_seq"`
}

// EventOf is ev as the API shows it.
func EventOf(ev state.Event) Event {
	return Event{Seq: ev.Seq, Time: ev.Time, Type: ev.Type.String(), Job: ev.Job, Node: ev.Node, Reason: ev.Reason}
}

// Streaming: the state is polled every eventPoll; a comment line is sent
// after keepAliveEvery polls without an event, so that proxies and
// clients see a live stream; each write may take up to eventWriteTimeout
// (the server's write timeout does not end a stream; its read timeout
// does not either, as net/http clears the read deadline once it has read
// a request without a body).
const (
	eventPoll         = 200 * time.Millisecond
	keepAliveEvery    = 75
	eventWriteTimeout = time.Minute
	// eventBatch bounds the events one poll sends.
	eventBatch = 512
)

// eventsQuery is what a request to PathEvents asks.
type eventsQuery struct {
	job    string
	since  uint64
	follow bool
}

// parseEventsQuery reads the query and headers of a request to
// PathEvents: job, since (or the Last-Event-ID header, which wins) and
// follow (or Accept: text/event-stream).
func parseEventsQuery(r *http.Request) (eventsQuery, error) {
	q := r.URL.Query()
	var eq eventsQuery
	eq.job = q.Get("job")
	if s := q.Get("since"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return eq, fmt.Errorf("api: since=%.32q is not a sequence number (want 0 or more)", s)
		}
		eq.since = v
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		v, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil {
			return eq, fmt.Errorf("api: Last-Event-ID %.32q is not a sequence number", id)
		}
		eq.since = v
	}
	switch f := q.Get("follow"); f {
	case "", "0", "false":
	case "1", "true":
		eq.follow = true
	default:
		return eq, fmt.Errorf("api: follow=%.16q (want true or false)", f)
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		eq.follow = true
	}
	return eq, nil
}

// events answers GET PathEvents from this server's copy of the state
// (X-Pollux-Stale says whether it may lag the leader's).
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	eq, err := parseEventsQuery(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{err.Error()})
		return
	}
	if eq.job != "" {
		if j, _ := a.cfg.Backend.LocalJob(eq.job); j == nil {
			if evs, _ := a.cfg.Backend.LocalEvents(eq.job, 0, 1); len(evs) == 0 {
				writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: unknown job %q (never submitted, or pruned with its events)", eq.job)})
				return
			}
		}
	}
	_, leader := a.cfg.Backend.Leadership()
	w.Header().Set(HeaderStale, strconv.FormatBool(!leader))
	if eq.follow {
		a.followEvents(w, r, eq)
		return
	}
	evs, last := a.cfg.Backend.LocalEvents(eq.job, eq.since, 0)
	out := Events{Events: make([]Event, 0, len(evs)), LastSeq: last}
	for _, ev := range evs {
		out.Events = append(out.Events, EventOf(ev))
	}
	writeJSON(w, http.StatusOK, out)
}

// followEvents streams the events after eq.since as server-sent events
// until the client goes away or, for one job, the job has finished and
// every event of it is sent.
func (a *API) followEvents(w http.ResponseWriter, r *http.Request, eq eventsQuery) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(eventPoll)
	defer tick.Stop()
	quiet := 0
	for {
		// A job seen finished before its events are read has all of
		// them in (an event is written with its change).
		done := false
		if eq.job != "" {
			j, _ := a.cfg.Backend.LocalJob(eq.job)
			done = j == nil || j.State.Terminal()
		}
		evs, _ := a.cfg.Backend.LocalEvents(eq.job, eq.since, eventBatch)
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout)) // not every writer supports it
		for _, ev := range evs {
			if err := writeSSE(w, EventOf(ev)); err != nil {
				return
			}
			eq.since = ev.Seq
		}
		if len(evs) > 0 {
			quiet = 0
		} else if quiet++; quiet >= keepAliveEvery {
			quiet = 0
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if done && len(evs) < eventBatch {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// writeSSE writes one server-sent event: its id (the sequence number),
// its type as the event name, and its JSON as the data.
func writeSSE(w http.ResponseWriter, ev Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data)
	return err
}
