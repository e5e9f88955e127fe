package state

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Role is what an API token may do. Each role includes the ones below
// it: admin may do what submit may, submit what read may.
type Role uint8

// The roles. Zero is not a role (it never appears on the wire).
const (
	// RoleRead reads the cluster's state: jobs, nodes, status, metrics.
	RoleRead Role = 1 + iota
	// RoleSubmit also submits jobs and cancels its own.
	RoleSubmit
	// RoleAdmin also cancels any job, changes the Raft membership and
	// manages tokens.
	RoleAdmin
)

var roleNames = [...]string{"", "read", "submit", "admin"}

func (r Role) String() string {
	if r.valid() {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

func (r Role) valid() bool { return r >= RoleRead && r <= RoleAdmin }

// Allows reports whether a token of role r may do what needs role need.
func (r Role) Allows(need Role) bool { return r.valid() && need.valid() && r >= need }

// ParseRole parses "read", "submit" or "admin".
func ParseRole(s string) (Role, error) {
	for r := RoleRead; r <= RoleAdmin; r++ {
		if s == roleNames[r] {
			return r, nil
		}
	}
	return 0, invalid("role %q (want read, submit or admin)", s)
}

// TokenHash is the SHA-256 of a token's secret: the state stores it, never
// the secret.
type TokenHash [sha256.Size]byte

// HashSecret returns the hash a secret is stored and looked up by.
func HashSecret(secret string) TokenHash { return sha256.Sum256([]byte(secret)) }

// Bounds of the token table.
const (
	// MaxTokens bounds the token table, revoked tokens included.
	MaxTokens = 4096
	// maxTokenName bounds a token's name.
	maxTokenName = 64
)

// Token is one API token as the replicated state records it. Accessor is
// its public id (listed, shown as a job's submitter); the secret, which
// authenticates, is known only to its holder.
type Token struct {
	Accessor string
	Name     string
	Role     Role
	Hash     TokenHash
	// CreateTime and RevokeTime are seconds on the proposer's clock
	// (RevokeTime 0 until revoked).
	CreateTime float64
	Revoked    bool
	RevokeTime float64
}

func (t *Token) validate() error {
	if err := checkID("token accessor", t.Accessor); err != nil {
		return err
	}
	if err := checkID("token name", t.Name); err != nil {
		return err
	}
	if len(t.Name) > maxTokenName {
		return invalid("token name of %d bytes (limit %d)", len(t.Name), maxTokenName)
	}
	if !t.Role.valid() {
		return invalid("token role %d", t.Role)
	}
	if t.Hash == (TokenHash{}) {
		return invalid("token %q without a hash", t.Accessor)
	}
	if err := checkNonNeg("token creation time", t.CreateTime); err != nil {
		return err
	}
	if err := checkNonNeg("token revocation time", t.RevokeTime); err != nil {
		return err
	}
	if !t.Revoked && t.RevokeTime != 0 {
		return invalid("token %q has a revocation time but is not revoked", t.Accessor)
	}
	return nil
}

// ACL is the token table: every token ever created (revoked ones stay,
// flagged) and which one bootstrapped the cluster. The zero value is an
// empty table, not bootstrapped.
type ACL struct {
	bootstrap  string
	byAccessor map[string]*Token
	byHash     map[TokenHash]*Token
}

// Bootstrapped reports whether the cluster's bootstrap token was made
// (it is made once, ever).
func (a *ACL) Bootstrapped() bool { return a.bootstrap != "" }

// BootstrapAccessor is the accessor of the bootstrap token ("" before).
func (a *ACL) BootstrapAccessor() string { return a.bootstrap }

// Len is the number of tokens, revoked ones included.
func (a *ACL) Len() int { return len(a.byAccessor) }

// Token returns a copy of the token with accessor.
func (a *ACL) Token(accessor string) (Token, bool) {
	t, ok := a.byAccessor[accessor]
	if !ok {
		return Token{}, false
	}
	return *t, true
}

// Tokens returns copies of every token, oldest first (ties by accessor).
func (a *ACL) Tokens() []Token {
	out := make([]Token, 0, len(a.byAccessor))
	for _, t := range a.byAccessor {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(x, y Token) int {
		return cmp.Or(cmp.Compare(x.CreateTime, y.CreateTime), strings.Compare(x.Accessor, y.Accessor))
	})
	return out
}

// Authenticate returns the token whose secret is secret. It fails with
// ErrUnknownToken if there is none and with ErrTokenRevoked if it was
// revoked. The lookup is by the secret's SHA-256 (a map keyed by hashes
// of high-entropy secrets reveals nothing of a secret through timing),
// and the stored hash is then compared in constant time.
func (a *ACL) Authenticate(secret string) (Token, error) {
	h := HashSecret(secret)
	t, ok := a.byHash[h]
	if !ok || subtle.ConstantTimeCompare(t.Hash[:], h[:]) != 1 {
		return Token{}, fmt.Errorf("%w: no token has this secret", ErrUnknownToken)
	}
	if t.Revoked {
		return *t, fmt.Errorf("%w: token %s (%s) was revoked", ErrTokenRevoked, t.Accessor, t.Name)
	}
	return *t, nil
}

// live returns the unrevoked token with accessor.
func (a *ACL) live(accessor string) (*Token, error) {
	t, ok := a.byAccessor[accessor]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: accessor %q", ErrUnknownToken, accessor)
	case t.Revoked:
		return nil, fmt.Errorf("%w: token %s (%s) was revoked", ErrTokenRevoked, t.Accessor, t.Name)
	}
	return t, nil
}

// authorize checks that the token with accessor by is live and of a role
// that allows need. An empty by is a command of a server itself (or of a
// cluster running --insecure, without tokens): allowed.
func (a *ACL) authorize(by string, need Role, what string) (*Token, error) {
	if by == "" {
		return nil, nil
	}
	t, err := a.live(by)
	if err != nil {
		return nil, err
	}
	if !t.Role.Allows(need) {
		return nil, fmt.Errorf("%w: token %s (%s) has role %v; %s needs %v", ErrPermission, t.Accessor, t.Name, t.Role, what, need)
	}
	return t, nil
}

// add inserts t, which must be new (checked by the caller).
func (a *ACL) add(t Token) {
	if a.byAccessor == nil {
		a.byAccessor = map[string]*Token{}
		a.byHash = map[TokenHash]*Token{}
	}
	p := &t
	a.byAccessor[t.Accessor] = p
	a.byHash[t.Hash] = p
}

// checkNew refuses a token whose accessor or hash the table holds, or
// one beyond MaxTokens.
func (a *ACL) checkNew(t *Token) error {
	if _, ok := a.byAccessor[t.Accessor]; ok {
		return fmt.Errorf("%w: accessor %q", ErrTokenExists, t.Accessor)
	}
	if _, ok := a.byHash[t.Hash]; ok {
		return fmt.Errorf("%w: a token with this secret exists", ErrTokenExists)
	}
	if len(a.byAccessor) >= MaxTokens {
		return fmtErr(ErrLimit, "the cluster holds %d tokens (revoked ones included), the most it can", len(a.byAccessor))
	}
	return nil
}

func (a *ACL) clone() ACL {
	c := ACL{bootstrap: a.bootstrap}
	for _, t := range a.byAccessor {
		c.add(*t)
	}
	return c
}

func (a *ACL) accessors() []string { return slices.Sorted(maps.Keys(a.byAccessor)) }

// --- commands --------------------------------------------------------------

// BootstrapACL makes the cluster's first admin token. It applies once in
// the cluster's life: afterwards it is refused (ErrACLBootstrapped), even
// if the bootstrap token has been revoked since.
type BootstrapACL struct{ Token Token }

// CreateToken adds a token. By is the accessor of the admin token that
// asks (empty: a server itself).
type CreateToken struct {
	Token Token
	By    string
}

// RevokeToken revokes a token for good. By is the accessor of the admin
// token that asks (empty: a server itself). The last unrevoked admin
// token cannot be revoked (nobody could manage tokens any more).
type RevokeToken struct {
	Accessor string
	By       string
	Time     float64
}

// CancelJob cancels a job that has not finished, as FinishJob with
// state Cancelled, if By may: the token that submitted it or an admin
// token (empty By: a server itself). A non-empty Key is the request's
// idempotency key, which the job records: a CancelJob of the key that
// cancelled the job is a retry of that request and applies as a no-op
// instead of failing with ErrJobFinished. It is encoded last, and only
// when non-empty, so that entries written before it existed still decode.
type CancelJob struct {
	ID     string
	By     string
	Reason string
	Time   float64
	Key    string
}

func encodeToken(w *writer, t *Token) {
	w.str(t.Accessor)
	w.str(t.Name)
	w.byte(byte(t.Role))
	w.b = append(w.b, t.Hash[:]...)
	w.f64(t.CreateTime)
	w.bool(t.Revoked)
	w.f64(t.RevokeTime)
}

func decodeToken(r *reader, t *Token) {
	t.Accessor = r.str()
	t.Name = r.str()
	t.Role = Role(r.byte())
	if r.err == nil && len(r.b) < len(t.Hash) {
		r.fail("truncated token hash")
	}
	if r.err == nil {
		copy(t.Hash[:], r.b)
		r.b = r.b[len(t.Hash):]
	}
	t.CreateTime = r.f64()
	t.Revoked = r.bool()
	t.RevokeTime = r.f64()
}

func (c *BootstrapACL) kind() byte       { return typeBootstrapACL }
func (c *BootstrapACL) encode(w *writer) { encodeToken(w, &c.Token) }
func (c *BootstrapACL) decode(r *reader) { decodeToken(r, &c.Token) }
func (c *BootstrapACL) validate() error {
	if err := c.Token.validate(); err != nil {
		return err
	}
	if c.Token.Role != RoleAdmin || c.Token.Revoked {
		return invalid("bootstrap token of role %v, revoked %v (want a live admin token)", c.Token.Role, c.Token.Revoked)
	}
	return nil
}

func (c *CreateToken) kind() byte { return typeCreateToken }
func (c *CreateToken) encode(w *writer) {
	encodeToken(w, &c.Token)
	w.str(c.By)
}
func (c *CreateToken) decode(r *reader) {
	decodeToken(r, &c.Token)
	c.By = r.str()
}
func (c *CreateToken) validate() error {
	if err := c.Token.validate(); err != nil {
		return err
	}
	if c.Token.Revoked {
		return invalid("creating a revoked token")
	}
	return checkBy(c.By)
}

func (c *RevokeToken) kind() byte { return typeRevokeToken }
func (c *RevokeToken) encode(w *writer) {
	w.str(c.Accessor)
	w.str(c.By)
	w.f64(c.Time)
}
func (c *RevokeToken) decode(r *reader) {
	c.Accessor = r.str()
	c.By = r.str()
	c.Time = r.f64()
}
func (c *RevokeToken) validate() error {
	if err := checkID("token accessor", c.Accessor); err != nil {
		return err
	}
	if err := checkBy(c.By); err != nil {
		return err
	}
	return checkNonNeg("revocation time", c.Time)
}

func (c *CancelJob) kind() byte { return typeCancelJob }
func (c *CancelJob) encode(w *writer) {
	w.str(c.ID)
	w.str(c.By)
	w.str(c.Reason)
	w.f64(c.Time)
	if c.Key != "" {
		w.str(c.Key)
	}
}
func (c *CancelJob) decode(r *reader) {
	c.ID = r.str()
	c.By = r.str()
	c.Reason = r.str()
	c.Time = r.f64()
	if !r.more() {
		return
	}
	c.Key = r.str()
	if r.err == nil && c.Key == "" {
		r.fail("cancel with an encoded empty key (it is left out instead)")
	}
}
func (c *CancelJob) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	if err := checkKey(c.Key); err != nil {
		return err
	}
	if err := checkBy(c.By); err != nil {
		return err
	}
	if err := checkText("reason", c.Reason); err != nil {
		return err
	}
	return checkNonNeg("cancel time", c.Time)
}

// checkBy accepts an empty accessor (a server's own command) or a valid
// one.
func checkBy(by string) error {
	if by == "" {
		return nil
	}
	return checkID("requesting token accessor", by)
}

// --- application -----------------------------------------------------------

func applyBootstrapACL(s *State, c *BootstrapACL) error {
	if s.ACL.Bootstrapped() {
		return fmt.Errorf("%w: by token %s", ErrACLBootstrapped, s.ACL.bootstrap)
	}
	if err := s.ACL.checkNew(&c.Token); err != nil {
		return err
	}
	s.ACL.add(c.Token)
	s.ACL.bootstrap = c.Token.Accessor
	return nil
}

func applyCreateToken(s *State, c *CreateToken) error {
	if _, err := s.ACL.authorize(c.By, RoleAdmin, "creating a token"); err != nil {
		return err
	}
	if err := s.ACL.checkNew(&c.Token); err != nil {
		return err
	}
	s.ACL.add(c.Token)
	return nil
}

func applyRevokeToken(s *State, c *RevokeToken) error {
	if _, err := s.ACL.authorize(c.By, RoleAdmin, "revoking a token"); err != nil {
		return err
	}
	t, err := s.ACL.live(c.Accessor)
	if err != nil {
		return err
	}
	if t.Role == RoleAdmin {
		others := 0
		for _, o := range s.ACL.byAccessor {
			if o != t && o.Role == RoleAdmin && !o.Revoked {
				others++
			}
		}
		if others == 0 {
			return invalid("token %s (%s) is the last admin token: create another admin token before revoking it", t.Accessor, t.Name)
		}
	}
	t.Revoked, t.RevokeTime = true, c.Time
	return nil
}

func applyCancelJob(s *State, c *CancelJob) error {
	if j := s.Jobs[c.ID]; j != nil && c.Key != "" && j.State == Cancelled && j.CancelKey == c.Key {
		return nil // a retry of the request that cancelled it
	}
	j, err := liveJob(s, c.ID, 0)
	if err != nil {
		return err
	}
	t, err := s.ACL.authorize(c.By, RoleSubmit, "cancelling a job")
	if err != nil {
		return err
	}
	if t != nil && t.Role != RoleAdmin && j.Submitter != t.Accessor {
		return fmt.Errorf("%w: job %q was submitted by %s, not by token %s (%s); only its submitter or an admin may cancel it",
			ErrPermission, c.ID, submitterOf(j), t.Accessor, t.Name)
	}
	if err := applyFinish(s, &FinishJob{ID: c.ID, State: Cancelled, Reason: c.Reason, Time: c.Time}); err != nil {
		return err
	}
	j.CancelKey = c.Key
	return nil
}

func submitterOf(j *Job) string {
	if j.Submitter == "" {
		return "nobody known"
	}
	return fmt.Sprintf("token %s (%s)", j.Submitter, j.SubmitterName)
}

// encodeACL writes the token table in accessor order.
func encodeACL(w *writer, a *ACL) {
	w.str(a.bootstrap)
	ids := a.accessors()
	w.uvarint(uint64(len(ids)))
	for _, id := range ids {
		encodeToken(w, a.byAccessor[id])
	}
}

// decodeACL reads what encodeACL wrote and validates it: tokens in
// accessor order, no hash twice, the bootstrap token among them.
func decodeACL(r *reader) (ACL, error) {
	var a ACL
	a.bootstrap = r.str()
	n := r.length(MaxTokens)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		var t Token
		decodeToken(r, &t)
		if r.err != nil {
			break
		}
		if err := t.validate(); err != nil {
			return a, err
		}
		if t.Accessor <= prev {
			return a, fmt.Errorf("%w: token %q out of order", ErrMalformed, t.Accessor)
		}
		prev = t.Accessor
		if _, dup := a.byHash[t.Hash]; dup {
			return a, invalid("two tokens with one hash")
		}
		a.add(t)
	}
	if r.err != nil {
		return a, r.err
	}
	if a.bootstrap != "" {
		if t, ok := a.byAccessor[a.bootstrap]; !ok || t.Role != RoleAdmin {
			return a, invalid("bootstrap token %q is not an admin token of the table", a.bootstrap)
		}
	}
	return a, nil
}
