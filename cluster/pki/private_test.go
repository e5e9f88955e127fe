package pki

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPrivate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mode os.FileMode
		dir  bool
		want error
	}{
		{"owner only", 0o600, false, nil},
		{"read only", 0o400, false, nil},
		{"group readable", 0o640, false, ErrUnprotected},
		{"world readable", 0o644, false, ErrUnprotected},
		{"world writable", 0o602, false, ErrUnprotected},
		{"a directory", 0o700, true, ErrBadFile},
		{"missing", 0, false, ErrBadFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			switch {
			case tc.dir:
				if err := os.Mkdir(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			case tc.mode != 0:
				if err := os.WriteFile(path, []byte("k"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckPrivate(path)
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("CheckPrivate = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}
