package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

func token(acc, name string, role Role, secret string, at float64) Token {
	return Token{Accessor: acc, Name: name, Role: role, Hash: HashSecret(secret), CreateTime: at}
}

// aclFSM returns an FSM with a checkpoint root, a bootstrap admin token
// (secret "s-admin"), a submit token for alice and bob, a read token, and
// a second admin token.
func aclFSM(t testing.TB) *applier {
	t.Helper()
	a := newApplier()
	a.must(t, 1,
		&InitCluster{ID: "c1", CheckpointRoot: "/ckpt"},
		&BootstrapACL{Token: token("acc-admin", "bootstrap", RoleAdmin, "s-admin", 1)},
		&CreateToken{Token: token("acc-alice", "alice", RoleSubmit, "s-alice", 2), By: "acc-admin"},
		&CreateToken{Token: token("acc-bob", "bob", RoleSubmit, "s-bob", 3), By: "acc-admin"},
		&CreateToken{Token: token("acc-reader", "reader", RoleRead, "s-reader", 4), By: "acc-admin"},
		&CreateToken{Token: token("acc-ops", "ops", RoleAdmin, "s-ops", 5), By: "acc-admin"},
		&SubmitJob{ID: "alices", Spec: testSpec(), SubmitTime: 6, Submitter: "acc-alice"},
	)
	return a
}

func TestRoleOrder(t *testing.T) {
	tests := []struct {
		have, need Role
		ok         bool
	}{
		{RoleRead, RoleRead, true}, {RoleRead, RoleSubmit, false}, {RoleRead, RoleAdmin, false},
		{RoleSubmit, RoleRead, true}, {RoleSubmit, RoleSubmit, true}, {RoleSubmit, RoleAdmin, false},
		{RoleAdmin, RoleRead, true}, {RoleAdmin, RoleSubmit, true}, {RoleAdmin, RoleAdmin, true},
		{0, RoleRead, false}, {RoleAdmin, 0, false}, {4, RoleRead, false},
	}
	for _, tt := range tests {
		if got := tt.have.Allows(tt.need); got != tt.ok {
			t.Errorf("%v allows %v: %v, want %v", tt.have, tt.need, got, tt.ok)
		}
	}
	for _, s := range []string{"read", "submit", "admin"} {
		if r, err := ParseRole(s); err != nil || r.String() != s {
			t.Errorf("ParseRole(%q) = %v, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "Admin", "root", "write"} {
		if _, err := ParseRole(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRole(%q): %v, want ErrInvalid", s, err)
		}
	}
}

// TestACLApply is the state machine's side of the authorisation matrix:
// each command is applied to a fresh copy of aclFSM's state; a refusal
// must leave the state byte for byte as it was.
func TestACLApply(t *testing.T) {
	tests := []struct {
		name  string
		prep  []Command
		cmd   Command
		want  error
		check func(*testing.T, *State)
	}{
		{name: "bootstrap twice", cmd: &BootstrapACL{Token: token("acc-x", "x", RoleAdmin, "s-x", 9)}, want: ErrACLBootstrapped},
		{name: "bootstrap again after the bootstrap token is revoked",
			prep: []Command{&RevokeToken{Accessor: "acc-admin", By: "acc-ops", Time: 8}},
			cmd:  &BootstrapACL{Token: token("acc-x", "x", RoleAdmin, "s-x", 9)}, want: ErrACLBootstrapped},
		{name: "admin creates", cmd: &CreateToken{Token: token("acc-new", "new", RoleRead, "s-new", 9), By: "acc-ops"},
			check: func(t *testing.T, s *State) {
				if tok, ok := s.ACL.Token("acc-new"); !ok || tok.Role != RoleRead || tok.Name != "new" {
					t.Errorf("created token: %+v %v", tok, ok)
				}
			}},
		{name: "submit token creates", cmd: &CreateToken{Token: token("acc-new", "new", RoleAdmin, "s-new", 9), By: "acc-alice"}, want: ErrPermission},
		{name: "read token creates", cmd: &CreateToken{Token: token("acc-new", "new", RoleRead, "s-new", 9), By: "acc-reader"}, want: ErrPermission},
		{name: "unknown token creates", cmd: &CreateToken{Token: token("acc-new", "new", RoleRead, "s-new", 9), By: "acc-nobody"}, want: ErrUnknownToken},
		{name: "revoked admin creates", prep: []Command{&RevokeToken{Accessor: "acc-ops", By: "acc-admin", Time: 8}},
			cmd: &CreateToken{Token: token("acc-new", "new", RoleRead, "s-new", 9), By: "acc-ops"}, want: ErrTokenRevoked},
		{name: "accessor taken", cmd: &CreateToken{Token: token("acc-bob", "bob2", RoleRead, "s-other", 9), By: "acc-admin"}, want: ErrTokenExists},
		{name: "secret taken", cmd: &CreateToken{Token: token("acc-new", "new", RoleRead, "s-bob", 9), By: "acc-admin"}, want: ErrTokenExists},
		{name: "admin revokes", cmd: &RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 9},
			check: func(t *testing.T, s *State) {
				if tok, _ := s.ACL.Token("acc-bob"); !tok.Revoked || tok.RevokeTime != 9 {
					t.Errorf("revoked token: %+v", tok)
				}
				if _, err := s.ACL.Authenticate("s-bob"); !errors.Is(err, ErrTokenRevoked) {
					t.Errorf("authenticating a revoked token: %v", err)
				}
			}},
		{name: "admin revokes itself while another admin is left", cmd: &RevokeToken{Accessor: "acc-admin", By: "acc-admin", Time: 9}},
		{name: "revoking the last admin", prep: []Command{&RevokeToken{Accessor: "acc-ops", By: "acc-admin", Time: 8}},
			cmd: &RevokeToken{Accessor: "acc-admin", By: "acc-admin", Time: 9}, want: ErrInvalid},
		{name: "submit token revokes", cmd: &RevokeToken{Accessor: "acc-bob", By: "acc-alice", Time: 9}, want: ErrPermission},
		{name: "revoke unknown", cmd: &RevokeToken{Accessor: "acc-nobody", By: "acc-admin", Time: 9}, want: ErrUnknownToken},
		{name: "revoke twice", prep: []Command{&RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 8}},
			cmd: &RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 9}, want: ErrTokenRevoked},
		{name: "submit token submits", cmd: &SubmitJob{ID: "b1", Spec: testSpec(), SubmitTime: 9, Submitter: "acc-bob"},
			check: func(t *testing.T, s *State) {
				if j := s.Jobs["b1"]; j.Submitter != "acc-bob" || j.SubmitterName != "bob" {
					t.Errorf("submitter %q %q", j.Submitter, j.SubmitterName)
				}
			}},
		{name: "admin submits", cmd: &SubmitJob{ID: "b1", Spec: testSpec(), SubmitTime: 9, Submitter: "acc-ops"}},
		{name: "read token submits", cmd: &SubmitJob{ID: "b1", Spec: testSpec(), SubmitTime: 9, Submitter: "acc-reader"}, want: ErrPermission},
		{name: "revoked token submits", prep: []Command{&RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 8}},
			cmd: &SubmitJob{ID: "b1", Spec: testSpec(), SubmitTime: 9, Submitter: "acc-bob"}, want: ErrTokenRevoked},
		{name: "unknown token submits", cmd: &SubmitJob{ID: "b1", Spec: testSpec(), SubmitTime: 9, Submitter: "acc-nobody"}, want: ErrUnknownToken},
		{name: "submitter cancels", cmd: &CancelJob{ID: "alices", By: "acc-alice", Reason: "r", Time: 9},
			check: func(t *testing.T, s *State) {
				if j := s.Jobs["alices"]; j.State != Cancelled || j.FinishTime != 9 || j.Reason != "r" {
					t.Errorf("cancelled job %+v", j)
				}
			}},
		{name: "admin cancels", cmd: &CancelJob{ID: "alices", By: "acc-ops", Time: 9}},
		{name: "server cancels", cmd: &CancelJob{ID: "alices", Time: 9}},
		{name: "another submitter cancels", cmd: &CancelJob{ID: "alices", By: "acc-bob", Time: 9}, want: ErrPermission},
		{name: "read token cancels", cmd: &CancelJob{ID: "alices", By: "acc-reader", Time: 9}, want: ErrPermission},
		{name: "revoked submitter cancels", prep: []Command{&RevokeToken{Accessor: "acc-alice", By: "acc-admin", Time: 8}},
			cmd: &CancelJob{ID: "alices", By: "acc-alice", Time: 9}, want: ErrTokenRevoked},
		{name: "cancel unknown job", cmd: &CancelJob{ID: "nope", By: "acc-ops", Time: 9}, want: ErrUnknownJob},
		{name: "cancel finished job", prep: []Command{&CancelJob{ID: "alices", By: "acc-ops", Time: 8}},
			cmd: &CancelJob{ID: "alices", By: "acc-alice", Time: 9}, want: ErrJobFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := aclFSM(t)
			a.must(t, 1, tt.prep...)
			before := EncodeState(a.state())
			err := a.apply(t, 1, tt.cmd)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil {
				if !bytes.Equal(before, EncodeState(a.state())) {
					t.Fatal("a refused command changed the state")
				}
				return
			}
			if tt.check != nil {
				tt.check(t, a.state())
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	a := aclFSM(t)
	if tok, boot, err := authenticate(a.s, "s-alice"); err != nil || !boot || tok.Accessor != "acc-alice" || tok.Role != RoleSubmit {
		t.Fatalf("alice: %+v %v %v", tok, boot, err)
	}
	for _, s := range []string{"", "s-alic", "s-alice ", "S-ALICE"} {
		if _, _, err := authenticate(a.s, s); !errors.Is(err, ErrUnknownToken) {
			t.Errorf("secret %q: %v, want ErrUnknownToken", s, err)
		}
	}
	if _, boot, err := authenticate(New(), "s-alice"); boot || !errors.Is(err, ErrUnknownToken) {
		t.Errorf("empty table: %v %v", boot, err)
	}
	list := a.state().ACL.Tokens()
	if len(list) != 5 || list[0].Accessor != "acc-admin" || list[4].Accessor != "acc-ops" {
		t.Errorf("tokens listed %+v", list)
	}
}

func TestACLCommandsValidate(t *testing.T) {
	good := token("acc", "name", RoleRead, "s", 1)
	mod := func(f func(*Token)) Token { c := good; f(&c); return c }
	bad := []Command{
		&CreateToken{Token: mod(func(t *Token) { t.Accessor = "" })},
		&CreateToken{Token: mod(func(t *Token) { t.Name = "" })},
		&CreateToken{Token: mod(func(t *Token) { t.Name = "two words" })},
		&CreateToken{Token: mod(func(t *Token) { t.Name = string(bytes.Repeat([]byte("n"), 65)) })},
		&CreateToken{Token: mod(func(t *Token) { t.Role = 0 })},
		&CreateToken{Token: mod(func(t *Token) { t.Role = 4 })},
		&CreateToken{Token: mod(func(t *Token) { t.Hash = TokenHash{} })},
		&CreateToken{Token: mod(func(t *Token) { t.CreateTime = -1 })},
		&CreateToken{Token: mod(func(t *Token) { t.Revoked = true })},
		&CreateToken{Token: good, By: "has space"},
		&BootstrapACL{Token: good},
		&BootstrapACL{Token: mod(func(t *Token) { t.Role, t.Revoked, t.RevokeTime = RoleAdmin, true, 2 })},
		&RevokeToken{Accessor: ""},
		&RevokeToken{Accessor: "a", Time: -1},
		&CancelJob{ID: ""},
		&CancelJob{ID: "j", By: "\x00"},
		&SubmitJob{ID: "j", Spec: testSpec(), Submitter: "a b"},
	}
	for _, c := range bad {
		if _, err := Encode(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%T %+v: %v, want ErrInvalid", c, c, err)
		}
	}
}

func TestACLCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		&BootstrapACL{Token: token("acc", "bootstrap", RoleAdmin, "s", 1)},
		&CreateToken{Token: token("acc2", "alice", RoleSubmit, "s2", 2), By: "acc"},
		&CreateToken{Token: token("acc2", "alice", RoleSubmit, "s2", 2)},
		&RevokeToken{Accessor: "acc2", By: "acc", Time: 3},
		&CancelJob{ID: "j", By: "acc2", Reason: "no longer needed", Time: 4},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1, Submitter: "acc2"},
	} {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if b2, _ := Encode(d); !bytes.Equal(b, b2) {
			t.Fatalf("%T: re-encoding differs", c)
		}
	}
	// A submission without a submitter encodes as before tokens existed,
	// and an explicitly empty submitter is not an encoding.
	plain, _ := Encode(&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1})
	if _, err := Decode(append(bytes.Clone(plain), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty encoded submitter: %v", err)
	}
	// A truncated hash is malformed, not a panic.
	b, _ := Encode(&CreateToken{Token: token("acc", "n", RoleRead, "s", 1)})
	for i := 2; i < len(b); i++ {
		if _, err := Decode(b[:i]); err == nil {
			t.Fatalf("prefix of %d bytes decodes", i)
		}
	}
}

// TestACLSnapshot: the token table and job submitters survive a snapshot
// (so a new leader, or a server restored from a snapshot, authorises the
// same way), the restored machine keeps applying identically, and a
// version 2 snapshot (before tokens) still decodes, with no tokens.
func TestACLSnapshot(t *testing.T) {
	a := aclFSM(t)
	a.must(t, 1, &RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 7})
	snap := EncodeState(a.state())
	g, err := DecodeState(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, EncodeState(g)) {
		t.Fatal("restored state encodes differently")
	}
	if _, _, err := authenticate(g, "s-bob"); !errors.Is(err, ErrTokenRevoked) {
		t.Errorf("revoked token after restore: %v", err)
	}
	if tok, boot, err := authenticate(g, "s-alice"); err != nil || !boot || tok.Name != "alice" {
		t.Errorf("alice after restore: %+v %v %v", tok, boot, err)
	}
	if j := g.Jobs["alices"]; j.Submitter != "acc-alice" || j.SubmitterName != "alice" {
		t.Errorf("submitter after restore: %+v", j)
	}
	b := &applier{s: g}
	for _, c := range []Command{
		&BootstrapACL{Token: token("acc-x", "x", RoleAdmin, "s-x", 9)},
		&CancelJob{ID: "alices", By: "acc-bob", Time: 9},
		&CancelJob{ID: "alices", By: "acc-alice", Time: 9},
	} {
		ea, eb := a.apply(t, 1, c), b.apply(t, 1, c)
		if (ea == nil) != (eb == nil) || !bytes.Equal(EncodeState(a.state()), EncodeState(b.s)) {
			t.Fatalf("%T: diverged after restore: %v / %v", c, ea, eb)
		}
	}

	v2, err := os.ReadFile("testdata/snapshot-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	if v2[4] != 2 {
		t.Fatalf("fixture is version %d", v2[4])
	}
	s, err := DecodeState(v2)
	if err != nil {
		t.Fatal(err)
	}
	if s.ACL.Bootstrapped() || s.ACL.Len() != 0 || s.Jobs["j1"].Submitter != "" || s.Jobs["j3"].State != Cancelled || s.Config.ID != "c1" {
		t.Fatalf("v2 snapshot decoded as %+v", s)
	}
	if _, err := DecodeState(EncodeState(s)); err != nil {
		t.Fatalf("v2 state re-encoded: %v", err)
	}
}

// TestACLSnapshotRefuses: token tables that no state machine could
// have made are refused.
func TestACLSnapshotRefuses(t *testing.T) {
	enc := func(s *State) []byte { return EncodeState(s) }
	base := aclFSM(t).state()
	tests := []struct {
		name string
		mod  func(*State)
		want error
	}{
		{"bootstrap token missing", func(s *State) { s.ACL.bootstrap = "acc-gone" }, ErrInvalid},
		{"bootstrap token not admin", func(s *State) { s.ACL.bootstrap = "acc-reader" }, ErrInvalid},
		{"two tokens with one hash", func(s *State) {
			s.ACL.byAccessor["acc-bob"].Hash = HashSecret("s-alice")
		}, ErrInvalid},
		{"token of no role", func(s *State) { s.ACL.byAccessor["acc-bob"].Role = 0 }, ErrInvalid},
		{"revocation time of a live token", func(s *State) { s.ACL.byAccessor["acc-bob"].RevokeTime = 3 }, ErrInvalid},
		{"submitter without a name", func(s *State) { s.Jobs["alices"].SubmitterName = "" }, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base.Clone()
			tt.mod(s)
			if _, err := DecodeState(enc(s)); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// FuzzDecodeACLState fuzzes the snapshot decoder from states holding
// token tables and job submitters (FuzzDecodeState starts from states
// without): what decodes re-encodes to itself.
func FuzzDecodeACLState(f *testing.F) {
	a := aclFSM(f)
	f.Add(EncodeState(a.state()))
	a.must(f, 1, &RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 7}, &CancelJob{ID: "alices", By: "acc-alice", Time: 8})
	f.Add(EncodeState(a.state()))
	a.must(f, 1, &SetQuota{Accessor: "acc-alice", Quota: Quota{Jobs: 3, Rate: 0.5}, By: "acc-admin"},
		&SetQuota{Quota: Quota{SpecBytes: 1 << 20}, Budget: 1 << 24, By: "acc-admin"},
		&SubmitJob{ID: "again", Spec: ownedSpec("alices"), SubmitTime: 9, Submitter: "acc-alice", Owned: true})
	f.Add(EncodeState(a.state()))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			return
		}
		if b[len(snapshotMagic)] != SnapshotVersion {
			if _, err := DecodeState(EncodeState(s)); err != nil {
				t.Fatalf("an old snapshot's state does not re-encode: %v", err)
			}
			return
		}
		if again := EncodeState(s); !bytes.Equal(again, b) {
			t.Fatal("a decodable snapshot does not re-encode to itself")
		}
		// Its token table answers like the one it encodes.
		for _, tok := range s.ACL.Tokens() {
			if got, ok := s.ACL.Token(tok.Accessor); !ok || got != tok {
				t.Fatalf("token %q lost", tok.Accessor)
			}
		}
	})
}

// FuzzDecodeACLCommand fuzzes the command decoder from the token
// commands: what decodes re-encodes stably and applies without a panic.
func FuzzDecodeACLCommand(f *testing.F) {
	for _, c := range []Command{
		&BootstrapACL{Token: token("acc", "bootstrap", RoleAdmin, "s", 1)},
		&CreateToken{Token: token("acc2", "alice", RoleSubmit, "s2", 2), By: "acc-admin"},
		&RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 3},
		&CancelJob{ID: "alices", By: "acc-alice", Reason: "r", Time: 4},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1, Submitter: "acc-bob"},
		&SubmitJob{ID: "j", Spec: ownedSpec(""), SubmitTime: 1, Submitter: "acc-bob", Owned: true},
		&SubmitJob{ID: "j", Spec: ownedSpec("alices"), SubmitTime: 1, Submitter: "acc-alice", Owned: true},
		&SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 1, SpecBytes: 2, Rate: 3, Burst: 4}, By: "acc-admin"},
		&SetQuota{Quota: Quota{Jobs: 1}, Budget: 100},
	} {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		if c2, err := Decode(b2); err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		} else if b3, _ := Encode(c2); !bytes.Equal(b2, b3) {
			t.Fatal("encoding is not stable")
		}
		a := aclFSM(t)
		before := EncodeState(a.state())
		_, err = ApplyTo(a.s, c, 1)
		if err != nil && !bytes.Equal(before, EncodeState(a.state())) {
			t.Fatalf("a refused command (%v) changed the state", err)
		}
	})
}

// BenchmarkAuthenticate is the token check every API request pays, on a
// full table.
func BenchmarkAuthenticate(b *testing.B) {
	s := New()
	for i := range MaxTokens {
		s.ACL.add(token(fmt.Sprintf("acc-%05d", i), "n", RoleRead, fmt.Sprintf("s-%05d", i), 1))
	}
	for i := 0; b.Loop(); i++ {
		if _, err := s.ACL.Authenticate(fmt.Sprintf("s-%05d", i%MaxTokens)); err != nil {
			b.Fatal(err)
		}
	}
}

// authenticate is what the state machine answers for a secret: the token,
// and whether the table is bootstrapped.
func authenticate(s *State, secret string) (Token, bool, error) {
	t, err := s.ACL.Authenticate(secret)
	return t, s.ACL.Bootstrapped(), err
}
