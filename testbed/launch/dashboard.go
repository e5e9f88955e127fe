package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/actors/server/dashboard"
)

// CreateToken makes an API token of role (read, submit or admin) named
// name with the cluster's admin token, through the serving servers in
// turn, and returns it with its secret.
func (c *Cluster) CreateToken(ctx context.Context, name, role string) (api.Token, error) {
	body, err := json.Marshal(api.NewToken{Name: name, Role: role})
	if err != nil {
		return api.Token{}, err
	}
	last := "no server is serving"
	for _, m := range c.Servers {
		if !m.Serving() || m.HTTP == "" {
			continue
		}
		t, err := c.createToken(ctx, m, body)
		if err == nil {
			return t, nil
		}
		last = err.Error()
	}
	return api.Token{}, fmt.Errorf("%w: creating token %s: %s", ErrCluster, name, last)
}

func (c *Cluster) createToken(ctx context.Context, m *Member, body []byte) (api.Token, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+m.HTTP+api.PathACLTokens, bytes.NewReader(body))
	if err != nil {
		return api.Token{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return api.Token{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return api.Token{}, fmt.Errorf("%s: %d %s", m.ID, resp.StatusCode, bytes.TrimSpace(b))
	}
	var t api.Token
	if err := json.Unmarshal(b, &t); err != nil || t.Secret == "" {
		return api.Token{}, fmt.Errorf("%s: unreadable token answer %q", m.ID, b)
	}
	return t, nil
}

// DashboardURL is the URL of server m's sign-in page that signs a browser
// in with secret: the token is in the fragment, which the page's script
// posts (no server or log sees it in a URL).
func DashboardURL(m *Member, secret string) string {
	return "https://" + m.HTTP + dashboard.PathLogin + "#" + dashboard.QueryToken + "=" + url.QueryEscape(secret)
}

// ServerKeyPins are the base64 SHA-256 hashes of the servers' public keys
// (their certificates' SubjectPublicKeyInfo), what Chromium's
// --ignore-certificate-errors-spki-list takes: a browser that does not
// know the run's CA trusts exactly these servers.
func (c *Cluster) ServerKeyPins() ([]string, error) {
	var pins []string
	for _, m := range c.Servers {
		certFile, _, err := c.tls.Files(m.ID)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		raw, err := os.ReadFile(certFile)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("%w: no certificate in %s", ErrCluster, certFile)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("launch: %s: %w", certFile, err)
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		pins = append(pins, base64.StdEncoding.EncodeToString(sum[:]))
	}
	return pins, nil
}

// BrowserHint says how to open the dashboard in Chromium, which does not
// know the run's CA.
func (c *Cluster) BrowserHint() string {
	pins, err := c.ServerKeyPins()
	if err != nil {
		return "the servers' certificates are signed by the run's CA (" + c.tls.CA + "), which browsers do not know"
	}
	return "the servers' certificates are signed by the run's CA (" + c.tls.CA + "), which browsers do not know: " +
		"trust it, or run chromium --ignore-certificate-errors-spki-list=" + strings.Join(pins, ",") + " URL"
}
