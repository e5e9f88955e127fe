package backup_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"pollux/consensus/state"
	"pollux/internal/backup"
)

func TestWriteAndRead(t *testing.T) {
	dir := t.TempDir()
	st := state.New()
	if _, err := state.ApplyTo(st, &state.RegisterNode{Node: state.Node{ID: "n1", GPUs: 4, Health: state.Alive}}, 1); err != nil {
		t.Fatal(err)
	}
	good := state.EncodeState(st)
	path := filepath.Join(dir, "pollux.snap")
	if err := backup.WriteFile(path, good); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	got, err := backup.ReadFile(path)
	if err != nil || !bytes.Equal(got, good) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	tests := []struct {
		name string
		data []byte
		is   error
	}{
		{"truncated", good[:len(good)/2], state.ErrMalformed},
		{"not a snapshot", []byte("hello"), state.ErrMalformed},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.name)
		if err := os.WriteFile(p, tt.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := backup.ReadFile(p); !errors.Is(err, tt.is) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.is)
		}
	}
	if _, err := backup.ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := backup.WriteFile(filepath.Join(dir, "no", "such", "dir"), good); err == nil {
		t.Error("wrote into a directory that does not exist")
	}
}
