package secure

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"pollux/cluster/pki"
	"strings"
	"testing"
)

func TestPrivateDir(t *testing.T) {
	root := t.TempDir()
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, filepath.Join(root, "new", "sub")} {
		if err := PrivateDir(dir, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o700 {
			t.Fatalf("%s: mode %04o, want 0700", dir, got)
		}
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(file, "sub"), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a directory under a file was made")
	}
}

func TestLoadRefusesReadableKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(key, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Options{GossipKey: key, Insecure: true}.Load("server", "s0", nil, slog.New(slog.DiscardHandler))
	if !errors.Is(err, pki.ErrUnprotected) || !strings.Contains(err.Error(), key) {
		t.Fatalf("a world-readable gossip key: %v, want an error naming it", err)
	}
}
