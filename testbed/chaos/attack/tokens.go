package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// tokens are the API tokens the attackers hold, made at setup by the
// admin: a `read` one, a `submit` one that did not submit the victim,
// and a revoked `submit` one.
type tokens struct {
	reader, submitter, revoked string
}

// makeTokens creates the attackers' tokens with the launcher's admin
// token and revokes one.
func (t *target) makeTokens(ctx context.Context) error {
	hc := t.c.HTTPClient(10 * time.Second)
	create := func(name, role string) (api.Token, error) {
		var tok api.Token
		body, _ := json.Marshal(api.NewToken{Name: name, Role: role})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+t.leader.HTTP+api.PathACLTokens, bytes.NewReader(body))
		if err != nil {
			return tok, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return tok, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return tok, fmt.Errorf("creating token %s: %s: %s", name, resp.Status, msg)
		}
		return tok, json.NewDecoder(resp.Body).Decode(&tok)
	}
	var toks [3]api.Token
	for i, spec := range [][2]string{{"attack-reader", "read"}, {"attack-submitter", "submit"}, {"attack-revoked", "submit"}} {
		// An election (a loaded machine) fails a creation with a 503,
		// which may have committed: a retry makes the token anew under
		// a name of its own.
		for try := 0; ; try++ {
			name := spec[0]
			if try > 0 {
				name = fmt.Sprintf("%s-%d", spec[0], try)
			}
			tok, err := create(name, spec[1])
			if err == nil {
				toks[i] = tok
				break
			}
			if try == 20 || !strings.Contains(err.Error(), "503") {
				return fmt.Errorf("%w: %w", ErrRun, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			if m, _, err := t.c.Leader(ctx, 10*time.Second); err == nil {
				t.leader = m
			}
		}
	}
	// A 503 (an election on a loaded machine) or a 404 (a server that has
	// not applied the creation yet) is tried again; an earlier attempt
	// may have committed, which a retry sees as already revoked.
	var last string
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+t.leader.HTTP+api.PathACLTokens+"/"+toks[2].Accessor+"/revoke", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (try > 0 && bytes.Contains(msg, []byte("was revoked"))) {
				break
			}
			// A 404: the server asked has not applied the creation yet.
			if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusNotFound {
				return fmt.Errorf("%w: revoking a token: %s: %s", ErrRun, resp.Status, bytes.TrimSpace(msg))
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if try == 20 {
			return fmt.Errorf("%w: revoking a token: %s", ErrRun, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if m, _, err := t.c.Leader(ctx, 10*time.Second); err == nil {
			t.leader = m
		}
	}
	t.tokens = tokens{reader: toks[0].Secret, submitter: toks[1].Secret, revoked: toks[2].Secret}
	return nil
}

// asToken sends one API request to the leader with secret (none if
// empty) and the client certificate, following no redirect; it returns
// the status, the body and the local address (what the server logs as
// the peer).
func (t *target) asToken(ctx context.Context, secret, method, path string, body []byte) (int, string, string, error) {
	hc, err := t.c.TLS().HTTPClient(10 * time.Second)
	if err != nil {
		return 0, "", "", err
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var local string
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		local = ci.Conn.LocalAddr().String()
	}})
	req, err := http.NewRequestWithContext(ctx, method, "https://"+t.leader.HTTP+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", local, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, strings.TrimSpace(string(msg)), local, nil
}

// tokenAttack sends a request with the secret secret returns: refused if
// the answer is want (401 or 403) mentioning mention and the leader
// logged the refusal naming the peer; the observer checks the state.
func tokenAttack(secret func(*target) string, method string, path func(*target) string, body func(*target) []byte,
	want int, mention string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		var b []byte
		if body != nil {
			b = body(t)
		}
		m := t.leader
		code, msg, local, err := t.asToken(ctx, secret(t), method, path(t), b)
		if err != nil {
			return "request failed: " + err.Error(), false
		}
		if code != want || !strings.Contains(msg, mention) {
			return fmt.Sprintf("answer %d %s", code, msg), false
		}
		line, ok := t.logLine(m, "api: refused request", "peer="+local)
		if !ok {
			return fmt.Sprintf("%d %s; no log line of %s naming the peer %s", code, msg, m.ID, local), false
		}
		return fmt.Sprintf("%d %s; %s/%s logged: %s", code, msg, m.Role, m.ID, logMsg(line)), true
	}
}

func noSecret(*target) string        { return "" }
func madeUpSecret(*target) string    { return "plx_" + strings.Repeat("Z", 43) }
func readerSecret(t *target) string  { return t.tokens.reader }
func submitSecret(t *target) string  { return t.tokens.submitter }
func revokedSecret(t *target) string { return t.tokens.revoked }

func jobsPath(*target) string           { return api.PathJobs }
func cancelVictimPath(*target) string   { return api.PathJobs + "/attack-victim/cancel" }
func tokensPath(*target) string         { return api.PathACLTokens }
func removeLeaderPath(t *target) string { return api.PathPeers + "/" + t.leader.ID }
func quotasPath(*target) string         { return api.PathACLQuotas }
func snapshotPath(*target) string       { return api.PathSnapshot }

func attackSpec(name string) func(*target) []byte {
	return func(t *target) []byte { return t.appSpec(name, "") }
}

// raisedQuotas are the largest cluster-wide quotas and state budget the
// servers take: enough to flood the state.
func raisedQuotas(*target) []byte {
	b, _ := json.Marshal(api.SetQuota{Quota: api.Quota{Jobs: state.MaxJobs, SpecBytes: state.MaxStateBudget, Rate: state.MaxQuotaRate,
		Burst: state.MaxQuotaBurst}, StateBudget: state.MaxStateBudget})
	return b
}

// emptySnapshot is a state to restore: nothing (the restore must be
// refused before the body is read).
func emptySnapshot(*target) []byte { return nil }

func newAdminToken(*target) []byte {
	b, _ := json.Marshal(api.NewToken{Name: "attack-escalation", Role: "admin"})
	return b
}
