package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/cluster/pki"
)

// Environment variables FromEnv reads.
const (
	EnvServers    = "POLLUX_SERVERS"
	EnvCA         = "POLLUX_CA"
	EnvToken      = "POLLUX_TOKEN"
	EnvClientCert = "POLLUX_CLIENT_CERT"
	EnvClientKey  = "POLLUX_CLIENT_KEY"
)

// DefaultServer is the server a client asks when it is given none.
const DefaultServer = "127.0.0.1:8080"

// maxAnswer caps the body of an answer the client reads.
const maxAnswer = 64 << 20

// Sentinel errors; every error of the package but APIError wraps one of
// them or is a failure to decode a server's answer.
var (
	// ErrConfig is a Config the client cannot use: a CA, certificate or
	// key file it cannot load, or a server address that is no URL.
	ErrConfig = errors.New("client: bad configuration")
	// ErrUnavailable is returned when no server answered: each was
	// unreachable, failed TLS, or answered with a 5xx.
	ErrUnavailable = errors.New("client: no server answered")
)

// APIError is a server's refusal of a request: a 4xx answer, which every
// other server would give too.
type APIError struct {
	StatusCode int    // 403
	Status     string // "403 Forbidden"
	// Message is the server's api.Error, or its answer's body.
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("client: refused (%s): %s", e.Status, e.Message)
}

// Config says which servers a Client asks and how.
type Config struct {
	// Servers are the API addresses of servers, tried in order: host:port
	// is HTTPS, http://host:port a server running --insecure. Empty:
	// DefaultServer.
	Servers []string
	// CA is the file of the cluster CA certificate the servers'
	// certificates are checked against ("": the system's roots).
	CA string
	// Token is the API token's secret ("": none).
	Token string
	// Cert and Key are the files of a client certificate of the cluster
	// CA to show (the bootstrap needs one); both or neither.
	Cert, Key string
	// Timeout bounds each call, every server tried included (0: only the
	// caller's context).
	Timeout time.Duration
}

// FromEnv is the configuration the environment gives: the servers of
// $POLLUX_SERVERS (comma-separated; DefaultServer if unset or empty),
// $POLLUX_CA, $POLLUX_TOKEN, $POLLUX_CLIENT_CERT and $POLLUX_CLIENT_KEY.
func FromEnv() Config {
	var servers []string
	for _, s := range strings.Split(os.Getenv(EnvServers), ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	if len(servers) == 0 {
		servers = []string{DefaultServer}
	}
	return Config{Servers: servers, CA: os.Getenv(EnvCA), Token: strings.TrimSpace(os.Getenv(EnvToken)),
		Cert: os.Getenv(EnvClientCert), Key: os.Getenv(EnvClientKey)}
}

// Client is a client of the API of one cluster's servers. It is safe for
// concurrent use, but for a client made by Raw, whose calls write dst.
type Client struct {
	cfg  Config
	http *http.Client
	// raw, if set, receives the body of each answer (see Raw).
	raw *json.RawMessage
}

// New returns a client of cfg's servers, with its CA and client
// certificate loaded.
func New(cfg Config) (*Client, error) {
	if len(cfg.Servers) == 0 {
		cfg.Servers = []string{DefaultServer}
	}
	for _, s := range cfg.Servers {
		if u, err := url.Parse(apiURL(s, "/")); err != nil || u.Host == "" {
			return nil, fmt.Errorf("%w: server %q is not host:port or http://host:port", ErrConfig, s)
		}
	}
	cfg.Token = strings.TrimSpace(cfg.Token)
	var pool *x509.CertPool
	if cfg.CA != "" {
		p, err := pki.LoadPool(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: CA: %w", ErrConfig, err)
		}
		pool = p
	}
	var cert *tls.Certificate
	if cfg.Cert != "" || cfg.Key != "" {
		if cfg.Cert == "" || cfg.Key == "" {
			return nil, fmt.Errorf("%w: a client certificate and its key go together", ErrConfig)
		}
		c, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrConfig, err)
		}
		cert = &c
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = pki.APIClient(pool, cert)
	return &Client{cfg: cfg, http: &http.Client{Transport: tr, CheckRedirect: keepToken}}, nil
}

// keepToken follows up to 5 redirects, sending the token again to
// another server of the cluster, but never from HTTPS to plain HTTP (not
// even to the same host, to which net/http would copy it).
func keepToken(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	first := via[0]
	switch h := first.Header.Get("Authorization"); {
	case req.URL.Scheme == "http" && first.URL.Scheme == "https":
		req.Header.Del("Authorization")
	case h != "" && req.Header.Get("Authorization") == "":
		req.Header.Set("Authorization", h)
	}
	return nil
}

// Raw returns a client that works as c and also stores the body of each
// answer in dst, as the server sent it (for a caller that prints it
// unchanged).
func (c *Client) Raw(dst *json.RawMessage) *Client {
	cc := *c
	cc.raw = dst
	return &cc
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// apiURL is the URL of path on server s: HTTPS unless s says http://.
func apiURL(s, path string) string {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return strings.TrimSuffix(s, "/") + path
	}
	return "https://" + s + path
}

// explain adds what to do to a TLS failure.
func explain(err error, ca string) error {
	var ua x509.UnknownAuthorityError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua) || errors.As(err, &cv):
		if ca == "" {
			return fmt.Errorf("%w (pass the cluster CA with --ca or $%s)", err, EnvCA)
		}
		return fmt.Errorf("%w (is --ca %s the CA of this cluster?)", err, ca)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w (the server runs --insecure: give its address as http://HOST:PORT)", err)
	}
	return err
}

// call sends one request to the first server that answers and decodes
// its answer into out (nil: the answer is not decoded).
func (c *Client) call(ctx context.Context, method, path string, body []byte, out any) error {
	return c.callKeyed(ctx, method, path, "", body, out)
}

// callKeyed is call with an idempotency key ("": none) sent to every
// server tried, so that a server that gets a retry of a write that had
// committed answers as the write did.
func (c *Client) callKeyed(ctx context.Context, method, path, key string, body []byte, out any) error {
	data, s, err := c.send(ctx, method, path, key, body, maxAnswer)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("client: %s %s: the answer of %s: %w", method, path, s, err)
	}
	return nil
}

// send sends one request, with idempotency key key ("": none), to the
// first server that answers and returns its answer (at most limit bytes)
// and the server.
func (c *Client) send(ctx context.Context, method, path, key string, body []byte, limit int64) ([]byte, string, error) {
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	var errs []error
	for _, s := range c.cfg.Servers {
		data, err := c.ask(ctx, s, method, path, key, body, limit)
		var refused *APIError
		if errors.As(err, &refused) || errors.Is(err, ErrConfig) {
			return nil, s, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if c.raw != nil {
			*c.raw = data
		}
		return data, s, nil
	}
	return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

// ask sends one request to server s and returns the body of its 2xx
// answer.
func (c *Client) ask(ctx context.Context, s, method, path, key string, body []byte, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, apiURL(s, path), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: server %q: %w", ErrConfig, s, err)
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, explain(err, c.cfg.CA)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: an answer over %d bytes", s, limit)
	}
	if resp.StatusCode < 300 {
		return data, nil
	}
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
