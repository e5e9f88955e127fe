package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"pollux/actors/server/api"
)

// ErrLogCut is returned when a log stream ended with the server's error
// (the agent stopped answering) or broke off.
var ErrLogCut = errors.New("client: the log stream was cut")

// maxLogLine bounds one line of a log stream (a worker's line is at
// most workerlog.MaxLine bytes, escaped as JSON).
const maxLogLine = 1 << 20

// Logs reads the log of a worker of job id (api.LogQuery says which,
// and whether to follow it) and calls fn with each line, in order, until
// the log ends, ctx ends, or fn returns an error, which Logs returns.
// The client's Timeout bounds a read without Follow only.
func (c *Client) Logs(ctx context.Context, id string, q api.LogQuery, fn func(api.LogLine) error) error {
	if !q.Follow && c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	path := jobPath(id) + "/logs"
	if v := q.Values().Encode(); v != "" {
		path += "?" + v
	}
	var errs []error
	for _, s := range c.cfg.Servers {
		body, err := c.open(ctx, s, path)
		var refused *APIError
		if errors.As(err, &refused) || errors.Is(err, ErrConfig) {
			return err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = DecodeLogs(body, fn)
		body.Close()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

// open sends GET path to server s and returns the body of its 2xx
// answer, unread.
func (c *Client) open(ctx context.Context, s, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL(s, path), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: server %q: %w", ErrConfig, s, err)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, explain(err, c.cfg.CA)
	}
	if resp.StatusCode < 300 {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.Error
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if resp.StatusCode < 500 {
		return nil, &APIError{StatusCode: resp.StatusCode, Status: resp.Status, Message: msg}
	}
	return nil, fmt.Errorf("%s: %s: %s", s, resp.Status, msg)
}

// DecodeLogs reads a log stream (one api.LogLine as JSON a line) from r
// and calls fn with each line; a line carrying the server's error ends
// it with that error (wrapping ErrLogCut).
func DecodeLogs(r io.Reader, fn func(api.LogLine) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLogLine)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var l api.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("client: a line of the log stream: %w", err)
		}
		if l.Error != "" {
			return fmt.Errorf("%w: %s", ErrLogCut, l.Error)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrLogCut, err)
	}
	return nil
}

// LogPrinter returns a Logs callback that prints each line to out: the
// worker's line as it wrote it, or with asJSON the api.LogLine as one
// JSON object a line. A gap the size cap left is noted on notes.
func LogPrinter(out, notes io.Writer, asJSON bool) func(api.LogLine) error {
	return func(l api.LogLine) error {
		if l.SkippedBytes > 0 && notes != nil {
			fmt.Fprintf(notes, "pollux: %d bytes of the log of incarnation %d rank %d were rotated away (the agent's --worker-log-max) before the next line\n",
				l.SkippedBytes, l.Incarnation, l.Rank)
		}
		if !asJSON {
			_, err := fmt.Fprintln(out, l.Line)
			return err
		}
		b, err := json.Marshal(l)
		if err == nil {
			_, err = out.Write(append(b, '\n'))
		}
		return err
	}
}
