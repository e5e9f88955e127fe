package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

// TokenFileName is the file in Dir holding the cluster's admin token.
const TokenFileName = "admin.token"

// AdminToken is the secret of the cluster's bootstrap token, an admin
// token: drivers pass it to clients (POLLUX_TOKEN, --token) and make the
// other tokens they need with it.
func (c *Cluster) AdminToken() string { return c.token }

// TokenFile is the file holding AdminToken (mode 0600, in Dir).
func (c *Cluster) TokenFile() string { return c.tokenFile }

// makeToken makes the run's admin token secret and writes it to
// Dir/TokenFileName, readable by its owner only.
func (c *Cluster) makeToken() error {
	secret, err := api.NewSecret()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	path := filepath.Join(c.o.Dir, TokenFileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("launch: admin token file: %w", err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("launch: admin token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("launch: admin token file: %w", err)
	}
	c.token, c.tokenFile = secret, path
	return nil
}

// bootstrapACL makes the run's secret the cluster's bootstrap token
// (POST /v1/acl/bootstrap with the launcher's client certificate),
// through any serving server, retrying while no leader takes it. The
// secret is the launcher's own, so a retry after an answer that was lost
// is answered OK.
func (c *Cluster) bootstrapACL(ctx context.Context, within time.Duration) error {
	body, _ := json.Marshal(api.Bootstrap{Secret: c.token})
	deadline := time.Now().Add(within)
	last := "no server is serving"
	for {
		for _, m := range c.Servers {
			if !m.Serving() || m.HTTP == "" {
				continue
			}
			code, msg, err := c.post(ctx, m, api.PathACLBootstrap, body)
			switch {
			case err != nil:
				last = err.Error()
			case code == http.StatusCreated || code == http.StatusOK:
				c.log.Info("launch: tokens bootstrapped", "server", m.ID, "token_file", c.tokenFile)
				return nil
			case code >= 400 && code < 500:
				return fmt.Errorf("%w: bootstrapping the tokens through %s: %d %s", ErrCluster, m.ID, code, msg)
			default:
				last = fmt.Sprintf("%s: %d %s", m.ID, code, msg)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the tokens were not bootstrapped within %s: %s", ErrCluster, within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// post sends body to path on m without a token, and returns the status
// and the answer's text.
func (c *Cluster) post(ctx context.Context, m *Member, path string, body []byte) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+m.HTTP+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.http.Transport.(*tokenTransport).base.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// tokenTransport adds the admin token to requests that carry no
// Authorization header.
type tokenTransport struct {
	base  *http.Transport
	token string
}

func (t *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport.
func (t *tokenTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// Exports is the shell line that points the CLI at the cluster: its
// servers' API addresses, its CA and its admin token (read from the
// token file when evaluated).
func (c *Cluster) Exports() string {
	var servers []string
	for _, m := range c.Servers {
		servers = append(servers, m.HTTP)
	}
	return client.Exports(servers, c.tls.CA, c.tokenFile)
}
