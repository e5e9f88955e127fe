package cluster

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseKeys(t *testing.T) {
	k1, _ := NewKey()
	k2, _ := NewKey()
	k16 := base64.StdEncoding.EncodeToString(make([]byte, 16))
	keys, err := ParseKeys([]byte("# rotation in progress\n" + k2 + "\n\n  " + k1 + "  \n" + k16 + "\n"))
	if err != nil || len(keys) != 3 || base64.StdEncoding.EncodeToString(keys[0]) != k2 {
		t.Fatalf("ParseKeys = %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# only a comment\n", "not base64!\n", base64.StdEncoding.EncodeToString(make([]byte, 10)) + "\n", k1 + "\n" + k1 + "\n"} {
		if _, err := ParseKeys([]byte(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseKeys(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func FuzzParseKeys(f *testing.F) {
	k, _ := NewKey()
	f.Add([]byte(k + "\n"))
	f.Add([]byte("#\n\n" + k))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseKeys(b)
		if err == nil && len(keys) == 0 {
			t.Fatal("no error and no key")
		}
	})
}

func startKeyed(t *testing.T, name string, keys ...string) *Membership {
	t.Helper()
	var raw [][]byte
	for _, k := range keys {
		b, _ := base64.StdEncoding.DecodeString(k)
		raw = append(raw, b)
	}
	m, err := Start(Config{Name: name, Meta: Meta{Role: RoleAgent}, Fast: true, Logger: quiet(), Keys: raw})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func decode(ks ...string) [][]byte {
	var out [][]byte
	for _, k := range ks {
		b, _ := base64.StdEncoding.DecodeString(k)
		out = append(out, b)
	}
	return out
}

// TestGossipKeyRotation: members with a key refuse a member without it
// or with another key, and the documented rotation (add the new key,
// make it primary, drop the old) keeps the cluster together throughout;
// afterwards only the new key gets in.
func TestGossipKeyRotation(t *testing.T) {
	oldKey, _ := NewKey()
	newKey, _ := NewKey()
	a := startKeyed(t, "a", oldKey)
	b := startKeyed(t, "b", oldKey)
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, EventJoin, "b", 5*time.Second)
	plain := start(t, "plain", Meta{Role: RoleAgent})
	if _, err := plain.Join([]string{a.Addr()}); err == nil {
		t.Error("a member without a key joined an encrypted cluster")
	}
	wrong, _ := NewKey()
	w := startKeyed(t, "wrong", wrong)
	if _, err := w.Join([]string{a.Addr()}); err == nil {
		t.Error("a member with the wrong key joined")
	}
	for _, step := range [][]string{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for _, m := range []*Membership{a, b} {
			if err := m.SetKeys(decode(step...)); err != nil {
				t.Fatal(err)
			}
		}
		// The window is the test: both still see each other after three
		// probe intervals with the new keys (no event marks a probe passed).
		time.Sleep(600 * time.Millisecond)
		for _, m := range []*Membership{a, b} {
			if got := names(m.Members()); strings.Join(got, ",") != "a,b" {
				t.Fatalf("after keys %d: %s sees %v", len(step), m.name, got)
			}
		}
	}
	late := startKeyed(t, "late-old", oldKey)
	if _, err := late.Join([]string{a.Addr()}); err == nil {
		t.Error("a member with the removed key joined")
	}
	c := startKeyed(t, "c", newKey)
	if _, err := c.Join([]string{a.Addr()}); err != nil {
		t.Errorf("a member with the new key: %v", err)
	}
	if err := plain.SetKeys(decode(newKey)); !errors.Is(err, ErrConfig) {
		t.Errorf("SetKeys on a plaintext member = %v, want ErrConfig", err)
	}
}
