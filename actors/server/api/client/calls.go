package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// Submit submits a job spec (the YAML of package jobspec) and returns the
// new job's id. Its idempotency key makes a retry on another server of a
// submission that had committed succeed as it did.
func (c *Client) Submit(ctx context.Context, spec []byte) (string, error) {
	var res map[string]string
	err := c.callKeyed(ctx, http.MethodPost, api.PathJobs, newKey(), spec, &res)
	return res["id"], err
}

// Jobs lists the cluster's jobs.
func (c *Client) Jobs(ctx context.Context) ([]api.Job, error) {
	return do[[]api.Job](ctx, c, http.MethodGet, api.PathJobs, nil)
}

// Job returns one job, with its actor's latest bid.
func (c *Client) Job(ctx context.Context, id string) (api.Job, error) {
	return do[api.Job](ctx, c, http.MethodGet, jobPath(id), nil)
}

// Cancel cancels a job that has not finished. Its idempotency key makes
// a retry on another server of a cancel that had committed succeed as it
// did.
func (c *Client) Cancel(ctx context.Context, id string) (api.CancelResult, error) {
	var res api.CancelResult
	err := c.callKeyed(ctx, http.MethodPost, jobPath(id)+"/cancel", newKey(), nil, &res)
	return res, err
}

// newKey returns a new idempotency key: 26 random base32 characters.
func newKey() string { return rand.Text() }

// Nodes lists the cluster's GPU nodes.
func (c *Client) Nodes(ctx context.Context) ([]api.Node, error) {
	return do[[]api.Node](ctx, c, http.MethodGet, api.PathNodes, nil)
}

// Status returns the cluster's status: leader, term, GPU use, jobs by
// state, and the autoscaler's and federation's state if any.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	return do[api.Status](ctx, c, http.MethodGet, api.PathStatus, nil)
}

// Peers lists the Raft servers (operator raft list-peers).
func (c *Client) Peers(ctx context.Context) ([]api.Peer, error) {
	return do[[]api.Peer](ctx, c, http.MethodGet, api.PathPeers, nil)
}

// AddPeer makes a running server a voter of the cluster.
func (c *Client) AddPeer(ctx context.Context, p api.AddPeer) error {
	return c.call(ctx, http.MethodPost, api.PathPeers, marshal(p), nil)
}

// RemovePeer removes a server from the cluster; the servers refuse a
// removal that would leave the cluster without a live quorum.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, api.PathPeers+"/"+url.PathEscape(id), nil, nil)
}

// Bootstrap makes the cluster's first admin token, once in its life. The
// servers make its secret unless b names one; they need a client
// certificate of the cluster CA (Config.Cert).
func (c *Client) Bootstrap(ctx context.Context, b api.Bootstrap) (api.Token, error) {
	var body []byte
	if b.Secret != "" {
		body = marshal(b)
	}
	return do[api.Token](ctx, c, http.MethodPost, api.PathACLBootstrap, body)
}

// CreateToken makes a token; the answer holds its secret, which the
// cluster does not keep.
func (c *Client) CreateToken(ctx context.Context, t api.NewToken) (api.Token, error) {
	return do[api.Token](ctx, c, http.MethodPost, api.PathACLTokens, marshal(t))
}

// Tokens lists the tokens, revoked ones included, without their secrets.
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	return do[[]api.Token](ctx, c, http.MethodGet, api.PathACLTokens, nil)
}

// RevokeToken revokes the token of accessor for good.
func (c *Client) RevokeToken(ctx context.Context, accessor string) (api.Token, error) {
	return do[api.Token](ctx, c, http.MethodPost, api.PathACLTokens+"/"+url.PathEscape(accessor)+"/revoke", nil)
}

// Self returns the token the client runs with.
func (c *Client) Self(ctx context.Context) (api.Token, error) {
	return do[api.Token](ctx, c, http.MethodGet, api.PathACLSelf, nil)
}

// SaveSnapshot returns a backup of the replicated state (the leader's,
// after every write completed before the call).
func (c *Client) SaveSnapshot(ctx context.Context) ([]byte, error) {
	b, _, err := c.send(ctx, http.MethodGet, api.PathSnapshot, "", nil, state.MaxSnapshot)
	return b, err
}

// RestoreSnapshot replaces the cluster's replicated state with a backup
// SaveSnapshot made (its Raft membership stays its own).
func (c *Client) RestoreSnapshot(ctx context.Context, backup []byte) (api.Restored, error) {
	return do[api.Restored](ctx, c, http.MethodPut, api.PathSnapshot, backup)
}

// do sends a request and returns its answer, decoded.
func do[T any](ctx context.Context, c *Client, method, path string, body []byte) (T, error) {
	var v T
	err := c.call(ctx, method, path, body, &v)
	return v, err
}

func jobPath(id string) string { return api.PathJobs + "/" + url.PathEscape(id) }

// marshal encodes a request body: a struct of strings of package api,
// which always encodes.
func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Quotas lists the quotas: the defaults, the state budget and every
// live token's (admin).
func (c *Client) Quotas(ctx context.Context) (api.Quotas, error) {
	return do[api.Quotas](ctx, c, http.MethodGet, api.PathACLQuotas, nil)
}

// SetQuota sets a token's quota or, with an empty accessor, the
// defaults and the state budget (admin).
func (c *Client) SetQuota(ctx context.Context, q api.SetQuota) (api.SetQuota, error) {
	return do[api.SetQuota](ctx, c, http.MethodPost, api.PathACLQuotas, marshal(q))
}
