package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"pollux/actors/server/api"
)

// Events returns the cluster's events after sequence number since, of
// job only unless job is "", oldest first.
func (c *Client) Events(ctx context.Context, job string, since uint64) (api.Events, error) {
	return do[api.Events](ctx, c, http.MethodGet, eventsPath(job, since, false), nil)
}

func eventsPath(job string, since uint64, follow bool) string {
	q := url.Values{}
	if job != "" {
		q.Set("job", job)
	}
	if since > 0 {
		q.Set("since", strconv.FormatUint(since, 10))
	}
	if follow {
		q.Set("follow", "true")
	}
	if len(q) == 0 {
		return api.PathEvents
	}
	return api.PathEvents + "?" + q.Encode()
}

// maxEventLine bounds a line of an event stream.
const maxEventLine = 64 << 10

// FollowEvents streams the events after since (of job only unless job
// is "") to fn, oldest first, until ctx ends, fn fails or, for one job,
// the job's event that it finished (completed, failed, cancelled) is
// delivered or the server ends a stream that had nothing more (then it
// returns nil). A stream that breaks, or ends after events but before
// that one, is resumed after the last event delivered (Last-Event-ID),
// from the next server that answers, so no event is delivered twice; it
// gives up when every server failed in a row.
func (c *Client) FollowEvents(ctx context.Context, job string, since uint64, fn func(api.Event) error) error {
	path := eventsPath(job, 0, true)
	finished := false
	deliver := func(ev api.Event) error {
		if err := fn(ev); err != nil {
			return err
		}
		finished = job != "" && ev.Job == job && slices.Contains([]string{"completed", "failed", "cancelled"}, ev.Type)
		return nil
	}
	var errs []error
	for failed := 0; failed < len(c.cfg.Servers); {
		for _, s := range c.cfg.Servers {
			before := since
			err := c.stream(ctx, s, path, &since, deliver)
			var refused *APIError
			var stop *fnError
			switch {
			case finished, err == nil && job != "" && since == before:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.As(err, &refused) || errors.Is(err, ErrConfig):
				return err
			case errors.As(err, &stop):
				return stop.err
			}
			if err != nil {
				errs = append(errs, err)
			}
			if since > before {
				failed = 0
			} else if failed++; failed >= len(c.cfg.Servers) {
				break
			}
		}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

// fnError is an error of FollowEvents' callback, returned as it is.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// stream reads the event stream at path of server s after *since,
// advancing *since with each event delivered to fn. The client's
// Timeout bounds the wait for the answer's header only.
func (c *Client) stream(ctx context.Context, s, path string, since *uint64, fn func(api.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL(s, path), nil)
	if err != nil {
		return fmt.Errorf("%w: server %q: %w", ErrConfig, s, err)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	req.Header.Set("Accept", "text/event-stream")
	if *since > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*since, 10))
	}
	if c.cfg.Timeout > 0 {
		t := time.AfterFunc(c.cfg.Timeout, cancel)
		defer t.Stop()
		resp, err := c.http.Do(req)
		if !t.Stop() && err == nil {
			resp.Body.Close()
			return fmt.Errorf("%s: no answer within %v", s, c.cfg.Timeout)
		}
		return c.readStream(s, resp, err, since, fn)
	}
	resp, err := c.http.Do(req)
	return c.readStream(s, resp, err, since, fn)
}

// readStream checks the answer of an event stream request and reads it.
func (c *Client) readStream(s string, resp *http.Response, err error, since *uint64, fn func(api.Event) error) error {
	if err != nil {
		return explain(err, c.cfg.CA)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxEventLine))
		var e api.Error
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode < 500 {
			return &APIError{StatusCode: resp.StatusCode, Status: resp.Status, Message: msg}
		}
		return fmt.Errorf("%s: %s: %s", s, resp.Status, msg)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("%s: an event stream answered as %q", s, ct)
	}
	err = readEvents(resp.Body, func(ev api.Event) error {
		if ev.Seq <= *since {
			return fmt.Errorf("event %d after %d: out of order", ev.Seq, *since)
		}
		if err := fn(ev); err != nil {
			return &fnError{err}
		}
		*since = ev.Seq
		return nil
	})
	if err != nil {
		var stop *fnError
		if errors.As(err, &stop) {
			return stop
		}
		return fmt.Errorf("%s: event stream: %w", s, err)
	}
	return nil
}

// readEvents parses a stream of server-sent events as the API sends
// them (id, event and data lines, a blank line ending each; comment lines
// start with a colon) and calls fn with each event's data decoded. An
// id that is not the event's sequence number is an error.
func readEvents(r io.Reader, fn func(api.Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	var id string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch {
		case len(line) == 0:
			if len(data) == 0 {
				id = ""
				continue
			}
			var ev api.Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return fmt.Errorf("event data: %w", err)
			}
			if id != strconv.FormatUint(ev.Seq, 10) {
				return fmt.Errorf("event id %.32q, sequence number %d", id, ev.Seq)
			}
			if err := fn(ev); err != nil {
				return err
			}
			id, data = "", nil
		case len(field) == 0: // a comment
		case string(field) == "id":
			id = string(value)
		case string(field) == "data":
			if len(data) > 0 {
				data = append(data, '\n')
			}
			if len(data)+len(value) > maxEventLine {
				return fmt.Errorf("event data over %d bytes", maxEventLine)
			}
			data = append(data, value...)
		}
	}
	return sc.Err()
}

// WriteEvent prints one event as a line: its sequence number, time
// (RFC 3339, UTC), type, job (or node, or "cluster" for an event of the
// whole cluster: a leader or a lease) and reason.
func WriteEvent(w io.Writer, ev api.Event) error {
	subject := ev.Job
	switch {
	case subject != "":
	case ev.Node != "":
		subject = "node " + ev.Node
	default:
		subject = "cluster"
	}
	_, err := fmt.Fprintf(w, "%d\t%s\t%-10s\t%s\t%s\n", ev.Seq, when(ev.Time), ev.Type, subject, ev.Reason)
	return err
}

// WriteEvents prints events one a line (WriteEvent), or a line saying
// there are none.
func WriteEvents(w io.Writer, evs api.Events) error {
	if len(evs.Events) == 0 {
		_, err := fmt.Fprintln(w, "no events")
		return err
	}
	sw := &stickyWriter{w: w}
	for _, ev := range evs.Events {
		_ = WriteEvent(sw, ev)
	}
	return sw.err
}
